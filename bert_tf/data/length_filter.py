"""Dropping training examples that are too short or too long (the seed's data-filtering trick).

One rule for every task that filters (classification, tagging): lengths are
packed lengths before truncation, [CLS] and [SEP]s included, so
`max_seq_tokens=max_seq_length` drops exactly the examples that would be cut.
Bounds are given in tokens, or as a percentage of the training examples to
drop at each end, in which case the bounds are read off the training lengths.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from absl import logging


@dataclasses.dataclass(frozen=True)
class LengthFilter:
    """Which training examples to keep, by packed length.

    Attributes:
      min_seq_tokens: drop examples shorter than this; 0 keeps all.
      max_seq_tokens: drop examples longer than this; 0 keeps all.
      drop_percent: instead of fixed bounds, drop up to this percentage of the
        examples at each end: the bounds become the lengths of the examples at
        that rank from the shortest and from the longest (ties are kept, so at
        most this share goes at each end).
    """

    min_seq_tokens: int = 0
    max_seq_tokens: int = 0
    drop_percent: float = 0.0

    def __post_init__(self) -> None:
        if self.min_seq_tokens < 0 or self.max_seq_tokens < 0:
            raise ValueError("--min_seq_tokens and --max_seq_tokens must be >= 0 (0 = off)")
        if self.max_seq_tokens and self.min_seq_tokens > self.max_seq_tokens:
            raise ValueError(f"--min_seq_tokens={self.min_seq_tokens} exceeds "
                             f"--max_seq_tokens={self.max_seq_tokens}")
        if not 0.0 <= self.drop_percent < 50.0:
            raise ValueError(f"--length_filter_percent={self.drop_percent} must be in [0, 50)")
        if self.drop_percent and (self.min_seq_tokens or self.max_seq_tokens):
            raise ValueError("give either --length_filter_percent or --min_seq_tokens/--max_seq_tokens")


@dataclasses.dataclass(frozen=True)
class LengthFilterCounts:
    """What a length filter kept and dropped, and the bounds it used (0: none)."""

    kept: int
    too_short: int
    too_long: int
    min_seq_tokens: int = 0
    max_seq_tokens: int = 0


def _bounds(num_tokens: np.ndarray, rule: LengthFilter) -> tuple[int, int]:
    if not rule.drop_percent or not len(num_tokens):
        return rule.min_seq_tokens, rule.max_seq_tokens
    ranked = np.sort(num_tokens)
    k = int(len(ranked) * rule.drop_percent / 100)
    return int(ranked[k]), int(ranked[len(ranked) - 1 - k])


def length_mask(num_tokens: np.ndarray, rule: LengthFilter) -> tuple[np.ndarray, LengthFilterCounts]:
    """Which examples `rule` keeps.

    Args:
      num_tokens: int [N], each example's packed length before truncation.
      rule: the bounds.

    Returns:
      bool [N], true for kept examples; and the counts with the bounds used
      (logged when the filter is on).
    """
    low, high = _bounds(np.asarray(num_tokens), rule)
    too_short = num_tokens < low
    too_long = (num_tokens > high) if high else np.zeros_like(too_short)
    keep = ~(too_short | too_long)
    counts = LengthFilterCounts(int(keep.sum()), int(too_short.sum()), int(too_long.sum()), low, high)
    if low or high:
        logging.info("length filter [%d, %s] tokens: kept %d, dropped %d too short, %d too long",
                     low, high or "inf", counts.kept, counts.too_short, counts.too_long)
    return keep, counts
