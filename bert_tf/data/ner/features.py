"""Word-piece features of tagged sentences: labels on each word's first piece.

Dimension keys used in shapes:
  N: number of sentences    S: max_seq_length
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.data.ner.conll import TaggedSentence
from bert_tf.data.tokenization import BertTokenizer

IGNORED_LABEL = -1


def convert_to_features(sentences: Sequence[TaggedSentence], tokenizer: BertTokenizer,
                        tags: Sequence[str], max_seq_length: int) -> dict[str, np.ndarray]:
    """Word pieces of tagged sentences, labelled on each word's first piece.

    Each sentence becomes `[CLS] pieces [SEP]`, its pieces cut to
    max_seq_length - 2. A word whose first piece is cut off, or that has no
    piece at all (e.g. only characters the tokenizer deletes), gets no
    position; it is predicted "O" (see `first_pieces`).

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


def first_pieces(features: dict[str, np.ndarray]) -> tf.RaggedTensor:
    """Where each word's first piece sits: what `prediction.word_tags` reads.

    Args:
      features: the output of `convert_to_features` (`word_ids`, `num_words`).

    Returns:
      int64 RaggedTensor [N, (words)]: the position in its row of each word's
      first piece, -1 for a word with none (cut off, or without pieces).
    """
    word_ids, num_words = features["word_ids"], features["num_words"].astype(np.int64)
    rows, positions = np.nonzero(word_ids >= 0)
    flat = np.full([num_words.sum()], -1, np.int64)
    flat[(np.cumsum(num_words) - num_words)[rows] + word_ids[rows, positions]] = positions
    return tf.RaggedTensor.from_row_lengths(flat, num_words)
