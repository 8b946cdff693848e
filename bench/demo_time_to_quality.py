r"""Time to quality of the README's pretraining demo: when held-out NSP first reaches 70%, and
when held-out MLM loss first drops below the unigram entropy of the masked tokens.

    python bench/demo_time_to_quality.py [--eval_every_steps=250] [--set=--learning_rate=1e-3 ...]
    python bench/demo_time_to_quality.py --quick --output_json=/tmp/ttq.json

Runs `run_pretraining.py --flagfile=flags/pretrain_demo.flags` in its own process into a fresh
output directory (vocab and records included, as a new user's first run), evaluating on the
demo's fixed held-out split every --eval_every_steps; every other setting is the flagfile's,
unless a --set flag overrides it (a recipe under test). Then reads the eval summaries. For each
evaluation: the seconds since the driver started minus the seconds spent in evaluations so far
(their frequency is this script's instrument, not the recipe), and the held-out figures.

Reports `seconds_to_nsp70` and `seconds_to_mlm_below_unigram` (left out when not reached:
`reached_*` says), the steps of each, `demo_seconds_to_*` (the same plus the evaluations the
flagfile's own schedule would have run by then, at this run's mean evaluation time: what the
README command takes), `*_text` (the same in words, for the README table), the last held-out
figures, NSP accuracy at every evaluation (`nsp_curve_text`), and the whole run's wall time
as measured (`wall_seconds`) and as the README command takes it (`demo_wall_seconds`).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from absl import app, flags
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import bench_util

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_FLAGS = os.path.join("flags", "pretrain_demo.flags")

flags.DEFINE_integer("eval_every_steps", 250, "Evaluate on the held-out split every this many steps.",
                     lower_bound=1)
flags.DEFINE_multi_string("set", [], "A driver flag overriding the flagfile's, e.g. --set=--learning_rate=1e-3.")
flags.DEFINE_string("keep_output_dir", None, "Run into this directory and keep it (default: a temporary one).")
FLAGS = flags.FLAGS

NSP_TARGET = 0.70
# The recipe's settings recorded with the figures (recipe_<name> in the JSON).
RECIPE = ("model_preset", "max_seq_length", "train_batch_size", "learning_rate", "num_warmup_steps", "num_train_steps")
# --quick: a tiny model for a few steps (the targets are not reached; the figures mean nothing).
QUICK = ["--model_preset=tiny_chinese", "--vocab_size=300", "--dupe_factor=1", "--max_seq_length=32",
         "--max_predictions_per_seq=5", "--train_batch_size=8", "--eval_batch_size=8", "--num_train_steps=4",
         "--num_warmup_steps=1", "--max_eval_steps=2", "--save_checkpoints_steps=4", "--log_steps=2"]


def flagfile_value(path: str, name: str) -> str | None:
    """The value a flagfile gives --name (the last one), or None."""
    value = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith(f"--{name}="):
                value = line.strip().split("=", 1)[1]
    return value


def setting(name: str, overrides: list[str]) -> str:
    """The value the run gives --name: the last override, else the flagfile's ("" for neither)."""
    value = flagfile_value(os.path.join(REPO, DEMO_FLAGS), name) or ""
    for override in overrides:
        if override.startswith(f"--{name}="):
            value = override.split("=", 1)[1]
    return value


def eval_records(output_dir: str) -> list[dict[str, float]]:
    """Every evaluation of a run, in step order: step, wall time and the held-out scalars."""
    events = EventAccumulator(glob.glob(os.path.join(output_dir, "eval", "events*"))[0],
                              size_guidance={"tensors": 0}).Reload()
    by_step: dict[int, dict[str, float]] = {}
    for tag in ("mlm_loss", "nsp_accuracy", "unigram_entropy", "seconds"):
        for event in events.Tensors(tag):
            record = by_step.setdefault(event.step, {"step": event.step, "wall_time": event.wall_time})
            record["wall_time"] = max(record["wall_time"], event.wall_time)
            record[tag] = float(tf.make_ndarray(event.tensor_proto))
    return [by_step[step] for step in sorted(by_step)]


def time_to_quality(records: list[dict[str, float]], start: float, demo_eval_every: int | None) -> dict:
    """The figures of the module docstring from a run's evaluations and its start time."""
    figures: dict = {}
    spent = 0.0
    mean_eval = sum(r["seconds"] for r in records) / max(1, len(records))
    targets = {"nsp70": lambda r: r["nsp_accuracy"] >= NSP_TARGET,
               "mlm_below_unigram": lambda r: r["mlm_loss"] < r["unigram_entropy"]}
    for record in records:
        spent += record["seconds"]
        seconds = record["wall_time"] - start - spent
        for name, reached in targets.items():
            if f"seconds_to_{name}" not in figures and reached(record):
                figures[f"seconds_to_{name}"] = seconds
                figures[f"steps_to_{name}"] = record["step"]
                demo_evals = record["step"] // demo_eval_every if demo_eval_every else 0
                figures[f"demo_seconds_to_{name}"] = seconds + demo_evals * mean_eval
    for name in targets:
        figures[f"reached_{name}"] = f"seconds_to_{name}" in figures
        figures[f"{name}_text"] = (
            f"{figures[f'demo_seconds_to_{name}'] / 60:.1f} min (step {figures[f'steps_to_{name}']})"
            if figures[f"reached_{name}"] else f"not reached in {records[-1]['step']} steps")
    figures["eval_seconds_mean"] = mean_eval
    figures["nsp_curve_text"] = ", ".join(f"{100 * r['nsp_accuracy']:.1f}% at {r['step']}" for r in records)
    return figures


def main(argv: list[str]) -> None:
    del argv
    output_dir = FLAGS.keep_output_dir or tempfile.mkdtemp(prefix="demo_ttq_")
    if os.path.exists(os.path.join(output_dir, "checkpoints")):
        raise SystemExit(f"demo_time_to_quality: {output_dir} holds a run already; give a new directory")
    os.makedirs(output_dir, exist_ok=True)
    overrides = (QUICK if FLAGS.quick else []) + list(FLAGS.set)
    command = [sys.executable, "run_pretraining.py", f"--flagfile={DEMO_FLAGS}", f"--output_dir={output_dir}",
               f"--eval_every_steps={FLAGS.eval_every_steps}", *overrides]
    log_path = os.path.join(output_dir, "driver.log")
    start = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        result = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    wall = time.time() - start
    if result.returncode:
        raise SystemExit(f"demo_time_to_quality: the demo failed (exit {result.returncode}); see {log_path}")
    records = eval_records(output_dir)
    demo_every = int(setting("eval_every_steps", []) or 0)  # the flagfile's own schedule
    recipe = {name: setting(name, overrides) for name in RECIPE}
    figures = {"overrides": " ".join(overrides), "eval_every_steps": FLAGS.eval_every_steps,
               **{f"recipe_{name}": value for name, value in recipe.items()},
               "wall_seconds": wall, **time_to_quality(records, start, demo_every)}
    last = records[-1]
    figures.update(steps=last["step"], last_nsp_accuracy=last["nsp_accuracy"], last_mlm_loss=last["mlm_loss"],
                   unigram_entropy=last["unigram_entropy"],
                   demo_wall_seconds=wall - sum(r["seconds"] for r in records)
                   + (last["step"] // demo_every if demo_every else 0) * figures["eval_seconds_mean"])
    for record in records:
        print(f"step {record['step']:5d}: NSP {100 * record['nsp_accuracy']:5.1f}%  MLM {record['mlm_loss']:.3f} "
              f"(unigram {record['unigram_entropy']:.3f})  eval {record['seconds']:.1f} s")
    for name in ("nsp70", "mlm_below_unigram"):
        print(f"{name}: {figures[f'{name}_text']} as the README command runs"
              + (f", {figures[f'seconds_to_{name}'] / 60:.1f} min without evaluations"
                 if figures[f"reached_{name}"] else ""))
    print(f"whole run {wall / 60:.1f} min, {figures['demo_wall_seconds'] / 60:.1f} min as the README command "
          f"runs, {last['step']} steps")
    bench_util.write_json(FLAGS.output_json, "demo_time_to_quality", figures)
    if not FLAGS.keep_output_dir:
        shutil.rmtree(output_dir, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
