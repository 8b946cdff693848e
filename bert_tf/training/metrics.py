"""Figures of a pretraining run: model FLOPs, utilisation, the unigram baseline."""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections import Counter
from typing import Iterable

import numpy as np
import tensorflow as tf

from bert_tf.configs import BertConfig


@dataclasses.dataclass(frozen=True)
class Gemm:
    """One matrix multiply of a training step: `count` independent [m, k] x [k, n] products."""

    name: str
    count: int
    m: int
    k: int
    n: int

    @property
    def flops(self) -> int:
        return 2 * self.count * self.m * self.k * self.n


def _with_gradients(forward: list[Gemm]) -> list[Gemm]:
    # y[m, n] = x[m, k] w[k, n] has dx = dy w^T ([m, n] x [n, k]) and dw = x^T dy ([k, m] x [m, n]).
    backward = []
    for g in forward:
        backward += [Gemm(f"{g.name}/dx", g.count, g.m, g.n, g.k), Gemm(f"{g.name}/dw", g.count, g.k, g.m, g.n)]
    return forward + backward


def pretraining_gemms(config: BertConfig, batch: int, seq_length: int, max_predictions: int,
                      nsp: bool = True) -> list[Gemm]:
    """Every matmul of one pretraining step, forward and backward, at the model's shapes.

    Per layer: the Q, K, V and output projections and the feed-forward over all
    tokens, and per head the attention scores and weighted sum; then the pooler
    and (with `nsp`) the NSP head, and the MLM transform and vocab projection at
    the predicted positions only (the head is gathered). Embedding lookups and
    their gradients are gathers and scatters, not matmuls.
    """
    h, i, s = config.hidden_size, config.intermediate_size, seq_length
    heads, tokens, predicted = config.num_attention_heads, batch * seq_length, batch * max_predictions
    d = h // heads
    layer = [Gemm("query", 1, tokens, h, h), Gemm("key", 1, tokens, h, h), Gemm("value", 1, tokens, h, h),
             Gemm("scores", batch * heads, s, d, s), Gemm("context", batch * heads, s, s, d),
             Gemm("attention_output", 1, tokens, h, h), Gemm("intermediate", 1, tokens, h, i),
             Gemm("output", 1, tokens, i, h)]
    forward = [dataclasses.replace(g, name=f"layer_{n}/{g.name}")
               for n in range(config.num_hidden_layers) for g in layer]
    forward += [Gemm("pooler", 1, batch, h, h)] + ([Gemm("nsp", 1, batch, h, 2)] if nsp else [])
    forward += [Gemm("mlm_transform", 1, predicted, h, h), Gemm("mlm_vocab", 1, predicted, h, config.vocab_size)]
    return _with_gradients(forward)


def pretraining_flops_per_sequence(config: BertConfig, seq_length: int, max_predictions: int) -> float:
    """Model FLOPs of one training sequence: forward plus backward (twice forward).

    The FLOPs (2 per multiply-add) of `pretraining_gemms`: per token and layer
    the Q, K, V and output projections (4 H^2) and the feed-forward (2 H I);
    per layer the attention scores and weighted sum (2 S^2 H); the pooler and
    NSP head; the MLM transform and vocab projection at the predicted positions.
    """
    return float(sum(g.flops for g in pretraining_gemms(config, 1, seq_length, max_predictions)))


def gemm_floor_call(gemms: list[Gemm], dtype: tf.DType = tf.float32) -> functools.partial:
    """A call that runs `gemms` alone, back to back as one compiled function (`float()` of
    its result waits for them).

    The floor a training step with these matmuls could reach on this device:
    its step time over this call's is how far the rest of the step (element-wise
    ops, gathers, the optimizer, the framework) keeps it from its matmuls' own speed.
    """
    # Operands of their own for every product: products of equal inputs would be merged
    # into one (common subexpressions), as the step's products never are.
    operands = [(tf.cast(tf.random.normal([g.count, g.m, g.k]), dtype),
                 tf.cast(tf.random.normal([g.count, g.k, g.n]), dtype)) for g in gemms]

    @tf.function
    def run_all(operands):
        # Operands come in as arguments (captured constants would be folded away at trace
        # time), and one element of each product goes out (an unread result would be pruned).
        return tf.add_n([tf.cast(tf.matmul(a, b)[0, 0, 0], tf.float32) for a, b in operands])

    return functools.partial(run_all, operands)


def measure_copy_bandwidth(megabytes: int = 64, seconds: float = 1.0) -> float:
    """Bytes/second an element-wise op moves through memory on the default device (the best call).

    `x * 2` over `megabytes` of float32, read once and written once, far beyond the caches:
    the memory-bound counterpart of the matmul peak, for a step's element-wise kernels, casts
    and optimizer updates.
    """
    x = tf.ones([megabytes * 2 ** 20 // 4])

    @tf.function
    def scale(x):
        return (x * 2.0)[0]  # one element goes out, as in gemm_floor_call

    return 2 * megabytes * 2 ** 20 / _best_call(lambda: scale(x).numpy(), seconds)


def _best_call(call, seconds: float) -> float:
    """The fastest of the calls of `call()` made in `seconds` (after one warm-up call), in seconds."""
    call()
    best, start = math.inf, time.perf_counter()
    while time.perf_counter() - start < seconds or best == math.inf:
        begin = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - begin)
    return best


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
