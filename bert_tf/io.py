"""Small file helpers: the one atomic writer, a UTF-8 reader, and the one malformed-row error of the readers."""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
from typing import Any


def write_text_atomically(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Writes UTF-8 text so that `path` appears only complete (temp file, then rename)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(temp, 0o644)  # mkstemp makes it private; these files are not secret
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
    return path


def read_utf8(path: str | os.PathLike, what: str) -> str:
    """The whole text of a UTF-8 file; errors name `what` the file is and its path.

    Raises:
      FileNotFoundError: no such file.
      ValueError: bytes that are not UTF-8 (the offset of the first).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} {path} does not exist")
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} {path} is not UTF-8 (bad byte at offset {e.start})") from None


def write_json(path: str | os.PathLike, values: Any) -> pathlib.Path:
    """Writes JSON (sorted keys, indent 2, UTF-8 text) atomically."""
    return write_text_atomically(path, json.dumps(values, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


class BadRow(Exception):
    """A malformed input row; the reader that catches it names the file (and the line).

    Attributes:
      reason: what is wrong, for the one-line error.
      line: the 1-based line, where the raiser knows it (else the reader adds it).
    """

    def __init__(self, reason: str, line: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.line = line
