"""The bench/ scripts run in their --quick mode and write their JSON; the README table is built from it.

Speed itself is never asserted here (figures are ratios from one run, see bench/README.md).
"""

import json
import os
import subprocess
import sys

import pytest

from tests import driver_runs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# script -> keys its JSON must hold (beyond the machine and version keys every file has).
SCRIPTS = {
    "pretrain_throughput": ["ratio_best_vs_keras_hub", "ratio_default_vs_keras_hub", "mfu",
                            "bert_tf_float32_seq_per_s", "keras_hub_float32_seq_per_s"],
    "input_pipeline": ["ratio_tokenize_pack_vs_hugging_face", "ratio_pipeline_vs_consumption"],
    "serving_latency": ["ours_b1_p50_ms", "ours_b1_p99_ms", "ratio_b1_p50", "ratio_b1_p50_best",
                        "ratio_b32_p50_best"],
    "finetune_padding": ["ratio_dynamic_vs_fixed", "dynamic_examples_per_s", "fixed_examples_per_s"],
    "activation_memory": ["ratio_memory_recompute_vs_keep", "ratio_speed_recompute_vs_keep",
                          "keep_peak_mib", "recompute_peak_mib"],
}


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    """Runs every script's --quick mode at once (each is mostly single-threaded set-up)."""
    out = tmp_path_factory.mktemp("bench")
    runs = {name: driver_runs.start([os.path.join(REPO, "bench", f"{name}.py"), "--quick",
                                     f"--output_json={out / (name + '.json')}"], cwd=str(out))
            for name in SCRIPTS}
    logs = {name: "".join(run.communicate(timeout=1200)) for name, run in runs.items()}
    return out, {name: (runs[name].returncode, logs[name]) for name in SCRIPTS}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_quick_run_writes_its_figures(quick_results, name):
    out, results = quick_results
    returncode, log = results[name]
    assert returncode == 0, log[-3000:]
    with open(out / f"{name}.json", encoding="utf-8") as f:
        figures = json.load(f)
    assert figures["script"] == name and figures["quick"] is True
    for key in SCRIPTS[name] + ["machine_cpu", "version_tensorflow", "date"]:
        assert key in figures, key
    for key in SCRIPTS[name]:
        assert isinstance(figures[key], (int, float)) and figures[key] > 0, (key, figures[key])


def test_results_table_renders_every_file_into_the_readme(quick_results, tmp_path):
    out, _ = quick_results
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nbefore\n<!-- bench:start -->\nold\n<!-- bench:end -->\nafter\n", encoding="utf-8")
    subprocess.run([sys.executable, os.path.join(REPO, "bench", "results_table.py"),
                    f"--results_dir={out}", f"--readme={readme}"], check=True, capture_output=True)
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# x\n\nbefore\n<!-- bench:start -->\n| figure |") and text.endswith(
        "<!-- bench:end -->\nafter\n")
    assert "old" not in text
    for name in SCRIPTS:
        assert f"| {name} |" in text and f"- {name}: " in text and "(--quick: not meaningful)" in text


def test_gpu_check_imports_and_says_when_there_is_no_gpu():
    result = subprocess.run([sys.executable, os.path.join(REPO, "bench", "gpu_check.py"), "--quick"],
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "gpu_check: TensorFlow sees no GPU" in result.stderr, result.stderr[-2000:]


def test_finetune_tricks_quick_runs_resumes_and_renders_the_table(tmp_path):
    """The sweep in --quick mode (tiny random model): real driver runs, one JSON each, a resumed
    sweep reruns nothing, and the table is rendered from the JSON files alone."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    command = [sys.executable, os.path.join(REPO, "bench", "finetune_tricks.py"), "--quick",
               f"--results_dir={results}", f"--runs_dir={runs}"]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    for tasks, variants in (("reviews", "baseline,length_filter,further_pretraining"), ("ner", "crf")):
        first = subprocess.run(command + [f"--tasks={tasks}", f"--variants={variants}"], env=env,
                               capture_output=True, text=True, timeout=600)
        assert first.returncode == 0, first.stderr[-3000:]
    records = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in results.glob("*.json")}
    assert sorted(records) == ["ner__crf__s1.json", "reviews__baseline__s1.json",
                               "reviews__further_pretraining__s1.json", "reviews__length_filter__s1.json"]
    for record in records.values():
        keys = ("test_f1", "dev_f1") if record["task"] == "ner" else ("test_accuracy", "test_macro_f1")
        assert all(0.0 <= record[k] <= 1.0 for k in keys) and record["seconds"] > 0, record
    base, filtered = records["reviews__baseline__s1.json"], records["reviews__length_filter__s1.json"]
    assert base["length_filter"]["too_short"] == base["length_filter"]["too_long"] == 0
    counts = filtered["length_filter"]
    assert counts["kept"] + counts["too_short"] + counts["too_long"] == base["length_filter"]["kept"]
    assert 0 < counts["too_short"] + counts["too_long"] <= 2 * int(0.05 * base["length_filter"]["kept"])
    assert 0 < counts["min_seq_tokens"] <= counts["max_seq_tokens"]
    further = records["reviews__further_pretraining__s1.json"]
    assert further["further_pretraining"]["steps"] == 4 and further["further_pretraining"]["eval_mlm_loss"] > 0
    assert "--use_crf" in records["ner__crf__s1.json"]["command"]

    for tasks, variants in (("reviews", "baseline,length_filter,further_pretraining"), ("ner", "crf")):
        again = subprocess.run(command + [f"--tasks={tasks}", f"--variants={variants}"], env=env,
                               capture_output=True, text=True, timeout=600)
        assert again.returncode == 0 and " seed 1: " not in again.stdout, again.stdout[-2000:]

    readme = tmp_path / "README.md"
    readme.write_text("a\n<!-- finetune_tricks:start -->\nold\n<!-- finetune_tricks:end -->\nb\n", encoding="utf-8")
    table = subprocess.run(command + ["--table_only", f"--readme={readme}"], env=env, capture_output=True,
                           text=True, timeout=600)
    assert table.returncode == 0, table.stderr[-2000:]
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("a\n<!-- finetune_tricks:start -->\n**reviews**") and "old" not in text
    assert text.endswith("<!-- finetune_tricks:end -->\nb\n")
    assert "| baseline " in text and "| further_pretraining " in text and "| crf " in text
