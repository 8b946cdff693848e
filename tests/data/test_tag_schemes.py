"""Tagging schemes: transition rules, and the one implementation of the entity chunk rules against seqeval."""

import numpy as np
import pytest
import tensorflow as tf
from seqeval.metrics.sequence_labeling import get_entities

from bert_tf.data import tag_schemes

BIO_TAGS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
# Every prefix of BIO, IOB1 and BIOES over two types: random sequences are mostly invalid in every scheme.
ANY_TAGS = ["O"] + [f"{prefix}-{kind}" for prefix in "BIES" for kind in ("LOC", "PER")]


def random_tags(rng, count):
    return [[ANY_TAGS[i] for i in rng.integers(0, len(ANY_TAGS), n)] for n in rng.integers(1, 13, count)]


def test_transition_rules():
    allowed = tag_schemes.transition_allowed
    assert not allowed("O", "I-PER", "BIO")
    assert not allowed("B-PER", "I-LOC", "BIO")
    assert not allowed(None, "I-PER", "BIO")
    assert allowed("B-PER", "I-PER", "BIO") and allowed("I-PER", "B-PER", "BIO")
    assert allowed("I-PER", None, "BIO") and allowed("B-LOC", "O", "BIO")
    # IOB1: I- starts entities; B- only right after an entity of the same type.
    assert allowed(None, "I-PER", "IOB1") and allowed("O", "I-PER", "IOB1")
    assert allowed("I-LOC", "I-PER", "IOB1") and allowed("I-PER", "B-PER", "IOB1")
    assert not allowed("O", "B-PER", "IOB1") and not allowed("I-LOC", "B-PER", "IOB1")
    # BIOES: entities close with E- or S-.
    assert allowed("B-PER", "E-PER", "BIOES") and allowed("I-PER", "I-PER", "BIOES")
    assert not allowed("B-PER", "O", "BIOES") and not allowed("B-PER", "E-LOC", "BIOES")
    assert not allowed("I-PER", None, "BIOES") and not allowed(None, "E-PER", "BIOES")
    assert not allowed("E-PER", "I-PER", "BIOES") and allowed("S-PER", "B-LOC", "BIOES")
    assert not allowed("O", "E-PER", "BIOES") and allowed("E-PER", None, "BIOES")
    transitions, start, end = tag_schemes.allowed_transitions(BIO_TAGS, "BIO")
    # Into I-X only from B-X and I-X; everything else anywhere.
    assert transitions.sum() == 25 - 2 * 3 and start.tolist() == [True, True, True, False, False]
    assert end.all()
    with pytest.raises(ValueError, match="'E-PER' is neither O nor B-, I-"):
        tag_schemes.split_tag("E-PER", "BIO")
    with pytest.raises(ValueError, match="unknown tagging scheme 'IOB2'"):
        tag_schemes.split_tag("O", "IOB2")


def test_entities_agree_with_seqeval_on_random_tags():
    sentences = random_tags(np.random.default_rng(0), 5000)
    found = tag_schemes.entities(sentences)
    assert len(found) == len(sentences)
    for sentence, entities in zip(sentences, found):
        assert entities == get_entities(sentence), sentence


def test_entity_spans_in_a_graph_with_empty_rows():
    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.string, row_splits_dtype=tf.int32)])
    def spans(tags):
        return tag_schemes.entity_spans(tags)

    tags = tf.ragged.constant([["I-PER", "I-PER"], [], ["O"], ["B-LOC", "E-LOC", "S-PER"]], row_splits_dtype=tf.int32)
    found = spans(tags)
    assert found.types.to_list() == [[b"PER"], [], [], [b"LOC", b"PER"]]
    assert found.first.to_list() == [[0], [], [], [0, 2]] and found.last.to_list() == [[1], [], [], [1, 2]]
    assert tag_schemes.entities([]) == [] and tag_schemes.entities([[], ["O"]]) == [[], []]


@pytest.mark.parametrize("scheme", tag_schemes.SCHEMES)
def test_entity_tags_are_valid_and_read_back(scheme):
    rng = np.random.default_rng(1)
    for _ in range(300):
        # Random non-overlapping entities of 1 to 3 words, adjacent ones included.
        length, found, i = int(rng.integers(1, 10)), [], 0
        while i < length:
            size = int(rng.integers(0, 4))
            if size and i + size <= length:
                found.append((str(rng.choice(["LOC", "PER"])), i, i + size - 1))
            i += max(size, 1)
        tags = tag_schemes.entity_tags(length, found, scheme)
        sequence = [None, *tags, None]
        assert all(tag_schemes.transition_allowed(a, b, scheme) for a, b in zip(sequence, sequence[1:])), tags
        assert tag_schemes.entities([tags]) == [found], (found, tags)
    # IOB1 writes B- only where an entity directly follows one of its type.
    assert tag_schemes.entity_tags(5, [("LOC", 1, 1), ("LOC", 2, 3), ("PER", 4, 4)], "IOB1") == [
        "O", "I-LOC", "B-LOC", "I-LOC", "I-PER"]
