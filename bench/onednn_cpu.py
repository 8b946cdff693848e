r"""The pretraining step with TensorFlow's oneDNN CPU kernels on against off, as a ratio.

    python bench/onednn_cpu.py [--preset=mini_uncased --seq=128 --batch=32 --pairs=3]
    python bench/onednn_cpu.py --quick --output_json=/tmp/onednn.json

TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, when it loads, and on Linux turns oneDNN on by
itself only on x86 CPUs with AVX-512 VNNI/BF16, AVX-VNNI or AMX; importing bert_tf turns it on
everywhere on x86 Linux (bert_tf/__init__.py). A process holds one setting, so each setting runs
in child processes, alternating off, on, off, on, ... (`--pairs` of each): every child builds the
default step of bench/pretrain_throughput.py (`--mixed_precision=auto`, no XLA), warms it up and
times `--rounds` x `--steps` steps and the matmul peak at that precision. Prints the median step
time of each setting with its spread over children, the ratio on / off and whether TensorFlow
turns oneDNN on by itself on this CPU. One run on a shared machine: a ratio, not a guarantee.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags

import bench_util
from pretrain_throughput import model_config, ours, random_batch, seconds_per_call  # also defines --preset, --seq, --batch, ...

flags.DEFINE_integer("pairs", 3, "Child processes per setting, alternating.", lower_bound=1)
flags.DEFINE_bool("child", False, "Internal: time the step in this process and print JSON.")
FLAGS = flags.FLAGS


def _child() -> dict:
    import tensorflow as tf
    from tensorflow.python.util import _pywrap_util_port

    from bert_tf.training import metrics
    from bert_tf.training.distribute import resolve_precision

    precision = resolve_precision("auto")
    config = model_config()
    batch = random_batch(config.vocab_size, FLAGS.batch, FLAGS.seq, FLAGS.predictions)
    step = ours(config, precision, False, batch)
    for _ in range(2):
        float(step())
    times = [seconds_per_call(step, FLAGS.steps) for _ in range(FLAGS.rounds)]
    dtype = tf.bfloat16 if "bfloat16" in precision else tf.float32
    return {"step_ms": 1e3 * statistics.median(times), "precision": precision,
            "onednn": bool(_pywrap_util_port.IsMklEnabled()),
            "peak_gflops": metrics.measure_matmul_peak(dtype, seconds=0.2 if FLAGS.quick else 1.0) / 1e9}


def _run(onednn: bool, passed: list[str]) -> dict:
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1" if onednn else "0"}
    result = subprocess.run([sys.executable, __file__, *passed, "--child"], env=env,
                            capture_output=True, text=True, check=False)
    if result.returncode:
        raise SystemExit(f"onednn_cpu: the child with oneDNN {'on' if onednn else 'off'} failed:\n"
                         f"{result.stderr[-2000:]}")
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    if measured["onednn"] != onednn:
        raise SystemExit(f"onednn_cpu: TF_ENABLE_ONEDNN_OPTS={int(onednn)} did not take effect")
    return measured


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.quick:
        FLAGS.preset, FLAGS.seq, FLAGS.batch, FLAGS.predictions = "tiny_uncased", 32, 8, 5
        FLAGS.steps, FLAGS.rounds, FLAGS.pairs = 2, 1, 1
    if FLAGS.child:
        print(json.dumps(_child()))
        return
    passed = [f"--preset={FLAGS.preset}", f"--seq={FLAGS.seq}", f"--batch={FLAGS.batch}",
              f"--predictions={FLAGS.predictions}", f"--steps={FLAGS.steps}", f"--rounds={FLAGS.rounds}",
              f"--quick={FLAGS.quick}"]
    runs: dict = {"off": [], "on": []}
    for _ in range(FLAGS.pairs):
        for name in runs:
            runs[name].append(_run(name == "on", passed))
    # What TensorFlow does on this CPU when nobody sets the switch.
    unset = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    probe = subprocess.run([sys.executable, "-c", "from tensorflow.python.util import _pywrap_util_port as p; "
                            "print(p.IsMklEnabled())"], env=unset, capture_output=True, text=True, check=True)
    figures: dict = {"preset": FLAGS.preset, "seq": FLAGS.seq, "batch": FLAGS.batch,
                     "predictions": FLAGS.predictions, "precision": runs["on"][0]["precision"],
                     "pairs": FLAGS.pairs,
                     "tensorflow_default_onednn": probe.stdout.strip().splitlines()[-1] == "True"}
    print(f"pretraining step, {FLAGS.preset}, batch {FLAGS.batch}, seq {FLAGS.seq}, "
          f"{figures['precision']}, {FLAGS.pairs} processes per setting, alternating:")
    for name, results in runs.items():
        steps = [r["step_ms"] for r in results]
        peaks = [r["peak_gflops"] for r in results]
        figures[f"{name}_step_ms"] = statistics.median(steps)
        figures[f"{name}_peak_gflops"] = max(peaks)
        print(f"  oneDNN {name:3s}  step {statistics.median(steps):7.1f} ms (processes {min(steps):.1f}-"
              f"{max(steps):.1f})  matmul peak {max(peaks):6.1f} GFLOP/s")
    figures["ratio_speed_on_vs_off"] = figures["off_step_ms"] / figures["on_step_ms"]
    print(f"speed oneDNN on / off: {figures['ratio_speed_on_vs_off']:.2f}x; TensorFlow on its own "
          f"turns oneDNN {'on' if figures['tensorflow_default_onednn'] else 'off'} on this CPU")
    bench_util.write_json(FLAGS.output_json, "onednn_cpu", figures)


if __name__ == "__main__":
    app.run(main)
