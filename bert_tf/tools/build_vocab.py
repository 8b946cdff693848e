r"""Learns a WordPiece vocab.txt from plain text (see bert_tf.data.vocab_builder).

    python -m bert_tf.tools.build_vocab --input_files='corpus/*.txt' \
        --vocab_size=8000 --lower_case=true --output=vocab.txt [--num_unused=100]

Bad input (no file matched, an empty corpus, text that is not UTF-8) ends
with a one-line error and exit status 2; no output file is left behind.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import NoReturn, Sequence

from absl import app, flags

from bert_tf.data import vocab_builder

_INPUT_FILES = flags.DEFINE_string("input_files", None, "Comma-separated globs of UTF-8 text files.")
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", None, "Most tokens in the vocab, reserved ones included.")
_LOWER_CASE = flags.DEFINE_bool("lower_case", True, "Lower-case and strip accents (uncased model).")
_OUTPUT = flags.DEFINE_string("output", None, "Path of the vocab.txt to write.")
_NUM_UNUSED = flags.DEFINE_integer("num_unused", 0, "Number of [unusedK] slots after the special tokens.",
                                   lower_bound=0)
flags.mark_flags_as_required(["input_files", "vocab_size", "output"])


def _fail(message: str) -> NoReturn:
    print(f"build_vocab: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        _fail(f"unexpected arguments: {' '.join(argv[1:])}")
    input_files = sorted({path for pattern in _INPUT_FILES.value.split(",") if pattern
                          for path in glob.glob(pattern)})
    if not input_files:
        _fail(f"--input_files={_INPUT_FILES.value} matches no file")
    if not os.path.isdir(os.path.dirname(os.path.abspath(_OUTPUT.value))):
        _fail(f"--output={_OUTPUT.value}: its folder does not exist")
    try:
        vocab = vocab_builder.build_vocab(input_files, _VOCAB_SIZE.value, _LOWER_CASE.value, _OUTPUT.value,
                            _NUM_UNUSED.value)
    except (OSError, ValueError) as e:
        _fail(str(e))
    print(f"wrote {len(vocab)} tokens to {_OUTPUT.value}")


if __name__ == "__main__":
    app.run(main)
