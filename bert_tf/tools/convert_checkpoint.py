"""Converts BERT checkpoints between bert_tf, google-research/bert, Hugging Face and keras-hub.

    python -m bert_tf.tools.convert_checkpoint --input=DIR --output_dir=OUT
    python -m bert_tf.tools.convert_checkpoint --input_format=tf1 \
        --input=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=OUT
    python -m bert_tf.tools.convert_checkpoint --input=MODEL_DIR --output_format=hf --output_dir=OUT
    python -m bert_tf.tools.convert_checkpoint --input=MODEL_DIR --output_format=keras_hub \
        --output_dir=OUT

The input is a bert_tf model directory or a google-research/bert checkpoint
("tf1"), a Hugging Face directory ("hf") or a keras-hub BertBackbone preset
("keras_hub"); --input_format skips the detection.

--output_format=tf1 (the default) writes a bert_tf model directory:
bert_config.json, vocab.txt (when the input has one) and bert_model.ckpt with
the original TF1 variable names, which google-research/bert reads too.
--output_format=hf writes config.json, model.safetensors, vocab.txt and
tokenizer_config.json, loaded by transformers' BertModel / BertForPreTraining /
AutoTokenizer `from_pretrained(OUT)`. Both keep the pretraining heads when the
input has them. --output_format=keras_hub writes a preset for keras-hub's
BertBackbone.from_preset(OUT) and BertTokenizer.from_preset(OUT), without the
heads. The tokenizer files record --do_lower_case (default: the input's casing).

keras-hub's BertBackbone always computes tanh-approximated GELU: a model with
hidden_act="gelu_tanh" exports exactly; one with the exact (erf) "gelu" of the
original BERT is refused unless --allow_gelu_approximation, which exports it
anyway and prints the largest output difference measured on a random batch
(the exported weights then compute a slightly different function).

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
flags.DEFINE_enum("input_format", None, ["hf", "keras_hub", "tf1"],
                  "Format of --input (default: detected). tf1: a bert_tf model directory or a "
                  "google-research/bert checkpoint prefix or directory.")
flags.DEFINE_string("input", None, "The model directory, checkpoint prefix or preset to convert.")
flags.DEFINE_enum("output_format", "tf1", ["hf", "keras_hub", "tf1"],
                  "What to write: a bert_tf model directory (tf1), a Hugging Face directory (hf) "
                  "or a keras-hub BertBackbone preset (keras_hub).")
flags.DEFINE_string("output_dir", None, "Directory to write (replaced when it exists).")
flags.DEFINE_boolean("allow_gelu_approximation", False,
                     "--output_format=keras_hub: export a model with exact GELU (hidden_act=gelu) "
                     "to keras-hub's tanh-GELU backbone anyway, and print the measured largest "
                     "output difference.")
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
flags.DEFINE_boolean("do_lower_case", None, "The casing recorded in the tokenizer files of "
                     "--output_format=hf and keras_hub, and --task's (default: the casing the input "
                     "records, else true).")
flags.mark_flags_as_required(["input", "output_dir"])

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


def convert(input_path: str, input_format: str | None, output_dir: str,
            vocab_file: str | None = None, task_info: dict | None = None, *,
            output_format: str = "tf1", do_lower_case: bool | None = None,
            allow_gelu_approximation: bool = False) -> str:
    """Loads a checkpoint and writes it in `output_format` to `output_dir`.

    Without `task_info`: the encoder, with the pretraining heads when present
    (keras_hub: the encoder only). With it: the fine-tuned task model it
    describes (see `original_task_info`), as a tf1 model directory.

    Returns:
        The directory written.
    """
    if task_info is not None:
        if output_format != "tf1":
            raise ValueError("--task writes a bert_tf model directory (--output_format=tf1)")
        model = checkpoints.load_task_model(input_path, task_info)
    elif output_format != "keras_hub" and checkpoints.has_pretraining_heads(input_path, input_format):
        model = checkpoints.load_pretrainer(input_path, input_format)
    else:
        model = checkpoints.load_encoder(input_path, input_format)
    vocab_file = vocab_file or model.vocab_file
    if output_format == "tf1":
        return checkpoints.save_model_dir(model, output_dir, vocab_file, task_info)
    lower = checkpoints.resolve_lower_case(do_lower_case, input_path)
    if output_format == "hf":
        return checkpoints.save_hf_dir(model, output_dir, vocab_file, lower)
    return checkpoints.save_keras_hub_preset(model, output_dir, vocab_file, lower,
                                             allow_gelu_approximation=allow_gelu_approximation)


def main(argv: list[str]) -> None:
    del argv
    try:
        task_info = None
        if FLAGS.task:
            if FLAGS.input_format not in (None, "tf1"):
                raise ValueError("--task needs a google-research/bert checkpoint (--input_format=tf1)")
            task_info = original_task_info(
                FLAGS.task, FLAGS.input, labels=FLAGS.labels, text_pair=FLAGS.text_pair,
                version_2_with_negative=FLAGS.version_2_with_negative,
                max_seq_length=FLAGS.max_seq_length, do_lower_case=FLAGS.do_lower_case)
        out = convert(FLAGS.input, FLAGS.input_format, FLAGS.output_dir, FLAGS.vocab_file, task_info,
                      output_format=FLAGS.output_format, do_lower_case=FLAGS.do_lower_case,
                      allow_gelu_approximation=FLAGS.allow_gelu_approximation)
    except (OSError, ValueError) as e:
        print(f"convert_checkpoint: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {out}")
    if FLAGS.output_format == "keras_hub" and FLAGS.allow_gelu_approximation:
        import keras_hub

        difference = checkpoints.keras_hub_max_difference(
            checkpoints.load_encoder(FLAGS.input, FLAGS.input_format),
            keras_hub.models.BertBackbone.from_preset(out))
        print(f"keras-hub's tanh GELU: the preset's outputs differ from the input's by at most "
              f"{difference:.2e} on a random batch")


if __name__ == "__main__":
    app.run(main)
