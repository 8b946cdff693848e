"""SQuAD windows: the model inputs of every question, max-context flags, training positions.

The recipe of google-research/bert's run_squad.py:

- A question becomes `[CLS] query [SEP] window [SEP]`, the query cut to
  `max_query_length` pieces; a context longer than the room left
  (max_seq_length - query - 3) is split into windows `doc_stride` pieces
  apart, the last one ending at the last piece.
- A piece seen by several windows is scored only in the one where it has the
  most context on both sides (`is_max_context`).
- Training positions index the answer's first and last piece in the window,
  or `[CLS]` (0) when the answer is outside the window or the question has no
  answer (v2.0).

`window_layout` and `pack_windows` are graph functions: the exported model
slides the same windows over a context it is sent.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.configs import INPUT_NAMES
from bert_tf.data.packing import pack_segments
from bert_tf.data.squad import alignment
from bert_tf.data.squad.reading import SquadContext, SquadExample
from bert_tf.data.tokenization import BertTokenizer

_BATCH_SIZE = 1024  # contexts or questions per graph call
POSITION_NAMES = ("start_positions", "end_positions")


class WindowLayout(NamedTuple):
    """Where the windows of a batch of questions lie; one row per window, grouped by question.

    Sequence position `doc_offset + i` holds the context piece `doc_start + i`,
    for 0 <= i < doc_length.

    Attributes:
      question: int32 [windows], the question (row of the batch) of each window.
      doc_start: int32 [windows], index of the window's first context piece.
      doc_length: int32 [windows], number of context pieces in the window.
      doc_offset: int32 [windows], sequence position of the first context piece
        (after [CLS], the query and [SEP]).
      is_max_context: bool [windows, max_seq_length]: the position holds a
        context piece that has more context in this window than in any other.
    """

    question: tf.Tensor
    doc_start: tf.Tensor
    doc_length: tf.Tensor
    doc_offset: tf.Tensor
    is_max_context: tf.Tensor


def window_layout(doc_lengths: tf.Tensor, query_lengths: tf.Tensor, *, max_seq_length: int,
                  doc_stride: int) -> WindowLayout:
    """The windows of each question.

    Args:
      doc_lengths: int Tensor [questions], pieces of each context.
      query_lengths: int Tensor [questions], pieces of each (cut) query.
      max_seq_length: S.
      doc_stride: pieces between the starts of consecutive windows.

    Returns:
      The layout; a question with an empty context has one empty window.
    """
    n, q = tf.cast(doc_lengths, tf.int32), tf.cast(query_lengths, tf.int32)
    room = max_seq_length - q - 3
    # Every window but the last is `room` long, so they start `step` apart.
    step = tf.minimum(room, doc_stride)
    count = 1 + tf.maximum(0, (n - room + step - 1) // step)
    question = tf.repeat(tf.range(tf.size(n)), count)
    k = tf.ragged.range(count).flat_values
    n, room, step = (tf.gather(x, question) for x in (n, room, step))
    start = k * step
    length = tf.minimum(n - start, room)
    offset = tf.gather(q, question) + 2

    # The original scores a piece in a window min(left, right) + 0.01 * window
    # length and keeps the first best window. As a function of the window,
    # min(left, right) rises then falls (left context shrinks, right context
    # grows from window to window) and only the last window can be shorter,
    # so the best window is the one that beats the window before it and is
    # not beaten by the window after it. Scores are in hundredths.
    piece = start[:, None] + tf.range(max_seq_length)[None, :] - offset[:, None]  # [W, S]

    def score(window_start, window_length):
        context = tf.minimum(piece - window_start[:, None], window_start[:, None] + window_length[:, None] - 1
                             - piece)
        inside = (piece >= window_start[:, None]) & (piece < (window_start + window_length)[:, None])
        return tf.where(inside, 100 * context + window_length[:, None], -1)

    own = score(start, length)
    before = tf.where((k > 0)[:, None], score(start - step, room), -1)
    after_start = start + step
    after = tf.where((start + length < n)[:, None], score(after_start, tf.minimum(n - after_start, room)), -1)
    is_max_context = (own >= 0) & (own > before) & (own >= after)
    return WindowLayout(question, start, length, offset, is_max_context)


def pack_windows(query_ids: tf.RaggedTensor, doc_ids: tf.RaggedTensor, layout: WindowLayout, *,
                 max_seq_length: int, tokenizer: BertTokenizer) -> dict[str, tf.Tensor]:
    """`[CLS] query [SEP] window [SEP]` of every window.

    Args:
      query_ids: int RaggedTensor [questions, (pieces)], the cut queries.
      doc_ids: int RaggedTensor [questions, (pieces)], the contexts' pieces.
      layout: from `window_layout` on their lengths.
      max_seq_length: S.
      tokenizer: for the ids of [CLS], [SEP] and [PAD].

    Returns:
      `input_word_ids`, `input_mask`, `input_type_ids`: int32 [windows, S].
    """
    first = tf.gather(doc_ids.row_starts(), layout.question) + tf.cast(layout.doc_start, tf.int64)
    positions = tf.ragged.range(first, first + tf.cast(layout.doc_length, tf.int64))
    window = positions.with_flat_values(tf.gather(doc_ids.flat_values, positions.flat_values))
    return pack_segments([tf.gather(query_ids, layout.question), window], max_seq_length=max_seq_length,
                         cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id)


@dataclasses.dataclass(frozen=True, eq=False)
class DocPieces:
    """A context's word pieces.

    Attributes:
      ids: int32 array [pieces], their vocab ids, in text order.
      begin: int64 array [pieces], each piece's first character in the context.
      end: int64 array [pieces], one past each piece's last character.
      word_to_piece: int64 array [words + 1], index of each word's first piece
        (a word of deleted characters only has none: it equals the next
        word's); the last entry is the number of pieces.
    """

    ids: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    word_to_piece: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class SquadFeature:
    """One window (row of the feature arrays).

    Attributes:
      example: the question.
      window_index: index of this window among the question's windows.
      doc: the context's pieces.
      doc_offset, doc_start, doc_length: as in `WindowLayout`.
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

    Returns:
      text -> int32 array of its piece ids (repeats are tokenized once).
    """
    unique = list(dict.fromkeys(texts))
    result: dict[str, np.ndarray] = {}
    for begin in range(0, len(unique), _BATCH_SIZE):
        batch = unique[begin:begin + _BATCH_SIZE]
        ids = tokenizer(tf.constant(batch, tf.string))
        for text, row in zip(batch, np.split(ids.flat_values.numpy(), ids.row_splits.numpy()[1:-1])):
            result[text] = row
    return result


def doc_pieces(contexts: Sequence[SquadContext], tokenizer: BertTokenizer) -> list[DocPieces]:
    """The pieces of each context (`alignment.context_pieces`), in batched graph calls."""
    docs = []
    for begin in range(0, len(contexts), _BATCH_SIZE):
        batch = contexts[begin:begin + _BATCH_SIZE]
        pieces = alignment.context_pieces(tokenizer, tf.constant([c.text for c in batch], tf.string))
        for row, context in enumerate(batch):
            lengths = pieces.word_lengths[row].numpy()
            if len(lengths) != len(context.word_starts):
                raise AssertionError(f"the graph split {len(lengths)} words, not {len(context.word_starts)}")
            docs.append(DocPieces(ids=pieces.ids[row].numpy(), begin=pieces.begin[row].numpy(),
                                  end=pieces.end[row].numpy(),
                                  word_to_piece=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)))
    return docs


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


def _answer_span(example: SquadExample, doc: DocPieces, answer_ids: dict[str, np.ndarray]) -> tuple[int, int]:
    """The training answer's first and last piece in the context, or (-1, -1)."""
    if example.start_word < 0:
        return -1, -1
    first = int(doc.word_to_piece[example.start_word])
    last = int(doc.word_to_piece[example.end_word + 1]) - 1
    if first > last:  # the answer's words yield no piece at all
        return -1, -1
    return _improve_answer_span(doc.ids, first, last, answer_ids[example.answer_text])


def _ragged(rows: list[np.ndarray]) -> tf.RaggedTensor:
    return tf.RaggedTensor.from_row_lengths(np.concatenate(rows).astype(np.int32), [len(r) for r in rows])


def convert_examples_to_features(
        examples: Sequence[SquadExample], tokenizer: BertTokenizer, *, max_seq_length: int,
        doc_stride: int, max_query_length: int,
        is_training: bool) -> tuple[dict[str, np.ndarray], list[SquadFeature]]:
    """Builds the model inputs of every window of every question.

    Args:
      examples: from `reading.read_squad_examples` (with `is_training` alike).
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
    docs = dict(zip(map(id, contexts), doc_pieces(contexts, tokenizer)))
    query_ids = tokenize_texts(tokenizer, [e.question for e in examples])
    answer_ids = tokenize_texts(tokenizer, [e.answer_text for e in examples if e.start_word >= 0]) \
        if is_training else {}

    rows: dict[str, list] = {name: [] for name in INPUT_NAMES + POSITION_NAMES}
    features: list[SquadFeature] = []
    for begin in range(0, len(examples), _BATCH_SIZE):
        batch = examples[begin:begin + _BATCH_SIZE]
        batch_docs = [docs[id(e.context)] for e in batch]
        queries = _ragged([query_ids[e.question][:max_query_length] for e in batch])
        contexts_ids = _ragged([d.ids for d in batch_docs])
        layout = window_layout(contexts_ids.row_lengths(), queries.row_lengths(), max_seq_length=max_seq_length,
                               doc_stride=doc_stride)
        packed = pack_windows(queries, contexts_ids, layout, max_seq_length=max_seq_length, tokenizer=tokenizer)
        for name in INPUT_NAMES:
            rows[name].append(packed[name].numpy())
        question, start, length, offset, max_context = (np.asarray(x) for x in layout)
        window_index = np.arange(len(question)) - np.searchsorted(question, question)
        spans = [_answer_span(e, d, answer_ids) if is_training else (-1, -1) for e, d in zip(batch, batch_docs)]
        for w in range(len(question)):
            example, doc, span = batch[question[w]], batch_docs[question[w]], spans[question[w]]
            inside = span[0] >= 0 and start[w] <= span[0] and span[1] < start[w] + length[w]
            rows["start_positions"].append([span[0] - start[w] + offset[w] if inside else 0])
            rows["end_positions"].append([span[1] - start[w] + offset[w] if inside else 0])
            features.append(SquadFeature(
                example=example, window_index=int(window_index[w]), doc=doc, doc_offset=int(offset[w]),
                doc_start=int(start[w]), doc_length=int(length[w]),
                is_max_context=max_context[w, offset[w]:offset[w] + length[w]]))
    arrays = {name: np.concatenate(rows[name]).astype(np.int32) if rows[name]
              else np.zeros([0, max_seq_length], np.int32) for name in INPUT_NAMES}
    if is_training:
        arrays.update({name: np.concatenate(rows[name] or [[]]).astype(np.int32) for name in POSITION_NAMES})
    return arrays, features
