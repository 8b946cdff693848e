"""WordPiece tokenization with the original BERT rules, in graph (tensorflow-text).

`BertTokenizer` gives the token ids of google-research/bert's
`tokenization.FullTokenizer` (the tests compare them on every line of the
embedded corpora and on every code point of planes 0, 1 and 14). The original
`BasicTokenizer`:
  - deletes NUL, U+FFFD and the control characters of categories Cc and Cf;
    tab, newline and CR count as whitespace, as do space and category Zs, and
    become a space. Private-use, unassigned and other category C characters
    stay;
  - writes a space on each side of every CJK ideograph;
  - splits on whitespace with `str.split()`, which also splits on U+2028 and
    U+2029 (and on controls such as \\x1c and \\x85, deleted by then);
  - when lower-casing, lower-cases each word with `str.lower()` (full case
    mapping, so "İ" becomes "i" plus a combining dot and a final "Σ" becomes
    "ς"), decomposes it (NFD) and drops the nonspacing marks (category Mn);
  - splits off every punctuation character: category P and all ASCII symbols.
`WordpieceTokenizer` then splits each word greedily, longest match first,
into vocab pieces; a word of more than 200 characters, or one that no pieces
spell, becomes [UNK].

This module does the same with graph ops only (RE2 regexes, ICU lower-casing
and normalisation), so it runs inside tf.data and exported SavedModels.
tensorflow-text's own `lower_case=True` path case-folds with NFKC instead (ss
for ß, ASCII for full-width letters, 1/2 for ½, ...), so the text is
normalised here and handed to tensorflow-text's regex splitter and WordPiece
op, which do no normalisation of their own. Two places need care:
  - Final sigma: Python's `str.lower` and ICU apply the same Unicode rule (Σ
    preceded by a cased letter, skipping case-ignorable characters, and not
    followed by one becomes ς). ICU lower-cases the whole text at once, but
    the spaces written around CJK ideographs and whitespace are neither cased
    nor case-ignorable, so the rule sees exactly the original's words.
  - ICU lower-cases for the process's default locale (from $LANG): under a
    Turkish or Azeri locale "I" becomes dotless "ı". "I" is lower-cased
    before ICU sees it; the other locale rules (Lithuanian dots) only add
    marks that are stripped anyway.
The character tables are the libraries' (RE2: Unicode 15; TensorFlow's ICU,
which lower-cases: 13; tensorflow-text's ICU, which decomposes: 16), the
original's those of the running Python's `unicodedata` (Unicode 14.0 in
Python 3.11). Characters assigned in one of these versions and not in another
can differ: the 838 new in Unicode 14 (Vithkuqi, U+2C2F, ...) are not
lower-cased here and the final sigma rule does not skip the new marks among
them; the Egyptian hieroglyph format controls U+13439-U+1343F (Unicode 15) are
deleted here as Cf and kept by the original under Python 3.11; U+1734, Mn
until Unicode 13 and Mc since, still counts as case-ignorable. The tests
leave out these few thousand code points. Surrogates cannot occur in UTF-8
text.

Hugging Face's `BertTokenizerFast` differs from the original, and so from this
module, in three places: it deletes private-use characters (category Co),
lower-cases Σ to σ everywhere, and makes words over 100 characters [UNK].
"""

from __future__ import annotations

import os
from typing import Any

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.io import read_utf8

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# WordpieceTokenizer's max_input_chars_per_word in the original.
MAX_INPUT_CHARS_PER_WORD = 200
# UTF-8 needs at most 4 bytes a character; the character limit is applied
# separately, so the byte limit of the WordPiece op must never bind first.
_MAX_BYTES_PER_CHAR = 4

# `_is_whitespace` (space, tab, newline, CR, Zs) plus U+2028 and U+2029, the
# only other characters `str.split()` splits on that survive the cleaning.
_WHITESPACE = r"[\t\n\r\p{Zs}\x{2028}\x{2029}]"
# NUL and the other controls are Cc; tab, newline and CR are spaces by the
# time this is applied.
_DELETED = r"[\p{Cc}\p{Cf}\x{FFFD}]"
# ASCII symbols such as $ + < = > ^ ` | ~ are not category P but the original
# `_is_punctuation` counts all of 33-47, 58-64, 91-96 and 123-126.
_PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
# Normalised text splits into words on spaces and around punctuation.
_WORD_SPLIT = f" +|{_PUNCTUATION}"
# The CJK Unified Ideographs blocks of the original `_is_chinese_char`; Hangul,
# Hiragana and Katakana are not among them and stay in words.
_CJK = (r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}"
        r"\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}"
        r"\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")


def load_vocab(vocab_file: str | os.PathLike) -> list[str]:
    """Reads a vocab file: one token a line, the line number is the id.

    Args:
      vocab_file: path of a UTF-8 text file.

    Returns:
      The tokens in id order.

    Raises:
      FileNotFoundError: the file does not exist.
      ValueError: the file is empty, not UTF-8, or repeats a token.
    """
    path = os.fspath(vocab_file)
    content = read_utf8(path, "vocab file")
    tokens = content.split("\n")
    if tokens[-1] == "":
        tokens.pop()
    if not tokens:
        raise ValueError(f"vocab file {path} is empty")
    first_line: dict[str, int] = {}
    for line, token in enumerate(tokens, start=1):
        if token in first_line:
            raise ValueError(
                f"vocab file {path} repeats {token!r} on lines {first_line[token]} and {line}")
        first_line[token] = line
    return tokens


def special_token_ids(vocab: list[str] | tuple[str, ...], vocab_file: str | os.PathLike) -> dict[str, int]:
    """Ids of `SPECIAL_TOKENS` in `vocab`.

    Raises:
      ValueError: a special token is missing; the message names `vocab_file`.
    """
    missing = [token for token in SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise ValueError(
            f"vocab file {os.fspath(vocab_file)} lacks the special tokens {', '.join(missing)}")
    return {token: vocab.index(token) for token in SPECIAL_TOKENS}


def normalize_text(text: tf.Tensor, lower_case: bool) -> tf.Tensor:
    """Cleans text the way the original BERT `BasicTokenizer` does, in graph.

    Deletes NUL, U+FFFD and control characters (Cc, Cf), maps whitespace to a
    space, writes a space on each side of every CJK ideograph and, when
    `lower_case`, lower-cases, decomposes (NFD) and drops nonspacing marks
    (Mn). Punctuation is split off later, in `split_words`.

    Args:
      text: tf.string Tensor of any shape.
      lower_case: lower-case and strip accents.

    Returns:
      tf.string Tensor of the same shape.
    """
    text = tf.strings.regex_replace(text, _WHITESPACE, " ")
    text = tf.strings.regex_replace(text, _DELETED, "")
    # Before lower-casing: the spaces bound the context of the final sigma
    # rule, and an ideograph that NFD maps to another stays a word of its own.
    text = tf.strings.regex_replace(text, _CJK, r" \0 ")
    if lower_case:
        # ICU would make "I" dotless under a Turkish or Azeri default locale.
        text = tf.strings.regex_replace(text, "I", "i")
        text = tf.strings.lower(text, encoding="utf-8")
        text = tf_text.normalize_utf8(text, "NFD")
        text = tf.strings.regex_replace(text, r"\p{Mn}", "")
    return text


def split_words(text: tf.Tensor) -> tf.RaggedTensor:
    """Splits normalised text on spaces and punctuation, keeping the punctuation.

    Args:
      text: tf.string Tensor of shape [batch], output of `normalize_text`
        (which has already set CJK ideographs apart).

    Returns:
      tf.string RaggedTensor of shape [batch, (words)].
    """
    return tf_text.regex_split(text, _WORD_SPLIT, _PUNCTUATION)


def split_words_with_offsets(text: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
    """Splits raw text into the words `BertTokenizer` would see, with their byte offsets.

    The split is that of `split_words` (whitespace, punctuation, every CJK
    character a word) applied before normalisation, so offsets point into the
    text as given; each word then normalises to the same word pieces as in the
    whole text, with one exception: an upper-case sigma that ends such a word
    but not the original's whitespace-separated word (as in "ΑΣ.Α", where "."
    is case-ignorable) is lower-cased to ς alone and to σ in the whole text.
    Used where predictions are mapped back onto the input (tags of words,
    answer spans).

    Args:
      text: tf.string Tensor of shape [batch].

    Returns:
      (words, begin, end): tf.string RaggedTensor [batch, (words)] and int64
      RaggedTensors of the same shape, each word's start and end byte offsets.
    """
    return tf_text.regex_split_with_offsets(
        text, f"{_WHITESPACE}+|{_PUNCTUATION}|{_CJK}", f"{_PUNCTUATION}|{_CJK}")


def _vocab_table(vocab_file: str, key_index: int, value_index: int,
                 key_dtype: tf.DType, value_dtype: tf.DType, default: Any) -> tf.lookup.StaticHashTable:
    # A TextFileInitializer created eagerly tracks the file as an asset, so a
    # SavedModel carries its own copy of the vocab.
    initializer = tf.lookup.TextFileInitializer(
        vocab_file, key_dtype, key_index, value_dtype, value_index)
    return tf.lookup.StaticHashTable(initializer, default_value=default)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTokenizer(keras.layers.Layer):
    """Maps strings to BERT word-piece ids with the original BasicTokenizer rules.

    No [CLS]/[SEP] are added (that is packing's job), and literal "[CLS]" text
    in the input is split like any other text, so user text cannot inject
    special tokens.

    Attributes:
      vocabulary: tuple of the tokens in id order.
      vocab_size: number of tokens.
      pad_id, unk_id, cls_id, sep_id, mask_id: ids of the special tokens,
        read from the vocab.
    """

    def __init__(self, vocab_file: str | os.PathLike, lower_case: bool = True,
                 max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD, **kwargs: Any):
        """Builds the tokenizer.

        Args:
          vocab_file: one token a line; must hold [PAD], [UNK], [CLS], [SEP]
            and [MASK].
          lower_case: strip accents and lower-case (uncased models).
          max_input_chars_per_word: longer words (counted in characters
            after normalisation) become [UNK]; the original's is 200.
          **kwargs: `keras.layers.Layer` arguments (name, ...).

        Raises:
          FileNotFoundError, ValueError: see `load_vocab`, `special_token_ids`.
        """
        super().__init__(**kwargs)
        # Inputs are tf.string, which Keras must not convert to backend tensors.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.vocab_file = os.fspath(vocab_file)
        self.lower_case = lower_case
        self.max_input_chars_per_word = max_input_chars_per_word
        self.vocabulary = tuple(load_vocab(self.vocab_file))
        ids = special_token_ids(self.vocabulary, self.vocab_file)
        self.vocab_size = len(self.vocabulary)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            ids[token] for token in SPECIAL_TOKENS)
        line, number = tf.lookup.TextFileIndex.WHOLE_LINE, tf.lookup.TextFileIndex.LINE_NUMBER
        self._token_to_id = _vocab_table(self.vocab_file, line, number, tf.string, tf.int64, -1)
        self._id_to_token = _vocab_table(self.vocab_file, number, line, tf.int64, tf.string, "[UNK]")
        self._wordpiece = tf_text.WordpieceTokenizer(
            self._token_to_id,
            max_bytes_per_word=_MAX_BYTES_PER_CHAR * max_input_chars_per_word,
            token_out_type=tf.int64, unknown_token="[UNK]")
        self.built = True

    def call(self, inputs: tf.Tensor) -> tf.RaggedTensor | tf.Tensor:
        """Tokenizes.

        Args:
          inputs: tf.string Tensor of shape [batch], or a scalar.

        Returns:
          int32 RaggedTensor of shape [batch, (tokens)]; for a scalar input an
          int32 Tensor of shape [tokens].
        """
        inputs = tf.convert_to_tensor(inputs, dtype=tf.string)
        if inputs.shape.rank not in (0, 1):
            raise ValueError(f"BertTokenizer takes a scalar or a [batch] of strings, got shape {inputs.shape}")
        words = split_words(normalize_text(tf.reshape(inputs, [-1]), self.lower_case))
        ids = tf.cast(self._wordpiece.tokenize(self._cap_word_length(words)).merge_dims(-2, -1), tf.int32)
        return ids[0] if inputs.shape.rank == 0 else ids

    def _cap_word_length(self, words: tf.RaggedTensor) -> tf.RaggedTensor:
        # A word over the limit is replaced by the literal "[UNK]", which the
        # WordPiece op finds whole in the vocab; no real word can be "[UNK]"
        # because brackets are split off as punctuation.
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > self.max_input_chars_per_word
        return words.with_flat_values(tf.where(too_long, "[UNK]", words.flat_values))

    def tokenize_with_offsets(self, inputs: tf.Tensor) -> tuple[tf.Tensor, tf.RaggedTensor, tf.RaggedTensor,
                                                                 tf.RaggedTensor]:
        """Tokenizes like `call`, and says where each piece lies in the normalised text.

        Args:
          inputs: tf.string Tensor of shape [batch].

        Returns:
          (normalized, ids, begin, end): `normalize_text(inputs)`, tf.string
          [batch]; the ids of `call`, int32 RaggedTensor [batch, (tokens)];
          each piece's start and end byte offsets in `normalized`, int64
          RaggedTensors of the same shape. An [UNK] piece spans its whole word.
        """
        normalized = normalize_text(inputs, self.lower_case)
        words, word_begin, word_end = tf_text.regex_split_with_offsets(normalized, _WORD_SPLIT, _PUNCTUATION)
        capped = self._cap_word_length(words)
        ids, begin, end = self._wordpiece.tokenize_with_offsets(capped)  # [batch, (words), (pieces)]
        # A capped word's one [UNK] piece has the offsets of the literal "[UNK]":
        # give it its word's. Offsets are per word until shifted by the word's start.
        pieces_word = begin.values.value_rowids()  # the word of every piece
        too_long = tf.gather(tf.not_equal(capped.flat_values, words.flat_values), pieces_word)
        length = tf.gather((word_end - word_begin).flat_values, pieces_word)
        shift = tf.gather(word_begin.flat_values, pieces_word)
        begin = begin.with_flat_values(shift + tf.where(too_long, tf.zeros_like(length), begin.flat_values))
        end = end.with_flat_values(shift + tf.where(too_long, length, end.flat_values))
        return (normalized, tf.cast(ids.merge_dims(-2, -1), tf.int32), begin.merge_dims(-2, -1),
                end.merge_dims(-2, -1))

    def detokenize(self, ids: tf.Tensor | tf.RaggedTensor) -> tf.Tensor:
        """Joins word pieces back into text for display (lower-cased, accents gone).

        Args:
          ids: int Tensor or RaggedTensor of shape [batch, (tokens)]; trailing
            [PAD] ids of a dense Tensor are dropped.

        Returns:
          tf.string Tensor of shape [batch]: tokens joined by spaces, "##"
          continuations glued to the piece before.
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids, padding=tf.cast(self.pad_id, ids.dtype))
        tokens = self._id_to_token.lookup(tf.cast(ids, tf.int64))
        text = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
        return tf.strings.regex_replace(text, " ##", "")

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(vocab_file=self.vocab_file, lower_case=self.lower_case,
                      max_input_chars_per_word=self.max_input_chars_per_word)
        return config
