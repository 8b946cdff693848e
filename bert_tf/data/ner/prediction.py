"""From a tagger's logits to one tag per word: the path evaluation and the exported SavedModel share.

Graph ops, so that `bert_tf.export` serves exactly what run_ner.py predicts
and scores; the entities of the tags are `tag_schemes.entity_spans`.

Dimension keys used in shapes:
  B: batch size    S: sequence length    T: number of tags
"""

from __future__ import annotations

from typing import Callable, Sequence

import tensorflow as tf


def word_tags(logits: tf.Tensor, first_pieces: tf.RaggedTensor, tags: Sequence[str],
              decode: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]) -> tf.RaggedTensor:
    """Decodes the tags of the words' first pieces.

    Args:
      logits: float32 Tensor [B, S, T], the tagger's per-piece scores.
      first_pieces: int RaggedTensor [B, (words)], the position in its row of
        each word's first piece; -1 for a word without one (cut off, or
        without pieces), which is tagged "O".
      tags: the T tag names, in id order.
      decode: maps logits and a bool mask [B, S] of the positions to tag to
        int32 tag ids [B, S] (`BertTagger.decode`: the CRF's best valid path
        over the masked positions, or argmax).

    Returns:
      tf.string RaggedTensor [B, (words)], one tag per word.
    """
    first_pieces = first_pieces.with_row_splits_dtype(tf.int64)
    positions = tf.cast(first_pieces.flat_values, tf.int64)
    kept = positions >= 0
    index = tf.stack([first_pieces.value_rowids(), tf.where(kept, positions, 0)], axis=1)
    shape = tf.shape(logits, out_type=tf.int64)[:2]
    kept_index = tf.boolean_mask(index, kept)
    mask = tf.scatter_nd(kept_index, tf.ones_like(kept_index[:, 0], tf.int32), shape) > 0
    ids = tf.gather_nd(decode(logits, mask), index)
    return first_pieces.with_flat_values(tf.where(kept, tf.gather(tf.constant(list(tags)), ids), "O"))
