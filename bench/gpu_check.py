r"""The GPU check: BERT-Base and BERT-Large pretraining throughput, MFU and memory on one GPU.

    bash bench/gpu_check.sh [--output_json=PATH]        # the prepared script; inside 8 minutes

For BERT-Base and BERT-Large (uncased vocab) at sequence length 128 and 512, in
mixed_bfloat16 with XLA, the real pretraining step (`TrainStep`: MLM + NSP,
AdamW, clipping; the batch in GPU memory): sequences/second, MFU against the
GPU's bf16 dense peak (the datasheet figure for known chips, else a matmul
peak measured here), and peak GPU memory. Then the largest batch, in powers of
two, that fits BERT-Large at length 512 in one step, without and with
activation recomputation (`recompute_activations`).
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bert_tf  # noqa: F401  (first: on x86 Linux it turns oneDNN on before TensorFlow loads)
import tensorflow as tf
from absl import app, flags

import bench_util
from bert_tf.configs import get_preset
from bert_tf.training import metrics
from pretrain_throughput import ours, random_batch, sequences_per_second

# (preset, seq, batch, predictions): the BERT paper's 20 predictions at 128 and 80 at 512.
RUNS = [("base_uncased", 128, 256, 20), ("base_uncased", 512, 64, 80),
        ("large_uncased", 128, 128, 20), ("large_uncased", 512, 32, 80)]
# Dense bf16 tensor-core peaks from the datasheets, FLOP/s (SXM parts).
DATASHEET_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}
SEARCH_BUDGET_S = 420  # gpu_check.sh stops the script at 470 s
FLAGS = flags.FLAGS  # --steps (timed steps per run) comes with pretrain_throughput


def _peak(device_name: str) -> tuple[float, str]:
    for chip, flops in DATASHEET_BF16.items():
        if chip in device_name:
            return flops, f"{chip} datasheet"
    return metrics.measure_matmul_peak(tf.bfloat16, size=8192), "measured 8192^3 bf16 matmul"


def _run(preset: str, seq: int, size: int, predictions: int, steps: int,
         recompute: bool = False) -> tuple[float, float]:
    """(sequences/second, peak GPU memory in GiB) of one configuration."""
    config = get_preset(preset)
    tf.config.experimental.reset_memory_stats("GPU:0")
    step = ours(config, "mixed_bfloat16", True, random_batch(config.vocab_size, size, seq, predictions),
                recompute)
    for _ in range(3):
        float(step())
    speed = sequences_per_second(step, steps, size)
    return speed, tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**30


def main(argv: list[str]) -> None:
    del argv
    started = time.perf_counter()
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise SystemExit("gpu_check: TensorFlow sees no GPU (install tensorflow[and-cuda] on a GPU machine)")
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
    peak, source = _peak(name)
    steps = 2 if FLAGS.quick else FLAGS.steps
    print(f"{name}; bf16 dense peak {peak / 1e12:.0f} TFLOP/s ({source}); mixed_bfloat16 + XLA")
    figures: dict = {"gpu": name, "peak_tflops_bf16": peak / 1e12}
    for preset, seq, size, predictions in RUNS:
        speed, memory = _run(preset, seq, size, predictions, steps)
        mfu = metrics.pretraining_flops_per_sequence(get_preset(preset), seq, predictions) * speed / peak
        key = f"{preset.split('_')[0]}_seq{seq}"
        figures.update({f"{key}_batch": size, f"{key}_seq_per_s": speed, f"{key}_mfu": mfu,
                        f"{key}_peak_memory_gib": memory})
        print(f"  {preset:14s} seq {seq:3d} batch {size:3d}: {speed:8.1f} seq/s  MFU {100 * mfu:5.1f}%  "
              f"peak memory {memory:6.1f} GiB")
    # Recomputation fits at least the batch that fits without it: its search starts there.
    # Past the time budget a search stops and its figure is a lower bound.
    largest = 0
    for recompute in (False, True):
        size = max(32, 2 * largest)
        while size <= 1024 and time.perf_counter() - started < SEARCH_BUDGET_S:
            try:
                _run("large_uncased", 512, size, 80, 1, recompute)
            except tf.errors.ResourceExhaustedError:
                break
            largest, size = size, size * 2
        figures[f"large_seq512_largest_batch_{'recompute' if recompute else 'keep'}"] = largest
        print(f"largest BERT-Large batch at seq 512 (powers of two), "
              f"{'with' if recompute else 'without'} activation recomputation: {largest}")
    bench_util.write_json(FLAGS.output_json, "gpu_check", figures)


if __name__ == "__main__":
    app.run(main)
