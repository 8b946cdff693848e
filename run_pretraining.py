"""Pretrains BERT with masked LM and next-sentence prediction.

    python run_pretraining.py --flagfile=flags/pretrain_demo.flags

Intentionally kept short: flags in, dataclasses out, one call into
bert_tf.training. Rerunning the same command resumes from OUTPUT_DIR.
"""

from __future__ import annotations

import os

from absl import app, flags, logging

from bert_tf import flags as bert_flags

bert_flags.define_pretraining_flags()
FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        bert_flags.exit_with_error(f"unexpected arguments: {' '.join(argv[1:])}")
    import tensorflow as tf

    from bert_tf.checkpoints import CheckpointMismatchError
    from bert_tf.training import distribute, pretraining_job
    from bert_tf.training.optimization import OptimizerConfig

    if FLAGS.num_cpu_devices > 1:
        distribute.split_cpu(FLAGS.num_cpu_devices)
    try:
        strategy = distribute.get_strategy(FLAGS.distribution_strategy, FLAGS.tpu)
        data = pretraining_job.DataConfig(
            input_files=tuple(FLAGS.input_file or ()),
            eval_input_files=tuple(FLAGS.eval_input_file or ()),
            input_text_files=tuple(FLAGS.input_text_file or ()), text_corpus=FLAGS.text_corpus,
            vocab_file=FLAGS.vocab_file, vocab_size=FLAGS.vocab_size,
            do_lower_case=FLAGS.do_lower_case, allow_case_mismatch=FLAGS.allow_case_mismatch,
            dynamic_masking=FLAGS.dynamic_masking,
            masked_lm_prob=FLAGS.masked_lm_prob, dupe_factor=FLAGS.dupe_factor,
            do_whole_word_mask=FLAGS.do_whole_word_mask, word_boundaries=FLAGS.word_boundaries,
            original_rng=FLAGS.original_rng, balanced_nsp=FLAGS.balanced_nsp,
            seed=FLAGS.random_seed, skip_corrupt_records=FLAGS.skip_corrupt_records)
        optimizer = OptimizerConfig(
            optimizer=FLAGS.optimizer, learning_rate=FLAGS.learning_rate,
            num_train_steps=FLAGS.num_train_steps, num_warmup_steps=FLAGS.num_warmup_steps,
            end_learning_rate=FLAGS.end_learning_rate, weight_decay=FLAGS.weight_decay,
            adam_bias_correction=FLAGS.adam_bias_correction, clip_norm=FLAGS.clip_norm or None)
        training = pretraining_job.PretrainingConfig(
            output_dir=FLAGS.output_dir, train_batch_size=FLAGS.train_batch_size,
            eval_batch_size=FLAGS.eval_batch_size, max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
            stop_step=FLAGS.stop_at_step, save_checkpoints_steps=FLAGS.save_checkpoints_steps,
            keep_checkpoint_max=FLAGS.keep_checkpoint_max, log_steps=FLAGS.log_steps,
            eval_every_steps=FLAGS.eval_every_steps, eval_batches=FLAGS.max_eval_steps,
            init_checkpoint=FLAGS.init_checkpoint,
            mixed_precision=distribute.resolve_precision(FLAGS.mixed_precision),
            jit_compile=FLAGS.jit_compile, recompute_activations=FLAGS.recompute_activations,
            peak_flops=FLAGS.peak_tflops * 1e12 if FLAGS.peak_tflops else None, seed=FLAGS.random_seed,
            deterministic=FLAGS.deterministic)
        results = pretraining_job.run(data, FLAGS.model_preset, FLAGS.bert_config_file, optimizer,
                                      training, strategy, hparams=bert_flags.flag_values())
    except (OSError, ValueError, FloatingPointError, CheckpointMismatchError) as e:
        bert_flags.exit_with_error(e)
    except tf.errors.DataLossError as e:  # a shard corrupt part-way, found while training
        bert_flags.exit_with_error(f"corrupt TFRecord data in the input ({e.message.splitlines()[0]}); "
                                   "--skip_corrupt_records skips the rest of such shards")
    for name, value in sorted(results.items()):
        logging.info("final %s = %.4f", name, value)
    print(f"done: model in {os.path.join(FLAGS.output_dir, 'model')}; "
          f"tensorboard --logdir {FLAGS.output_dir}")


if __name__ == "__main__":
    app.run(main, flags_parser=bert_flags.parse_flags_or_exit)
