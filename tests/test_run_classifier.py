"""run_classifier.py end to end on a tiny model: GLUE layouts, user data, bad rows."""

import json
import os

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics

from bert_tf import checkpoints
from bert_tf.configs import INPUT_NAMES
from bert_tf.data import classification, glue
from bert_tf.data.tokenization import BertTokenizer
from tests.conftest import own_stderr_lines
from tests.finetuning_helpers import TESTDATA, run_driver, tiny_model_dir

# float32, so the metrics recomputed here in float32 see the same logits.
COMMON = ["--train_batch_size=4", "--eval_batch_size=4", "--num_train_epochs=2", "--max_seq_length=32",
          "--learning_rate=1e-3", "--log_steps=1", "--mixed_precision=float32"]


def _dev_outputs(model_dir, task_name) -> tuple[np.ndarray, list]:
    """(the fine-tuned model's outputs on the GLUE dev file, the gold labels), computed here in float32."""
    model = checkpoints.load_task_model(model_dir)
    info = model.task_info
    examples = glue.read_glue(f"{TESTDATA}/glue/{task_name}", task_name, "dev")
    tokenizer = BertTokenizer(os.path.join(model_dir, "vocab.txt"), lower_case=info["do_lower_case"])
    encoded = classification.encode_examples(examples, tokenizer, info["max_seq_length"],
                                             label_list=info["labels"], regression=not info["labels"])
    logits = model({k: encoded.features[k] for k in INPUT_NAMES}, training=False)["logits"].numpy()
    return logits, examples.labels


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, minilm_dir):
    return tiny_model_dir(tmp_path_factory.mktemp("pretrained") / "model", minilm_dir)


def test_mrpc_train_eval_predict(pretrained, tmp_path):
    out = tmp_path / "mrpc"
    result = run_driver("run_classifier.py", "--task_name=MRPC", f"--data_dir={TESTDATA}/glue/MRPC",
                        f"--init_checkpoint={pretrained}", f"--output_dir={out}", "--do_train",
                        "--do_eval", "--do_predict", "--head=conv_avg_max", *COMMON)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.load(open(out / "eval_results.json"))
    assert set(results["dev"]) == {"f1", "accuracy", "score"}
    logits, gold = _dev_outputs(out / "best", "MRPC")
    predicted = [str(i) for i in logits.argmax(-1)]
    accuracy, f1 = metrics.accuracy_score(gold, predicted), metrics.f1_score(gold, predicted, pos_label="1")
    assert results["dev"]["accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert results["dev"]["f1"] == pytest.approx(f1, abs=1e-6)
    assert results["dev"]["score"] == pytest.approx((accuracy + f1) / 2, abs=1e-6)
    submission = (out / "MRPC.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == 4
    assert {line.split("\t")[1] for line in submission[1:]} <= {"0", "1"}
    task = json.load(open(out / "best" / "task.json"))
    assert task["labels"] == ["0", "1"] and task["head"] == "conv_avg_max"
    # Predict again from the fine-tuned directory alone.
    again = run_driver("run_classifier.py", "--task_name=MRPC", f"--data_dir={TESTDATA}/glue/MRPC",
                       f"--init_checkpoint={out / 'best'}", f"--output_dir={tmp_path / 'again'}",
                       "--do_predict", *COMMON)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "again" / "MRPC.tsv").read_text() == (out / "MRPC.tsv").read_text()


def test_stsb_regression(pretrained, tmp_path):
    out = tmp_path / "stsb"
    result = run_driver("run_classifier.py", "--task_name=STS-B", f"--data_dir={TESTDATA}/glue/STS-B",
                        f"--init_checkpoint={pretrained}", f"--output_dir={out}", "--do_train",
                        "--do_eval", "--do_predict", "--length_bucketing", *COMMON)
    assert result.returncode == 0, result.stderr[-3000:]
    dev = json.load(open(out / "eval_results.json"))["dev"]
    assert set(dev) == {"pearson", "spearman", "score"}
    logits, gold = _dev_outputs(out / "best", "STS-B")
    pearson, spearman = stats.pearsonr(gold, logits[:, 0])[0], stats.spearmanr(gold, logits[:, 0])[0]
    # The driver pads batches to another length than this one call does: the logits differ in their
    # last bits, which a correlation over four examples magnifies to about 1e-4.
    assert dev["pearson"] == pytest.approx(pearson, abs=1e-3)
    assert dev["spearman"] == pytest.approx(spearman, abs=1e-6)
    rows = (out / "STS-B.tsv").read_text().splitlines()[1:]
    assert len(rows) == len(glue.read_glue(f"{TESTDATA}/glue/STS-B", "STS-B", "test"))
    assert all(np.isfinite(float(row.split("\t")[1])) for row in rows)


def _user_files(tmp_path, bad=False):
    rows = ["text\tlabel"] + [f"good movie {i}\tpos" if i % 2 else f"bad film {i}\tneg" for i in range(12)]
    if bad:
        rows.insert(5, "a row without its label")
    train = tmp_path / "train.tsv"
    train.write_text("\n".join(rows) + "\n")
    dev = tmp_path / "dev.tsv"
    dev.write_text("\n".join(rows[:7 if not bad else 5]) + "\n")
    return train, dev


def test_user_data_and_bad_rows(pretrained, tmp_path):
    train, dev = _user_files(tmp_path, bad=True)
    args = [f"--train_file={train}", f"--dev_file={dev}", f"--init_checkpoint={pretrained}",
            "--do_train", "--do_eval", *COMMON]
    failed = run_driver("run_classifier.py", *args, f"--output_dir={tmp_path / 'fail'}")
    assert failed.returncode == 2
    lines = own_stderr_lines(failed.stderr)
    assert len(lines) == 1 and f"{train}:6:" in lines[0], lines
    assert not (tmp_path / "fail" / "best").exists()
    skipped = run_driver("run_classifier.py", *args, "--skip_bad_rows", f"--output_dir={tmp_path / 'ok'}")
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    assert json.load(open(tmp_path / "ok" / "best" / "task.json"))["labels"] == ["neg", "pos"]


@pytest.mark.parametrize("args, message", [
    (["--task_name=MRPC"], "--data_dir is required with --task_name"),
    (["--task_name=NOPE", "--data_dir=/tmp"], "NOPE"),
    (["--demo=tweets", "--task_name=MRPC", "--data_dir=/tmp"], "give exactly one of"),
])
def test_bad_flags(pretrained, tmp_path, args, message):
    result = run_driver("run_classifier.py", *args, f"--init_checkpoint={pretrained}", "--do_train",
                        f"--output_dir={tmp_path / 'x'}")
    assert result.returncode == 2
    lines = own_stderr_lines(result.stderr)
    assert len(lines) == 1 and message in lines[0], lines
