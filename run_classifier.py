"""Fine-tunes BERT for sentence (pair) classification or regression.

    python run_classifier.py --task_name=MRPC --data_dir=glue_data/MRPC \
        --init_checkpoint=runs/pretrain_demo/model --do_train --do_eval --output_dir=runs/mrpc
    python run_classifier.py --flagfile=flags/classifier_tweets_demo.flags

Intentionally kept short: flags in, dataclasses out, one call into bert_tf.training.
"""

from __future__ import annotations

from absl import app, flags

from bert_tf import flags as bert_flags

bert_flags.define_finetuning_flags()
bert_flags.define_length_filter_flags()
flags.DEFINE_string("task_name", None, "A GLUE task: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI, AX.")
flags.DEFINE_string("data_dir", None, "The GLUE task's folder (glue_data/MRPC).")
flags.DEFINE_string("train_file", None, "Your training data: CSV, TSV or JSONL with named columns.")
flags.DEFINE_string("dev_file", None, "Your dev data (same columns).")
flags.DEFINE_string("test_file", None, "Your test data (labels not needed).")
flags.DEFINE_string("text_column", "text", "Column of the text.")
flags.DEFINE_string("text_pair_column", None, "Column of the second text, for pairs.")
flags.DEFINE_string("label_column", "label", "Column of the label.")
flags.DEFINE_boolean("regression", False, "Labels are numbers: predict a score.")
flags.DEFINE_enum("demo", None, ["product_reviews", "tweets"], "An embedded demo dataset.")
flags.DEFINE_integer("demo_subsample", 0, "Use only this many demo examples (0: all).", lower_bound=0)
flags.DEFINE_enum("head", "pooled", ["pooled", "conv", "conv_avg_max", "concat_last_n"],
                  "Classification head.")
FLAGS = flags.FLAGS


def _run() -> dict:
    from bert_tf.training import classifier_job

    data = classifier_job.ClassifierData(
        task_name=FLAGS.task_name, data_dir=FLAGS.data_dir, train_file=FLAGS.train_file,
        dev_file=FLAGS.dev_file, test_file=FLAGS.test_file, text_column=FLAGS.text_column,
        text_pair_column=FLAGS.text_pair_column, label_column=FLAGS.label_column,
        regression=FLAGS.regression, demo=FLAGS.demo, demo_subsample=FLAGS.demo_subsample,
        skip_bad_rows=FLAGS.skip_bad_rows, length_filter=bert_flags.length_filter_options())
    return classifier_job.run(data, *bert_flags.finetuning_options(), head=FLAGS.head)


def main(argv: list[str]) -> None:
    bert_flags.run_finetuning_driver(argv, _run)


if __name__ == "__main__":
    app.run(main, flags_parser=bert_flags.parse_flags_or_exit)
