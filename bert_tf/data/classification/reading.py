"""Reading text and text-pair classification or regression examples from CSV, TSV or JSONL.

The one reader behind GLUE (`bert_tf.data.glue`) and any user data: files with
named columns (text, an optional text pair, a label). A malformed row
(missing column, wrong field count, label outside the label set or not a
number, bytes that are not UTF-8) is a `ValueError` naming `FILE:LINE`, or,
with `skip_bad_rows=True`, skipped, counted and logged: never read as
something else.

File conventions:
  - TSV: tab-separated, no quoting (`csv.QUOTE_NONE`, as the GLUE files):
    a quote character is text, a row is one line.
  - CSV: RFC 4180 (`csv` module's excel dialect): fields with commas,
    quotes or newlines are quoted; a row may span lines.
  - JSONL: one JSON object a line.
  - UTF-8, with or without a byte-order mark; blank lines are ignored.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import pathlib
from typing import Iterator, Sequence

from absl import logging

from bert_tf.io import BadRow

FILE_FORMATS = ("csv", "tsv", "jsonl")
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


def _parse_label(value: object, label_list: Sequence[str] | None,
                 regression: bool) -> str | float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadRow(f"label {value!r} is not a string or number")
    if regression:
        try:
            number = float(value)
        except ValueError:
            raise BadRow(f"label {value!r} is not a number") from None
        if not math.isfinite(number):
            raise BadRow(f"label {value!r} is not finite")
        return number
    label = str(value)
    if label_list is not None and label not in label_list:
        raise BadRow(f"label {label!r} is not one of {', '.join(label_list)}")
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
                    needed: Sequence[str]) -> Iterator[tuple[int, dict[str, str] | BadRow]]:
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
                raise BadRow("bytes that are not UTF-8")
        except StopIteration:
            break
        except (csv.Error, BadRow) as e:
            bad = e if isinstance(e, BadRow) else BadRow(f"unreadable row ({e})")
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
            yield start, BadRow(f"{len(row)} fields, expected {len(header)} "
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


def _jsonl_rows(path: str) -> Iterator[tuple[int, dict | BadRow]]:
    bad_lines: set[int] = set()
    for number, line in enumerate(_decoded_lines(path, bad_lines), start=1):
        if number in bad_lines:
            yield number, BadRow("bytes that are not UTF-8")
        elif line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                yield number, BadRow(f"not JSON ({e.msg})")
                continue
            yield number, row if isinstance(row, dict) else BadRow("not a JSON object")


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
            if isinstance(row, BadRow):
                raise row
            missing = [column for column in needed if column not in row]
            if missing:
                raise BadRow(f"no {', '.join(map(repr, missing))}")
            text_fields = [row[text_column]] + ([row[text_pair_column]] if text_pair_column else [])
            if not all(isinstance(field, str) for field in text_fields):
                raise BadRow("a text is not a string")
            label = (_parse_label(row[label_column], label_list, regression)
                     if label_column is not None else None)
        except BadRow as e:
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
