"""Exact match and F1 as the official SQuAD v1.1 and v2.0 evaluation scripts define them.

Both scripts normalise an answer the same way: lower case, delete every
character of `string.punctuation` (ASCII only: typographic quotes and dashes
such as “ ” – stay), delete the articles a/an/the as whole words, and collapse
whitespace. F1 compares the bags of whitespace tokens of the normalised
prediction and gold answer; a question scores the maximum over its gold
answers. The two scripts differ at the edges, and each function below keeps
its script's behaviour:

- v1.1 counts a question without a prediction as 0 and includes it in the
  total; an empty token bag on either side gives F1 0.
- v2.0 needs a prediction for every question (the script fails with a
  KeyError otherwise; here a ValueError names the count). Gold answers that
  normalise to "" are dropped, and a question left with none (a no-answer
  question) has the single gold answer "", which only an empty prediction
  matches (EM 1, F1 1). It also reports the HasAns/NoAns
  breakdown and, given no-answer scores, the best threshold.
"""

from __future__ import annotations

import collections
import re
import string
from typing import Mapping, Sequence

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower case, punctuation, articles and extra whitespace removed (the scripts' order)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _common_token_count(prediction_tokens: list[str], gold_tokens: list[str]) -> int:
    common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
    return sum(common.values())


def _f1_from_tokens(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
    same = _common_token_count(prediction_tokens, gold_tokens)
    if same == 0:
        return 0.0
    precision = same / len(prediction_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match_v1(prediction: str, gold: str) -> float:
    """1.0 when the normalised strings are equal (v1.1 `exact_match_score`)."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_v1(prediction: str, gold: str) -> float:
    """Token-bag F1 of the normalised strings (v1.1 `f1_score`): 0 when either is empty."""
    return _f1_from_tokens(normalize_answer(prediction).split(), normalize_answer(gold).split())


def exact_match_v2(prediction: str, gold: str) -> float:
    """v2.0 `compute_exact`: the same test as v1.1."""
    return exact_match_v1(prediction, gold)


def f1_v2(prediction: str, gold: str) -> float:
    """v2.0 `compute_f1`: as v1.1, except that two empty token bags score 1."""
    prediction_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not prediction_tokens or not gold_tokens:
        return float(prediction_tokens == gold_tokens)
    return _f1_from_tokens(prediction_tokens, gold_tokens)


def squad_v1_metrics(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str]) -> dict[str, float]:
    """The official v1.1 evaluation.

    Args:
      gold: question id -> its gold answer texts (every question of the
        dataset; see `bert_tf.data.squad.reading.gold_answers`).
      predictions: question id -> predicted text.

    Returns:
      {"exact_match": percent, "f1": percent}.

    Raises:
      ValueError: `gold` is empty.
    """
    if not gold:
        raise ValueError("no gold questions to evaluate")
    exact = f1 = 0.0
    for qid, answers in gold.items():
        if qid not in predictions:
            continue  # scored 0, still counted in the total
        exact += max(exact_match_v1(predictions[qid], answer) for answer in answers)
        f1 += max(f1_v1(predictions[qid], answer) for answer in answers)
    return {"exact_match": 100.0 * exact / len(gold), "f1": 100.0 * f1 / len(gold)}


def _best_threshold(predictions: Mapping[str, str], scores: Mapping[str, float],
                    na_probs: Mapping[str, float], has_answer: Mapping[str, bool]) -> tuple[float, float]:
    # Start from "every question predicted as no answer" and move the
    # threshold up through the questions in order of no-answer score.
    score = best = float(sum(1 for answerable in has_answer.values() if not answerable))
    best_threshold = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            score += scores[qid]
        elif predictions[qid]:
            score -= 1
        if score > best:
            best, best_threshold = score, na_probs[qid]
    return 100.0 * best / len(scores), best_threshold


def squad_v2_metrics(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                     na_probs: Mapping[str, float] | None = None,
                     na_prob_thresh: float = 1.0) -> dict[str, float]:
    """The official v2.0 evaluation.

    Args:
      gold: question id -> gold answer texts ([] for a no-answer question).
      predictions: question id -> predicted text ("" for no answer).
      na_probs: question id -> no-answer score (the null_odds.json written by
        `write_predictions`), as the script's --na-prob-file; None scores
        every question 0.
      na_prob_thresh: a question whose no-answer score exceeds this counts as
        predicted "no answer" (the script's --na-prob-thresh).

    Returns:
      exact, f1, total; HasAns_exact, HasAns_f1, HasAns_total and NoAns_*
      when such questions exist; best_exact, best_exact_thresh, best_f1,
      best_f1_thresh when `na_probs` is given. Scores are percentages.

    Raises:
      ValueError: `gold` is empty, or a question of it has no prediction.
    """
    if not gold:
        raise ValueError("no gold questions to evaluate")
    missing = [qid for qid in gold if qid not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} of {len(gold)} questions have no prediction, e.g. {missing[0]!r}")
    has_answer = {qid: bool(answers) for qid, answers in gold.items()}
    exact_raw: dict[str, float] = {}
    f1_raw: dict[str, float] = {}
    for qid, answers in gold.items():
        kept = [answer for answer in answers if normalize_answer(answer)] or [""]
        exact_raw[qid] = max(exact_match_v2(predictions[qid], answer) for answer in kept)
        f1_raw[qid] = max(f1_v2(predictions[qid], answer) for answer in kept)
    probs = dict.fromkeys(gold, 0.0) if na_probs is None else na_probs

    def thresholded(raw: dict[str, float]) -> dict[str, float]:
        return {qid: float(not has_answer[qid]) if probs[qid] > na_prob_thresh else score
                for qid, score in raw.items()}

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
    result = {"exact": 100.0 * sum(exact.values()) / len(exact),
              "f1": 100.0 * sum(f1.values()) / len(f1), "total": len(exact)}
    for name, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid in exact if has_answer[qid] == wanted]
        if qids:
            result[f"{name}_exact"] = 100.0 * sum(exact[q] for q in qids) / len(qids)
            result[f"{name}_f1"] = 100.0 * sum(f1[q] for q in qids) / len(qids)
            result[f"{name}_total"] = len(qids)
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(
            predictions, exact_raw, na_probs, has_answer)
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(
            predictions, f1_raw, na_probs, has_answer)
    return result
