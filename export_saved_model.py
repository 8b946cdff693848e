"""Exports a model directory as a SavedModel for TensorFlow Serving (text in, predictions out).

    python export_saved_model.py --model_dir=runs/reviews/best --export_dir=exports --model_name=reviews
    python export_saved_model.py --model_dir=runs/pretrain_demo/model --export_dir=exports \
        --model_name=encoder --max_seq_length=128

Writes EXPORT_DIR/MODEL_NAME/VERSION/ (next free integer version unless --version),
the layout TF Serving watches. Intentionally kept short: flags in, one call into bert_tf.export.
"""

from __future__ import annotations

import os

from absl import app, flags

from bert_tf import flags as bert_flags

flags.DEFINE_string("model_dir", None, "A model directory written by this project (bert_config.json, "
                    "vocab.txt, bert_model.ckpt; task.json for a fine-tuned model).")
flags.DEFINE_string("export_dir", None, "The folder TF Serving's model base paths live under.")
flags.DEFINE_string("model_name", None, "The served model's name: EXPORT_DIR/MODEL_NAME/VERSION.")
flags.DEFINE_integer("version", None, "Integer version folder (default: one above the highest present).",
                     lower_bound=0)
flags.DEFINE_boolean("overwrite", False, "Replace the version folder if it exists.")
flags.DEFINE_integer("max_seq_length", None, "Packed length (default: the task's training length; "
                     "128 for an encoder).", lower_bound=3)
flags.mark_flags_as_required(["model_dir", "export_dir", "model_name"])
FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        bert_flags.exit_with_error(f"unexpected arguments: {' '.join(argv[1:])}")
    from bert_tf import export

    try:
        path = export.export_saved_model(FLAGS.model_dir, FLAGS.export_dir, FLAGS.model_name,
                                         version=FLAGS.version, overwrite=FLAGS.overwrite,
                                         max_seq_length=FLAGS.max_seq_length)
    except (OSError, ValueError) as e:
        bert_flags.exit_with_error(e)
    print(f"exported {path}; serve it with --model_base_path={os.path.dirname(path)}")


if __name__ == "__main__":
    app.run(main, flags_parser=bert_flags.parse_flags_or_exit)
