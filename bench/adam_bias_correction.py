"""Fine-tuning with and without Adam's bias correction, over seeds, on two demos.

google-research/bert's AdamWeightDecayOptimizer has no bias correction, and bert_tf
follows it by default; `--adam_bias_correction` takes Keras AdamW's corrected update.
This runs `run_classifier.py` on the English tweet demo (real MiniLM checkpoint) and on
the Chinese review demo (from the pretraining demo's model, on a subsample so that a run
takes minutes on 2 cores), each seed with the flag off and on, and prints dev and test
accuracy and macro-F1 as mean and sample standard deviation over the seeds. Finished runs
(an `eval_results.json` in their directory) are read, not rerun, so an interrupted sweep
resumes.

  python bench/adam_bias_correction.py --runs_dir=runs/adam_bias_correction \
      --reviews_init_checkpoint=runs/pretrain_demo/model --output_json=bench/results/adam_bias_correction.json
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from absl import app, flags

import bench_util

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_string("runs_dir", "runs/adam_bias_correction", "Where each run writes its output_dir.")
flags.DEFINE_string("reviews_init_checkpoint", "runs/pretrain_demo/model",
                    "The pretraining demo's model, which the review demo fine-tunes.")
flags.DEFINE_integer("reviews_subsample", 6000, "Reviews used (80% train, 10% dev, 10% test).")
flags.DEFINE_list("seeds", ["1", "2", "3"], "Seeds (--random_seed of the driver).")
FLAGS = flags.FLAGS


def _demos() -> dict[str, list[str]]:
    return {
        "tweets": ["--flagfile=flags/classifier_tweets_demo.flags"],
        "reviews": ["--flagfile=flags/classifier_reviews_demo.flags",
                    f"--init_checkpoint={FLAGS.reviews_init_checkpoint}",
                    f"--demo_subsample={FLAGS.reviews_subsample}"],
    }


def _run(demo: str, args: list[str], correction: bool, seed: str) -> dict[str, float]:
    """One fine-tuning run (reused when finished); its dev and test metrics."""
    out = os.path.join(FLAGS.runs_dir, f"{demo}_bc{str(correction).lower()}_s{seed}")
    if not os.path.exists(os.path.join(out, "eval_results.json")):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
        subprocess.run([sys.executable, "run_classifier.py", *args, f"--output_dir={out}",
                        f"--random_seed={seed}", f"--adam_bias_correction={correction}"],
                       cwd=REPO, env=env, check=True)
    metrics = {}
    for split, name in (("dev", "eval_results.json"), ("test", "test_results.json")):
        with open(os.path.join(out, name), encoding="utf-8") as f:
            values = json.load(f)[split]
        metrics.update({f"{split}_{key}": values[key] for key in ("accuracy", "macro_f1")})
    return metrics


def main(argv: list[str]) -> None:
    del argv
    figures: dict[str, float] = {}
    rows = ["| demo | bias correction | dev accuracy | dev macro-F1 | test accuracy | test macro-F1 |",
            "|---|---|---|---|---|---|"]
    for demo, args in _demos().items():
        for correction in (False, True):
            runs = [_run(demo, args, correction, seed) for seed in FLAGS.seeds]
            cells = []
            for key in ("dev_accuracy", "dev_macro_f1", "test_accuracy", "test_macro_f1"):
                values = [100 * run[key] for run in runs]
                mean, spread = statistics.mean(values), statistics.stdev(values)
                tag = f"{demo}_{'on' if correction else 'off'}_{key}"
                figures[f"{tag}_mean"], figures[f"{tag}_std"] = mean, spread
                cells.append(f"{mean:.1f} ± {spread:.1f}")
            setting = "on" if correction else "off (default)"
            rows.append(f"| {demo} | {setting} | " + " | ".join(cells) + " |")
    print(f"{len(FLAGS.seeds)} seeds each, mean ± sample standard deviation, in %:")
    print("\n".join(rows))
    bench_util.write_json(FLAGS.output_json, "adam_bias_correction", figures)


if __name__ == "__main__":
    app.run(main)
