"""The official SQuAD v1.1 and v2.0 evaluation rules, restated here independently of bert_tf.

The reference bert_tf's SQuAD metrics and run_squad.py's reported scores are
tested against (the official scripts are not on PyPI).
"""

import itertools
import string

import numpy as np


def _is_word_char(char):
    # What Python's re counts as \w in a str pattern.
    return char.isalnum() or char == "_"


def normalize(text):
    text = text.lower().translate({ord(c): None for c in string.punctuation})
    pieces = []
    for is_word, group in itertools.groupby(text, key=_is_word_char):
        run = "".join(group)
        pieces.append(" " if is_word and run in ("a", "an", "the") else run)
    return " ".join("".join(pieces).split())


def token_f1(prediction_tokens, gold_tokens):
    remaining = {}
    for token in gold_tokens:
        remaining[token] = remaining.get(token, 0) + 1
    same = 0
    for token in prediction_tokens:
        if remaining.get(token, 0) > 0:
            remaining[token] -= 1
            same += 1
    if same == 0:
        return 0.0
    precision, recall = same / len(prediction_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def v1_metrics(gold, predictions):
    em = f1 = 0.0
    for qid in gold:
        prediction = predictions.get(qid)
        if prediction is None:
            continue
        p = normalize(prediction)
        em += max(float(p == normalize(g)) for g in gold[qid])
        f1 += max(token_f1(p.split(), normalize(g).split()) for g in gold[qid])
    return {"exact_match": 100 * em / len(gold), "f1": 100 * f1 / len(gold)}


def v2_scores(prediction, answers):
    golds = [g for g in answers if normalize(g) != ""]
    if not golds:
        golds = [""]
    p = normalize(prediction).split()
    em = max(float(normalize(prediction) == normalize(g)) for g in golds)
    f1 = 0.0
    for g in golds:
        t = normalize(g).split()
        f1 = max(f1, float(p == t) if not p or not t else token_f1(p, t))
    return em, f1


def v2_metrics(gold, predictions, na_probs=None, thresh=1.0):
    probs = na_probs or {}
    raw = {qid: v2_scores(predictions[qid], gold[qid]) for qid in gold}
    final = {}
    for qid, (em, f1) in raw.items():
        if probs.get(qid, 0.0) > thresh:
            em = f1 = float(not gold[qid])
        final[qid] = (em, f1)
    result = {"exact": 100 * np.mean([v[0] for v in final.values()]),
              "f1": 100 * np.mean([v[1] for v in final.values()]), "total": len(final)}
    for name, has in (("HasAns", True), ("NoAns", False)):
        part = [final[q] for q in gold if bool(gold[q]) == has]
        if part:
            result.update({f"{name}_exact": 100 * np.mean([v[0] for v in part]),
                           f"{name}_f1": 100 * np.mean([v[1] for v in part]), f"{name}_total": len(part)})
    if na_probs is not None:
        # Brute force over thresholds: a question answers "no answer" when its
        # score exceeds the threshold (the official sweep, for distinct scores).
        for k, name in ((0, "exact"), (1, "f1")):
            best = (sum(1.0 for q in gold if not gold[q]), 0.0)
            for t in sorted(na_probs.values()):
                score = sum(float(not gold[q]) if na_probs[q] > t else raw[q][k] for q in gold)
                if score > best[0]:
                    best = (score, t)
            result[f"best_{name}"], result[f"best_{name}_thresh"] = 100 * best[0] / len(gold), best[1]
    return result
