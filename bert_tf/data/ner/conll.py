"""CoNLL-style tagging files: reading (with errors naming the file and line), writing, the tag list.

  - `read_conll` reads CoNLL-style files (token first, tag last on each line,
    a blank line between sentences) in the BIO, IOB1 or BIOES scheme, with
    errors naming the file and line; `learn_tags` makes the tag list.
  - `write_conll` writes sentences back as `token tag` lines.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Iterator, Sequence

from absl import logging

from bert_tf.data.tag_schemes import PREFIXES, split_tag, transition_allowed
from bert_tf.io import BadRow, write_text_atomically

# Columns are split on ASCII blanks only, so that a token may be any other
# character, e.g. a full-width space in a character-level Chinese file.
_COLUMN_SEPARATOR = re.compile(r"[ \t]+")


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    """A sentence of words with one tag each.

    Attributes:
      words: the tokens (first column of a CoNLL file).
      tags: the tags (last column), parallel to `words`.
      line: line number of the first word in its file; 0 when not read from
        a file.
    """

    words: tuple[str, ...]
    tags: tuple[str, ...]
    line: int = 0


@dataclasses.dataclass(frozen=True)
class ConllFile:
    """The sentences of a CoNLL file.

    Attributes:
      path: the file.
      sentences: the sentences read.
      skipped: with `skip_bad_rows`, one "FILE:LINE: reason" message per
        sentence left out.
    """

    path: str
    sentences: list[TaggedSentence]
    skipped: list[str]


def _blocks(path: str) -> Iterator[list[tuple[int, list[str] | None, str]]]:
    # Yields the lines of each sentence as (line number, columns, problem);
    # columns is None for a line that is not UTF-8. Lines are decoded one by
    # one so that a bad byte is reported on its own line.
    block = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                block.append((number, None, f"not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"))
                continue
            if number == 1:
                line = line.removeprefix("\ufeff")  # byte order mark of editors that write one
            columns = _COLUMN_SEPARATOR.split(line.strip(" \t\r\n"))
            if columns == [""] or columns[0] == "-DOCSTART-":
                if block:
                    yield block
                block = []
                continue
            block.append((number, columns, ""))
    if block:
        yield block


def _parse_sentence(block: list[tuple[int, list[str] | None, str]], scheme: str,
                    tag_set: frozenset[str] | None) -> TaggedSentence:
    words, tags = [], []
    for number, columns, problem in block:
        if columns is None:
            raise BadRow(line=number, reason=problem)
        if len(columns) < 2:
            raise BadRow(line=number, reason=f"one column {columns[0]!r}; expected a token and a tag")
        word, tag = columns[0], columns[-1]
        if tag_set is not None and tag not in tag_set:
            raise BadRow(line=number, reason=f"tag {tag!r} is not in the tag set ({' '.join(sorted(tag_set))})")
        try:
            split_tag(tag, scheme)
        except ValueError as e:
            raise BadRow(line=number, reason=str(e)) from None
        words.append(word)
        tags.append(tag)
    previous = None
    for (number, _, _), tag in zip(block, tags):
        if not transition_allowed(previous, tag, scheme):
            after = f"after {previous}" if previous else "at the start of a sentence"
            raise BadRow(line=number, reason=f"tag {tag} {after} is not valid in {scheme}")
        previous = tag
    if not transition_allowed(previous, None, scheme):
        raise BadRow(line=block[-1][0], reason=f"tag {previous} at the end of a sentence is not valid in {scheme}")
    return TaggedSentence(tuple(words), tuple(tags), block[0][0])


def read_conll(path: str | os.PathLike, *, scheme: str = "BIO", tags: Sequence[str] | None = None,
               skip_bad_rows: bool = False) -> ConllFile:
    """Reads a CoNLL-style tagging file.

    One token per line: the token in the first column, its tag in the last
    (so the 4-column CoNLL-2003 layout and 2-column files both work); a blank
    line between sentences; `-DOCSTART-` lines are skipped.

    Args:
      path: the file.
      scheme: "BIO" (IOB2: entities start with B-), "IOB1" (entities start
        with I-, B- only right after an entity of the same type) or "BIOES".
        Sequences invalid in the scheme (e.g. BIO: I-PER after O or after
        B-LOC) are errors.
      tags: the tag set (of the training file, for dev and test files); a tag
        outside it is an error. None accepts any tag of the scheme's form.
      skip_bad_rows: leave out each sentence with an error and record its
        message in `skipped`, instead of raising.

    Returns:
      The sentences, and the messages of the skipped ones.

    Raises:
      ValueError: "FILE:LINE: reason" for a line that is not UTF-8, has one
        column, has a tag not in `tags` or not of the scheme's form, or makes
        an invalid sequence (without `skip_bad_rows`); also when the file
        holds no sentence.
    """
    split_tag("O", scheme)  # rejects an unknown scheme before reading
    path = os.fspath(path)
    tag_set = frozenset(tags) if tags is not None else None
    sentences, skipped = [], []
    for block in _blocks(path):
        try:
            sentences.append(_parse_sentence(block, scheme, tag_set))
        except BadRow as e:
            message = f"{path}:{e.line}: {e.reason}"
            if not skip_bad_rows:
                raise ValueError(message) from None
            skipped.append(message)
    if skipped:
        logging.warning("%s: skipped %d bad sentence(s), the first: %s", path, len(skipped), skipped[0])
    if not sentences:
        raise ValueError(f"{path}: no sentence" + (f" ({len(skipped)} skipped)" if skipped else ""))
    return ConllFile(path, sentences, skipped)


def learn_tags(sentences: Sequence[TaggedSentence], scheme: str = "BIO") -> list[str]:
    """The tag list of a training set: "O", then every tag of its entity types, sorted.

    Every prefix of the scheme is included for each entity type seen, so that
    a type seen only as B-X in training still has I-X for dev files and the
    CRF constraints.

    Args:
      sentences: the training sentences.
      scheme: one of "BIO", "IOB1", "BIOES".

    Returns:
      Tag names; a tag's index is its id.
    """
    types = {split_tag(tag, scheme)[1] for sentence in sentences for tag in sentence.tags} - {""}
    return ["O"] + sorted(f"{prefix}-{entity_type}" for entity_type in types for prefix in PREFIXES[scheme])


def write_conll(path: str | os.PathLike, sentences: Sequence[TaggedSentence]) -> None:
    """Writes sentences atomically as `token tag` lines, a blank line between sentences.

    Raises:
      ValueError: a word is empty or holds a space, tab or line break (it
        would not read back).
    """
    blocks = []
    for sentence in sentences:
        for word in sentence.words:
            if not word or re.search(r"[ \t\r\n]", word):
                raise ValueError(f"word {word!r} is empty or holds a space, tab or line break")
        blocks.append("".join(f"{word} {tag}\n" for word, tag in zip(sentence.words, sentence.tags)))
    write_text_atomically(path, "\n".join(blocks))
