"""run_ner.py end to end on a tiny model with the CoNLL fixtures."""

import json

import pytest
from seqeval.metrics import f1_score, precision_score, recall_score

from tests.conftest import own_stderr_lines
from tests.finetuning_helpers import TESTDATA, run_driver, tiny_model_dir

COMMON = ["--train_batch_size=2", "--eval_batch_size=4", "--num_train_epochs=2", "--max_seq_length=32",
          "--learning_rate=1e-3", "--log_steps=1"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, minilm_dir):
    return tiny_model_dir(tmp_path_factory.mktemp("pretrained") / "model", minilm_dir)


@pytest.mark.parametrize("crf", [True, False])
def test_conll_train_eval_predict(pretrained, tmp_path, crf):
    out = tmp_path / "ner"
    result = run_driver("run_ner.py", f"--train_file={TESTDATA}/ner_train.txt",
                        f"--dev_file={TESTDATA}/ner_dev.txt", f"--test_file={TESTDATA}/ner_dev.txt",
                        f"--init_checkpoint={pretrained}", f"--output_dir={out}", "--do_train",
                        "--do_eval", "--do_predict", f"--use_crf={crf}", *COMMON)
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.load(open(out / "eval_results.json"))
    assert {"precision", "recall", "f1", "per_type"} <= set(scores)
    task = json.load(open(out / "best" / "task.json"))
    assert task["crf"] == crf and task["labels"][0] == "O"
    gold = _sentences(open(f"{TESTDATA}/ner_dev.txt").read())
    predicted = _sentences((out / "test_predictions.txt").read_text())
    assert [[w for w, _ in s] for s in predicted] == [[w for w, _ in s] for s in gold]
    # The reported scores are seqeval's on the written predictions (dev and test are one file here).
    gold_tags, predicted_tags = [[t for _, t in s] for s in gold], [[t for _, t in s] for s in predicted]
    expected = {"precision": precision_score(gold_tags, predicted_tags), "recall": recall_score(gold_tags, predicted_tags),
                "f1": f1_score(gold_tags, predicted_tags)}
    for name in ("eval_results.json", "test_results.json"):
        reported = json.load(open(out / name))
        assert {k: reported[k] for k in expected} == pytest.approx(expected, abs=1e-12), name


def _sentences(text: str) -> list[list[tuple[str, str]]]:
    """CoNLL text as sentences of (word, last column), read here independently of bert_tf."""
    blocks = [b.splitlines() for b in text.split("\n\n")]
    return [[(line.split()[0], line.split()[-1]) for line in b] for b in blocks
            if b and not b[0].startswith("-DOCSTART-")]


def test_bad_tag_names_file_and_line(pretrained, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("John B-PER\nlives O\nin O\nParis I-LOC\n\n")
    result = run_driver("run_ner.py", f"--train_file={bad}", f"--init_checkpoint={pretrained}",
                        f"--output_dir={tmp_path / 'out'}", "--do_train", *COMMON)
    assert result.returncode == 2
    lines = own_stderr_lines(result.stderr)
    assert len(lines) == 1 and f"{bad}:4:" in lines[0], lines
