"""Converts a Hugging Face or google-research/bert checkpoint into a bert_tf model directory.

    python -m bert_tf.tools.convert_checkpoint --input_format=hf --input=DIR --output_dir=OUT
    python -m bert_tf.tools.convert_checkpoint --input_format=tf1 \
        --input=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=OUT

The output holds bert_config.json, vocab.txt (when the input has one) and
bert_model.ckpt with the original TF1 variable names; the pretraining heads are
kept when the input has them.

A model fine-tuned with google-research/bert's run_classifier.py or
run_squad.py becomes a fine-tuned model directory (with task.json) through
`--task`; copy the pretrained model's bert_config.json and vocab.txt into its
output folder first:

    python -m bert_tf.tools.convert_checkpoint --input_format=tf1 --task=classification \
        --labels=0,1 --text_pair --max_seq_length=128 --input=mrpc_output --output_dir=OUT
    python -m bert_tf.tools.convert_checkpoint --input_format=tf1 --task=squad \
        --max_seq_length=384 --input=squad_output --output_dir=OUT
"""

from __future__ import annotations

import sys

from absl import app, flags

from bert_tf import checkpoints

FLAGS = flags.FLAGS
flags.DEFINE_enum("input_format", None, ["hf", "tf1"], "Format of --input.")
flags.DEFINE_string("input", None, "HF model directory, or TF1 checkpoint prefix or directory.")
flags.DEFINE_string("output_dir", None, "Model directory to write.")
flags.DEFINE_string("vocab_file", None, "vocab.txt to copy when the input has none beside it.")
flags.DEFINE_enum("task", None, ["classification", "squad"],
                  "The input is a model fine-tuned by google-research/bert's run_classifier.py "
                  "(pooled head: output_weights, output_bias) or run_squad.py (cls/squad/...); "
                  "writes its task.json too.")
flags.DEFINE_list("labels", None, "--task=classification: the labels in the order of the original "
                  "processor's get_labels() (e.g. 0,1 for MRPC); unset for regression.")
flags.DEFINE_boolean("text_pair", False, "--task=classification: inputs are sentence pairs.")
flags.DEFINE_boolean("version_2_with_negative", False, "--task=squad: SQuAD 2.0 (null answers).")
flags.DEFINE_integer("max_seq_length", None, "The fine-tuning's --max_seq_length (default: 128 for "
                     "classification, 384 for squad, the original defaults).", lower_bound=8)
flags.DEFINE_boolean("do_lower_case", None, "The fine-tuning's --do_lower_case (default: the casing "
                     "the input records, else true).")
flags.mark_flags_as_required(["input_format", "input", "output_dir"])

# The original run_classifier.py's and run_squad.py's --max_seq_length defaults.
_ORIGINAL_MAX_SEQ_LENGTH = {"classification": 128, "squad": 384}


def original_task_info(task: str, input_path: str, *, labels: list[str] | None = None,
                       text_pair: bool = False, version_2_with_negative: bool = False,
                       max_seq_length: int | None = None, do_lower_case: bool | None = None) -> dict:
    """The task.json of a model fine-tuned by google-research/bert's run_classifier.py or run_squad.py."""
    info = {"task": task, "max_seq_length": max_seq_length or _ORIGINAL_MAX_SEQ_LENGTH[task],
            "do_lower_case": checkpoints.resolve_lower_case(do_lower_case, input_path)}
    if task == "classification":
        return {**info, "labels": labels or None, "head": "pooled", "text_pair": text_pair}
    return {**info, "version_2_with_negative": version_2_with_negative}


def convert(input_path: str, input_format: str, output_dir: str,
            vocab_file: str | None = None, task_info: dict | None = None) -> str:
    """Loads a checkpoint and writes a model directory.

    Without `task_info`: the encoder, with the pretraining heads when present.
    With it: the fine-tuned task model it describes (see `original_task_info`).
    """
    if task_info is not None:
        model = checkpoints.load_task_model(input_path, task_info)
    elif checkpoints.has_pretraining_heads(input_path, input_format):
        model = checkpoints.load_pretrainer(input_path, input_format)
    else:
        model = checkpoints.load_encoder(input_path, input_format)
    return checkpoints.save_model_dir(model, output_dir, vocab_file or model.vocab_file, task_info)


def main(argv: list[str]) -> None:
    del argv
    try:
        task_info = None
        if FLAGS.task:
            if FLAGS.input_format != "tf1":
                raise ValueError("--task needs --input_format=tf1 (a google-research/bert checkpoint)")
            task_info = original_task_info(
                FLAGS.task, FLAGS.input, labels=FLAGS.labels, text_pair=FLAGS.text_pair,
                version_2_with_negative=FLAGS.version_2_with_negative,
                max_seq_length=FLAGS.max_seq_length, do_lower_case=FLAGS.do_lower_case)
        out = convert(FLAGS.input, FLAGS.input_format, FLAGS.output_dir, FLAGS.vocab_file, task_info)
    except (OSError, ValueError) as e:
        print(f"convert_checkpoint: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {out}")


if __name__ == "__main__":
    app.run(main)
