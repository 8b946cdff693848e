"""Fine-tunes BERT for token tagging (NER, slot filling), with a softmax or CRF head.

    python run_ner.py --train_file=train.txt --dev_file=dev.txt --test_file=test.txt \
        --init_checkpoint=MODEL_DIR --use_crf --do_train --do_eval --do_predict --output_dir=runs/ner
    python run_ner.py --flagfile=flags/ner_peoples_daily_demo.flags

Intentionally kept short: flags in, dataclasses out, one call into bert_tf.training.
"""

from __future__ import annotations

from absl import app, flags

from bert_tf import flags as bert_flags

bert_flags.define_finetuning_flags()
bert_flags.define_length_filter_flags()
flags.DEFINE_string("train_file", None, "CoNLL-style training file: token ... tag per line.")
flags.DEFINE_string("dev_file", None, "CoNLL-style dev file.")
flags.DEFINE_string("test_file", None, "CoNLL-style test file.")
flags.DEFINE_enum("demo", None, ["peoples_daily"], "The embedded People's Daily NER demo.")
flags.DEFINE_integer("demo_subsample", 0, "Train on the first N sentences only (0: all).", lower_bound=0)
flags.DEFINE_enum("tagging_scheme", "BIO", ["BIO", "IOB1", "BIOES"], "How tags mark entities.")
flags.DEFINE_boolean("use_crf", True, "A linear-chain CRF head (else a softmax per token).")
FLAGS = flags.FLAGS


def _run() -> dict:
    from bert_tf.training import ner_job

    data = ner_job.NerData(train_file=FLAGS.train_file, dev_file=FLAGS.dev_file, test_file=FLAGS.test_file,
                           demo=FLAGS.demo, demo_subsample=FLAGS.demo_subsample, scheme=FLAGS.tagging_scheme,
                           skip_bad_rows=FLAGS.skip_bad_rows, length_filter=bert_flags.length_filter_options())
    return ner_job.run(data, *bert_flags.finetuning_options(), use_crf=FLAGS.use_crf)


def main(argv: list[str]) -> None:
    bert_flags.run_finetuning_driver(argv, _run)


if __name__ == "__main__":
    app.run(main, flags_parser=bert_flags.parse_flags_or_exit)
