"""SQuAD v1.1 / v2.0 files: questions, their contexts split into words, gold answers.

The context is split into words on whitespace as google-research/bert's
run_squad.py splits it; every word keeps its character span in the original
text, so a decoded answer can be cut from the context as written.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
from typing import Any, Iterable

import numpy as np

from bert_tf.io import BadRow, read_utf8

# The original run_squad.py splits contexts on these only; other Unicode
# spaces stay inside a word (the tokenizer still splits on them).
WORD_SEPARATORS = " \t\r\n\u202f"
_WORD_SEPARATOR_SET = frozenset(WORD_SEPARATORS)


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
            if char in _WORD_SEPARATOR_SET:
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


def _field(record: Any, name: str, kind: type, what: str) -> Any:
    if not isinstance(record, dict) or name not in record:
        raise BadRow(f"{what} lacks the field {name!r}")
    value = record[name]
    # bool is an int in Python; an answer_start of `true` is still malformed.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRow(f"{what} field {name!r} is {type(value).__name__}, not {kind.__name__}")
    if kind is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escape such as "\ud800" in the JSON
            raise BadRow(f"{what} field {name!r} is not valid Unicode") from None
    return value


def _load_json(input_file: str) -> Any:
    text = read_utf8(input_file, "SQuAD file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{input_file}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None


def _training_answer(answers: list[dict], context: SquadContext,
                     version_2_with_negative: bool) -> dict[str, Any]:
    if not answers:
        raise BadRow("has no answer" + ("" if version_2_with_negative
                                         else " (a v2.0 question? pass version_2_with_negative)"))
    text, start = answers[0]["text"], answers[0]["answer_start"]
    if start < 0 or context.text[start:start + len(text)] != text:
        found = context.text[start:start + len(text)]
        raise BadRow(f"answer {text!r} is not at answer_start {start} (the context has {found!r} there)")
    # Leading or trailing spaces of the answer text must not pull in the
    # neighbouring words.
    stripped = text.strip(WORD_SEPARATORS)
    if not stripped:
        raise BadRow("answer text is blank")
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
            raise BadRow("is_impossible in a v1.1 run (pass version_2_with_negative)")
        if is_impossible and answers:
            raise BadRow("is_impossible but has answers")
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
            except BadRow as e:
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
                        raise BadRow("lacks a string field 'id'")
                    if qid in seen:
                        raise BadRow("repeats an earlier question id")
                    example = _read_question(qa, context, is_training, version_2_with_negative)
                except BadRow as e:
                    bad(where, str(e))
                    continue
                seen.add(qid)
                examples.append(example)
    return examples, skipped


def gold_answers(examples: Iterable[SquadExample]) -> dict[str, list[str]]:
    """Question id -> gold answer texts, the input of `metrics`."""
    return {example.qas_id: list(example.answers) for example in examples}
