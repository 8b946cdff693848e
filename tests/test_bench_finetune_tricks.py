"""bench/finetune_tricks.py in its --quick mode: real driver runs, a JSON per run, resume, the table.

A file of its own, so that the test runner can give it a worker beside the other bench scripts.
"""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_finetune_tricks_quick_runs_resumes_and_renders_the_table(tmp_path):
    """The sweep in --quick mode (tiny random model): real driver runs, one JSON each, a resumed
    sweep reruns nothing, and the table is rendered from the JSON files alone."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    command = [sys.executable, os.path.join(REPO, "bench", "finetune_tricks.py"), "--quick",
               f"--results_dir={results}", f"--runs_dir={runs}"]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    part = ["--tasks=reviews", "--variants=baseline,length_filter,further_pretraining"]
    first = subprocess.run(command + part, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    records = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in results.glob("*.json")}
    assert sorted(records) == ["reviews__baseline__s1.json", "reviews__further_pretraining__s1.json",
                               "reviews__length_filter__s1.json"]
    for record in records.values():
        keys = ("dev_accuracy", "test_accuracy", "test_macro_f1")
        assert all(0.0 <= record[k] <= 1.0 for k in keys) and record["seconds"] > 0, record
    base, filtered = records["reviews__baseline__s1.json"], records["reviews__length_filter__s1.json"]
    assert base["length_filter"]["too_short"] == base["length_filter"]["too_long"] == 0
    counts = filtered["length_filter"]
    assert counts["kept"] + counts["too_short"] + counts["too_long"] == base["length_filter"]["kept"]
    assert 0 < counts["too_short"] + counts["too_long"] <= 2 * int(0.05 * base["length_filter"]["kept"])
    assert 0 < counts["min_seq_tokens"] <= counts["max_seq_tokens"]
    further = records["reviews__further_pretraining__s1.json"]
    assert further["further_pretraining"]["steps"] == 4 and further["further_pretraining"]["eval_mlm_loss"] > 0
    assert "--length_filter_percent=5" in records["reviews__length_filter__s1.json"]["command"]

    again = subprocess.run(command + part, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and " seed 1: " not in again.stdout, again.stdout[-2000:]

    readme = tmp_path / "README.md"
    readme.write_text("a\n<!-- finetune_tricks:start -->\nold\n<!-- finetune_tricks:end -->\nb\n", encoding="utf-8")
    table = subprocess.run(command + ["--table_only", f"--readme={readme}"], env=env, capture_output=True,
                           text=True, timeout=600)
    assert table.returncode == 0, table.stderr[-2000:]
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("a\n<!-- finetune_tricks:start -->\n**reviews**") and "old" not in text
    assert text.endswith("<!-- finetune_tricks:end -->\nb\n")
    assert "| baseline " in text and "| further_pretraining " in text and "| length_filter " in text
