"""run_squad.py end to end on a tiny model with the SQuAD v1.1 / v2.0 fixtures."""

import json
import re

import pytest

from tests import squad_reference
from tests.conftest import own_stderr_lines
from tests.finetuning_helpers import TESTDATA, run_driver, tiny_model_dir

COMMON = ["--train_batch_size=2", "--eval_batch_size=4", "--num_train_epochs=2", "--max_seq_length=64",
          "--doc_stride=16", "--max_query_length=16", "--learning_rate=1e-3", "--log_steps=1"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, minilm_dir):
    return tiny_model_dir(tmp_path_factory.mktemp("pretrained") / "model", minilm_dir)


@pytest.mark.parametrize("version", ["v1.1", "v2.0"])
def test_train_and_predict(pretrained, tmp_path, version):
    data = f"{TESTDATA}/squad_{version}.json"
    out = tmp_path / "squad"
    args = [f"--train_file={data}", f"--predict_file={data}", f"--init_checkpoint={pretrained}",
            f"--output_dir={out}", "--do_train", "--do_predict", *COMMON]
    if version == "v2.0":
        args.append("--version_2_with_negative")
    result = run_driver("run_squad.py", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    predictions = json.load(open(out / "predictions.json"))
    questions = [qa["id"] for article in json.load(open(data))["data"]
                 for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    assert sorted(predictions) == sorted(questions)
    contexts = " ".join(p["context"] for a in json.load(open(data))["data"] for p in a["paragraphs"])
    assert all(answer in contexts for answer in predictions.values())  # exact original substrings
    # The reported scores are the official rules' on the written predictions.
    gold = {qa["id"]: [a["text"] for a in qa["answers"]] for article in json.load(open(data))["data"]
            for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    scores = json.load(open(out / "eval_results.json"))
    if version == "v1.1":
        expected = squad_reference.v1_metrics(gold, predictions)
    else:
        expected = squad_reference.v2_metrics(gold, predictions, json.load(open(out / "null_odds.json")))
    assert {k: scores[k] for k in expected} == pytest.approx(expected, abs=1e-9)
    assert (out / "nbest_predictions.json").exists()
    assert (out / "null_odds.json").exists() == (version == "v2.0")
    # What the export needs to window and decode as this evaluation did.
    task = json.load(open(out / "best" / "task.json"))
    assert {k: task[k] for k in ("max_seq_length", "doc_stride", "max_query_length", "n_best_size",
                                 "max_answer_length", "version_2_with_negative")} == {
        "max_seq_length": 64, "doc_stride": 16, "max_query_length": 16, "n_best_size": 20,
        "max_answer_length": 30, "version_2_with_negative": version == "v2.0"}


def test_answer_not_at_answer_start(pretrained, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{
        "context": "The cat sat on the mat.",
        "qas": [{"id": "q1", "question": "Where?", "answers": [{"text": "mat", "answer_start": 3}]}]}]}]}))
    result = run_driver("run_squad.py", f"--train_file={bad}", f"--init_checkpoint={pretrained}",
                        f"--output_dir={tmp_path / 'out'}", "--do_train", *COMMON)
    assert result.returncode == 2
    lines = own_stderr_lines(result.stderr)
    assert len(lines) == 1 and str(bad) in lines[0] and "q1" in lines[0], lines


def test_help_shows_the_original_run_squad_defaults():
    result = run_driver("run_squad.py", "--helpfull")  # absl's help exits with code 1
    blocks = {m.group(1): m.group(2) for m in re.finditer(r"^  --(\w+):(.*?)(?=^  --|\Z)",
                                                           result.stdout, re.M | re.S)}
    defaults = {name: re.search(r"\(default: '([^']*)'\)", blocks[name]).group(1)
                for name in ("max_seq_length", "doc_stride", "max_query_length")}
    # google-research/bert run_squad.py: 384-piece windows, stride 128, questions cut to 64.
    assert defaults == {"max_seq_length": "384", "doc_stride": "128", "max_query_length": "64"}
