"""The BIO, IOB1 and BIOES tagging schemes: which tag may follow which, and entities from tags.

  - `split_tag` checks a tag's form; `transition_allowed` says whether one tag
    may follow another; `allowed_transitions` makes the tables of valid moves
    of a tag list, which the CRF takes to decode only valid paths.
  - `entity_spans` reads the entities of a batch of tag sequences by
    conlleval's chunk rules, as graph ops: evaluation and the exported
    SavedModel both read entities through it. `entities` is it on Python lists.
  - `entity_tags` writes the tags of given entities in a scheme.

BIO is IOB2: every entity starts with B-. In IOB1 an entity starts with I-,
and B- only starts an entity that directly follows one of the same type.
BIOES (IOBES) marks single-token entities S- and last tokens E-.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import tensorflow as tf

SCHEMES = ("BIO", "IOB1", "BIOES")
# The prefixes of entity tags in each scheme.
PREFIXES = {"BIO": "BI", "IOB1": "BI", "BIOES": "BIES"}


def split_tag(tag: str, scheme: str) -> tuple[str, str]:
    """Splits a tag into its prefix and entity type.

    Args:
      tag: "O", or a prefix of `scheme` + "-" + a non-empty type, e.g. "B-PER".
      scheme: one of `SCHEMES`.

    Returns:
      ("O", "") for "O", else (prefix, type), e.g. ("B", "PER").

    Raises:
      ValueError: the scheme is unknown, or the tag has no such form.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown tagging scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    if tag == "O":
        return "O", ""
    prefix, dash, entity_type = tag.partition("-")
    if not dash or not entity_type or prefix not in PREFIXES[scheme]:
        prefixes = "-, ".join(PREFIXES[scheme])
        raise ValueError(f"tag {tag!r} is neither O nor {prefixes}- followed by a type ({scheme})")
    return prefix, entity_type


def transition_allowed(from_tag: str | None, to_tag: str | None, scheme: str) -> bool:
    """Whether `to_tag` may follow `from_tag` in `scheme`.

    Args:
      from_tag: the previous tag, or None at the start of a sequence.
      to_tag: the next tag, or None at the end of a sequence.
      scheme: one of `SCHEMES`.

    Returns:
      True if the move is valid.

    Raises:
      ValueError: a tag is not of the scheme's form (see `split_tag`).
    """
    prev, prev_type = split_tag(from_tag, scheme) if from_tag is not None else ("O", "")
    if to_tag is None:
        # BIOES entities close explicitly; BIO and IOB1 ones close anywhere.
        return scheme != "BIOES" or prev in "OES"
    next_, next_type = split_tag(to_tag, scheme)
    same_entity = prev != "O" and prev_type == next_type
    if scheme == "BIO":
        return next_ != "I" or same_entity
    if scheme == "IOB1":
        return next_ != "B" or same_entity
    # BIOES: inside an entity only I- or E- of its type may follow.
    if prev in "BI":
        return next_ in "IE" and same_entity
    return next_ in "OBS"


def allowed_transitions(tags: Sequence[str], scheme: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tables of the valid moves between the tags of a tag list: what `CRF(allowed=...)` takes.

    Args:
      tags: the T tag names, in id order.
      scheme: one of `SCHEMES`.

    Returns:
      (transitions, start, end): bool arrays of shape [T, T] (from, to), [T]
      (may start a sequence) and [T] (may end a sequence).

    Raises:
      ValueError: a tag is not of the scheme's form.
    """
    transitions = np.array([[transition_allowed(a, b, scheme) for b in tags] for a in tags], bool)
    start = np.array([transition_allowed(None, tag, scheme) for tag in tags], bool)
    end = np.array([transition_allowed(tag, None, scheme) for tag in tags], bool)
    return transitions.reshape(len(tags), len(tags)), start, end


class EntitySpans(NamedTuple):
    """Entities of a batch of sentences, B sentences with a ragged number of entities each.

    Attributes:
      types: tf.string RaggedTensor [B, (entities)], the entity types.
      first: int64 RaggedTensor [B, (entities)], the index of each entity's
        first word in its sentence.
      last: int64 RaggedTensor [B, (entities)], the index of its last word.
    """

    types: tf.RaggedTensor
    first: tf.RaggedTensor
    last: tf.RaggedTensor


def _is_in(prefixes: tf.Tensor, names: str) -> tf.Tensor:
    return tf.reduce_any(tf.stack([tf.equal(prefixes, n) for n in names]), axis=0)


def entity_spans(tags: tf.RaggedTensor) -> EntitySpans:
    """The entities of tag sequences by conlleval's chunk rules, as seqeval's default mode reads them.

    Graph ops, so that a SavedModel serves the entities evaluation scores.
    The rules cover BIO, IOB1 and BIOES at once and read any sequence, valid
    in a scheme or not: an entity ends after E- or S-, before B-, S- or O,
    and where the type changes; it starts at B- or S-, at I- or E- after O,
    E- or S-, and where the type changes (so an I-X after O starts one).

    Args:
      tags: tf.string RaggedTensor [B, (words)], each "O" or PREFIX-TYPE
        with PREFIX one of B, I, E, S.

    Returns:
      The entities of each sentence, in order.
    """
    tags = tags.with_row_splits_dtype(tf.int64)
    flat, rows = tags.flat_values, tags.value_rowids()
    index = tf.range(tf.size(flat, out_type=tf.int64))
    row_starts = tf.gather(tags.row_starts(), rows)
    first = tf.equal(index, row_starts)
    last = tf.equal(index, tf.gather(tags.row_limits(), rows) - 1)
    split = tf.strings.split(flat, "-", maxsplit=1).to_tensor(default_value="", shape=[None, 2])
    prefix, kind = split[:, 0], split[:, 1]
    # Each word's neighbours in its sentence; outside the sentence is O.
    previous = tf.where(first, "O", tf.roll(prefix, 1, 0))
    previous_kind = tf.where(first, "", tf.roll(kind, 1, 0))
    following = tf.where(last, "O", tf.roll(prefix, -1, 0))
    following_kind = tf.where(last, "", tf.roll(kind, -1, 0))
    inside = tf.not_equal(prefix, "O")
    starts = inside & (_is_in(prefix, "BS") | (_is_in(previous, "ESO") & _is_in(prefix, "EI"))
                       | tf.not_equal(previous_kind, kind))
    ends = inside & (_is_in(prefix, "ES") | (_is_in(prefix, "BI") & _is_in(following, "BSO"))
                     | tf.not_equal(kind, following_kind))
    # Entities never overlap and each start is followed by its end in the
    # same sentence, so the k-th start and the k-th end bound the k-th entity.
    start_words, end_words = tf.where(starts)[:, 0], tf.where(ends)[:, 0]
    entity_rows = tf.gather(rows, start_words)
    offset = tf.gather(row_starts, start_words)

    def per_sentence(values: tf.Tensor) -> tf.RaggedTensor:
        return tf.RaggedTensor.from_value_rowids(values, entity_rows, nrows=tags.nrows())

    return EntitySpans(per_sentence(tf.gather(kind, start_words)), per_sentence(start_words - offset),
                       per_sentence(end_words - offset))


def entities(sentences: Sequence[Sequence[str]]) -> list[list[tuple[str, int, int]]]:
    """`entity_spans` of Python tag lists, in one batch.

    Args:
      sentences: one list of tags per sentence.

    Returns:
      (type, first index, last index) of each entity of each sentence, in order.
    """
    flat = [tag for sentence in sentences for tag in sentence]
    tags = tf.RaggedTensor.from_row_lengths(tf.constant(flat, tf.string),
                                            tf.constant([len(s) for s in sentences], tf.int64))
    spans = entity_spans(tags)
    types = [t.decode() for t in spans.types.flat_values.numpy()]
    first, last = spans.first.flat_values.numpy().tolist(), spans.last.flat_values.numpy().tolist()
    splits = spans.types.row_splits.numpy().tolist()
    return [list(zip(types[a:b], first[a:b], last[a:b])) for a, b in zip(splits, splits[1:])]


def entity_tags(length: int, found: Sequence[tuple[str, int, int]], scheme: str = "BIO") -> list[str]:
    """The tags of a sentence holding given entities, in `scheme`: what `entities` reads back.

    Args:
      length: the number of words.
      found: (type, first index, last index) of each entity; they must not
        overlap.
      scheme: one of `SCHEMES`. An entity is B-X I-X ... in BIO; in IOB1
        I-X I-X ..., with B-X first only right after an entity of type X;
        in BIOES S-X, or B-X I-X ... E-X.

    Returns:
      `length` tags, "O" outside the entities.

    Raises:
      ValueError: the scheme is unknown.
    """
    split_tag("O", scheme)
    tags = ["O"] * length
    previous_last, previous_type = -2, ""
    for entity_type, first, last in sorted(found, key=lambda entity: entity[1]):
        tags[first:last + 1] = [f"I-{entity_type}"] * (last + 1 - first)
        if scheme != "IOB1" or (previous_last == first - 1 and previous_type == entity_type):
            tags[first] = f"B-{entity_type}"
        if scheme == "BIOES":
            tags[last] = f"S-{entity_type}" if first == last else f"E-{entity_type}"
        previous_last, previous_type = last, entity_type
    return tags
