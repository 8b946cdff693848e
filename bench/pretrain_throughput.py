r"""Pretraining-step throughput of bert_tf against keras-hub's BertMaskedLM, as ratios.

    python bench/pretrain_throughput.py [--preset=mini_uncased --seq=128 --batch=32 --predictions=20]
    python bench/pretrain_throughput.py --quick --output_json=/tmp/pretrain.json

Sequences/second of one training step (forward, backward, optimizer update;
the batch already in memory) for
  - bert_tf: the driver's `TrainStep` on a `BertPretrainer` (MLM + NSP, AdamW
    with BERT's weight-decay exclusions, global-norm clipping), and
  - keras-hub: `BertMaskedLM` on a `BertBackbone` of the same architecture
    (MLM only), compiled as keras-hub's `compile()` does by default (Adam), and
    stepped through Keras' own train function, as `fit` does,
each in float32 and mixed_bfloat16, with and without XLA. All eight run in one
process and alternate round by round, so machine noise hits them alike.

Prints the median of each, the ratio ours/keras-hub (a) at each library's
default setting (bert_tf: `--mixed_precision=auto`, no XLA; keras-hub: float32,
`jit_compile="auto"`, which Keras turns on only with a GPU) and (b) each at its
fastest setting, and two efficiency figures per setting:
  - the floor ratio, the headline: step time over the time of the step's own
    matmuls alone (`metrics.pretraining_gemms`: every GEMM of forward and
    backward at the model's shapes, run back to back as one compiled function,
    `metrics.gemm_floor_call`) at the same precision, timed as the step is
    (`--steps` calls) right after it in every round; the median of the rounds'
    ratios. keras-hub's floor leaves out the NSP head it does not have;
  - model FLOPs utilisation: FLOPs per sequence x sequences/second over a
    2048x2048 matmul peak at the same precision.
The matmul peaks are measured in every round, between the steps, and the
best round counts; so is the memory bandwidth of an element-wise op
(`metrics.measure_copy_bandwidth`), what the work above the floor mostly
waits on. One run on a shared machine: ratios, not guarantees.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bert_tf  # noqa: F401  (first: on x86 Linux it turns oneDNN on before TensorFlow loads)
import keras
import keras_hub
import numpy as np
import tensorflow as tf
from absl import app, flags

import bench_util
from bert_tf.configs import get_preset
from bert_tf.modeling.pretrainer import BertPretrainer
from bert_tf.training import metrics
from bert_tf.training.distribute import resolve_precision
from bert_tf.training.optimization import OptimizerConfig, create_optimizer
from bert_tf.training.tasks import PretrainingTask
from bert_tf.training.step import TrainStep

flags.DEFINE_string("preset", "mini_uncased", "Model preset (bert_tf.configs).")
flags.DEFINE_integer("seq", 128, "Sequence length.", lower_bound=8)
flags.DEFINE_integer("batch", 32, "Sequences per step.", lower_bound=1)
flags.DEFINE_integer("predictions", 20, "Masked positions per sequence.", lower_bound=1)
flags.DEFINE_integer("steps", 10, "Timed steps per setting and round.", lower_bound=1)
flags.DEFINE_integer("rounds", 5, "Rounds; each setting is timed once per round.", lower_bound=1)
FLAGS = flags.FLAGS

SETTINGS = [(precision, jit) for precision in ("float32", "mixed_bfloat16") for jit in (False, True)]
LIBRARIES = ("bert_tf", "keras_hub")


def model_config():
    """The --preset's config; --quick shrinks its vocab (the embedding update dominates a tiny model)."""
    config = get_preset(FLAGS.preset)
    return dataclasses.replace(config, vocab_size=1000) if FLAGS.quick else config


def random_batch(vocab_size: int, size: int, seq: int, predictions: int) -> dict[str, np.ndarray]:
    """One batch of random ids in the pretraining feature layout (A = first half, B = second)."""
    rng = np.random.default_rng(0)
    positions = np.stack([np.sort(rng.choice(np.arange(1, seq), predictions, replace=False))
                          for _ in range(size)])
    return {
        "input_word_ids": rng.integers(5, vocab_size, (size, seq)).astype(np.int32),
        "input_mask": np.ones((size, seq), np.int32),
        "input_type_ids": (np.arange(seq)[None] >= seq // 2).repeat(size, 0).astype(np.int32),
        "masked_lm_positions": positions.astype(np.int32),
        "masked_lm_ids": rng.integers(5, vocab_size, (size, predictions)).astype(np.int32),
        "masked_lm_weights": np.ones((size, predictions), np.float32),
        "next_sentence_labels": rng.integers(0, 2, size).astype(np.int32),
    }


def _with_policy(precision: str, build):
    keras.mixed_precision.set_global_policy(precision)
    try:
        return build()
    finally:
        keras.mixed_precision.set_global_policy("float32")


def ours(config, precision: str, jit: bool, batch: dict, recompute: bool = False):
    """A callable running one bert_tf pretraining step on `batch`."""
    strategy = tf.distribute.OneDeviceStrategy("/gpu:0" if tf.config.list_physical_devices("GPU") else "/cpu:0")

    def build():
        with strategy.scope():
            model = BertPretrainer(config, recompute_activations=recompute)
            optimizer = create_optimizer(OptimizerConfig(num_train_steps=10_000, num_warmup_steps=100),
                                         precision)
            optimizer.build(model.trainable_variables)
        return model, optimizer

    model, optimizer = _with_policy(precision, build)
    size = len(batch["input_word_ids"])
    step = TrainStep(model, optimizer, strategy, PretrainingTask(), train_batch_size=size,
                     eval_batch_size=size, jit_compile=jit, clip_norm=1.0)
    iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
    return lambda: step.train(iterator)["mlm_loss"]


def keras_hub_model(config, precision: str, jit: bool, batch: dict):
    """A callable running one keras-hub BertMaskedLM training step through Keras' train function."""

    def build():
        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
            num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
            intermediate_dim=config.intermediate_size, dropout=config.hidden_dropout_prob,
            max_sequence_length=config.max_position_embeddings, num_segments=config.type_vocab_size)
        model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
        model.compile(jit_compile=jit)  # keras-hub's defaults otherwise
        return model

    model = _with_policy(precision, build)
    x = {"token_ids": batch["input_word_ids"], "segment_ids": batch["input_type_ids"],
         "padding_mask": batch["input_mask"].astype(bool), "mask_positions": batch["masked_lm_positions"]}
    data = (x, batch["masked_lm_ids"], batch["masked_lm_weights"])
    iterator = iter(tf.data.Dataset.from_tensors(data).repeat())
    model.make_train_function()
    return lambda: model.train_function(iterator)["loss"]


def seconds_per_call(call, calls: int) -> float:
    """Mean seconds of `calls` back-to-back calls of a (warmed-up) function returning a tensor."""
    start = time.perf_counter()
    for _ in range(calls):
        out = call()
    float(out)  # waits for the last call
    return (time.perf_counter() - start) / calls


def sequences_per_second(step, steps: int, batch: int) -> float:
    """Sequences/second of `steps` calls of a (warmed-up) step on batches of `batch`."""
    return batch / seconds_per_call(step, steps)


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.quick:
        FLAGS.preset, FLAGS.seq, FLAGS.batch, FLAGS.predictions = "tiny_uncased", 32, 8, 5
        FLAGS.steps, FLAGS.rounds = 2, 1
        # Both precisions and both libraries' default settings (no XLA on a CPU), in fewer builds.
        SETTINGS[:] = [("float32", False), ("mixed_bfloat16", False)]
    config = model_config()
    batch = random_batch(config.vocab_size, FLAGS.batch, FLAGS.seq, FLAGS.predictions)
    builders = {"bert_tf": ours, "keras_hub": keras_hub_model}
    runs = {(lib, s): builders[lib](config, *s, batch) for s in SETTINGS for lib in LIBRARIES}
    for step in runs.values():  # trace, compile and warm up
        for _ in range(2):
            float(step())
    step_seconds: dict = {key: [] for key in runs}
    precisions = {"float32": tf.float32, "mixed_bfloat16": tf.bfloat16}
    peaks: dict = {p: [] for p in precisions}
    floor_calls = {(lib, p): metrics.gemm_floor_call(
        metrics.pretraining_gemms(config, FLAGS.batch, FLAGS.seq, FLAGS.predictions, nsp=lib == "bert_tf"), dtype)
        for lib in LIBRARIES for p, dtype in precisions.items()}
    for call in floor_calls.values():  # trace and warm up
        float(call())
    floors: dict = {key: [] for key in runs}
    bandwidths = []
    seconds = 0.2 if FLAGS.quick else 1.0
    for _ in range(FLAGS.rounds):
        for key, step in runs.items():
            step_seconds[key].append(seconds_per_call(step, FLAGS.steps))
            # The step's matmuls alone, right after it and timed as it is: a ratio of two times
            # taken under the same load, round by round.
            lib, (precision, _) = key
            floors[key].append(seconds_per_call(floor_calls[(lib, precision)], FLAGS.steps))
        # The matmul peaks are measured in every round too; the best round counts.
        for precision, dtype in precisions.items():
            peaks[precision].append(metrics.measure_matmul_peak(dtype, seconds=seconds))
        bandwidths.append(metrics.measure_copy_bandwidth(seconds=seconds))
    speed = {key: [FLAGS.batch / t for t in times] for key, times in step_seconds.items()}
    median = {key: statistics.median(v) for key, v in speed.items()}
    spread = {key: (min(v), max(v)) for key, v in speed.items()}
    # Step time over floor time in each round.
    floor_ratios = {key: [t / f for t, f in zip(step_seconds[key], floors[key])] for key in runs}
    peak = {precision: max(values) for precision, values in peaks.items()}
    # The fastest floor of each precision, over its rounds and settings (the figure printed and kept).
    floor = {precision: min(t for (lib, (p, _)), times in floors.items() if lib == "bert_tf" and p == precision
                            for t in times) for precision in precisions}
    bandwidth = max(bandwidths)
    flops = metrics.pretraining_flops_per_sequence(config, FLAGS.seq, FLAGS.predictions)

    device = tf.config.list_logical_devices()[-1].device_type
    print(f"pretraining step: {FLAGS.preset}, batch {FLAGS.batch}, seq {FLAGS.seq}, "
          f"{FLAGS.predictions} predictions, {device}, {len(os.sched_getaffinity(0))} cores; "
          f"{flops / 1e9:.2f} GFLOP per sequence; matmul peak float32 {peak['float32'] / 1e9:.0f} "
          f"GFLOP/s, bfloat16 {peak['mixed_bfloat16'] / 1e9:.0f} GFLOP/s; the step's matmuls alone take "
          f"{1e3 * floor['float32']:.1f} ms in float32, "
          f"{1e3 * floor['mixed_bfloat16']:.1f} ms in bfloat16 (the fastest round); an element-wise op moves "
          f"{bandwidth / 1e9:.1f} GB/s")
    figures: dict = {"preset": FLAGS.preset, "seq": FLAGS.seq, "batch": FLAGS.batch,
                     "predictions": FLAGS.predictions, "gflop_per_sequence": flops / 1e9,
                     "peak_gflops_float32": peak["float32"] / 1e9,
                     "peak_gflops_bfloat16": peak["mixed_bfloat16"] / 1e9,
                     "floor_ms_float32": 1e3 * floor["float32"],
                     "floor_ms_bfloat16": 1e3 * floor["mixed_bfloat16"],
                     "copy_gb_per_s": bandwidth / 1e9}
    for (lib, (precision, jit)), value in median.items():
        mfu = flops * value / peak[precision]
        ratios = floor_ratios[(lib, (precision, jit))]
        floor_ratio = statistics.median(ratios)
        name = f"{lib}_{precision}{'_xla' if jit else ''}"
        figures[f"{name}_seq_per_s"], figures[f"{name}_mfu"] = value, mfu
        figures[f"{name}_floor_ratio"] = floor_ratio
        low, high = spread[(lib, (precision, jit))]
        print(f"  {lib:9s} {precision:15s} xla={'on ' if jit else 'off'} {value:8.1f} seq/s "
              f"(rounds {low:.1f}-{high:.1f})  step / matmul floor {floor_ratio:5.2f} "
              f"(rounds {min(ratios):.2f}-{max(ratios):.2f})  MFU {100 * mfu:5.1f}%")

    # Keras resolves jit_compile="auto" to XLA on when TensorFlow sees a GPU, off on a CPU.
    gpu = bool(tf.config.list_physical_devices("GPU"))
    default = {"bert_tf": (resolve_precision("auto"), False), "keras_hub": ("float32", gpu)}
    best = {lib: max(SETTINGS, key=lambda s: median[(lib, s)]) for lib in LIBRARIES}
    for kind, chosen in (("default", default), ("best", best)):
        ratio = median[("bert_tf", chosen["bert_tf"])] / median[("keras_hub", chosen["keras_hub"])]
        figures[f"ratio_{kind}_vs_keras_hub"] = ratio
        for lib in LIBRARIES:
            precision, jit = chosen[lib]
            figures[f"{kind}_setting_{lib}"] = f"{precision}{' + XLA' if jit else ''}"
        print(f"{kind:7s} settings: bert_tf {figures[f'{kind}_setting_bert_tf']}, keras-hub "
              f"{figures[f'{kind}_setting_keras_hub']}: ratio bert_tf / keras-hub {ratio:.2f}")
    precision, jit = best["bert_tf"]
    figures["mfu"] = figures[f"bert_tf_{precision}{'_xla' if jit else ''}_mfu"]
    print(f"bert_tf MFU at its best setting: {100 * figures['mfu']:.1f}% of the {precision} matmul peak")
    for lib, prefix in (("bert_tf", ""), ("keras_hub", "keras_hub_")):
        precision, jit = default[lib]
        figures[f"{prefix}floor_ratio"] = figures[f"{lib}_{precision}{'_xla' if jit else ''}_floor_ratio"]
    print(f"step time / its own matmul floor at the default settings: bert_tf {figures['floor_ratio']:.2f}, "
          f"keras-hub {figures['keras_hub_floor_ratio']:.2f}")
    bench_util.write_json(FLAGS.output_json, "pretrain_throughput", figures)


if __name__ == "__main__":
    app.run(main)
