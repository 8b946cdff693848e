"""The GLUE tasks, read from the official files as users download them.

`download_glue_data.py` (the GLUE authors' script) leaves one folder per task
under glue_data/; a task's `data_dir` is that folder (glue_data/MRPC, ...;
the diagnostic set AX is glue_data/diagnostic/diagnostic.tsv, or AX.tsv as
served by the GLUE site). Every file is tab-separated without quoting and has
a header line, except CoLA's train.tsv and dev.tsv (no header; columns
source, label, original annotation, sentence). Test files have no labels;
their `index` (QQP: `id`) column is what the submission refers to.

| task  | text, pair                | labels                                 | metrics            |
|-------|---------------------------|----------------------------------------|--------------------|
| CoLA  | sentence                  | 0, 1                                   | Matthews corr.     |
| SST-2 | sentence                  | 0, 1                                   | accuracy           |
| MRPC  | #1 String, #2 String      | 0, 1 (column Quality)                  | F1, accuracy       |
| STS-B | sentence1, sentence2      | float 0-5 (column score)               | Pearson, Spearman  |
| QQP   | question1, question2      | 0, 1 (column is_duplicate)             | F1, accuracy       |
| MNLI  | sentence1, sentence2      | contradiction, entailment, neutral     | accuracy (m / mm)  |
| QNLI  | question, sentence        | entailment, not_entailment             | accuracy           |
| RTE   | sentence1, sentence2      | entailment, not_entailment             | accuracy           |
| WNLI  | sentence1, sentence2      | 0, 1                                   | accuracy           |
| AX    | sentence1, sentence2      | MNLI's (test only, an MNLI model)      | (GLUE server)      |

MNLI's splits are train, dev_matched, dev_mismatched, test_matched and
test_mismatched, evaluated separately.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from typing import Mapping, Sequence

import numpy as np

from bert_tf.data.classification import Examples, read_examples
from bert_tf.io import write_text_atomically

_COLA_COLUMNS = ("source", "label", "original_label", "sentence")


@dataclasses.dataclass(frozen=True)
class SplitFile:
    """Where one split of a task lives and how its columns are named.

    Attributes:
      file_names: candidate names in the task folder; the first that exists
        is read.
      text_column, text_pair_column: the texts (pair None for single texts).
      label_column: None for test files.
      id_column: None where the file has no id (line numbers are used).
      column_names: the columns of a file without a header line.
    """

    file_names: tuple[str, ...]
    text_column: str
    text_pair_column: str | None
    label_column: str | None
    id_column: str | None
    column_names: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """One GLUE task: its files, labels, metrics and submission files.

    Attributes:
      name: the GLUE spelling (CoLA, SST-2, ...).
      label_list: label names in id order (sorted), or None for regression.
      metrics: metric names as `bert_tf.training.glue_metrics` computes them.
      splits: split name -> `SplitFile`.
      submission_files: test split -> file name the GLUE server expects.
    """

    name: str
    label_list: tuple[str, ...] | None
    metrics: tuple[str, ...]
    splits: Mapping[str, SplitFile]
    submission_files: Mapping[str, str]

    @property
    def is_regression(self) -> bool:
        return self.label_list is None

    @property
    def train_split(self) -> str | None:
        """"train", or None for the test-only AX."""
        return "train" if "train" in self.splits else None

    @property
    def eval_splits(self) -> tuple[str, ...]:
        """Labelled evaluation splits: ("dev",), or MNLI's matched and mismatched."""
        return tuple(s for s in self.splits if s.startswith("dev"))

    @property
    def test_splits(self) -> tuple[str, ...]:
        """Unlabelled splits that get a submission file."""
        return tuple(self.submission_files)


def _task(name: str, label_list: tuple[str, ...] | None, metrics: tuple[str, ...],
          text: str, pair: str | None, label: str | None, *, train_dev_id: str | None,
          test_id: str = "index", mnli: bool = False) -> GlueTask:
    def split(file: str, labelled: bool, id_column: str | None) -> SplitFile:
        return SplitFile((f"{file}.tsv",), text, pair, label if labelled else None, id_column)

    if mnli:
        dev, test = ("dev_matched", "dev_mismatched"), ("test_matched", "test_mismatched")
        submission = {"test_matched": f"{name}-m.tsv", "test_mismatched": f"{name}-mm.tsv"}
    else:
        dev, test = ("dev",), ("test",)
        submission = {"test": f"{name}.tsv"}
    splits = {"train": split("train", True, train_dev_id)}
    splits.update({s: split(s, True, train_dev_id) for s in dev})
    splits.update({s: split(s, False, test_id) for s in test})
    return GlueTask(name, label_list, metrics, splits, submission)


_BINARY = ("0", "1")
_NLI = ("contradiction", "entailment", "neutral")
_ENTAILMENT = ("entailment", "not_entailment")
_ACCURACY = ("accuracy",)
_F1_ACCURACY = ("f1", "accuracy")

_cola = _task("CoLA", _BINARY, ("matthews_corr",), "sentence", None, "label", train_dev_id=None)

GLUE_TASKS: dict[str, GlueTask] = {task.name: task for task in (
    # CoLA's train and dev files alone have no header line.
    dataclasses.replace(_cola, splits={**_cola.splits, **{
        split: SplitFile((f"{split}.tsv",), "sentence", None, "label", None, _COLA_COLUMNS)
        for split in ("train", "dev")}}),
    _task("SST-2", _BINARY, _ACCURACY, "sentence", None, "label", train_dev_id=None),
    _task("MRPC", _BINARY, _F1_ACCURACY, "#1 String", "#2 String", "Quality", train_dev_id=None),
    _task("STS-B", None, ("pearson", "spearman"), "sentence1", "sentence2", "score",
          train_dev_id="index"),
    _task("QQP", _BINARY, _F1_ACCURACY, "question1", "question2", "is_duplicate",
          train_dev_id="id", test_id="id"),
    _task("MNLI", _NLI, _ACCURACY, "sentence1", "sentence2", "gold_label",
          train_dev_id="index", mnli=True),
    _task("QNLI", _ENTAILMENT, _ACCURACY, "question", "sentence", "label", train_dev_id="index"),
    _task("RTE", _ENTAILMENT, _ACCURACY, "sentence1", "sentence2", "label", train_dev_id="index"),
    _task("WNLI", _BINARY, _ACCURACY, "sentence1", "sentence2", "label", train_dev_id="index"),
    GlueTask("AX", _NLI, (), {"test": SplitFile(("diagnostic.tsv", "AX.tsv"), "sentence1",
                                                "sentence2", None, "index")},
             {"test": "AX.tsv"}),
)}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def get_task(name: str) -> GlueTask:
    """The GLUE task called `name`, ignoring case, "-" and "_" (mnli, sts-b, sst2, ...).

    Raises:
      ValueError: no such task; the message lists the tasks.
    """
    for task in GLUE_TASKS.values():
        if _key(task.name) == _key(name):
            return task
    raise ValueError(f"unknown GLUE task {name!r}; tasks: {', '.join(GLUE_TASKS)}")


def split_path(data_dir: str | os.PathLike, task: GlueTask, split: str) -> pathlib.Path:
    """Path of a split's file in the task folder.

    Raises:
      ValueError: the task has no such split.
      FileNotFoundError: none of the split's file names exists.
    """
    if split not in task.splits:
        raise ValueError(f"{task.name} has no split {split!r}; splits: {', '.join(task.splits)}")
    candidates = [pathlib.Path(data_dir) / name for name in task.splits[split].file_names]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"{task.name} {split}: no {' or '.join(map(str, candidates))} "
                            "(data_dir is the task's folder of GLUE's download, e.g. glue_data/"
                            f"{'diagnostic' if task.name == 'AX' else task.name})")


def read_glue(data_dir: str | os.PathLike, task_name: str, split: str, *,
              skip_bad_rows: bool = False) -> Examples:
    """Reads one split of a GLUE task from the official file.

    Args:
      data_dir: the task's folder (glue_data/MNLI, glue_data/diagnostic, ...).
      task_name: see `get_task`.
      split: one of the task's splits ("train", "dev", "test"; MNLI's
        "dev_matched", ...).
      skip_bad_rows: skip and count malformed rows instead of failing.

    Returns:
      The examples; labels are the task's label names (floats for STS-B),
      None for test splits.

    Raises:
      ValueError: unknown task or split; a malformed row, "FILE:LINE: reason".
      FileNotFoundError: the split's file is missing.
    """
    task = get_task(task_name)
    path = split_path(data_dir, task, split)
    layout = task.splits[split]
    return read_examples(
        path, text_column=layout.text_column, text_pair_column=layout.text_pair_column,
        label_column=layout.label_column, id_column=layout.id_column,
        label_list=task.label_list, regression=task.is_regression,
        column_names=layout.column_names, file_format="tsv", skip_bad_rows=skip_bad_rows)


def write_submission(output_dir: str | os.PathLike, task_name: str, split: str,
                     ids: Sequence[str], predictions: np.ndarray | Sequence) -> pathlib.Path:
    """Writes test predictions in the GLUE submission format, atomically.

    One file per test split, named as the GLUE server expects (CoLA.tsv,
    MNLI-m.tsv, MNLI-mm.tsv, AX.tsv, ...), header "index\\tprediction", one
    row per test example in file order: the label name for classification,
    the score with 3 decimals for STS-B.

    Args:
      output_dir: folder for the file (created if needed).
      task_name: see `get_task`.
      split: a test split of the task ("test", "test_matched", ...).
      ids: the test examples' ids (`Examples.ids`): the file's index column.
      predictions: class ids (int, [N]) or, for STS-B, scores (float, [N]).

    Returns:
      The path written.

    Raises:
      ValueError: not a test split; ids and predictions differ in length;
        ids are not 0..N-1 in order (a test row was skipped: the server
        needs every row); a class id outside the label list.
    """
    task = get_task(task_name)
    if split not in task.submission_files:
        raise ValueError(f"{task.name} {split!r} is not a test split; "
                         f"test splits: {', '.join(task.test_splits)}")
    predictions = np.asarray(predictions)
    if len(ids) != len(predictions):
        raise ValueError(f"{len(ids)} ids but {len(predictions)} predictions")
    expected = [str(i) for i in range(len(ids))]
    if list(ids) != expected:
        first = next(i for i, (a, b) in enumerate(zip(ids, expected)) if a != b)
        raise ValueError(f"test ids must be 0..{len(ids) - 1} in file order (all test rows); "
                         f"position {first} has id {ids[first]!r}")
    if task.is_regression:
        if not np.all(np.isfinite(predictions.astype(np.float64))):
            raise ValueError("STS-B predictions must be finite numbers")
        values = [f"{float(p):.3f}" for p in predictions]
    else:
        if predictions.size and not (np.issubdtype(predictions.dtype, np.integer)
                                     and predictions.min() >= 0
                                     and predictions.max() < len(task.label_list)):
            raise ValueError(f"{task.name} predictions must be class ids in "
                             f"0..{len(task.label_list) - 1}")
        values = [task.label_list[p] for p in predictions]
    text = "index\tprediction\n" + "".join(f"{i}\t{v}\n" for i, v in zip(ids, values))
    return write_text_atomically(pathlib.Path(output_dir) / task.submission_files[split], text)
