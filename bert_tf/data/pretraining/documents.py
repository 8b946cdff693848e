"""Pretraining corpora as documents of tokenized sentences (the input of the pair recipe).

Input: plain text, one sentence a line and a blank line between documents; or
one paragraph a line, split into sentences. Tokens carry a word-start flag so
that whole-word masking knows word boundaries: from `##` word pieces for
English, or from a Chinese word segmenter (jieba) or pre-segmented
(space-separated) text, since every CJK character is a token of its own and
`##` says nothing there.
"""

from __future__ import annotations

import dataclasses
import glob
from typing import Protocol, Sequence

import tensorflow as tf

from bert_tf.data import corpora

WORD_BOUNDARIES = ("wordpiece", "jieba", "whitespace")
INPUT_FORMATS = ("sentences", "paragraphs")


class Tokenizer(Protocol):
    """What the pretraining data needs from `bert_tf.data.tokenization.BertTokenizer`.

    Called on tf.string [batch], returns int RaggedTensor [batch, (tokens)].
    """

    vocabulary: Sequence[str]
    vocab_size: int
    pad_id: int
    cls_id: int
    sep_id: int
    mask_id: int

    def __call__(self, texts: tf.Tensor) -> tf.RaggedTensor: ...


@dataclasses.dataclass
class Sentence:
    """Token ids of one sentence and, for each, whether it starts a word."""

    ids: list[int]
    word_starts: list[bool]

    def __len__(self) -> int:
        return len(self.ids)


Document = list[Sentence]

@dataclasses.dataclass
class CorpusStats:
    """Counts from reading and filtering a corpus."""

    documents: int = 0
    sentences: int = 0
    tokens: int = 0
    dropped_short: int = 0
    dropped_long: int = 0


def expand_input_patterns(patterns: Sequence[str]) -> list[str]:
    """Sorted file names matching each glob pattern.

    Raises:
      FileNotFoundError: a pattern matches no file; the message names it.
    """
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise FileNotFoundError(f"{pattern}: no such input file")
        files.extend(matches)
    return files


def _line_of_byte(path: str, error: UnicodeDecodeError) -> int:
    """The line of `path` holding the undecodable byte (the decoder reads in chunks,
    so `error.start` is an offset into the failing chunk, not the file)."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 1


def read_documents(files: Sequence[str], input_format: str = "sentences") -> list[list[str]]:
    """Reads plain-text corpora into documents of sentences.

    Args:
      files: UTF-8 text files.
      input_format: "sentences": one sentence a line, a blank line between
        documents (the original format); "paragraphs": one paragraph (a
        document) a line, split into sentences at Chinese 。！？ and English
        . ! ? (`corpora.split_sentences`).

    Returns:
      The non-empty documents, each a list of stripped, non-empty sentences.

    Raises:
      ValueError: a file is not UTF-8 (the message names it).
    """
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input_format must be one of {INPUT_FORMATS}, got {input_format!r}")
    documents: list[list[str]] = []
    for path in files:
        current: list[str] = []
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if input_format == "paragraphs":
                        if line:
                            documents.append(corpora.split_sentences(line))
                    elif line:
                        current.append(line)
                    elif current:
                        documents.append(current)
                        current = []
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}:{_line_of_byte(path, e)}: not UTF-8 text ({e.reason})") from None
        if current:
            documents.append(current)
    return documents


def _segment_words(sentence: str, word_boundaries: str) -> list[str]:
    if word_boundaries == "jieba":
        import jieba  # Only needed for Chinese whole-word masking.

        return [w for w in jieba.lcut(sentence) if w.strip()]
    return sentence.split()


def tokenize_documents(documents: Sequence[Sequence[str]], tokenizer: Tokenizer, *,
                       word_boundaries: str = "wordpiece",
                       batch_size: int = 1024) -> list[Document]:
    """Tokenizes documents of sentences, marking where words start.

    Args:
      documents: lists of sentences.
      tokenizer: maps tf.string [batch] to int RaggedTensor [batch, (tokens)];
        its `vocabulary` tells continuation pieces (`##...`).
      word_boundaries: "wordpiece" (a word is a piece and its `##` pieces),
        "jieba" (words of the jieba segmenter) or "whitespace" (pre-segmented
        text: words separated by spaces). For the last two each word is
        tokenized on its own, so a word's pieces never straddle two words.
      batch_size: strings per tokenizer call.

    Returns:
      The documents as token ids; sentences without tokens are dropped, and so
      are documents left empty.
    """
    if word_boundaries not in WORD_BOUNDARIES:
        raise ValueError(f"word_boundaries must be one of {WORD_BOUNDARIES}, got {word_boundaries!r}")
    if word_boundaries == "wordpiece":
        texts = [s for doc in documents for s in doc]
        owner = list(range(len(texts)))
    else:
        texts, owner = [], []
        for index, sentence in enumerate(s for doc in documents for s in doc):
            words = _segment_words(sentence, word_boundaries)
            texts.extend(words)
            owner.extend([index] * len(words))
    pieces: list[list[int]] = []
    for start in range(0, len(texts), batch_size):
        pieces.extend(tokenizer(tf.constant(texts[start:start + batch_size])).to_list())

    is_continuation = [token.startswith("##") for token in tokenizer.vocabulary]
    sentences = [Sentence([], []) for _ in range(sum(len(doc) for doc in documents))]
    for index, ids in zip(owner, pieces):
        sentence = sentences[index]
        if word_boundaries == "wordpiece":
            sentence.word_starts.extend(not is_continuation[i] for i in ids)
        else:
            sentence.word_starts.extend(i == 0 for i in range(len(ids)))
        sentence.ids.extend(ids)

    result: list[Document] = []
    position = 0
    for doc in documents:
        tokenized = [s for s in sentences[position:position + len(doc)] if s.ids]
        position += len(doc)
        if tokenized:
            result.append(tokenized)
    return result


def filter_documents(documents: Sequence[Document], *, min_tokens: int = 0,
                     max_tokens: int = 0) -> tuple[list[Document], CorpusStats]:
    """Drops documents with fewer than `min_tokens` or more than `max_tokens` tokens.

    A limit of 0 is no limit. Returns the kept documents and the counts.
    """
    stats = CorpusStats()
    kept = []
    for doc in documents:
        n = sum(len(s) for s in doc)
        if min_tokens and n < min_tokens:
            stats.dropped_short += 1
        elif max_tokens and n > max_tokens:
            stats.dropped_long += 1
        else:
            kept.append(doc)
            stats.documents += 1
            stats.sentences += len(doc)
            stats.tokens += n
    return kept, stats
