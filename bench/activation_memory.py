r"""Memory and speed of a pretraining step with and without activation recomputation.

    python bench/activation_memory.py [--preset=mini_uncased --seq=512 --batch=32 --predictions=80]
    python bench/activation_memory.py --quick --output_json=/tmp/memory.json

Each setting runs in its own child process (peak memory is per process): the
real pretraining step (`TrainStep` on a `BertPretrainer`, as
bench/pretrain_throughput.py builds it; the default precision, no XLA) on one
in-memory batch, first without, then with `recompute_activations`. Prints
sequences/second and the process's peak resident memory above what it held
after building the model and optimizer (on a GPU: TensorFlow's peak GPU memory),
and the ratios recompute / keep. One run on a shared machine: ratios only.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags

import bench_util
from pretrain_throughput import model_config, ours, random_batch, sequences_per_second  # also defines --preset, --seq, --batch, ...

flags.DEFINE_bool("child_recompute", None, "Internal: run one setting in this process and print JSON.")
FLAGS = flags.FLAGS
FLAGS.set_default("seq", 512)
FLAGS.set_default("predictions", 80)
FLAGS.set_default("steps", 5)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _current_rss_mib() -> float:
    with open("/proc/self/statm", encoding="utf-8") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _child(recompute: bool) -> dict[str, float]:
    import tensorflow as tf

    from bert_tf.training.distribute import resolve_precision

    config = model_config()
    gpu = bool(tf.config.list_physical_devices("GPU"))
    step = ours(config, resolve_precision("auto"), False,
                random_batch(config.vocab_size, FLAGS.batch, FLAGS.seq, FLAGS.predictions), recompute)
    built = _current_rss_mib()
    if gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")
    float(step())  # trace and first step
    speed = sequences_per_second(step, FLAGS.steps, FLAGS.batch)
    peak = (tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20 if gpu
            else _rss_mib() - built)
    return {"seq_per_s": speed, "peak_mib": peak}


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.quick:
        FLAGS.preset, FLAGS.seq, FLAGS.batch, FLAGS.predictions, FLAGS.steps = "tiny_uncased", 64, 4, 10, 1
    if FLAGS.child_recompute is not None:
        print(json.dumps(_child(FLAGS.child_recompute)))
        return
    figures: dict = {"preset": FLAGS.preset, "seq": FLAGS.seq, "batch": FLAGS.batch,
                     "predictions": FLAGS.predictions}
    passed = [f"--preset={FLAGS.preset}", f"--seq={FLAGS.seq}", f"--batch={FLAGS.batch}",
              f"--predictions={FLAGS.predictions}", f"--steps={FLAGS.steps}", f"--quick={FLAGS.quick}"]
    for name, recompute in (("keep", False), ("recompute", True)):
        result = subprocess.run(
            [sys.executable, __file__, *passed, f"--child_recompute={recompute}"],
            capture_output=True, text=True, check=False)
        if result.returncode:
            raise SystemExit(f"activation_memory: the {name} run failed:\n{result.stderr[-2000:]}")
        measured = json.loads(result.stdout.strip().splitlines()[-1])
        figures.update({f"{name}_{key}": value for key, value in measured.items()})
    figures["ratio_memory_recompute_vs_keep"] = figures["recompute_peak_mib"] / figures["keep_peak_mib"]
    figures["ratio_speed_recompute_vs_keep"] = figures["recompute_seq_per_s"] / figures["keep_seq_per_s"]
    print(f"pretraining step, {FLAGS.preset}, seq {FLAGS.seq}, batch {FLAGS.batch}:")
    for name in ("keep", "recompute"):
        print(f"  {name:9s} {figures[f'{name}_seq_per_s']:7.1f} seq/s  "
              f"peak memory above the built model {figures[f'{name}_peak_mib']:7.0f} MiB")
    print(f"recompute / keep: memory {figures['ratio_memory_recompute_vs_keep']:.2f}, "
          f"speed {figures['ratio_speed_recompute_vs_keep']:.2f}")
    bench_util.write_json(FLAGS.output_json, "activation_memory", figures)


if __name__ == "__main__":
    app.run(main)
