"""Entity-level precision, recall and F1, as seqeval computes them."""

from __future__ import annotations

import collections
from typing import Any, Sequence

from bert_tf.data import tag_schemes


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Entity-level precision, recall and F1 (micro average and per type), as seqeval computes them.

    An entity counts as found only if its type and both ends match; entities
    are read by `tag_schemes.entity_spans`, so invalid predicted sequences
    are scored too. A ratio with a zero denominator is 0 (seqeval's
    zero_division=0).

    Args:
      gold: the true tags, one list per sentence.
      predicted: the predicted tags, same lengths.

    Returns:
      {"precision", "recall", "f1": floats over all entities (micro average),
       "support": number of gold entities,
       "per_type": {type: {"precision", "recall", "f1", "support"}} for every
       type gold or predicted, sorted by type}.

    Raises:
      ValueError: the numbers or lengths of sentences differ.
    """
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    for i, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
    true, found, correct = collections.Counter(), collections.Counter(), collections.Counter()
    for g, p in zip(tag_schemes.entities(gold), tag_schemes.entities(predicted)):
        g, p = set(g), set(p)
        true.update(entity[0] for entity in g)
        found.update(entity[0] for entity in p)
        correct.update(entity[0] for entity in g & p)

    def scores(tp: int, n_found: int, n_true: int) -> dict[str, float | int]:
        precision = tp / n_found if n_found else 0.0
        recall = tp / n_true if n_true else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1, "support": n_true}

    return {**scores(correct.total(), found.total(), true.total()),
            "per_type": {t: scores(correct[t], found[t], true[t]) for t in sorted(true | found)}}
