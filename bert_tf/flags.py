"""absl flags shared by the drivers, and how drivers fail.

Each driver calls the `define_*_flags` functions it needs (each defines a
flag only once, so groups may overlap), turns the parsed flags into the
library's options dataclass and calls one library function; the checks live
there, not here (a flag only parses). Bad input ends the driver with one line
on stderr naming the flag or file, and exit code 2.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, NoReturn, Sequence

from absl import flags

from bert_tf.data.pretraining.documents import INPUT_FORMATS, WORD_BOUNDARIES

FLAGS = flags.FLAGS


def _define_once(name: str, define: Callable[[], object]) -> None:
    if name not in FLAGS:
        define()


def define_model_input_flags() -> None:
    """Vocab, casing, sequence length and model config: every driver's inputs."""
    _define_once("vocab_file", lambda: flags.DEFINE_string(
        "vocab_file", None, "The vocabulary file the BERT model was trained on."))
    _define_once("do_lower_case", lambda: flags.DEFINE_boolean(
        "do_lower_case", True, "Lower-case the input text (uncased models)."))
    _define_once("max_seq_length", lambda: flags.DEFINE_integer(
        "max_seq_length", 128, "Length of every packed sequence, [CLS] and [SEP]s included.",
        lower_bound=5))
    _define_once("bert_config_file", lambda: flags.DEFINE_string(
        "bert_config_file", None,
        "bert_config.json of the model; when given, --max_seq_length is checked against "
        "its max_position_embeddings."))


def define_masked_lm_flags() -> None:
    """How pairs and masked-LM targets are drawn: create_pretraining_data.py and run_pretraining.py."""
    define_model_input_flags()
    if "max_predictions_per_seq" in FLAGS:
        return
    flags.DEFINE_integer("max_predictions_per_seq", 20,
                         "Most masked-LM targets per sequence.", lower_bound=1)
    flags.DEFINE_float("masked_lm_prob", 0.15, "Fraction of tokens chosen for masked LM.")
    flags.DEFINE_boolean("do_whole_word_mask", False,
                         "Mask whole words rather than single word pieces.")
    flags.DEFINE_enum("word_boundaries", "wordpiece", WORD_BOUNDARIES,
                      "Where words start for whole-word masking: wordpiece (## pieces, "
                      "English), jieba (Chinese segmenter) or whitespace (pre-segmented text).")
    flags.DEFINE_boolean("original_rng", False,
                         "Draw every random choice as google-research/bert's "
                         "create_pretraining_data.py does (one random.Random, masking each "
                         "example as it is made), so the same input, vocab, flags and seed "
                         "write its examples in its order. The default follows the same rules "
                         "but draws the masks with a vectorised, seeded masker.")
    flags.DEFINE_boolean("balanced_nsp", False,
                         "Not the original: a one-sentence chunk that draws a true next "
                         "borrows a neighbouring sentence (or is cut in two) instead of always "
                         "getting a random B, so NSP pairs are 50% random rather than the "
                         "original's 56-76% (measured on the embedded corpora).")


def define_pretraining_data_flags() -> None:
    """Flags of create_pretraining_data.py (the original tool's names and defaults)."""
    define_masked_lm_flags()
    flags.DEFINE_list("input_file", None,
                      "Comma-separated globs of text files: one sentence a line, "
                      "a blank line between documents.")
    flags.DEFINE_enum("input_format", "sentences", INPUT_FORMATS,
                      "sentences: one sentence a line, a blank line between documents; "
                      "paragraphs: one paragraph (document) a line, split into sentences.")
    flags.DEFINE_string("output_file", None,
                        "TFRecord file to write; with --num_shards > 1, suffixed -KKKKK-of-NNNNN.")
    flags.DEFINE_integer("dupe_factor", 10,
                         "Passes over the corpus, each with different pairs and masks.",
                         lower_bound=1)
    flags.DEFINE_integer("random_seed", 12345, "Seed of every random choice.")
    flags.DEFINE_float("short_seq_prob", 0.1,
                       "Probability of a shorter random target length.",
                       lower_bound=0.0, upper_bound=1.0)
    flags.DEFINE_boolean("static_masking", True,
                         "Write masked examples; false writes unmasked pairs for dynamic "
                         "masking in the input pipeline.")
    flags.DEFINE_integer("num_shards", 1, "Machines (or runs) the corpus is split over.",
                         lower_bound=1)
    flags.DEFINE_integer("shard_index", 0, "Which shard this run writes.", lower_bound=0)
    flags.DEFINE_integer("min_tokens", 0, "Drop documents with fewer tokens (0: no limit).",
                         lower_bound=0)
    flags.DEFINE_integer("max_tokens", 0, "Drop documents with more tokens (0: no limit).",
                         lower_bound=0)
    for name in ("input_file", "output_file", "vocab_file"):
        flags.mark_flag_as_required(name)


def define_case_mismatch_flag() -> None:
    """--allow_case_mismatch: run although --do_lower_case contradicts --init_checkpoint."""
    _define_once("allow_case_mismatch", lambda: flags.DEFINE_boolean(
        "allow_case_mismatch", False,
        "Use --do_lower_case even when it contradicts the casing --init_checkpoint records "
        "(its bert_config.json, or a google-research/bert name such as uncased_L-12_H-768_A-12); "
        "without it such a run stops, as the original's validate_case_matches_checkpoint."))


def exit_with_error(message: object) -> NoReturn:
    """Ends a driver: one line `<driver>: error: <message>` on stderr, exit code 2."""
    text = " ".join(str(message).split())
    print(f"{os.path.basename(sys.argv[0])}: error: {text}", file=sys.stderr)
    sys.exit(2)


def parse_flags_or_exit(argv: Sequence[str]) -> list[str]:
    """`app.run`'s flags_parser: a bad or missing flag ends the run via `exit_with_error`."""
    try:
        return FLAGS(argv)
    except flags.Error as e:
        exit_with_error(e)


def define_adam_bias_correction_flag() -> None:
    """--adam_bias_correction, shared by run_pretraining.py and the fine-tuning drivers."""
    _define_once("adam_bias_correction", lambda: flags.DEFINE_boolean(
        "adam_bias_correction", False,
        "Divide Adam's moving averages by 1 - beta^step (--optimizer=adamw or adam; LAMB always "
        "does). Default false, as google-research/bert's AdamWeightDecayOptimizer, which "
        "pretrained and fine-tuned BERT without it (its early steps are then larger: up to 6.6x "
        "at step 12, 1.3x at step 1000, which the warmup tempers); in the README's fine-tuning "
        "tricks table (bench/finetune_tricks.py, 3 seeds a task) correction helps on no task beyond "
        "seed noise and is worse on tweets and NER."))


def define_pretraining_flags() -> None:
    """Flags of run_pretraining.py (original google-research/bert names where one exists)."""
    from bert_tf.configs import PRESETS
    from bert_tf.training.distribute import STRATEGIES
    from bert_tf.training.optimization import OPTIMIZERS
    from bert_tf.training.pretraining_job import EMBEDDED_CORPORA
    from bert_tf.training.step import PRECISIONS

    define_masked_lm_flags()
    flags.DEFINE_enum("model_preset", "base_uncased", sorted(PRESETS),
                      "Model size when no --bert_config_file is given; vocab_size follows the vocab.")
    flags.DEFINE_list("input_file", None, "Comma-separated globs of pretraining TFRecords.")
    flags.DEFINE_list("eval_input_file", None, "Globs of held-out TFRecords for evaluation.")
    flags.DEFINE_list("input_text_file", None,
                      "Globs of plain text (a sentence a line, blank line between documents); "
                      "records are written to OUTPUT_DIR/data first.")
    flags.DEFINE_enum("text_corpus", None, sorted(EMBEDDED_CORPORA),
                      "An embedded corpus from the demo extra, used like --input_text_file.")
    flags.DEFINE_integer("vocab_size", 8000, "Size of the vocab learned when --vocab_file is "
                         "not given or does not exist yet.", lower_bound=10)
    flags.DEFINE_string("output_dir", None, "Checkpoints, summaries, data and the final model.")
    flags.DEFINE_string("init_checkpoint", None,
                        "Model directory, TF1 checkpoint or Hugging Face directory to start "
                        "from (weights only; a checkpoint in --output_dir takes precedence).")
    define_case_mismatch_flag()
    flags.DEFINE_integer("dupe_factor", 5, "Passes over a text corpus when writing records.",
                         lower_bound=1)
    flags.DEFINE_boolean("dynamic_masking", False,
                         "Mask anew every epoch in tf.data (text input: records are written unmasked).")
    flags.DEFINE_boolean("skip_corrupt_records", False,
                         "Leave out TFRecord shards that are corrupt (logged and counted) instead "
                         "of stopping.")
    flags.DEFINE_integer("train_batch_size", 32, "Global batch of one optimizer step.",
                         lower_bound=1)
    flags.DEFINE_integer("eval_batch_size", 32, "Global eval batch.", lower_bound=1)
    flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.", lower_bound=0.0)
    flags.DEFINE_float("end_learning_rate", 0.0, "Learning rate at num_train_steps.", lower_bound=0.0)
    flags.DEFINE_integer("num_train_steps", 100000, "Steps of the learning-rate schedule.",
                         lower_bound=1)
    flags.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup steps.", lower_bound=0)
    flags.DEFINE_integer("stop_at_step", None, "Stop this run at this step (phase 1 of two-phase "
                         "pretraining); default num_train_steps.", lower_bound=1)
    flags.DEFINE_enum("optimizer", "adamw", OPTIMIZERS, "adamw as in BERT, or lamb.")
    flags.DEFINE_float("weight_decay", 0.01, "Decoupled weight decay (not on LayerNorm or bias).",
                       lower_bound=0.0)
    define_adam_bias_correction_flag()
    flags.DEFINE_float("clip_norm", 1.0, "Clip gradients by this global norm (0: off).",
                       lower_bound=0.0)
    flags.DEFINE_integer("gradient_accumulation_steps", 1, "Micro-batches per optimizer step.",
                         lower_bound=1)
    flags.DEFINE_enum("distribution_strategy", "auto", STRATEGIES, "tf.distribute strategy.")
    flags.DEFINE_string("tpu", None, "TPU address for --distribution_strategy=tpu.")
    flags.DEFINE_integer("num_cpu_devices", 1, "Split the CPU into this many logical devices "
                         "(MirroredStrategy without GPUs: tests and debugging).", lower_bound=1)
    flags.DEFINE_enum("mixed_precision", "auto", list(PRECISIONS) + ["auto"],
                      "auto: mixed_bfloat16 where the hardware has fast bfloat16 (GPUs of compute "
                      "capability 8.0+, CPUs with AMX or AVX512-BF16), else float32.")
    flags.DEFINE_boolean("jit_compile", False, "Compile the forward/backward step with XLA.")
    flags.DEFINE_boolean("recompute_activations", False,
                         "Recompute each Transformer block's activations in the backward pass "
                         "(tf.recompute_grad): less memory for long sequences, about a third more "
                         "compute per step.")
    flags.DEFINE_integer("random_seed", 12345, "Seed of data order, masking and initialisation.")
    _define_once("deterministic", lambda: flags.DEFINE_boolean(
        "deterministic", False, "Deterministic ops (tf.config.experimental.enable_op_determinism): "
        "the same command gives bitwise-identical weights on the same machine; slower."))
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many steps.",
                         lower_bound=1)
    flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.", lower_bound=1)
    flags.DEFINE_integer("log_steps", 100, "Log and write train summaries every this many steps.",
                         lower_bound=1)
    flags.DEFINE_integer("eval_every_steps", 1000, "Evaluate every this many steps.", lower_bound=1)
    flags.DEFINE_integer("max_eval_steps", 20, "Eval batches per evaluation.", lower_bound=1)
    flags.DEFINE_float("peak_tflops", None, "Peak TFLOP/s per replica for MFU; measured when unset.")
    flags.mark_flag_as_required("output_dir")


def flag_values() -> dict[str, object]:
    """The set values of the flags defined here and in the running driver."""
    modules = FLAGS.flags_by_module_dict()
    ours = {f.name for module in (__name__, sys.argv[0], "__main__") for f in modules.get(module, [])}
    return {name: FLAGS[name].value for name in sorted(ours) if FLAGS[name].value is not None}


def define_finetuning_flags() -> None:
    """Flags every fine-tuning driver shares (original run_classifier.py names where one exists)."""
    from bert_tf.training.distribute import STRATEGIES
    from bert_tf.training.optimization import OPTIMIZERS
    from bert_tf.training.step import PRECISIONS

    _define_once("vocab_file", lambda: flags.DEFINE_string(
        "vocab_file", None, "vocab.txt; default: the one in --init_checkpoint's directory."))
    _define_once("bert_config_file", lambda: flags.DEFINE_string(
        "bert_config_file", None, "bert_config.json; default: the one beside --init_checkpoint."))
    flags.DEFINE_boolean("do_lower_case", None, "Lower-case input; default: the model config's do_lower_case.")
    flags.DEFINE_integer("max_seq_length", 128, "Longest packed input, [CLS] and [SEP]s included.",
                         lower_bound=8)
    flags.DEFINE_string("init_checkpoint", None,
                        "With --do_train: a pretrained model (project dir, TF1 checkpoint, HF dir, or "
                        "package:NAME/PATH inside an installed package). Without: a fine-tuned "
                        "model directory to evaluate or predict with.")
    flags.DEFINE_string("output_dir", None, "Checkpoints, summaries, the best model and results JSON.")
    define_case_mismatch_flag()
    flags.DEFINE_boolean("do_train", False, "Fine-tune.")
    flags.DEFINE_boolean("do_eval", False, "Evaluate on the dev split(s); writes eval_results.json.")
    flags.DEFINE_boolean("do_predict", False, "Predict the test split(s).")
    flags.DEFINE_integer("train_batch_size", 32, "Global batch of one optimizer step.", lower_bound=1)
    flags.DEFINE_integer("eval_batch_size", 64, "Batch for evaluation and prediction.", lower_bound=1)
    flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate (paper: 5e-5, 3e-5, 2e-5).",
                       lower_bound=0.0)
    flags.DEFINE_float("num_train_epochs", 3.0, "Epochs (paper: 2 to 4).", lower_bound=0.0)
    flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of steps of linear warmup.",
                       lower_bound=0.0, upper_bound=1.0)
    _define_once("optimizer", lambda: flags.DEFINE_enum("optimizer", "adamw", OPTIMIZERS, "Optimizer."))
    _define_once("weight_decay", lambda: flags.DEFINE_float(
        "weight_decay", 0.01, "Decoupled weight decay (not on LayerNorm or bias).", lower_bound=0.0))
    define_adam_bias_correction_flag()
    _define_once("gradient_accumulation_steps", lambda: flags.DEFINE_integer(
        "gradient_accumulation_steps", 1, "Micro-batches per optimizer step.", lower_bound=1))
    _define_once("distribution_strategy", lambda: flags.DEFINE_enum(
        "distribution_strategy", "auto", STRATEGIES, "tf.distribute strategy."))
    _define_once("mixed_precision", lambda: flags.DEFINE_enum(
        "mixed_precision", "auto", list(PRECISIONS) + ["auto"],
        "auto: mixed_bfloat16 where the hardware has fast bfloat16, else float32."))
    _define_once("jit_compile", lambda: flags.DEFINE_boolean("jit_compile", False, "XLA."))
    flags.DEFINE_float("layerwise_lr_decay", 1.0,
                       "Layer-wise learning-rate decay: each Transformer layer's rate times this to the "
                       "power of its distance from the top (pooler and task head 1, embeddings lowest); "
                       "1 is off.", lower_bound=0.0, upper_bound=1.0)
    flags.DEFINE_integer("reinit_top_layers", 0, "Re-initialise the top N encoder layers and the pooler "
                         "instead of taking them from --init_checkpoint.", lower_bound=0)
    flags.DEFINE_boolean("length_bucketing", False,
                         "Batch training rows of similar length together (buckets of 8 tokens): "
                         "less padding, faster on data of mixed lengths; batches are then less mixed.")
    _define_once("random_seed", lambda: flags.DEFINE_integer("random_seed", 12345, "Seed."))
    _define_once("deterministic", lambda: flags.DEFINE_boolean(
        "deterministic", False, "Deterministic ops (tf.config.experimental.enable_op_determinism): "
        "the same command gives bitwise-identical weights on the same machine; slower."))
    _define_once("log_steps", lambda: flags.DEFINE_integer("log_steps", 50, "Log every this many steps.",
                                                           lower_bound=1))
    flags.DEFINE_boolean("skip_bad_rows", False, "Skip and count malformed rows instead of failing.")
    flags.mark_flag_as_required("output_dir")


def define_length_filter_flags() -> None:
    """--min_seq_tokens, --max_seq_tokens, --length_filter_percent: run_classifier.py and run_ner.py."""
    flags.DEFINE_integer("min_seq_tokens", 0, "Drop training examples shorter than this many word pieces "
                         "([CLS] and [SEP]s included; 0: off).", lower_bound=0)
    flags.DEFINE_integer("max_seq_tokens", 0, "Drop training examples longer than this (0: off); "
                         "--max_seq_tokens=MAX_SEQ_LENGTH drops those that would be cut.", lower_bound=0)
    flags.DEFINE_float("length_filter_percent", 0.0,
                       "Instead: drop up to this percentage of the training examples at each end of "
                       "the length distribution (the bounds used are logged and reported).",
                       lower_bound=0.0)


def length_filter_options():
    """The length-filter flags as the library's LengthFilter (its checks raise ValueError)."""
    from bert_tf.data.length_filter import LengthFilter

    return LengthFilter(min_seq_tokens=FLAGS.min_seq_tokens, max_seq_tokens=FLAGS.max_seq_tokens,
                        drop_percent=FLAGS.length_filter_percent)


def run_finetuning_driver(argv: Sequence[str], job: Callable[[], dict]) -> None:
    """A fine-tuning driver's main: no stray arguments, bad input as one line, the report as JSON."""
    import json

    from bert_tf.checkpoints import CheckpointMismatchError

    if len(argv) > 1:
        exit_with_error(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        report = job()
    except (OSError, ValueError, FloatingPointError, CheckpointMismatchError) as e:
        exit_with_error(e)
    print(json.dumps({k: v for k, v in report.items() if k != "train"}, indent=2, sort_keys=True,
                     ensure_ascii=False))


def finetuning_options():
    """The shared fine-tuning flags as the arguments every fine-tuning job's `run` takes after its data.

    Returns (JobOptions, OptimizerConfig, FinetuningConfig, strategy). Driver-side
    glue (this module is where flags are read): the library takes the
    dataclasses. The schedule's length comes from the epochs at run time.
    """
    from bert_tf.training import distribute
    from bert_tf.training.finetuning import FinetuningConfig, JobOptions
    from bert_tf.training.optimization import OptimizerConfig

    optimizer = OptimizerConfig(optimizer=FLAGS.optimizer, learning_rate=FLAGS.learning_rate,
                                weight_decay=FLAGS.weight_decay,
                                adam_bias_correction=FLAGS.adam_bias_correction,
                                layerwise_lr_decay=FLAGS.layerwise_lr_decay,
                                num_train_steps=0, num_warmup_steps=0)
    config = FinetuningConfig(
        output_dir=FLAGS.output_dir, train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size, num_train_epochs=FLAGS.num_train_epochs,
        warmup_proportion=FLAGS.warmup_proportion,
        gradient_accumulation_steps=FLAGS.gradient_accumulation_steps, log_steps=FLAGS.log_steps,
        seed=FLAGS.random_seed, mixed_precision=distribute.resolve_precision(FLAGS.mixed_precision),
        jit_compile=FLAGS.jit_compile, length_bucketing=FLAGS.length_bucketing,
        deterministic=FLAGS.deterministic, reinit_top_layers=FLAGS.reinit_top_layers)
    job = JobOptions(init_checkpoint=FLAGS.init_checkpoint, do_train=FLAGS.do_train, do_eval=FLAGS.do_eval,
                     do_predict=FLAGS.do_predict, max_seq_length=FLAGS.max_seq_length,
                     do_lower_case=FLAGS.do_lower_case, vocab_file=FLAGS.vocab_file,
                     bert_config_file=FLAGS.bert_config_file, allow_case_mismatch=FLAGS.allow_case_mismatch)
    return job, optimizer, config, distribute.get_strategy(FLAGS.distribution_strategy)
