"""SQuAD answers from the start/end logits of every window: the one post-processor.

`decode_windows` is a graph function: run_squad.py's evaluation calls it on
the logits of the windows `features.convert_examples_to_features` built, and
the exported model calls it on the windows it slid over the context it was
sent. The rules are google-research/bert's `write_predictions`:

- In every window, the `n_best_size` best start and end positions are
  paired; a pair is a candidate when both lie in the window's context, the
  start piece has its max context in this window, end >= start and the span
  is at most `max_answer_length` pieces.
- v2.0: the null score is the lowest [CLS] score (start + end logit at
  position 0) over the question's windows; it is a candidate too.
- Candidates are ranked by start + end logit (ties in window, start, end
  order); the n-best list keeps the first `n_best_size` distinct texts
  (the null answer's text is ""), adds the null answer when it is not among
  them (v2.0), and gives each entry the softmax probability of its score.
- The prediction is the best entry (v1.1), or for v2.0 the best non-null
  entry unless the null score exceeds its score by more than
  `null_score_diff_threshold` (the null odds), when it is "".

The answer text is the context's characters from the start piece's first to
the end piece's last (`alignment`), an exact substring of the context.
`predictions.py` turns its output into the prediction files.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.data.squad.features import WindowLayout


class Contexts(NamedTuple):
    """The context of each question and the character spans of its pieces.

    Attributes:
      text: tf.string [questions].
      begin: int64 RaggedTensor [questions, (pieces)], each piece's first character.
      end: int64 RaggedTensor [questions, (pieces)], one past its last character.
    """

    text: tf.Tensor
    begin: tf.RaggedTensor
    end: tf.RaggedTensor


class Candidates(NamedTuple):
    """Scored spans, flat over a batch (float64 logits, int64 indices).

    Attributes:
      question: the question of each candidate.
      window: the window (logits row) it comes from.
      start, end: its first and last sequence position; 0 and 0 for the null answer.
      start_logit, end_logit: the logits at those positions.
    """

    question: tf.Tensor
    window: tf.Tensor
    start: tf.Tensor
    end: tf.Tensor
    start_logit: tf.Tensor
    end_logit: tf.Tensor


class Decoded(NamedTuple):
    """The n-best lists and answers of a batch of questions.

    N-best tensors are [questions, n_best_size + 1], padded after `nbest_size`
    entries ("" and zero logits).

    Attributes:
      nbest_text: tf.string.
      nbest_start_logit, nbest_end_logit, nbest_probability: float64.
      nbest_size: int32 [questions].
      answer: tf.string [questions], the prediction ("" for no answer).
      answer_begin, answer_end: int64 [questions], character offsets of the
        answer in the context; -1 for "".
      answer_score: float64 [questions], start + end logit of the prediction
        (the null score when it is "" in v2.0).
      null_odds: float64 [questions], null score minus the best non-null
        entry's score (+inf without one); meaningful in v2.0 only.
    """

    nbest_text: tf.Tensor
    nbest_start_logit: tf.Tensor
    nbest_end_logit: tf.Tensor
    nbest_probability: tf.Tensor
    nbest_size: tf.Tensor
    answer: tf.Tensor
    answer_begin: tf.Tensor
    answer_end: tf.Tensor
    answer_score: tf.Tensor
    null_odds: tf.Tensor


def _span_candidates(start_logits: tf.Tensor, end_logits: tf.Tensor, layout: WindowLayout, n_best_size: int,
                     max_answer_length: int) -> Candidates:
    """The valid pairs of each window's best starts and ends, in window, start rank, end rank order."""
    offset, doc_end = (tf.cast(x, tf.int32) for x in (layout.doc_offset, layout.doc_offset + layout.doc_length))
    # Past a window's last [SEP] is padding, whose logits depend on how the
    # batch was padded (zeros where it was trimmed): it never takes a place
    # among the best positions.
    padding = tf.range(tf.shape(start_logits)[1])[None, :] > doc_end[:, None]
    k = tf.minimum(n_best_size, tf.shape(start_logits)[1])
    # top_k keeps the lower position first among equal logits, as the original's stable sort.
    lowest = tf.constant(-np.inf, start_logits.dtype)
    starts = tf.math.top_k(tf.where(padding, lowest, start_logits), k).indices
    ends = tf.math.top_k(tf.where(padding, lowest, end_logits), k).indices
    s, e = starts[:, :, None], ends[:, None, :]
    max_context = tf.gather(layout.is_max_context, starts, batch_dims=1)[:, :, None]
    valid = ((s >= offset[:, None, None]) & (s < doc_end[:, None, None]) & max_context & (e >= s)
             & (e < doc_end[:, None, None]) & (e - s < max_answer_length))
    where = tf.where(valid)  # [candidates, 3]: window, start rank, end rank
    window = where[:, 0]
    start = tf.cast(tf.gather_nd(starts, where[:, :2]), tf.int64)
    end = tf.cast(tf.gather_nd(ends, tf.stack([window, where[:, 2]], 1)), tf.int64)
    return Candidates(question=tf.gather(tf.cast(layout.question, tf.int64), window), window=window,
                      start=start, end=end,
                      start_logit=tf.gather_nd(start_logits, tf.stack([window, start], 1)),
                      end_logit=tf.gather_nd(end_logits, tf.stack([window, end], 1)))


def _null_candidates(start_logits: tf.Tensor, end_logits: tf.Tensor, question: tf.Tensor,
                     num_questions: tf.Tensor) -> Candidates:
    """Each question's [CLS] answer from its window of lowest null score (the first of equals)."""
    null = start_logits[:, 0] + end_logits[:, 0]
    lowest = tf.math.unsorted_segment_min(null, question, num_questions)
    rows = tf.range(tf.size(null, out_type=tf.int64))
    window = tf.math.unsorted_segment_min(tf.where(tf.equal(null, tf.gather(lowest, question)), rows,
                                                   tf.size(null, out_type=tf.int64)), question, num_questions)
    zero = tf.zeros_like(window)
    return Candidates(question=tf.range(num_questions, dtype=tf.int64), window=window, start=zero, end=zero,
                      start_logit=tf.gather(start_logits[:, 0], window),
                      end_logit=tf.gather(end_logits[:, 0], window))


def _concat(parts: Sequence[Candidates]) -> Candidates:
    return Candidates(*(tf.concat(list(field), 0) for field in zip(*parts)))


def _take(candidates: Candidates, index: tf.Tensor) -> Candidates:
    return Candidates(*(tf.gather(field, index) for field in candidates))


def _segment_first(flags: tf.Tensor, question: tf.Tensor, num_questions: tf.Tensor) -> tf.Tensor:
    """Index of each question's first flagged row (rows sorted by question), or the number of rows."""
    rows = tf.range(tf.size(flags, out_type=tf.int64))
    return tf.math.unsorted_segment_min(tf.where(flags, rows, tf.size(flags, out_type=tf.int64)), question,
                                        num_questions)


def decode_windows(start_logits: tf.Tensor, end_logits: tf.Tensor, layout: WindowLayout, contexts: Contexts,
                   *, n_best_size: int, max_answer_length: int, version_2_with_negative: bool,
                   null_score_diff_threshold: float) -> Decoded:
    """Chooses each question's answer from the logits of its windows.

    Args:
      start_logits, end_logits: float Tensors [windows, S], rows as in `layout`.
      layout: the windows (`features.window_layout`); every question has one.
      contexts: the questions' contexts and piece spans.
      n_best_size: best starts and ends paired per window, entries in the n-best list.
      max_answer_length: longest span, in pieces.
      version_2_with_negative: consider "no answer".
      null_score_diff_threshold: v2.0: answer "" when the null odds exceed it.

    Returns:
      The n-best lists and answers.
    """
    # Scores in float64, as the original adds Python floats.
    start_logits, end_logits = tf.cast(start_logits, tf.float64), tf.cast(end_logits, tf.float64)
    num_questions = tf.shape(contexts.text, out_type=tf.int64)[0]
    question = tf.cast(layout.question, tf.int64)
    parts = [_span_candidates(start_logits, end_logits, layout, n_best_size, max_answer_length)]
    null = _null_candidates(start_logits, end_logits, question, num_questions)
    if version_2_with_negative:
        parts.append(null)  # after the spans: a span of equal score ranks first
    candidates = _concat(parts)
    # Rank by score within each question; both sorts are stable.
    order = tf.argsort(-(candidates.start_logit + candidates.end_logit), stable=True)
    order = tf.gather(order, tf.argsort(tf.gather(candidates.question, order), stable=True))
    candidates = _take(candidates, order)

    is_span = candidates.start > 0
    doc_start, doc_offset = (tf.cast(tf.gather(x, candidates.window), tf.int64)
                             for x in (layout.doc_start, layout.doc_offset))
    first_piece = tf.gather(contexts.begin.row_starts(), candidates.question) + doc_start - doc_offset
    no_piece = tf.size(contexts.begin.flat_values, out_type=tf.int64)  # indexes the -1 appended

    def char_offset(offsets: tf.RaggedTensor, position: tf.Tensor) -> tf.Tensor:
        return tf.gather(tf.concat([offsets.flat_values, [-1]], 0),
                         tf.where(is_span, first_piece + position, no_piece))

    begin, end = char_offset(contexts.begin, candidates.start), char_offset(contexts.end, candidates.end)
    text = tf.strings.substr(tf.gather(contexts.text, candidates.question), tf.maximum(begin, 0), end - begin,
                             unit="UTF8_CHAR")

    # The n-best list: the first n_best_size distinct texts of each question.
    key = tf.strings.join([tf.strings.as_string(candidates.question), text], separator=" ")
    _, text_id = tf.unique(key)
    rows = tf.range(tf.size(key, out_type=tf.int64))
    first_seen = tf.math.unsorted_segment_min(rows, text_id, tf.size(key))
    kept = tf.equal(tf.gather(first_seen, text_id), rows)
    rank = tf.cumsum(tf.cast(kept, tf.int64), exclusive=True)  # nondecreasing: a question's first is its least
    rank -= tf.gather(tf.math.unsorted_segment_min(rank, candidates.question, num_questions), candidates.question)
    kept &= rank < n_best_size
    entries = _take(candidates, tf.where(kept)[:, 0])
    entry_begin, entry_end, entry_text = (tf.boolean_mask(x, kept) for x in (begin, end, text))
    # v2.0 adds the null answer when its text is not listed; v1.1 without a
    # valid span answers "" with zero logits.
    listed = tf.math.unsorted_segment_max(tf.cast(tf.equal(entry_text, "") if version_2_with_negative
                                                  else tf.ones_like(entry_text, tf.bool), tf.int32),
                                          entries.question, num_questions) > 0
    extra = tf.where(~listed)[:, 0]
    extra_null = _take(null, extra)
    if not version_2_with_negative:
        extra_null = extra_null._replace(start_logit=tf.zeros_like(extra_null.start_logit),
                                         end_logit=tf.zeros_like(extra_null.end_logit))
    entries = _concat([entries, extra_null])
    no_span = -tf.ones_like(extra)
    entry_begin, entry_end = tf.concat([entry_begin, no_span], 0), tf.concat([entry_end, no_span], 0)
    entry_text = tf.concat([entry_text, tf.fill(tf.shape(extra), "")], 0)
    order = tf.argsort(entries.question, stable=True)
    entries = _take(entries, order)
    entry_begin, entry_end, entry_text = (tf.gather(x, order) for x in (entry_begin, entry_end, entry_text))

    score = entries.start_logit + entries.end_logit
    best = tf.math.unsorted_segment_max(score, entries.question, num_questions)
    exp = tf.exp(score - tf.gather(best, entries.question))
    probability = exp / tf.gather(tf.math.unsorted_segment_sum(exp, entries.question, num_questions),
                                  entries.question)

    def per_question(values, default):
        ragged = tf.RaggedTensor.from_value_rowids(values, entries.question, nrows=num_questions)
        return ragged.to_tensor(default, shape=[None, n_best_size + 1])

    top = _segment_first(tf.ones_like(score, tf.bool), entries.question, num_questions)
    if version_2_with_negative:
        top = _segment_first(tf.not_equal(entry_text, ""), entries.question, num_questions)
    found = top < tf.size(score, out_type=tf.int64)
    top = tf.minimum(top, tf.size(score, out_type=tf.int64) - 1)
    null_score = null.start_logit + null.end_logit
    null_odds = tf.where(found, null_score - tf.gather(score, top), np.inf)
    answered = found
    if version_2_with_negative:
        answered &= null_odds <= null_score_diff_threshold
    return Decoded(
        nbest_text=per_question(entry_text, ""), nbest_start_logit=per_question(entries.start_logit, 0.0),
        nbest_end_logit=per_question(entries.end_logit, 0.0), nbest_probability=per_question(probability, 0.0),
        nbest_size=tf.math.unsorted_segment_sum(tf.ones_like(entries.question, tf.int32), entries.question,
                                                num_questions),
        answer=tf.where(answered, tf.gather(entry_text, top), ""),
        answer_begin=tf.where(answered, tf.gather(entry_begin, top), -1),
        answer_end=tf.where(answered, tf.gather(entry_end, top), -1),
        answer_score=tf.where(answered, tf.gather(score, top), null_score if version_2_with_negative else 0.0),
        null_odds=null_odds)
