"""SQuAD prediction files from the logits of `features.convert_examples_to_features` windows.

The answers come from `decoding.decode_windows`, the post-processor the
exported model runs too; this module batches the windows of many questions
into it and writes predictions.json, nbest_predictions.json and (v2.0)
null_odds.json.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.data.squad.decoding import Contexts, Decoded, decode_windows
from bert_tf.data.squad.features import SquadFeature, WindowLayout
from bert_tf.io import write_text_atomically

_QUESTIONS_PER_CALL = 1024


class NbestEntry(NamedTuple):
    """One entry of a question's n-best list, as nbest_predictions.json writes it."""

    text: str
    probability: float
    start_logit: float
    end_logit: float


@dataclasses.dataclass(frozen=True)
class SquadPredictions:
    """Decoded answers.

    Attributes:
      predictions: question id -> answer text ("" for no answer).
      nbest: question id -> n-best entries, best first.
      null_odds: question id -> null score minus the best span's score (v2.0
        only, else None); +inf when no span was valid.
    """

    predictions: dict[str, str]
    nbest: dict[str, list[NbestEntry]]
    null_odds: dict[str, float] | None


def _feature_batches(features: Sequence[SquadFeature], seq_length: int):
    """(rows, question ids, layout, contexts) of consecutive groups of questions."""
    rows_of: dict[str, list[int]] = {}
    for row, feature in enumerate(features):
        rows_of.setdefault(feature.example.qas_id, []).append(row)
    ids = list(rows_of)
    for begin in range(0, len(ids), _QUESTIONS_PER_CALL):
        batch = ids[begin:begin + _QUESTIONS_PER_CALL]
        rows = [row for qid in batch for row in rows_of[qid]]
        windows = [features[row] for row in rows]
        is_max_context = np.zeros([len(rows), seq_length], bool)
        for w, f in enumerate(windows):
            is_max_context[w, f.doc_offset:f.doc_offset + f.doc_length] = f.is_max_context
        layout = WindowLayout(
            question=tf.constant(np.repeat(np.arange(len(batch)), [len(rows_of[q]) for q in batch]), tf.int32),
            doc_start=tf.constant([f.doc_start for f in windows], tf.int32),
            doc_length=tf.constant([f.doc_length for f in windows], tf.int32),
            doc_offset=tf.constant([f.doc_offset for f in windows], tf.int32),
            is_max_context=tf.constant(is_max_context))
        docs = [features[rows_of[qid][0]] for qid in batch]
        contexts = Contexts(
            text=tf.constant([f.example.context.text for f in docs], tf.string),
            begin=tf.RaggedTensor.from_row_lengths(np.concatenate([f.doc.begin for f in docs]),
                                                   [len(f.doc.begin) for f in docs]),
            end=tf.RaggedTensor.from_row_lengths(np.concatenate([f.doc.end for f in docs]),
                                                 [len(f.doc.end) for f in docs]))
        yield rows, batch, layout, contexts


def decode_predictions(features: Sequence[SquadFeature], start_logits: np.ndarray, end_logits: np.ndarray, *,
                       n_best_size: int = 20, max_answer_length: int = 30, version_2_with_negative: bool = False,
                       null_score_diff_threshold: float = 0.0) -> SquadPredictions:
    """`decode_windows` on the windows of `features.convert_examples_to_features`.

    Args:
      features: row i describes logits row i.
      start_logits, end_logits: float arrays [N, S].
      n_best_size, max_answer_length, version_2_with_negative,
        null_score_diff_threshold: as in `decode_windows`.

    Returns:
      The predictions, n-best lists and (v2.0) null odds, in question order.
    """
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    if start_logits.shape != end_logits.shape or len(start_logits) != len(features):
        raise ValueError(f"logits of shapes {start_logits.shape} and {end_logits.shape} "
                         f"for {len(features)} features")
    predictions, nbest, null_odds = {}, {}, {}
    for rows, ids, layout, contexts in _feature_batches(features, start_logits.shape[1]):
        out = decode_windows(start_logits[rows], end_logits[rows], layout, contexts, n_best_size=n_best_size,
                             max_answer_length=max_answer_length, version_2_with_negative=version_2_with_negative,
                             null_score_diff_threshold=null_score_diff_threshold)
        out = Decoded(*(np.asarray(x) for x in out))
        for q, qid in enumerate(ids):
            nbest[qid] = [NbestEntry(out.nbest_text[q, i].decode("utf-8"), float(out.nbest_probability[q, i]),
                                     float(out.nbest_start_logit[q, i]), float(out.nbest_end_logit[q, i]))
                          for i in range(out.nbest_size[q])]
            predictions[qid] = out.answer[q].decode("utf-8")
            null_odds[qid] = float(out.null_odds[q])
    return SquadPredictions(predictions, nbest, null_odds if version_2_with_negative else None)


def write_predictions(output_dir: str | os.PathLike, predictions: SquadPredictions) -> list[str]:
    """Writes predictions.json, nbest_predictions.json and (v2.0) null_odds.json.

    Each file appears only once complete (temporary name, then rename).

    Returns:
      The paths written.
    """
    output_dir = os.fspath(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    files = {"predictions.json": predictions.predictions,
             "nbest_predictions.json": {qid: [entry._asdict() for entry in entries]
                                        for qid, entries in predictions.nbest.items()}}
    if predictions.null_odds is not None:
        files["null_odds.json"] = predictions.null_odds
    paths = []
    for name, value in files.items():
        paths.append(os.path.join(output_dir, name))
        # ASCII escapes, as the original wrote them: the official
        # evaluation scripts open files in the locale's encoding.
        write_text_atomically(paths[-1], json.dumps(value, indent=4) + "\n")
    return paths
