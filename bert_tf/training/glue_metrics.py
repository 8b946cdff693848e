"""Classification and regression metrics as GLUE defines them, by scikit-learn and scipy.

CoLA: Matthews correlation; MRPC, QQP: F1 of the positive class ("1",
label id 1) and accuracy; STS-B: Pearson and Spearman correlation; the other
tasks: accuracy (MNLI matched and mismatched computed separately). A task's
GLUE score is the mean of its metrics (`task_score`).

Undefined values are decided here, not left to NaN (NaN breaks "best
checkpoint" comparisons and is not valid JSON):
  - Matthews correlation with one class only in labels or predictions: 0.0
    (scikit-learn's own convention).
  - F1 with no positive label and no positive prediction: 0.0
    (`zero_division=0.0`, stated rather than warned about).
  - Pearson / Spearman when labels or predictions are constant: 0.0, with a
    warning logged; scipy returns NaN there. A constant predictor carries no
    information about the order of the examples, which 0 says.
  - NaN or infinite predictions, empty or unequal inputs: ValueError.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from absl import logging
from scipy import stats
from sklearn import metrics as sk_metrics

ArrayLike = np.ndarray | Sequence


def _check(labels: ArrayLike, predictions: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape or labels.ndim != 1:
        raise ValueError(f"labels {labels.shape} and predictions {predictions.shape} must be "
                         "1-D and of the same length")
    if labels.size == 0:
        raise ValueError("no examples to compute a metric on")
    for name, values in (("labels", labels), ("predictions", predictions)):
        if np.issubdtype(values.dtype, np.floating) and not np.all(np.isfinite(values)):
            raise ValueError(f"{name} contain NaN or infinite values")
    return labels, predictions


def accuracy(labels: ArrayLike, predictions: ArrayLike) -> float:
    """Fraction of class ids predicted right."""
    return float(sk_metrics.accuracy_score(*_check(labels, predictions)))


def f1(labels: ArrayLike, predictions: ArrayLike) -> float:
    """Binary F1 of class id 1 (MRPC "equivalent", QQP "duplicate"); 0.0 without positives."""
    return float(sk_metrics.f1_score(*_check(labels, predictions), pos_label=1,
                                     average="binary", zero_division=0.0))


def macro_f1(labels: ArrayLike, predictions: ArrayLike) -> float:
    """Unweighted mean of the per-class F1 over the classes in labels or predictions."""
    return float(sk_metrics.f1_score(*_check(labels, predictions), average="macro",
                                     zero_division=0.0))


def matthews_corr(labels: ArrayLike, predictions: ArrayLike) -> float:
    """Matthews correlation coefficient; 0.0 when either side has one class only."""
    return float(sk_metrics.matthews_corrcoef(*_check(labels, predictions)))


def _correlation(statistic: Callable, name: str, labels: ArrayLike,
                 predictions: ArrayLike) -> float:
    labels, predictions = _check(labels, predictions)
    if np.ptp(labels) == 0 or np.ptp(predictions) == 0:
        logging.warning("%s correlation is undefined for constant %s; reported as 0.0", name,
                        "labels" if np.ptp(labels) == 0 else "predictions")
        return 0.0
    return float(statistic(labels, predictions).statistic)


def pearson(labels: ArrayLike, predictions: ArrayLike) -> float:
    """Pearson correlation (scipy.stats.pearsonr); 0.0 when either side is constant."""
    return _correlation(stats.pearsonr, "Pearson", labels, predictions)


def spearman(labels: ArrayLike, predictions: ArrayLike) -> float:
    """Spearman rank correlation (scipy.stats.spearmanr); 0.0 when either side is constant."""
    return _correlation(stats.spearmanr, "Spearman", labels, predictions)


METRICS: dict[str, Callable[[ArrayLike, ArrayLike], float]] = {
    "accuracy": accuracy, "f1": f1, "macro_f1": macro_f1, "matthews_corr": matthews_corr,
    "pearson": pearson, "spearman": spearman,
}
# Metrics of user data (`run_classifier.py` without a GLUE task).
CLASSIFICATION_METRICS = ("accuracy", "macro_f1")
REGRESSION_METRICS = ("pearson", "spearman")


def compute_metrics(names: Sequence[str], labels: ArrayLike,
                    predictions: ArrayLike) -> dict[str, float]:
    """Computes the named metrics.

    Args:
      names: keys of `METRICS`, e.g. `GlueTask.metrics`.
      labels: gold class ids (int [N]) or scores (float [N]).
      predictions: predicted class ids (argmax of the logits) or scores.

    Returns:
      {name: value}.

    Raises:
      ValueError: unknown metric name; inputs empty, of different lengths,
        or not finite.
    """
    unknown = [name for name in names if name not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; known: {', '.join(METRICS)}")
    return {name: METRICS[name](labels, predictions) for name in names}


def task_score(metrics: dict[str, float], names: Sequence[str]) -> float:
    """A task's GLUE score: the mean of its metrics (e.g. MRPC (F1 + accuracy) / 2).

    The number to keep the best checkpoint by.
    """
    if not names:
        raise ValueError("a task score needs at least one metric")
    return float(np.mean([metrics[name] for name in names]))
