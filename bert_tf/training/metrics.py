"""Figures of a pretraining run: model FLOPs, utilisation, the unigram baseline."""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Iterable

import numpy as np
import tensorflow as tf

from bert_tf.configs import BertConfig


def pretraining_flops_per_sequence(config: BertConfig, seq_length: int, max_predictions: int) -> float:
    """Model FLOPs of one training sequence: forward plus backward (twice forward).

    Counts the matmuls (2 FLOPs per multiply-add): per token and layer the
    Q, K, V and output projections (4 H^2) and the feed-forward (2 H I); per
    layer the attention scores and weighted sum (2 S^2 H); the pooler and NSP
    head; the MLM transform and vocab projection at the predicted positions only.
    """
    h, i, s = config.hidden_size, config.intermediate_size, seq_length
    per_layer = s * (4 * h * h + 2 * h * i) + 2 * s * s * h
    encoder = config.num_hidden_layers * per_layer + h * h + 2 * h
    mlm = max_predictions * (h * h + h * config.vocab_size)
    return 3 * 2 * (encoder + mlm)


def measure_matmul_peak(dtype: tf.DType = tf.float32, size: int = 2048, seconds: float = 1.0) -> float:
    """FLOP/s of square matmuls on the default device: the peak that MFU is stated against."""
    a = tf.random.normal([size, size], dtype=tf.float32)
    a = tf.cast(a, dtype)

    @tf.function
    def matmul(x):
        return tf.matmul(x, x)

    matmul(a).numpy()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        matmul(a).numpy()
        count += 1
    return 2 * size ** 3 * count / (time.perf_counter() - start)


def unigram_entropy(token_counts: Counter) -> float:
    """Entropy (nats) of the token distribution: the MLM loss of a model that
    knows only token frequencies."""
    total = sum(token_counts.values())
    probs = np.array([c / total for c in token_counts.values() if c])
    return float(-(probs * np.log(probs)).sum())


def masked_token_counts(batches: Iterable[dict]) -> Counter:
    """Counts the masked_lm_ids with non-zero weight over some batches."""
    counts: Counter = Counter()
    for batch in batches:
        ids = np.asarray(batch["masked_lm_ids"])[np.asarray(batch["masked_lm_weights"]) > 0]
        counts.update(ids.tolist())
    return counts


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
