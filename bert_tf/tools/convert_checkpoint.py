"""Converts a Hugging Face or google-research/bert checkpoint into a bert_tf model directory.

    python -m bert_tf.tools.convert_checkpoint --input_format=hf --input=DIR --output_dir=OUT
    python -m bert_tf.tools.convert_checkpoint --input_format=tf1 \
        --input=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=OUT

The output holds bert_config.json, vocab.txt (when the input has one) and
bert_model.ckpt with the original TF1 variable names; the pretraining heads are
kept when the input has them.
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
flags.mark_flags_as_required(["input_format", "input", "output_dir"])


def convert(input_path: str, input_format: str, output_dir: str,
            vocab_file: str | None = None) -> str:
    """Loads a checkpoint (with its heads when present) and writes a model directory."""
    if checkpoints.has_pretraining_heads(input_path, input_format):
        model = checkpoints.load_pretrainer(input_path, input_format)
    else:
        model = checkpoints.load_encoder(input_path, input_format)
    return checkpoints.save_model_dir(model, output_dir, vocab_file or model.vocab_file)


def main(argv: list[str]) -> None:
    del argv
    try:
        out = convert(FLAGS.input, FLAGS.input_format, FLAGS.output_dir, FLAGS.vocab_file)
    except (OSError, ValueError) as e:
        print(f"convert_checkpoint: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {out}")


if __name__ == "__main__":
    app.run(main)
