"""The TFRecord format of pretraining examples, shared with google-research/bert.

Masked records carry the original feature names and dtypes, so files written
here load in google-research/bert's `run_pretraining.py` and its files load
here. Unmasked records (for dynamic masking) keep the same names, drop the
masked-LM features and add `word_starts` for whole-word masking.
`RECORD_TO_MODEL` is the one place where record names become model input names.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import tensorflow as tf

RECORD_TO_MODEL = {
    "input_ids": "input_word_ids",
    "input_mask": "input_mask",
    "segment_ids": "input_type_ids",
    "masked_lm_positions": "masked_lm_positions",
    "masked_lm_ids": "masked_lm_ids",
    "masked_lm_weights": "masked_lm_weights",
    "next_sentence_labels": "next_sentence_labels",
    "word_starts": "word_starts",
}
MODEL_TO_RECORD = {model: record for record, model in RECORD_TO_MODEL.items()}


def masked_feature_spec(max_seq_length: int,
                        max_predictions_per_seq: int) -> dict[str, tf.io.FixedLenFeature]:
    """The original spec: int64 [S] inputs, int64/float [P] targets, int64 [1] label."""
    return {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def unmasked_feature_spec(max_seq_length: int) -> dict[str, tf.io.FixedLenFeature]:
    """Packed pairs before masking: int64 [S] inputs and word starts, int64 [1] label."""
    return {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "word_starts": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def serialize_batch(batch: Mapping[str, np.ndarray]) -> list[bytes]:
    """Serializes a batch keyed by model names into tf.train.Example records.

    Args:
      batch: arrays of shape [B, ...] keyed by model input names (a subset of
        `MODEL_TO_RECORD`); `next_sentence_labels` of shape [B].

    Returns:
      B serialized examples, byte-for-byte reproducible (sorted feature map).
    """
    columns = {}
    for name, values in batch.items():
        values = np.asarray(values)
        columns[MODEL_TO_RECORD[name]] = values.reshape(len(values), -1)
    records = []
    for row in range(len(next(iter(columns.values())))):
        features = {}
        for name, values in columns.items():
            if values.dtype.kind == "f":
                features[name] = tf.train.Feature(
                    float_list=tf.train.FloatList(value=values[row].tolist()))
            else:
                features[name] = tf.train.Feature(
                    int64_list=tf.train.Int64List(value=values[row].astype(np.int64).tolist()))
        example = tf.train.Example(features=tf.train.Features(feature=features))
        records.append(example.SerializeToString(deterministic=True))
    return records


def parse_batch(records: tf.Tensor, spec: Mapping[str, tf.io.FixedLenFeature]) -> dict[str, tf.Tensor]:
    """Parses a batch of records and renames them to model inputs.

    Args:
      records: tf.string Tensor of shape [B].
      spec: `masked_feature_spec(...)` or `unmasked_feature_spec(...)`.

    Returns:
      Model-named int32 Tensors ([B, S], [B, P]; `word_starts` bool [B, S];
      `next_sentence_labels` [B]) and float32 `masked_lm_weights` [B, P].
    """
    features = tf.io.parse_example(records, dict(spec))
    inputs = {}
    for name, value in features.items():
        model_name = RECORD_TO_MODEL[name]
        if name == "next_sentence_labels":
            value = value[:, 0]
        if name == "word_starts":
            inputs[model_name] = tf.cast(value, tf.bool)
        elif value.dtype == tf.int64:
            inputs[model_name] = tf.cast(value, tf.int32)
        else:
            inputs[model_name] = value
    return inputs
