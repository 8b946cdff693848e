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
    "pretrain_throughput": ["ratio_best_vs_keras_hub", "ratio_default_vs_keras_hub", "mfu", "floor_ratio",
                            "keras_hub_floor_ratio", "copy_gb_per_s",
                            "bert_tf_float32_seq_per_s", "keras_hub_float32_seq_per_s"],
    "input_pipeline": ["ratio_tokenize_pack_vs_hugging_face", "ratio_pipeline_vs_consumption"],
    "serving_latency": ["ours_b1_p50_ms", "ours_b1_p99_ms", "ratio_b1_p50", "ratio_b1_p50_best",
                        "ratio_b32_p50_best"],
    "finetune_padding": ["ratio_dynamic_vs_fixed", "dynamic_examples_per_s", "fixed_examples_per_s"],
    "activation_memory": ["ratio_memory_recompute_vs_keep", "ratio_speed_recompute_vs_keep",
                          "keep_peak_mib", "recompute_peak_mib"],
    "demo_time_to_quality": ["wall_seconds", "eval_seconds_mean", "steps"],
    "profile_step": ["step_ms", "group_1_ms", "group_1_share", "op_1_ms", "xla_1_ms"],
    "onednn_cpu": ["ratio_speed_on_vs_off", "on_step_ms", "off_step_ms"],
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
    readme.write_text("# x\n\nbefore\n<!-- bench:start -->\nold\n<!-- bench:end -->\nafter\n"
                      "<!-- pretraining-demo:start -->\nold row\n<!-- pretraining-demo:end -->\n", encoding="utf-8")
    subprocess.run([sys.executable, os.path.join(REPO, "bench", "results_table.py"),
                    f"--results_dir={out}", f"--readme={readme}"], check=True, capture_output=True)
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# x\n\nbefore\n<!-- bench:start -->\n| figure |") and text.endswith(
        "<!-- pretraining-demo:end -->\n")
    assert "old" not in text and "<!-- bench:end -->\nafter\n<!-- pretraining-demo:start -->\n| demo |" in text
    assert "`python run_pretraining.py --flagfile=flags/pretrain_demo.flags` | held-out MLM loss" in text
    assert "BERT-Tiny (2 layers, hidden 128) from scratch" in text  # --quick's model preset, tiny_chinese
    for name in SCRIPTS:
        assert f"| {name} |" in text and f"- {name}: " in text and "(--quick: not meaningful)" in text


def test_gpu_check_imports_and_says_when_there_is_no_gpu():
    result = subprocess.run([sys.executable, os.path.join(REPO, "bench", "gpu_check.py"), "--quick"],
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "gpu_check: TensorFlow sees no GPU" in result.stderr, result.stderr[-2000:]



def test_time_to_quality_leaves_out_evaluation_time_and_adds_the_demos_own():
    sys.path.insert(0, os.path.join(REPO, "bench"))
    try:
        import demo_time_to_quality as ttq
    finally:
        sys.path.pop(0)
    start = 1000.0
    records = [  # step, wall time at the end of its evaluation, figures, that evaluation's seconds
        {"step": 250, "wall_time": start + 110, "nsp_accuracy": 0.55, "mlm_loss": 6.9, "unigram_entropy": 6.4,
         "seconds": 10},
        {"step": 500, "wall_time": start + 220, "nsp_accuracy": 0.697, "mlm_loss": 6.3, "unigram_entropy": 6.4,
         "seconds": 10},
        {"step": 750, "wall_time": start + 330, "nsp_accuracy": 0.71, "mlm_loss": 6.0, "unigram_entropy": 6.4,
         "seconds": 10}]
    figures = ttq.time_to_quality(records, start, demo_eval_every=500)
    assert figures["seconds_to_mlm_below_unigram"] == 200 and figures["steps_to_mlm_below_unigram"] == 500
    assert figures["demo_seconds_to_mlm_below_unigram"] == 210  # the demo evaluates once by step 500
    assert figures["seconds_to_nsp70"] == 300 and figures["demo_seconds_to_nsp70"] == 310
    assert figures["nsp70_text"] == "5.2 min (step 750)" and figures["reached_nsp70"] is True
    # One decimal: 69.7% is not 70% (the goal), as a rounded curve would print it.
    assert figures["nsp_curve_text"] == "55.0% at 250, 69.7% at 500, 71.0% at 750"
    never = ttq.time_to_quality(records[:1], start, demo_eval_every=500)
    assert not never["reached_nsp70"] and "seconds_to_nsp70" not in never
    assert never["nsp70_text"] == "not reached in 250 steps"
