"""Packing: [CLS] A [SEP] B [SEP], segment ids, mask, padding, round-robin trimming."""

import keras
import numpy as np
import tensorflow as tf
from hypothesis import given, settings, strategies as st

from bert_tf.data.packing import BertPacker, pack_segments, trim_padding

CLS, SEP, PAD = 101, 102, 0


def _pack(a, b, max_seq_length):
    packed = pack_segments([tf.ragged.constant(a, tf.int32), tf.ragged.constant(b, tf.int32)],
                           max_seq_length=max_seq_length, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    return {name: value.numpy() for name, value in packed.items()}


def test_pair_is_packed_with_segment_ids_mask_and_padding():
    packed = _pack([[5, 6, 7]], [[8, 9]], 10)
    np.testing.assert_array_equal(packed["input_word_ids"], [[CLS, 5, 6, 7, SEP, 8, 9, SEP, PAD, PAD]])
    np.testing.assert_array_equal(packed["input_type_ids"], [[0, 0, 0, 0, 0, 1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(packed["input_mask"], [[1, 1, 1, 1, 1, 1, 1, 1, 0, 0]])
    assert all(v.dtype == np.int32 for v in packed.values())


def test_round_robin_trimming_takes_from_the_longer_segment():
    # Budget 8 - 3 = 5 tokens: B is short, so A keeps 3; two long ones share 3/2.
    packed = _pack([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]], [[7, 8], [7, 8, 9, 10, 11, 12]], 8)
    np.testing.assert_array_equal(packed["input_word_ids"],
                                  [[CLS, 1, 2, 3, SEP, 7, 8, SEP], [CLS, 1, 2, 3, SEP, 7, 8, SEP]])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 999), max_size=40), st.lists(st.integers(1, 999), max_size=40),
       st.integers(5, 32))
def test_trimmed_lengths_are_round_robin(a, b, max_seq_length):
    packed = _pack([a], [b], max_seq_length)
    budget = max_seq_length - 3
    kept_a = int(np.sum((packed["input_type_ids"][0] == 0) & (packed["input_mask"][0] == 1))) - 2
    kept_b = int(np.sum(packed["input_type_ids"][0] == 1)) - 1
    # Each segment keeps min(its length, its round-robin share) and leftovers go to the other.
    expected_a = min(len(a), max(budget - len(b), (budget + 1) // 2))
    assert kept_a == expected_a
    assert kept_b == min(len(b), budget - expected_a)
    assert packed["input_word_ids"][0, 1:1 + kept_a].tolist() == a[:kept_a]


def test_unbatched_map_equals_batched():
    a = tf.ragged.constant([[5, 6, 7, 8, 9], [5]], tf.int32)
    b = tf.ragged.constant([[10], [11, 12, 13, 14, 15, 16]], tf.int32)
    batched = pack_segments([a, b], max_seq_length=7, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    ds = tf.data.Dataset.from_tensor_slices((a, b)).map(
        lambda x, y: pack_segments([x, y], max_seq_length=7, cls_id=CLS, sep_id=SEP, pad_id=PAD))
    rows = list(ds.as_numpy_iterator())
    for name, value in batched.items():
        np.testing.assert_array_equal(np.stack([row[name] for row in rows]), value.numpy())


def test_packer_layer_round_trips_through_config_and_matches_function():
    layer = BertPacker(max_seq_length=9, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    clone = BertPacker.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    a = tf.ragged.constant([[5, 6, 7, 8, 9, 10, 11]], tf.int32)
    b = tf.ragged.constant([[12, 13]], tf.int32)
    expected = pack_segments([a, b], max_seq_length=9, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    for name, value in clone([a, b]).items():
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(value), expected[name].numpy())
    single = layer(a)
    np.testing.assert_array_equal(single["input_word_ids"].numpy(),
                                  [[CLS, 5, 6, 7, 8, 9, 10, 11, SEP]])


def test_trim_padding_cuts_to_the_longest_row():
    batch = {"input_mask": tf.constant([[1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]] * 2),
             "input_word_ids": tf.ones([2, 12], tf.int32), "label_ids": tf.constant([0, 1])}
    out = trim_padding(batch, ("input_mask", "input_word_ids"), multiple=4)
    assert out["input_mask"].shape == (2, 4) and out["input_word_ids"].shape == (2, 4)
    assert out["label_ids"].shape == (2,)
