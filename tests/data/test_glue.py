"""GLUE and user classification data: readers, bad rows, encoding, length filter,
metrics against scikit-learn/scipy, submission files, demo splits and baseline."""

import csv
import json
import os
import pathlib
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats
from sklearn import metrics as sk_metrics

from bert_tf.configs import INPUT_NAMES
from bert_tf.data import classification, glue
from bert_tf.data.packing import pack_segments
from bert_tf.data.tokenization import BertTokenizer
from bert_tf.training import glue_metrics

GLUE_DIR = pathlib.Path(__file__).parent.parent / "testdata" / "glue"

# (text, pair, label, id) columns by position, as google-research/bert's
# run_classifier.py processors and GLUE's own layouts define them; the reader
# under test finds them by header name instead. None: absent.
_POSITIONS = {
    ("CoLA", "train"): (3, None, 1, None), ("CoLA", "dev"): (3, None, 1, None),
    ("CoLA", "test"): (1, None, None, 0),
    ("SST-2", "train"): (0, None, 1, None), ("SST-2", "dev"): (0, None, 1, None),
    ("SST-2", "test"): (1, None, None, 0),
    ("MRPC", "train"): (3, 4, 0, None), ("MRPC", "dev"): (3, 4, 0, None),
    ("MRPC", "test"): (3, 4, None, 0),
    ("STS-B", "train"): (7, 8, 9, 0), ("STS-B", "dev"): (7, 8, 9, 0), ("STS-B", "test"): (7, 8, None, 0),
    ("QQP", "train"): (3, 4, 5, 0), ("QQP", "dev"): (3, 4, 5, 0), ("QQP", "test"): (1, 2, None, 0),
    ("MNLI", "train"): (8, 9, 11, 0), ("MNLI", "dev_matched"): (8, 9, 15, 0),
    ("MNLI", "dev_mismatched"): (8, 9, 15, 0), ("MNLI", "test_matched"): (8, 9, None, 0),
    ("MNLI", "test_mismatched"): (8, 9, None, 0),
    ("QNLI", "train"): (1, 2, 3, 0), ("QNLI", "dev"): (1, 2, 3, 0), ("QNLI", "test"): (1, 2, None, 0),
    ("RTE", "train"): (1, 2, 3, 0), ("RTE", "dev"): (1, 2, 3, 0), ("RTE", "test"): (1, 2, None, 0),
    ("WNLI", "train"): (1, 2, 3, 0), ("WNLI", "dev"): (1, 2, 3, 0), ("WNLI", "test"): (1, 2, None, 0),
    ("AX", "test"): (1, 2, None, 0),
}
_HEADERLESS = {("CoLA", "train"), ("CoLA", "dev")}


def _task_dir(task: str) -> pathlib.Path:
    return GLUE_DIR / ("diagnostic" if task == "AX" else task)


def _rows_by_position(path: pathlib.Path, headerless: bool) -> list[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return rows if headerless else rows[1:]


@pytest.fixture(scope="module")
def tokenizer(minilm_dir) -> BertTokenizer:
    return BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "corpora"


# GLUE readers ----------------------------------------------------------------

def test_every_task_and_split_has_a_fixture_and_a_position_table():
    assert set(glue.GLUE_TASKS) == {"CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI",
                                    "RTE", "WNLI", "AX"}
    assert {(t.name, s) for t in glue.GLUE_TASKS.values() for s in t.splits} == set(_POSITIONS)
    assert glue.get_task("MNLI").eval_splits == ("dev_matched", "dev_mismatched")
    assert glue.get_task("MNLI").test_splits == ("test_matched", "test_mismatched")
    assert glue.get_task("AX").train_split is None and glue.get_task("AX").eval_splits == ()


@pytest.mark.parametrize("task, split", sorted(_POSITIONS))
def test_reader_matches_the_official_column_positions(task, split):
    text, pair, label, index = _POSITIONS[task, split]
    path = glue.split_path(_task_dir(task), glue.get_task(task), split)
    rows = _rows_by_position(path, (task, split) in _HEADERLESS)
    examples = glue.read_glue(_task_dir(task), task, split)
    assert len(examples) == len(rows) >= 2 and examples.skipped_rows == 0
    assert examples.texts == [row[text] for row in rows]
    assert examples.text_pairs == (None if pair is None else [row[pair] for row in rows])
    if label is None:
        assert examples.labels is None
    elif task == "STS-B":
        assert examples.labels == [float(row[label]) for row in rows]
    else:
        assert examples.labels == [row[label] for row in rows]
        assert set(examples.labels) <= set(glue.get_task(task).label_list)
    first_data_line = 1 if (task, split) in _HEADERLESS else 2
    assert examples.line_numbers == list(range(first_data_line, first_data_line + len(rows)))
    assert examples.ids == ([row[index] for row in rows] if index is not None
                            else [str(n) for n in examples.line_numbers])


def test_labels_and_metrics_per_task():
    expected = {
        "CoLA": (("0", "1"), ("matthews_corr",)), "SST-2": (("0", "1"), ("accuracy",)),
        "MRPC": (("0", "1"), ("f1", "accuracy")), "STS-B": (None, ("pearson", "spearman")),
        "QQP": (("0", "1"), ("f1", "accuracy")),
        "MNLI": (("contradiction", "entailment", "neutral"), ("accuracy",)),
        "QNLI": (("entailment", "not_entailment"), ("accuracy",)),
        "RTE": (("entailment", "not_entailment"), ("accuracy",)),
        "WNLI": (("0", "1"), ("accuracy",)),
        "AX": (("contradiction", "entailment", "neutral"), ()),
    }
    assert {name: (t.label_list, t.metrics) for name, t in glue.GLUE_TASKS.items()} == expected
    assert [name for name, t in glue.GLUE_TASKS.items() if t.is_regression] == ["STS-B"]


def test_quotes_are_text_and_the_mrpc_byte_order_mark_is_dropped():
    assert (GLUE_DIR / "MRPC" / "train.tsv").read_bytes().startswith(b"\xef\xbb\xbfQuality\t")
    mrpc = glue.read_glue(GLUE_DIR / "MRPC", "mrpc", "train")
    assert mrpc.texts[0].startswith('Amrozi accused his brother , whom he called " the witness " ,')
    sst = glue.read_glue(GLUE_DIR / "SST-2", "sst2", "train")
    assert sst.texts[5] == 'a " smart " and witty comedy '


@pytest.mark.parametrize("name, canonical", [("mnli", "MNLI"), ("sts-b", "STS-B"), ("STS_B", "STS-B"),
                                             ("sst2", "SST-2"), ("Cola", "CoLA"), ("ax", "AX")])
def test_task_names_ignore_case_and_separators(name, canonical):
    assert glue.get_task(name).name == canonical


def test_unknown_task_split_or_missing_file(tmp_path):
    with pytest.raises(ValueError, match="unknown GLUE task 'squad'"):
        glue.get_task("squad")
    with pytest.raises(ValueError, match="MRPC has no split 'dev_matched'"):
        glue.read_glue(GLUE_DIR / "MRPC", "MRPC", "dev_matched")
    with pytest.raises(FileNotFoundError, match=r"RTE train: no .*train\.tsv.*glue_data/RTE"):
        glue.read_glue(tmp_path, "RTE", "train")


def test_diagnostic_file_may_keep_its_download_name(tmp_path):
    shutil.copy(GLUE_DIR / "diagnostic" / "diagnostic.tsv", tmp_path / "AX.tsv")
    assert (glue.read_glue(tmp_path, "AX", "test").texts
            == glue.read_glue(GLUE_DIR / "diagnostic", "AX", "test").texts)


def _with_line(source: pathlib.Path, tmp_path: pathlib.Path, line: int, content: bytes) -> pathlib.Path:
    """A copy of a fixture with line `line` (1-based) replaced."""
    lines = source.read_bytes().split(b"\n")
    lines[line - 1] = content
    target = tmp_path / source.parent.name / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"\n".join(lines))
    return target


_BAD_ROWS = [
    ("RTE", "train", 3, b"1\tA sentence without its pair or label.", r"2 fields, expected 4"),
    ("RTE", "train", 3, b"1\ta\tb\tentailment\textra", r"5 fields, expected 4"),
    ("RTE", "dev", 2, b"0\ta\tb\tneutral", r"label 'neutral' is not one of entailment, not_entailment"),
    ("CoLA", "train", 4, b"bc01\t2\t\tA sentence.", r"label '2' is not one of 0, 1"),
    ("MNLI", "train", 5, b"\t".join([b"3"] * 11 + [b"-"]), r"label '-' is not one of contradiction"),
    ("STS-B", "dev", 3, b"\t".join([b"1"] * 9 + [b"high"]), r"label 'high' is not a number"),
    ("STS-B", "dev", 3, b"\t".join([b"1"] * 9 + [b"nan"]), r"label 'nan' is not finite"),
    ("SST-2", "train", 2, b"caf\xe9 society\t1", r"bytes that are not UTF-8"),
    ("QQP", "test", 4, b"2\tonly one question", r"2 fields, expected 3"),
]


@pytest.mark.parametrize("task, split, line, content, reason", _BAD_ROWS)
def test_bad_row_names_file_and_line_or_is_skipped_and_counted(tmp_path, task, split, line,
                                                               content, reason):
    source = glue.split_path(_task_dir(task), glue.get_task(task), split)
    path = _with_line(source, tmp_path, line, content)
    with pytest.raises(ValueError, match=re.escape(f"{path}:{line}: ") + reason):
        glue.read_glue(path.parent, task, split)
    skipped = glue.read_glue(path.parent, task, split, skip_bad_rows=True)
    clean = glue.read_glue(source.parent, task, split)
    assert skipped.skipped_rows == 1 and re.match(re.escape(f"{path}:{line}: ") + reason,
                                                  skipped.skipped[0])
    keep = [i for i, n in enumerate(clean.line_numbers) if n != line]
    assert skipped.texts == [clean.texts[i] for i in keep]
    assert skipped.line_numbers == [clean.line_numbers[i] for i in keep]


def test_header_without_a_needed_column_is_an_error(tmp_path):
    path = _with_line(GLUE_DIR / "QNLI" / "train.tsv", tmp_path, 1, b"index\tquestion\ttext\tlabel")
    with pytest.raises(ValueError, match=re.escape(f"{path}:1: no column 'sentence'")):
        glue.read_glue(path.parent, "QNLI", "train", skip_bad_rows=True)


# User data -----------------------------------------------------------------

def test_csv_with_quoted_commas_and_newlines(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text('id,sentence,question,intent\n'
                    'a1,"Book a table, please","for two?",book\n'
                    'a2,"Line one\nline two",q,"cancel"\n'
                    'a3,"He said ""no""",q2,book\n', encoding="utf-8")
    examples = classification.read_examples(path, text_column="sentence", text_pair_column="question",
                                            label_column="intent", id_column="id")
    assert examples.texts == ["Book a table, please", "Line one\nline two", 'He said "no"']
    assert examples.text_pairs == ["for two?", "q", "q2"]
    assert examples.labels == ["book", "cancel", "book"]
    assert examples.ids == ["a1", "a2", "a3"] and examples.line_numbers == [2, 3, 5]
    assert classification.learn_labels(examples) == ["book", "cancel"]


def test_tsv_jsonl_regression_and_unlabelled(tmp_path):
    (tmp_path / "a.tsv").write_text('text\tscore\n"quoted" text\t0.5\n\nplain\t2\n', encoding="utf-8")
    examples = classification.read_examples(tmp_path / "a.tsv", label_column="score", regression=True)
    assert examples.texts == ['"quoted" text', "plain"] and examples.labels == [0.5, 2.0]
    assert examples.text_pairs is None and examples.line_numbers == [2, 4]

    rows = [{"text": "good", "label": "pos"}, {"text": "bad", "label": "neg", "extra": 1}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    examples = classification.read_examples(tmp_path / "a.jsonl")
    assert examples.texts == ["good", "bad"] and examples.labels == ["pos", "neg"]
    assert classification.read_examples(tmp_path / "a.jsonl", label_column=None).labels is None

    (tmp_path / "b.jsonl").write_text('{"text": "x", "label": 1}\n{"text": "y", "label": 0}\n')
    assert classification.read_examples(tmp_path / "b.jsonl").labels == ["1", "0"]


_BAD_USER_ROWS = [
    ("dev.jsonl", b'{"text": "ok", "label": "pos"}\n{"text": "x", "label": "neutral"}\n', 2,
     r"label 'neutral' is not one of neg, pos"),
    ("dev.jsonl", b'{"text": "ok", "label": "pos"}\n{"text": "x", "label": "pos"\n', 2, r"not JSON"),
    ("dev.jsonl", b'{"text": "ok", "label": "pos"}\n["x", "pos"]\n', 2, r"not a JSON object"),
    ("dev.jsonl", b'{"text": "ok", "label": "pos"}\n{"label": "pos"}\n', 2, r"no 'text'"),
    ("dev.jsonl", b'{"text": "ok", "label": "pos"}\n{"text": null, "label": "pos"}\n', 2,
     r"a text is not a string"),
    ("dev.jsonl", b'{"text": "ok", "label": "pos"}\n{"text": "x", "label": true}\n', 2,
     r"label True is not a string or number"),
    ("dev.jsonl", b'{"text": "ok", "label": "pos"}\n{"text": "\xff", "label": "pos"}\n', 2,
     r"bytes that are not UTF-8"),
    ("dev.csv", b'text,label\nok,pos\n"a\n\xffb",pos\nfine,neg\n', 3, r"bytes that are not UTF-8"),
    ("dev.csv", b'text,label\nok,pos\nno label\nfine,neg\n', 3, r"1 fields, expected 2"),
]


@pytest.mark.parametrize("name, content, line, reason", _BAD_USER_ROWS)
def test_bad_user_rows(tmp_path, name, content, line, reason):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(f"{path}:{line}: ") + reason):
        classification.read_examples(path, label_list=["neg", "pos"])
    examples = classification.read_examples(path, label_list=["neg", "pos"], skip_bad_rows=True)
    assert examples.skipped_rows == 1
    assert examples.texts == (["ok", "fine"] if name.endswith(".csv") else ["ok"])


def test_file_level_errors(tmp_path):
    (tmp_path / "a.txt").write_text("text\tlabel\n")
    with pytest.raises(ValueError, match="cannot tell the format from the suffix 'txt'"):
        classification.read_examples(tmp_path / "a.txt")
    (tmp_path / "empty.tsv").write_text("\n")
    with pytest.raises(ValueError, match="empty file, expected a header"):
        classification.read_examples(tmp_path / "empty.tsv")
    (tmp_path / "dup.tsv").write_text("text\ttext\tlabel\n")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'dup.tsv'}:1: header repeats")):
        classification.read_examples(tmp_path / "dup.tsv")
    with pytest.raises(FileNotFoundError):
        classification.read_examples(tmp_path / "missing.tsv")
    (tmp_path / "one.tsv").write_text("text\tlabel\na\tx\nb\tx\n")
    with pytest.raises(ValueError, match="at least two labels"):
        classification.learn_labels(classification.read_examples(tmp_path / "one.tsv"))


# Encoding and the length filter ----------------------------------------------

def test_encoded_pairs_are_cls_a_sep_b_sep_with_token_counts(tokenizer):
    examples = glue.read_glue(GLUE_DIR / "MNLI", "MNLI", "dev_mismatched")
    task = glue.get_task("MNLI")
    encoded = classification.encode_examples(examples, tokenizer, 32, label_list=task.label_list)
    features = encoded.features
    assert set(features) == {"input_word_ids", "input_mask", "input_type_ids", "label_ids"}
    assert all(features[k].shape == (4, 32) and features[k].dtype == np.int32
               for k in INPUT_NAMES)
    np.testing.assert_array_equal(features["label_ids"], [0, 0, 1, 2])
    assert features["label_ids"].dtype == np.int32 and encoded.ids == ["0", "1", "2", "3"]
    for i, (a, b) in enumerate(zip(examples.texts, examples.text_pairs)):
        a_ids, b_ids = tokenizer(a).numpy().tolist(), tokenizer(b).numpy().tolist()
        assert encoded.num_tokens[i] == len(a_ids) + len(b_ids) + 3
        length = min(encoded.num_tokens[i], 32)
        assert features["input_mask"][i].sum() == length
        if encoded.num_tokens[i] <= 32:
            expected = [tokenizer.cls_id] + a_ids + [tokenizer.sep_id] + b_ids + [tokenizer.sep_id]
            assert features["input_word_ids"][i, :length].tolist() == expected
            types = [0] * (len(a_ids) + 2) + [1] * (len(b_ids) + 1)
            assert features["input_type_ids"][i, :length].tolist() == types
    # Example 0 fills S exactly, 1 and 2 are truncated (as pack_segments trims), 3 is padded.
    assert encoded.num_tokens.tolist() == [32, 53, 37, 24]
    segments = [tokenizer(tf.constant(column)) for column in (examples.texts, examples.text_pairs)]
    packed = pack_segments(segments, max_seq_length=32, cls_id=tokenizer.cls_id,
                           sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id)
    for name in INPUT_NAMES:
        np.testing.assert_array_equal(features[name], packed[name].numpy())


def test_batching_does_not_change_features_and_regression_labels_are_float(tokenizer):
    examples = glue.read_glue(GLUE_DIR / "STS-B", "STS-B", "train")
    whole = classification.encode_examples(examples, tokenizer, 16, regression=True)
    pieces = classification.encode_examples(examples, tokenizer, 16, regression=True, batch_size=3)
    for name in whole.features:
        np.testing.assert_array_equal(whole.features[name], pieces.features[name])
    np.testing.assert_array_equal(whole.num_tokens, pieces.num_tokens)
    assert whole.features["labels"].dtype == np.float32 and "label_ids" not in whole.features
    np.testing.assert_allclose(whole.features["labels"], [5.0, 3.8, 3.8, 2.6, 4.25, 4.25, 0.5])


def test_single_sentences_and_test_split_without_labels(tokenizer):
    examples = glue.read_glue(GLUE_DIR / "CoLA", "CoLA", "test")
    encoded = classification.encode_examples(examples, tokenizer, 24)
    assert set(encoded.features) == set(INPUT_NAMES)
    assert encoded.features["input_type_ids"].sum() == 0
    assert encoded.num_tokens.tolist() == [len(tokenizer(t).numpy()) + 2 for t in examples.texts]


def test_label_outside_the_list_is_an_encoding_error(tokenizer, tmp_path):
    (tmp_path / "a.tsv").write_text("text\tlabel\na\tx\nb\ty\n")
    examples = classification.read_examples(tmp_path / "a.tsv")
    with pytest.raises(ValueError, match=r"labels \['y'\] are not in the label list"):
        classification.encode_examples(examples, tokenizer, 8, label_list=["x"])
    with pytest.raises(ValueError, match="needs the label_list"):
        classification.encode_examples(examples, tokenizer, 8)


# Metrics ---------------------------------------------------------------------

_RNG = np.random.default_rng(0)
_LABELS = _RNG.integers(0, 2, 200)
_PREDS = np.where(_RNG.random(200) < 0.8, _LABELS, 1 - _LABELS)
_SCORES = _RNG.uniform(0, 5, 200)
_PRED_SCORES = _SCORES + _RNG.normal(0, 1.5, 200)


def test_classification_metrics_agree_with_sklearn():
    assert glue_metrics.accuracy(_LABELS, _PREDS) == sk_metrics.accuracy_score(_LABELS, _PREDS)
    assert glue_metrics.f1(_LABELS, _PREDS) == sk_metrics.f1_score(_LABELS, _PREDS)
    assert glue_metrics.matthews_corr(_LABELS, _PREDS) == sk_metrics.matthews_corrcoef(_LABELS, _PREDS)
    three, three_preds = _RNG.integers(0, 3, 50), _RNG.integers(0, 3, 50)
    assert glue_metrics.macro_f1(three, three_preds) == sk_metrics.f1_score(three, three_preds,
                                                                          average="macro")
    # Hand-checked values on a small case, so the test also pins the definitions.
    labels, preds = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    assert glue_metrics.accuracy(labels, preds) == pytest.approx(0.6)
    assert glue_metrics.f1(labels, preds) == pytest.approx(2 / 3)
    assert glue_metrics.matthews_corr(labels, preds) == pytest.approx(1 / 6)


def test_correlations_agree_with_scipy():
    assert glue_metrics.pearson(_SCORES, _PRED_SCORES) == stats.pearsonr(_SCORES, _PRED_SCORES).statistic
    assert (glue_metrics.spearman(_SCORES, _PRED_SCORES)
            == stats.spearmanr(_SCORES, _PRED_SCORES).statistic)
    assert 0.5 < glue_metrics.spearman(_SCORES, _PRED_SCORES) < 0.9


def test_edge_cases_are_decided_not_nan():
    ones = np.ones(10, int)
    # One class everywhere: scikit-learn's MCC convention is 0; F1 without positives is 0.
    assert glue_metrics.matthews_corr(ones, ones) == sk_metrics.matthews_corrcoef(ones, ones) == 0.0
    zeros = np.zeros(10, int)
    assert glue_metrics.f1(zeros, zeros) == sk_metrics.f1_score(zeros, zeros, zero_division=0.0) == 0.0
    assert glue_metrics.f1(ones, ones) == 1.0 and glue_metrics.accuracy(zeros, zeros) == 1.0
    assert glue_metrics.matthews_corr(_LABELS, np.zeros(200, int)) == 0.0
    # Constant predictions: scipy says NaN, the metric says 0.
    constant = np.full(200, 2.5)
    with pytest.warns(stats.ConstantInputWarning):
        assert np.isnan(stats.pearsonr(_SCORES, constant).statistic)
    assert glue_metrics.pearson(_SCORES, constant) == 0.0
    assert glue_metrics.spearman(constant, _SCORES) == 0.0
    with pytest.raises(ValueError, match="NaN or infinite"):
        glue_metrics.pearson(_SCORES, np.where(_SCORES > 4, np.nan, _SCORES))
    with pytest.raises(ValueError, match="same length"):
        glue_metrics.accuracy([0, 1], [0])
    with pytest.raises(ValueError, match="no examples"):
        glue_metrics.accuracy([], [])


def test_compute_metrics_and_task_score():
    mrpc = glue.get_task("MRPC")
    results = glue_metrics.compute_metrics(mrpc.metrics, _LABELS, _PREDS)
    assert list(results) == ["f1", "accuracy"]
    assert glue_metrics.task_score(results, mrpc.metrics) == pytest.approx(
        (sk_metrics.f1_score(_LABELS, _PREDS) + sk_metrics.accuracy_score(_LABELS, _PREDS)) / 2)
    stsb = glue_metrics.compute_metrics(glue.get_task("STS-B").metrics, _SCORES, _PRED_SCORES)
    assert stsb == {"pearson": stats.pearsonr(_SCORES, _PRED_SCORES).statistic,
                    "spearman": stats.spearmanr(_SCORES, _PRED_SCORES).statistic}
    assert json.loads(json.dumps(results)) == results
    with pytest.raises(ValueError, match="unknown metrics"):
        glue_metrics.compute_metrics(["bleu"], _LABELS, _PREDS)


# Submission files --------------------------------------------------------------

@pytest.mark.parametrize("task, split, file_name", [
    ("CoLA", "test", "CoLA.tsv"), ("SST-2", "test", "SST-2.tsv"), ("MRPC", "test", "MRPC.tsv"),
    ("STS-B", "test", "STS-B.tsv"), ("QQP", "test", "QQP.tsv"), ("MNLI", "test_matched", "MNLI-m.tsv"),
    ("MNLI", "test_mismatched", "MNLI-mm.tsv"), ("QNLI", "test", "QNLI.tsv"), ("RTE", "test", "RTE.tsv"),
    ("WNLI", "test", "WNLI.tsv"), ("AX", "test", "AX.tsv")])
def test_submission_files(tmp_path, task, split, file_name):
    spec = glue.get_task(task)
    examples = glue.read_glue(_task_dir(task), task, split)
    n = len(examples)
    predictions = (np.linspace(0, 5, n) if spec.is_regression
                   else np.arange(n) % len(spec.label_list))
    path = glue.write_submission(tmp_path, task, split, examples.ids, predictions)
    assert path == tmp_path / file_name and os.listdir(tmp_path) == [file_name]
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == n + 1
    rows = [line.split("\t") for line in lines[1:]]
    assert [r[0] for r in rows] == [str(i) for i in range(n)]
    if spec.is_regression:
        assert [r[1] for r in rows] == [f"{v:.3f}" for v in np.linspace(0, 5, n)]
    else:
        assert [r[1] for r in rows] == [spec.label_list[i % len(spec.label_list)] for i in range(n)]


def test_submission_refuses_incomplete_or_invalid_predictions(tmp_path):
    with pytest.raises(ValueError, match="position 1 has id '2'"):
        glue.write_submission(tmp_path, "RTE", "test", ["0", "2"], [0, 1])
    with pytest.raises(ValueError, match="class ids in 0..2"):
        glue.write_submission(tmp_path, "MNLI", "test_matched", ["0", "1"], [0, 3])
    with pytest.raises(ValueError, match="class ids"):
        glue.write_submission(tmp_path, "RTE", "test", ["0", "1"], [0.2, 0.9])
    with pytest.raises(ValueError, match="not a test split"):
        glue.write_submission(tmp_path, "RTE", "dev", ["0", "1"], [0, 1])
    with pytest.raises(ValueError, match="2 ids but 3 predictions"):
        glue.write_submission(tmp_path, "RTE", "test", ["0", "1"], [0, 1, 1])
    with pytest.raises(ValueError, match="finite"):
        glue.write_submission(tmp_path, "STS-B", "test", ["0", "1"], [1.0, np.nan])
    assert os.listdir(tmp_path) == []


# Demo splits and the baseline ----------------------------------------------------

def _split_rows(splits) -> dict[str, list[tuple[str, str]]]:
    return {name: list(zip(e.texts, e.labels)) for name, e in
            (("train", classification.read_examples(splits.train)),
             ("dev", classification.read_examples(splits.dev, label_list=splits.label_list)),
             ("test", classification.read_examples(splits.test, label_list=splits.label_list)))}


@pytest.mark.parametrize("name, sizes, duplicates, labels", [
    ("product_reviews", {"train": 28098, "dev": 822, "test": 531}, {"dev": 2690, "test": 2982},
     ["neg", "pos"]),
    ("tweets", {"train": 30526, "dev": 3707, "test": 3710}, {"dev": 108, "test": 107},
     ["negative", "neutral", "positive"]),
])
def test_demo_splits_are_deterministic_and_disjoint(cache, name, sizes, duplicates, labels):
    splits = classification.make_demo_splits(name)
    assert splits.train == cache / f"{name}_splits" / "train.tsv"
    assert (splits.sizes, splits.duplicates_removed, splits.label_list) == (sizes, duplicates, labels)
    rows = _split_rows(splits)
    assert {k: len(v) for k, v in rows.items()} == sizes
    train_texts = {text for text, _ in rows["train"]}
    dev_texts = {text for text, _ in rows["dev"]}
    test_texts = {text for text, _ in rows["test"]}
    assert not (dev_texts & train_texts) and not (test_texts & (train_texts | dev_texts))
    # 80/10/10 of the whole corpus before duplicates left dev and test.
    total = sum(sizes.values()) + sum(duplicates.values())
    assert sizes["train"] == int(0.8 * total)
    assert sizes["dev"] + duplicates["dev"] == int(0.1 * total)
    first = {split: path.read_bytes() for split, path in
             (("train", splits.train), ("dev", splits.dev), ("test", splits.test))}
    again = classification.make_demo_splits(name)
    assert first == {"train": again.train.read_bytes(), "dev": again.dev.read_bytes(),
                     "test": again.test.read_bytes()}
    assert not [p for p in splits.train.parent.iterdir() if p.name.startswith(".")]


def test_subsample_is_a_prefix_of_the_same_shuffle(cache):
    small = classification.make_demo_splits("tweets", subsample=1000)
    assert small.train.parent == cache / "tweets_splits_1000"
    assert small.sizes["train"] == 800
    assert sum(small.sizes.values()) + sum(small.duplicates_removed.values()) == 1000
    full = classification.make_demo_splits("tweets")
    small_train = small.train.read_text(encoding="utf-8").splitlines()
    assert full.train.read_text(encoding="utf-8").splitlines()[:801] == small_train
    with pytest.raises(ValueError, match="unknown demo dataset"):
        classification.make_demo_splits("imdb")


def test_tweet_texts_keep_one_line_per_row(cache):
    splits = classification.make_demo_splits("tweets", subsample=3000)
    for path in (splits.train, splits.dev, splits.test):
        for line in path.read_text(encoding="utf-8").splitlines():
            assert line.count("\t") == 1


def test_tfidf_baseline_beats_the_majority_class(cache):
    splits = classification.make_demo_splits("product_reviews", subsample=4000)
    test = classification.read_examples(splits.test)
    majority = max(test.labels.count(label) for label in splits.label_list) / len(test)
    accuracy = classification.tfidf_baseline(splits.train, splits.test)
    assert accuracy > majority + 0.15
