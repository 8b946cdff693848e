"""SQuAD v1.1 / v2.0: reading, windowed features, answer decoding, prediction files.

The recipe of google-research/bert's run_squad.py, written anew:

- The context is split into words on whitespace; every word keeps its
  character span in the original text, so a decoded answer is an exact
  substring of the context (case, accents and spacing as written).
- Every word is tokenized into word pieces (all words of all contexts in a few
  batched `BertTokenizer` calls). A question becomes `[CLS] query [SEP]
  window [SEP]`; a context longer than the room left is split into windows
  `doc_stride` pieces apart, and a piece seen by several windows is scored
  only in the one where it has the most context on both sides
  (`is_max_context`).
- Training positions index the answer's first and last piece in the window,
  or `[CLS]` (0) when the answer is outside the window or the question has no
  answer (v2.0).
- Decoding takes the start/end logits of every window, keeps the n best
  valid spans, maps the chosen pieces back to characters of the original
  text, and for v2.0 predicts "" when the [CLS] null score beats the best span
  by more than `null_score_diff_threshold`.

Metrics live in `bert_tf.data.squad_metrics`.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import os
import unicodedata
from typing import Any, Iterable, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.data.tokenization import BertTokenizer
from bert_tf.io import write_text_atomically

# The original run_squad.py splits contexts on these only; other Unicode
# spaces stay inside a word (the tokenizer still splits on them).
_WORD_SEPARATORS = frozenset(" \t\r\n\u202f")
_TOKENIZE_BATCH_SIZE = 4096
FEATURE_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
POSITION_NAMES = ("start_positions", "end_positions")


@dataclasses.dataclass(frozen=True, eq=False)
class SquadContext:
    """A paragraph's text and its whitespace-separated words, shared by its questions.

    Attributes:
      text: the context exactly as in the file.
      word_starts: int64 array [words], character offset of each word.
      word_ends: int64 array [words], offset one past each word's last character.
    """

    text: str
    word_starts: np.ndarray
    word_ends: np.ndarray

    @classmethod
    def from_text(cls, text: str) -> "SquadContext":
        starts, ends = [], []
        in_word = False
        for offset, char in enumerate(text):
            if char in _WORD_SEPARATORS:
                if in_word:
                    ends.append(offset)
                in_word = False
            elif not in_word:
                starts.append(offset)
                in_word = True
        if in_word:
            ends.append(len(text))
        return cls(text, np.array(starts, np.int64), np.array(ends, np.int64))

    @property
    def words(self) -> list[str]:
        return [self.text[s:e] for s, e in zip(self.word_starts, self.word_ends)]

    def word_at(self, offset: int) -> int:
        """Index of the word holding character `offset` (or the word before a separator)."""
        return bisect.bisect_right(self.word_starts, offset) - 1


@dataclasses.dataclass(frozen=True, eq=False)
class SquadExample:
    """One question.

    Attributes:
      qas_id: the question id of the file.
      question: the question text.
      context: the paragraph (shared with the paragraph's other questions).
      answers: every gold answer text, in file order (empty for a v2.0
        question without answer); used for evaluation.
      is_impossible: v2.0 question without answer.
      start_word, end_word: the training answer's first and last word in
        `context`, or -1 (not training, or no answer).
      answer_text: the training answer's text ("" when none).
    """

    qas_id: str
    question: str
    context: SquadContext
    answers: tuple[str, ...]
    is_impossible: bool = False
    start_word: int = -1
    end_word: int = -1
    answer_text: str = ""


class _BadRow(Exception):
    """A malformed question; becomes a ValueError or a skip."""


def _field(record: Any, name: str, kind: type, what: str) -> Any:
    if not isinstance(record, dict) or name not in record:
        raise _BadRow(f"{what} lacks the field {name!r}")
    value = record[name]
    # bool is an int in Python; an answer_start of `true` is still malformed.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _BadRow(f"{what} field {name!r} is {type(value).__name__}, not {kind.__name__}")
    if kind is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escape such as "\ud800" in the JSON
            raise _BadRow(f"{what} field {name!r} is not valid Unicode") from None
    return value


def _load_json(input_file: str) -> Any:
    if not os.path.isfile(input_file):
        raise FileNotFoundError(f"SQuAD file {input_file} does not exist")
    with open(input_file, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{input_file}: not UTF-8 (bad byte at offset {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{input_file}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None


def _training_answer(answers: list[dict], context: SquadContext,
                     version_2_with_negative: bool) -> dict[str, Any]:
    if not answers:
        raise _BadRow("has no answer" + ("" if version_2_with_negative
                                         else " (a v2.0 question? pass version_2_with_negative)"))
    text, start = answers[0]["text"], answers[0]["answer_start"]
    if start < 0 or context.text[start:start + len(text)] != text:
        found = context.text[start:start + len(text)]
        raise _BadRow(f"answer {text!r} is not at answer_start {start} (the context has {found!r} there)")
    # Leading or trailing spaces of the answer text must not pull in the
    # neighbouring words.
    stripped = text.strip("".join(_WORD_SEPARATORS))
    if not stripped:
        raise _BadRow("answer text is blank")
    first = start + text.index(stripped)
    return {"start_word": context.word_at(first),
            "end_word": context.word_at(first + len(stripped) - 1), "answer_text": stripped}


def _read_question(qa: Any, context: SquadContext, is_training: bool,
                   version_2_with_negative: bool) -> SquadExample:
    question = _field(qa, "question", str, "question")
    answers = _field(qa, "answers", list, "question")
    for answer in answers:
        _field(answer, "text", str, "answer")
        _field(answer, "answer_start", int, "answer")
    is_impossible = False
    if "is_impossible" in qa:
        is_impossible = _field(qa, "is_impossible", bool, "question")
        if is_impossible and not version_2_with_negative:
            raise _BadRow("is_impossible in a v1.1 run (pass version_2_with_negative)")
        if is_impossible and answers:
            raise _BadRow("is_impossible but has answers")
    span = _training_answer(answers, context, version_2_with_negative) \
        if is_training and not is_impossible else {}
    return SquadExample(qas_id=qa["id"], question=question, context=context,
                        answers=tuple(a["text"] for a in answers), is_impossible=is_impossible,
                        start_word=span.get("start_word", -1), end_word=span.get("end_word", -1),
                        answer_text=span.get("answer_text", ""))


def read_squad_examples(input_file: str | os.PathLike, *, is_training: bool,
                        version_2_with_negative: bool = False,
                        skip_bad_rows: bool = False) -> tuple[list[SquadExample], int]:
    """Reads a SQuAD v1.1 or v2.0 JSON file (data -> paragraphs -> qas).

    For training, the first answer of each question gives its word span, and
    its text must be found at its `answer_start`; evaluation keeps all answer
    texts without checking offsets (only their fields).

    Args:
      input_file: path of the JSON file.
      is_training: locate (and check) the training answer.
      version_2_with_negative: questions may be `is_impossible` (v2.0).
      skip_bad_rows: skip malformed questions and count them instead of
        raising.

    Returns:
      (examples in file order, number of questions skipped).

    Raises:
      FileNotFoundError: no such file.
      ValueError: the file is not UTF-8 or not JSON, lacks data/paragraphs;
        or (without `skip_bad_rows`) a question is malformed: a missing or
        mistyped field, a repeated id, an answer not at its answer_start, an
        impossible question in a v1.1 run. The message names the file and
        the question id.
    """
    path = os.fspath(input_file)
    dataset = _load_json(path)
    articles = dataset.get("data") if isinstance(dataset, dict) else None
    if not isinstance(articles, list):
        raise ValueError(f"{path}: not a SQuAD file (no top-level 'data' list)")
    examples: list[SquadExample] = []
    seen: set[str] = set()
    skipped = 0

    def bad(where: str, message: str) -> None:
        nonlocal skipped
        if not skip_bad_rows:
            raise ValueError(f"{path}: {where}: {message}")
        skipped += 1

    for a, article in enumerate(articles):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise ValueError(f"{path}: article {a} has no 'paragraphs' list")
        for p, paragraph in enumerate(paragraphs):
            qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
            if not isinstance(qas, list):
                raise ValueError(f"{path}: article {a} paragraph {p} has no 'qas' list")
            try:
                context = SquadContext.from_text(_field(paragraph, "context", str, "paragraph"))
            except _BadRow as e:
                # Every question of the paragraph is lost with its context.
                for _ in qas or [None]:
                    bad(f"article {a} paragraph {p}", str(e))
                continue
            for q, qa in enumerate(qas):
                qid = qa.get("id") if isinstance(qa, dict) else None
                where = (f"question id {qid!r}" if isinstance(qid, str)
                         else f"article {a} paragraph {p} question {q}")
                try:
                    if not isinstance(qid, str):
                        raise _BadRow("lacks a string field 'id'")
                    if qid in seen:
                        raise _BadRow("repeats an earlier question id")
                    example = _read_question(qa, context, is_training, version_2_with_negative)
                except _BadRow as e:
                    bad(where, str(e))
                    continue
                seen.add(qid)
                examples.append(example)
    return examples, skipped


def gold_answers(examples: Iterable[SquadExample]) -> dict[str, list[str]]:
    """Question id -> gold answer texts, the input of `squad_metrics`."""
    return {example.qas_id: list(example.answers) for example in examples}


@dataclasses.dataclass(frozen=True, eq=False)
class DocPieces:
    """A context's word pieces.

    Attributes:
      pieces: the piece strings ("##" marks a continuation), in text order.
      ids: int32 array [pieces], their vocab ids.
      piece_to_word: int32 array [pieces], the context word of each piece.
      word_to_piece: int32 array [words + 1], index of each word's first piece
        (a word of deleted characters only has none: it equals the next
        word's); the last entry is the number of pieces.
      lower_case: the tokenizer's setting, to align pieces with characters.
    """

    pieces: tuple[str, ...]
    ids: np.ndarray
    piece_to_word: np.ndarray
    word_to_piece: np.ndarray
    lower_case: bool


@dataclasses.dataclass(frozen=True, eq=False)
class SquadFeature:
    """What decoding needs to know about one window (row of the feature arrays).

    Sequence position `doc_offset + i` holds the context piece `doc_start + i`,
    for 0 <= i < doc_length.

    Attributes:
      example: the question.
      window_index: index of this window among the question's windows.
      doc: the context's pieces.
      doc_offset: position of the window's first piece in the sequence
        (after [CLS], the query and [SEP]).
      doc_start: index of that piece in `doc.pieces`.
      doc_length: number of context pieces in the window.
      is_max_context: bool array [doc_length]: this window gives the piece
        more context than any other window does.
    """

    example: SquadExample
    window_index: int
    doc: DocPieces
    doc_offset: int
    doc_start: int
    doc_length: int
    is_max_context: np.ndarray


def tokenize_texts(tokenizer: BertTokenizer, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """Word-piece ids of many texts in a few batched tokenizer calls.

    Args:
      tokenizer: the model's tokenizer.
      texts: strings; repeats are tokenized once.

    Returns:
      text -> int32 array of its piece ids.
    """
    unique = list(dict.fromkeys(texts))
    result: dict[str, np.ndarray] = {}
    for begin in range(0, len(unique), _TOKENIZE_BATCH_SIZE):
        batch = unique[begin:begin + _TOKENIZE_BATCH_SIZE]
        ids = tokenizer(tf.constant(batch))
        splits = ids.row_splits.numpy()
        values = ids.flat_values.numpy().astype(np.int32)
        for text, start, end in zip(batch, splits[:-1], splits[1:]):
            result[text] = values[start:end]
    return result


def _doc_pieces(context: SquadContext, word_ids: dict[str, np.ndarray],
                tokenizer: BertTokenizer) -> DocPieces:
    per_word = [word_ids[word] for word in context.words]
    lengths = np.array([len(ids) for ids in per_word], np.int32)
    ids = np.concatenate(per_word).astype(np.int32) if per_word else np.zeros([0], np.int32)
    word_to_piece = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return DocPieces(pieces=tuple(tokenizer.vocabulary[i] for i in ids), ids=ids,
                     piece_to_word=np.repeat(np.arange(len(per_word), dtype=np.int32), lengths),
                     word_to_piece=word_to_piece, lower_case=tokenizer.lower_case)


def _improve_answer_span(doc_ids: np.ndarray, start: int, end: int,
                         answer_ids: np.ndarray) -> tuple[int, int]:
    # The answer's words may hold more pieces than the answer ("(1895)" for
    # "1895"): take the first sub-span whose pieces are the answer's own
    # (the original's double loop, keeping only spans of the answer's length).
    n = len(answer_ids)
    if n == 0:
        return start, end
    for new_start in range(start, end - n + 2):
        if np.array_equal(doc_ids[new_start:new_start + n], answer_ids):
            return new_start, new_start + n - 1
    return start, end


def _windows(num_pieces: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of each window; the last one ends at the last piece."""
    windows = []
    start = 0
    while True:
        length = min(num_pieces - start, max_tokens_for_doc)
        windows.append((start, length))
        if start + length >= num_pieces:
            return windows
        start += min(length, doc_stride)


def _max_context(windows: list[tuple[int, int]], num_pieces: int) -> np.ndarray:
    """bool [windows, pieces]: the window where each piece has the most context.

    A piece's score in a window is min(pieces left of it, pieces right of it);
    the first window with the best score wins. The original adds 0.01 times
    the window length so that a longer window wins a tie, but only the last
    window can be shorter and it never wins a tie anyway.
    """
    positions = np.arange(num_pieces)
    scores = np.full([len(windows), num_pieces], -1)
    for w, (start, length) in enumerate(windows):
        inside = (positions >= start) & (positions < start + length)
        left, right = positions - start, start + length - 1 - positions
        scores[w, inside] = np.minimum(left, right)[inside]
    best = np.argmax(scores, axis=0)
    return best[None, :] == np.arange(len(windows))[:, None]


def convert_examples_to_features(
        examples: Sequence[SquadExample], tokenizer: BertTokenizer, *, max_seq_length: int,
        doc_stride: int, max_query_length: int,
        is_training: bool) -> tuple[dict[str, np.ndarray], list[SquadFeature]]:
    """Builds the model inputs of every window of every question.

    Args:
      examples: from `read_squad_examples` (with `is_training` alike).
      tokenizer: the model's tokenizer.
      max_seq_length: S, the packed length.
      doc_stride: pieces between the starts of consecutive windows.
      max_query_length: the question is cut to this many pieces.
      is_training: add `start_positions` and `end_positions`.

    Returns:
      (arrays, features): arrays maps `input_word_ids`, `input_mask`,
      `input_type_ids` to int32 arrays [N, S] and, for training,
      `start_positions`, `end_positions` to int32 arrays [N] (0, the [CLS]
      position, for a window without the answer); features[i] describes row i.

    Raises:
      ValueError: `max_seq_length` leaves no room for the context; or, for
        training, an answerable example was read without its answer span.
    """
    if doc_stride < 1 or max_query_length < 1:
        raise ValueError(f"doc_stride ({doc_stride}) and max_query_length ({max_query_length}) must be positive")
    if max_seq_length - max_query_length - 3 < 1:
        raise ValueError(f"max_seq_length={max_seq_length} leaves no room for a context after a "
                         f"query of max_query_length={max_query_length}, [CLS] and two [SEP]")
    if is_training:
        unlocated = [e.qas_id for e in examples if e.start_word < 0 and not e.is_impossible]
        if unlocated:
            raise ValueError(f"question {unlocated[0]!r} has no training answer span: read the "
                             "examples with is_training=True")
    contexts = list({id(e.context): e.context for e in examples}.values())
    word_ids = tokenize_texts(tokenizer, [w for context in contexts for w in context.words])
    docs = {id(context): _doc_pieces(context, word_ids, tokenizer) for context in contexts}
    query_ids = tokenize_texts(tokenizer, [e.question for e in examples])
    answer_ids = tokenize_texts(tokenizer, [e.answer_text for e in examples if e.start_word >= 0]) \
        if is_training else {}

    rows: dict[str, list] = {name: [] for name in FEATURE_NAMES + POSITION_NAMES}
    features: list[SquadFeature] = []
    for example in examples:
        doc = docs[id(example.context)]
        query = query_ids[example.question][:max_query_length]
        doc_offset = len(query) + 2
        span = None
        if is_training and example.start_word >= 0:
            first = int(doc.word_to_piece[example.start_word])
            last = int(doc.word_to_piece[example.end_word + 1]) - 1
            if first <= last:  # else the answer's words yield no piece at all
                span = _improve_answer_span(doc.ids, first, last, answer_ids[example.answer_text])
        windows = _windows(len(doc.ids), max_seq_length - len(query) - 3, doc_stride)
        max_context = _max_context(windows, len(doc.ids))
        for w, (start, length) in enumerate(windows):
            ids = np.zeros([max_seq_length], np.int32) + tokenizer.pad_id
            sequence = np.concatenate([[tokenizer.cls_id], query, [tokenizer.sep_id],
                                       doc.ids[start:start + length], [tokenizer.sep_id]])
            ids[:len(sequence)] = sequence
            mask = np.zeros([max_seq_length], np.int32)
            mask[:len(sequence)] = 1
            types = np.zeros([max_seq_length], np.int32)
            types[doc_offset:len(sequence)] = 1
            rows["input_word_ids"].append(ids)
            rows["input_mask"].append(mask)
            rows["input_type_ids"].append(types)
            if span is not None and start <= span[0] and span[1] < start + length:
                rows["start_positions"].append(span[0] - start + doc_offset)
                rows["end_positions"].append(span[1] - start + doc_offset)
            else:
                rows["start_positions"].append(0)
                rows["end_positions"].append(0)
            features.append(SquadFeature(
                example=example, window_index=w, doc=doc, doc_offset=doc_offset, doc_start=start,
                doc_length=length, is_max_context=max_context[w, start:start + length]))
    arrays = {name: np.array(rows[name], np.int32).reshape([-1, max_seq_length]) for name in FEATURE_NAMES}
    if is_training:
        arrays.update({name: np.array(rows[name], np.int32) for name in POSITION_NAMES})
    return arrays, features


# `BertTokenizer`'s rules (tokenization.py), restated per character for the
# alignment of pieces with the original text.
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_whitespace(char: str) -> bool:
    return char in "\t\n\r" or unicodedata.category(char) in ("Zs", "Zl", "Zp")


def _is_own_word(char: str) -> bool:
    """Punctuation (all ASCII symbols included) and CJK characters stand alone."""
    code = ord(char)
    return (33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126
            or unicodedata.category(char).startswith("P")
            or any(low <= code <= high for low, high in _CJK_RANGES))


@functools.lru_cache(maxsize=None)
def _normalized_char(char: str, lower_case: bool) -> str:
    """What the tokenizer's normalisation makes of one non-space character.

    Σ becomes σ here; the tokenizer writes ς at the end of a word, so pieces
    are compared with `_fold_sigma`.
    """
    if unicodedata.category(char) in ("Cc", "Cf") or char == "\ufffd":
        return ""
    if lower_case:
        char = "".join(c for c in unicodedata.normalize("NFD", char.lower()) if unicodedata.category(c) != "Mn")
    return char


def _fold_sigma(text: str) -> str:
    return text.replace("ς", "σ")


def _basic_tokens(word: str, lower_case: bool) -> list[list[tuple[str, int]]]:
    """The tokenizer's words inside `word`, each a list of (normalised character, source offset)."""
    tokens: list[list[tuple[str, int]]] = [[]]
    for offset, char in enumerate(word):
        if _is_whitespace(char):
            tokens.append([])
            continue
        for normalized in _normalized_char(char, lower_case):
            if _is_own_word(normalized):
                tokens += [[(normalized, offset)], []]
            else:
                tokens[-1].append((normalized, offset))
    return [token for token in tokens if token]


@functools.lru_cache(maxsize=1 << 16)
def _piece_char_spans(word: str, pieces: tuple[str, ...],
                      lower_case: bool) -> tuple[tuple[int, int], ...] | None:
    """Character span in `word` of each of its pieces, or None when they cannot be aligned.

    This is the original's final-text alignment done piece by piece: `word`
    is split into the tokenizer's words with every character normalised on
    its own, remembering the source character of each normalised one. A
    tokenizer word is either spelled by its pieces (without "##") or is one
    [UNK] piece.
    """
    groups: list[list[str]] = []
    for piece in pieces:
        if piece.startswith("##") and groups:
            groups[-1].append(piece[2:])
        else:
            groups.append([piece])
    tokens = _basic_tokens(word, lower_case)
    if len(groups) != len(tokens):
        return None
    spans = []
    for group, token in zip(groups, tokens):
        spelled = "".join(char for char, _ in token)
        lengths = [len(spelled)] if group == ["[UNK]"] else [len(text) for text in group]
        if 0 in lengths or (group != ["[UNK]"] and _fold_sigma("".join(group)) != _fold_sigma(spelled)):
            return None
        position = 0
        for length in lengths:
            first, last = token[position][1], token[position + length - 1][1] + 1
            # A combining mark belongs to the letter before it.
            while last < len(word) and unicodedata.category(word[last]) == "Mn" \
                    and not _normalized_char(word[last], lower_case):
                last += 1
            spans.append((first, last))
            position += length
    return tuple(spans)


def span_text(feature: SquadFeature, start: int, end: int) -> str:
    """The original context text of sequence positions start..end (inclusive).

    Positions must lie in the window's context part. Where the pieces of the
    first or last word cannot be aligned with its characters (a tokenizer
    normalisation this module does not restate), the whole word is taken, as
    the original does.
    """
    doc, context = feature.doc, feature.example.context
    first = feature.doc_start + start - feature.doc_offset
    last = feature.doc_start + end - feature.doc_offset
    chars = []
    for piece, side in ((first, 0), (last, 1)):
        word = int(doc.piece_to_word[piece])
        word_start, word_end = int(context.word_starts[word]), int(context.word_ends[word])
        begin = int(doc.word_to_piece[word])
        spans = _piece_char_spans(context.text[word_start:word_end],
                                  doc.pieces[begin:doc.word_to_piece[word + 1]], doc.lower_case)
        if spans is None:
            chars.append(word_end if side else word_start)
        else:
            chars.append(word_start + spans[piece - begin][side])
    return context.text[chars[0]:chars[1]]


@dataclasses.dataclass(frozen=True)
class SquadPredictions:
    """Decoded answers.

    Attributes:
      predictions: question id -> answer text ("" for no answer).
      nbest: question id -> candidates, best first, each {"text",
        "probability", "start_logit", "end_logit"}.
      null_odds: question id -> null score minus the best span's score (v2.0
        only, else None); +inf when no span was valid.
    """

    predictions: dict[str, str]
    nbest: dict[str, list[dict[str, Any]]]
    null_odds: dict[str, float] | None


def _top_indices(logits: np.ndarray, n: int) -> np.ndarray:
    # Stable, so equal logits keep position order as in the original.
    return np.argsort(-logits, kind="stable")[:n]


def decode_predictions(features: Sequence[SquadFeature], start_logits: np.ndarray,
                       end_logits: np.ndarray, *, n_best_size: int = 20,
                       max_answer_length: int = 30, version_2_with_negative: bool = False,
                       null_score_diff_threshold: float = 0.0) -> SquadPredictions:
    """Chooses each question's answer from the logits of its windows.

    Args:
      features: from `convert_examples_to_features`, row i for logits row i.
      start_logits, end_logits: float arrays [N, S].
      n_best_size: candidates kept per window side and in the n-best list.
      max_answer_length: longest span, in pieces.
      version_2_with_negative: consider "no answer" (the [CLS] null score,
        the lowest over the question's windows).
      null_score_diff_threshold: predict "" when the null score exceeds the
        best span's score by more than this.

    Returns:
      The predictions, n-best lists and (v2.0) null odds, in question order.
    """
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    if start_logits.shape != end_logits.shape or len(start_logits) != len(features):
        raise ValueError(f"logits of shapes {start_logits.shape} and {end_logits.shape} "
                         f"for {len(features)} features")
    by_example: dict[str, list[int]] = {}
    for row, feature in enumerate(features):
        by_example.setdefault(feature.example.qas_id, []).append(row)
    predictions, nbest_all, null_odds = {}, {}, {}
    for qid, rows in by_example.items():
        # (score, row, start, end, start_logit, end_logit); start 0 is the null answer.
        candidates = []
        null = None
        for row in rows:
            feature, s, e = features[row], start_logits[row], end_logits[row]
            if version_2_with_negative and (null is None or s[0] + e[0] < null[0]):
                null = (float(s[0] + e[0]), row, 0, 0, float(s[0]), float(e[0]))
            starts = _top_indices(s, n_best_size)[:, None]
            ends = _top_indices(e, n_best_size)[None, :]
            doc_end = feature.doc_offset + feature.doc_length
            in_doc = (starts >= feature.doc_offset) & (starts < doc_end)
            max_context = np.zeros([len(s)], bool)
            max_context[feature.doc_offset:doc_end] = feature.is_max_context
            valid = (in_doc & max_context[starts] & (ends >= starts) & (ends < doc_end)
                     & (ends - starts < max_answer_length))
            for i, j in zip(*np.nonzero(valid)):
                start, end = int(starts[i, 0]), int(ends[0, j])
                candidates.append((float(s[start] + e[end]), row, start, end,
                                   float(s[start]), float(e[end])))
        if null is not None:
            candidates.append(null)
        candidates.sort(key=lambda c: -c[0])
        nbest, seen = [], set()
        for score, row, start, end, start_logit, end_logit in candidates:
            if len(nbest) >= n_best_size:
                break
            text = span_text(features[row], start, end) if start > 0 else ""
            if text in seen:
                continue
            seen.add(text)
            nbest.append({"text": text, "start_logit": start_logit, "end_logit": end_logit})
        if null is not None and "" not in seen:
            nbest.append({"text": "", "start_logit": null[4], "end_logit": null[5]})
        if not nbest:
            nbest.append({"text": "", "start_logit": 0.0, "end_logit": 0.0})
        scores = np.array([c["start_logit"] + c["end_logit"] for c in nbest])
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        nbest_all[qid] = [{"text": c["text"], "probability": float(p), "start_logit": c["start_logit"],
                           "end_logit": c["end_logit"]} for c, p in zip(nbest, probs)]
        if not version_2_with_negative:
            predictions[qid] = nbest[0]["text"]
            continue
        best = next((c for c in nbest if c["text"]), None)
        diff = null[0] - (best["start_logit"] + best["end_logit"]) if best else float("inf")
        null_odds[qid] = diff
        predictions[qid] = "" if diff > null_score_diff_threshold else best["text"]
    return SquadPredictions(predictions, nbest_all, null_odds if version_2_with_negative else None)


def write_predictions(output_dir: str | os.PathLike, predictions: SquadPredictions) -> list[str]:
    """Writes predictions.json, nbest_predictions.json and (v2.0) null_odds.json.

    Each file appears only once complete (temporary name, then rename).

    Returns:
      The paths written.
    """
    output_dir = os.fspath(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    files = {"predictions.json": predictions.predictions, "nbest_predictions.json": predictions.nbest}
    if predictions.null_odds is not None:
        files["null_odds.json"] = predictions.null_odds
    paths = []
    for name, value in files.items():
        paths.append(os.path.join(output_dir, name))
        # ASCII escapes, as the original wrote them: the official
        # evaluation scripts open files in the locale's encoding.
        write_text_atomically(paths[-1], json.dumps(value, indent=4) + "\n")
    return paths
