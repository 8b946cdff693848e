"""Pretraining losses as pure functions, always computed in float32."""

from __future__ import annotations

import tensorflow as tf


def masked_lm_loss(masked_lm_ids: tf.Tensor, mlm_logits: tf.Tensor,
                   masked_lm_weights: tf.Tensor) -> tf.Tensor:
    """Weighted mean cross-entropy over the masked positions.

    Args:
        masked_lm_ids: int32 `[B, P]` original token ids at the masked positions.
        mlm_logits: `[B, P, V]` logits (any float dtype; cast to float32).
        masked_lm_weights: `[B, P]`, 1.0 for real predictions and 0.0 for
            padding slots.

    Returns:
        float32 scalar: sum(weight * cross-entropy) / sum(weight), 0 when the
        total weight is 0.
    """
    total, weight = masked_lm_loss_sum(masked_lm_ids, mlm_logits, masked_lm_weights)
    return tf.math.divide_no_nan(total, weight)


def masked_lm_loss_sum(masked_lm_ids: tf.Tensor, mlm_logits: tf.Tensor,
                       masked_lm_weights: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The numerator and denominator of `masked_lm_loss`, float32 scalars.

    Kept apart so a distributed or accumulated step can sum both over replicas
    and micro-batches before dividing once.
    """
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(masked_lm_ids, tf.int32), logits=tf.cast(mlm_logits, tf.float32))
    weights = tf.cast(masked_lm_weights, tf.float32)
    return tf.reduce_sum(per_token * weights), tf.reduce_sum(weights)


def next_sentence_loss(next_sentence_labels: tf.Tensor, nsp_logits: tf.Tensor) -> tf.Tensor:
    """Mean cross-entropy of the next-sentence prediction.

    Args:
        next_sentence_labels: int32 `[B]` or `[B, 1]`, 0 = B follows A, 1 = random B.
        nsp_logits: `[B, 2]` logits (cast to float32).

    Returns:
        float32 scalar.
    """
    labels = tf.reshape(tf.cast(next_sentence_labels, tf.int32), [-1])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.cast(nsp_logits, tf.float32)))


def pretraining_loss(features: dict[str, tf.Tensor],
                     outputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """MLM + NSP loss of one batch: returns `loss`, `mlm_loss`, `nsp_loss`."""
    mlm = masked_lm_loss(features["masked_lm_ids"], outputs["mlm_logits"],
                         features["masked_lm_weights"])
    nsp = next_sentence_loss(features["next_sentence_labels"], outputs["nsp_logits"])
    return {"loss": mlm + nsp, "mlm_loss": mlm, "nsp_loss": nsp}
