"""Word pieces of SQuAD contexts with their character spans in the text as given, in graph.

One implementation for evaluation (`features.convert_examples_to_features`)
and for the exported model (`bert_tf.export`), so both cut the same answer
text out of the context:

- The context is split into words on the whitespace of the original
  run_squad.py (`reading.WORD_SEPARATORS`), and every word is tokenized on
  its own, as the original does; the pieces are the model's input.
- `BertTokenizer.tokenize_with_offsets` says where each piece lies in the
  word's normalised text (lower-cased, accents stripped, controls deleted,
  spaces around CJK ideographs). Each character of the word is normalised
  alone too, which tells how many normalised bytes it makes; a piece then
  starts at the character making its first byte and ends after the one
  making its last, plus any combining marks the normalisation deleted right
  after it (they belong to the letter before them).
- Where the characters normalised one by one do not add up to the word
  normalised whole, the word cannot be mapped character for character and
  each of its pieces spans the whole word, as the original takes the whole
  words when its alignment fails.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.data.squad.reading import WORD_SEPARATORS
from bert_tf.data.tokenization import BertTokenizer, normalize_text

_SEPARATORS_PATTERN = "[" + "".join(f"\\x{{{ord(c):04X}}}" for c in WORD_SEPARATORS) + "]+"


class ContextPieces(NamedTuple):
    """Word pieces of a batch of contexts.

    Attributes:
      ids: int32 RaggedTensor [batch, (pieces)], the pieces of every word in
        text order.
      begin: int64 RaggedTensor [batch, (pieces)], each piece's first
        character in its context.
      end: int64 RaggedTensor [batch, (pieces)], one past its last character.
      word_lengths: int64 RaggedTensor [batch, (words)], the number of pieces
        of each whitespace-separated word (0 for a word of deleted characters).
    """

    ids: tf.RaggedTensor
    begin: tf.RaggedTensor
    end: tf.RaggedTensor
    word_lengths: tf.RaggedTensor


def split_context_words(texts: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """Whitespace-separated words and their first character, as `reading.SquadContext` splits.

    Args:
      texts: tf.string Tensor [batch], UTF-8.

    Returns:
      (words, starts): tf.string RaggedTensor [batch, (words)] and int64
      RaggedTensor of the same shape, each word's first character offset.
    """
    words, byte_begin, _ = tf_text.regex_split_with_offsets(texts, _SEPARATORS_PATTERN)
    prefixes = tf.strings.substr(tf.gather(texts, words.value_rowids()),
                                 tf.zeros_like(byte_begin.flat_values), byte_begin.flat_values)
    starts = tf.cast(tf.strings.length(prefixes, unit="UTF8_CHAR"), tf.int64)
    return words, words.with_flat_values(starts)


def word_pieces(tokenizer: BertTokenizer, words: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor,
                                                                     tf.RaggedTensor]:
    """The tokenizer's pieces of each word, with their character spans in the word.

    Args:
      tokenizer: the model's tokenizer.
      words: tf.string Tensor [words].

    Returns:
      (ids, begin, end): int32 RaggedTensor [words, (pieces)], `tokenizer(words)`;
      int64 RaggedTensors of the same shape, each piece's first character
      and one past its last character in its word.
    """
    normalized, ids, byte_begin, byte_end = tokenizer.tokenize_with_offsets(words)
    chars = tf.strings.unicode_split(words, "UTF-8")  # [words, (chars)]
    char_bytes = tf.cast(tf.strings.length(normalize_text(chars.flat_values, tokenizer.lower_case)), tf.int64)
    # Flat over the batch: byte offsets count from the first word's normalised text.
    char_byte_end = tf.cumsum(char_bytes)
    bounds = tf.concat([[0], char_byte_end], 0)
    word_byte_start = tf.gather(bounds, chars.row_starts())
    aligned = tf.equal(tf.gather(bounds, chars.row_limits()) - word_byte_start,
                       tf.cast(tf.strings.length(normalized), tf.int64))

    piece_word = byte_begin.value_rowids()
    base = tf.gather(word_byte_start, piece_word)
    first_char = tf.searchsorted(char_byte_end, base + byte_begin.flat_values, side="right", out_type=tf.int64)
    last_char = tf.searchsorted(char_byte_end, base + byte_end.flat_values - 1, side="right", out_type=tf.int64)
    # Deleted combining marks right after the last character stay with it.
    attached = tf.equal(char_bytes, 0) & tf.strings.regex_full_match(chars.flat_values, r"\p{Mn}")
    unattached = tf.cumsum(tf.cast(~attached, tf.int64))
    following = tf.searchsorted(unattached, tf.gather(unattached, last_char) + 1, side="left", out_type=tf.int64)
    word_char_start = tf.gather(chars.row_starts(), piece_word)
    word_char_end = tf.gather(chars.row_limits(), piece_word)
    piece_aligned = tf.gather(aligned, piece_word)
    begin = tf.where(piece_aligned, first_char, word_char_start) - word_char_start
    end = tf.where(piece_aligned, tf.minimum(following, word_char_end), word_char_end) - word_char_start
    return ids, byte_begin.with_flat_values(begin), byte_begin.with_flat_values(end)


def context_pieces(tokenizer: BertTokenizer, texts: tf.Tensor) -> ContextPieces:
    """Tokenizes contexts word by word, with each piece's character span in its context.

    Args:
      tokenizer: the model's tokenizer.
      texts: tf.string Tensor [batch], UTF-8.

    Returns:
      The pieces; repeated words are tokenized once.
    """
    words, starts = split_context_words(texts)
    unique, index = tf.unique(words.flat_values)
    ids, begin, end = (tf.gather(values, index) for values in word_pieces(tokenizer, unique))
    shift = tf.gather(starts.flat_values, begin.value_rowids())
    begin, end = (offsets.with_flat_values(offsets.flat_values + shift) for offsets in (begin, end))
    return ContextPieces(*(words.with_flat_values(values).merge_dims(1, 2) for values in (ids, begin, end)),
                         word_lengths=words.with_flat_values(ids.row_lengths()))
