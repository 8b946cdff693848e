"""Learns a WordPiece vocab from plain text with tensorflow-text's learner.

The text is normalised and split into words exactly as `BertTokenizer` does,
so every CJK character is a word and a Chinese corpus yields one entry per
character plus its ## continuation. The vocab starts with [PAD], [UNK],
[CLS], [SEP], [MASK] and the optional [unused0] ... slots. The command line
is `python -m bert_tf.tools.build_vocab`.
"""

from __future__ import annotations

import os
from typing import Sequence

import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

from bert_tf.data import tokenization
from bert_tf.io import write_text_atomically

_BATCH_SIZE = 1024


def read_lines(input_files: Sequence[str]) -> list[str]:
    """Reads the non-blank lines of UTF-8 text files.

    Raises:
      FileNotFoundError: a file does not exist.
      ValueError: a file is not UTF-8, or the files hold no text; the message
        names the file(s).
    """
    lines = []
    for path in input_files:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"input file {path} does not exist")
        with open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8").strip()
                except UnicodeDecodeError:
                    raise ValueError(f"input file {path} is not UTF-8 (line {number})") from None
                if line:
                    lines.append(line)
    if not lines:
        raise ValueError(f"input files hold no text: {', '.join(input_files)}")
    return lines


def learn_vocab(lines: Sequence[str], vocab_size: int, lower_case: bool, num_unused: int = 0,
                max_unique_chars: int | None = None) -> list[str]:
    """Learns a WordPiece vocab.

    Args:
      lines: the corpus, any number of sentences a line.
      vocab_size: the most tokens, reserved ones included; the learner stops
        within 5% below it when the corpus has enough distinct words.
      lower_case: normalise as an uncased `BertTokenizer` does.
      num_unused: number of [unusedK] slots after the special tokens.
      max_unique_chars: the alphabet size; words with rarer characters are
        not learned from and tokenize to [UNK]. Default: a third of the free
        slots, so that the alphabet and its ## continuations take at most
        two thirds of the vocab (all of a Chinese vocab's characters).

    Returns:
      The tokens in id order: special tokens, [unused*], characters and their
      ## continuations, then learned pieces by decreasing count.

    Raises:
      ValueError: `vocab_size` leaves no room beyond the reserved tokens.
    """
    reserved = list(tokenization.SPECIAL_TOKENS) + [f"[unused{i}]" for i in range(num_unused)]
    free = vocab_size - len(reserved)
    if free < 2:
        raise ValueError(f"vocab_size {vocab_size} leaves no room beyond {len(reserved)} reserved tokens")
    dataset = tf.data.Dataset.from_tensor_slices(list(lines)).batch(_BATCH_SIZE).map(
        lambda text: tokenization.normalize_text(text, lower_case))
    vocab = bert_vocab_from_dataset.bert_vocab_from_dataset(
        dataset, vocab_size, reserved,
        # Already normalised: the learner's own splitter must change nothing.
        bert_tokenizer_params={"lower_case": False},
        learn_params={"max_unique_chars": max_unique_chars or max(1, free // 3)})
    # The learner's search may end slightly above the target; its tail holds
    # the rarest learned pieces (the alphabet fits in two thirds of the free slots).
    return vocab[:vocab_size]


def write_vocab(vocab: Sequence[str], output: str | os.PathLike) -> None:
    """Writes one token a line; the file appears only once complete."""
    write_text_atomically(output, "".join(token + "\n" for token in vocab))


def build_vocab(input_files: Sequence[str], vocab_size: int, lower_case: bool, output: str,
                num_unused: int = 0) -> list[str]:
    """Reads `input_files`, learns a vocab and writes it to `output` (see `learn_vocab`)."""
    vocab = learn_vocab(read_lines(input_files), vocab_size, lower_case, num_unused)
    write_vocab(vocab, output)
    return vocab
