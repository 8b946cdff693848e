"""Fine-tunes BERT for extractive question answering on SQuAD v1.1 / v2.0.

    python run_squad.py --train_file=train-v1.1.json --predict_file=dev-v1.1.json \
        --init_checkpoint=MODEL_DIR --do_train --do_predict --output_dir=runs/squad

Intentionally kept short: flags in, dataclasses out, one call into bert_tf.training.
"""

from __future__ import annotations

from absl import app, flags

from bert_tf import flags as bert_flags

bert_flags.define_finetuning_flags()
# The original run_squad.py's window: a question and a 384-piece context window.
flags.FLAGS.set_default("max_seq_length", 384)
flags.DEFINE_string("train_file", None, "SQuAD JSON for training.")
flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict (and score, with its answers).")
flags.DEFINE_boolean("version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.")
flags.DEFINE_integer("doc_stride", 128, "Pieces between the starts of consecutive context windows.",
                     lower_bound=1)
flags.DEFINE_integer("max_query_length", 64, "Questions are cut to this many pieces.", lower_bound=1)
flags.DEFINE_integer("n_best_size", 20, "Candidates kept for nbest_predictions.json.", lower_bound=1)
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in word pieces.", lower_bound=1)
flags.DEFINE_float("null_score_diff_threshold", 0.0,
                   "SQuAD 2.0: answer \"\" when null score - best span score exceeds this.")
FLAGS = flags.FLAGS


def _run() -> dict:
    from bert_tf.training import squad_job

    squad_config = squad_job.SquadConfig(
        train_file=FLAGS.train_file, predict_file=FLAGS.predict_file,
        version_2_with_negative=FLAGS.version_2_with_negative, doc_stride=FLAGS.doc_stride,
        max_query_length=FLAGS.max_query_length, n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length, null_score_diff_threshold=FLAGS.null_score_diff_threshold,
        skip_bad_rows=FLAGS.skip_bad_rows)
    return squad_job.run(squad_config, *bert_flags.finetuning_options())


def main(argv: list[str]) -> None:
    bert_flags.run_finetuning_driver(argv, _run)


if __name__ == "__main__":
    app.run(main, flags_parser=bert_flags.parse_flags_or_exit)
