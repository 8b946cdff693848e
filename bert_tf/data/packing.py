"""Packing of token segments into BERT's fixed-length model inputs.

`[CLS] A [SEP] B [SEP]`, segment ids, input mask and padding to
`max_seq_length`, with round-robin truncation. The one implementation used by
pretraining, fine-tuning and serving, so the three never disagree.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import keras
import tensorflow as tf
import tensorflow_text as tf_text


def trim_padding(batch: dict, seq_keys: tuple[str, ...], multiple: int = 8) -> dict:
    """Cuts `[B, S]` features to the batch's longest row (rounded up to `multiple`).

    Dynamic padding: a batch of short inputs does not pay for max_seq_length.
    Used by fine-tuning and by the exported text signatures; outputs at the kept
    positions are unchanged, since padded keys get zero attention weight.
    """
    seq_length = tf.shape(batch["input_mask"])[1]
    longest = tf.reduce_max(tf.reduce_sum(tf.cast(batch["input_mask"], tf.int32), axis=1))
    length = tf.minimum(seq_length, (longest + multiple - 1) // multiple * multiple)
    return {k: (v[:, :length] if k in seq_keys else v) for k, v in batch.items()}


def pack_segments(segments: Sequence[tf.RaggedTensor | tf.Tensor], *, max_seq_length: int,
                  cls_id: int, sep_id: int, pad_id: int) -> dict[str, tf.Tensor]:
    """Packs one or more batches of token segments into model inputs.

    Every segment is trimmed round-robin (one token at a time from each
    segment still longer than its share) so that the packed sequence, with one
    `[CLS]` and one `[SEP]` per segment, fits in `max_seq_length`.

    Args:
      segments: one or two (or more) int RaggedTensors of shape
        [batch_size, (tokens)], the segments A, B, ... of each example; or
        int Tensors of shape [tokens] for one unbatched example (as in a
        `tf.data` map before batching).
      max_seq_length: S, the length of every packed sequence.
      cls_id: id placed first in every sequence.
      sep_id: id placed after every segment.
      pad_id: id filling the positions after the last `[SEP]`.

    Returns:
      A dict of int32 Tensors of shape [batch_size, S] ([S] for unbatched
      segments): `input_word_ids`,
      `input_mask` (1 on real tokens, 0 on padding) and `input_type_ids`
      (0 for `[CLS]`, A and its `[SEP]`; 1 for B and its `[SEP]`; ...).
    """
    if not segments:
        raise ValueError("pack_segments needs at least one segment")
    budget = max_seq_length - 1 - len(segments)
    if budget < 0:
        raise ValueError(
            f"max_seq_length={max_seq_length} leaves no room for {len(segments)} segment(s) "
            "plus [CLS] and [SEP]")
    unbatched = not isinstance(segments[0], tf.RaggedTensor)
    if unbatched:
        segments = [tf.RaggedTensor.from_tensor(tf.expand_dims(s, 0)) for s in segments]
    trimmed = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(list(segments))
    word_ids, type_ids = tf_text.combine_segments(
        trimmed, start_of_sequence_id=cls_id, end_of_segment_id=sep_id)
    word_ids, input_mask = tf_text.pad_model_inputs(word_ids, max_seq_length, pad_value=pad_id)
    type_ids, _ = tf_text.pad_model_inputs(type_ids, max_seq_length, pad_value=0)
    packed = {
        "input_word_ids": tf.cast(word_ids, tf.int32),
        "input_mask": tf.cast(input_mask, tf.int32),
        "input_type_ids": tf.cast(type_ids, tf.int32),
    }
    if unbatched:
        packed = {name: value[0] for name, value in packed.items()}
    return packed


class SpecialTokenIds(Protocol):
    """Ids that packing needs; `BertTokenizer` has them."""

    cls_id: int
    sep_id: int
    pad_id: int


def pack_pairs(tokens_a: tf.RaggedTensor, tokens_b: tf.RaggedTensor,
               word_starts_a: tf.RaggedTensor | None, word_starts_b: tf.RaggedTensor | None, *,
               max_seq_length: int, special: SpecialTokenIds) -> dict[str, tf.Tensor]:
    """Packs sentence pairs and, when given, their word-start flags alike.

    Args:
      tokens_a, tokens_b: int RaggedTensors [B, (tokens)].
      word_starts_a, word_starts_b: bool RaggedTensors [B, (tokens)], or None
        when whole-word masking is not wanted.
      max_seq_length: S.
      special: the [CLS], [SEP] and [PAD] ids.

    Returns:
      `pack_segments`'s int32 [B, S] dict plus, with word starts given,
      `word_starts`, bool [B, S] (true on [CLS] and [SEP], which are words of
      their own, false on padding).
    """
    packed = pack_segments([tokens_a, tokens_b], max_seq_length=max_seq_length,
                           cls_id=special.cls_id, sep_id=special.sep_id, pad_id=special.pad_id)
    if word_starts_a is not None:
        starts = pack_segments([tf.cast(word_starts_a, tf.int32), tf.cast(word_starts_b, tf.int32)],
                               max_seq_length=max_seq_length, cls_id=1, sep_id=1, pad_id=0)
        packed["word_starts"] = tf.cast(starts["input_word_ids"], tf.bool)
    return packed


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPacker(keras.layers.Layer):
    """Keras layer around `pack_segments`, for models that pack in-graph.

    Call it on a list of one or two int RaggedTensors [batch_size, (tokens)]
    (e.g. the output of `BertTokenizer`), or on one; returns the dict of
    `pack_segments`.
    """

    def __init__(self, max_seq_length: int, cls_id: int, sep_id: int, pad_id: int,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_seq_length = max_seq_length
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.pad_id = pad_id

    def call(self, segments: Sequence[tf.RaggedTensor]) -> dict[str, tf.Tensor]:
        if isinstance(segments, (tf.RaggedTensor, tf.Tensor)):
            segments = [segments]
        return pack_segments(segments, max_seq_length=self.max_seq_length,
                             cls_id=self.cls_id, sep_id=self.sep_id, pad_id=self.pad_id)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(max_seq_length=self.max_seq_length, cls_id=self.cls_id,
                      sep_id=self.sep_id, pad_id=self.pad_id)
        return config
