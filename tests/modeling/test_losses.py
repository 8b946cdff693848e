import numpy as np
import tensorflow as tf

from bert_tf.modeling import losses


def _cross_entropy(logits, labels):
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]


def test_masked_lm_loss_is_weighted_mean():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 11)).astype(np.float32)
    labels = rng.integers(0, 11, (3, 5))
    weights = np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]], np.float32)
    expected = (_cross_entropy(logits, labels) * weights).sum() / weights.sum()
    assert np.isclose(float(losses.masked_lm_loss(labels, logits, weights)), expected, rtol=1e-6)
    total, weight = losses.masked_lm_loss_sum(labels, logits, weights)
    assert float(weight) == 9.0 and np.isclose(float(total), expected * 9, rtol=1e-6)


def test_masked_lm_loss_is_zero_without_predictions():
    logits = np.ones((2, 3, 7), np.float32)
    loss = losses.masked_lm_loss(np.zeros((2, 3)), logits, np.zeros((2, 3)))
    assert float(loss) == 0.0


def test_next_sentence_loss_accepts_both_label_shapes():
    logits = np.array([[2.0, -1.0], [0.5, 0.5], [-3.0, 1.0]], np.float32)
    labels = np.array([0, 1, 1])
    expected = _cross_entropy(logits, labels).mean()
    assert np.isclose(float(losses.next_sentence_loss(labels, logits)), expected, rtol=1e-6)
    assert np.isclose(float(losses.next_sentence_loss(labels[:, None], logits)), expected, rtol=1e-6)


def test_losses_are_float32_for_half_precision_logits():
    logits = tf.constant(np.random.default_rng(1).normal(size=(2, 3, 9)), tf.bfloat16)
    loss = losses.masked_lm_loss(tf.zeros((2, 3), tf.int32), logits, tf.ones((2, 3), tf.bfloat16))
    assert loss.dtype == tf.float32
    assert losses.next_sentence_loss(tf.zeros((2,), tf.int32), logits[:, 0, :2]).dtype == tf.float32


def test_pretraining_task_sums_equal_the_plain_kernels():
    from bert_tf.training import tasks

    rng = np.random.default_rng(0)
    logits = tf.constant(rng.normal(size=(4, 5, 50)), tf.float32)
    labels = tf.constant(rng.integers(0, 50, (4, 5)), tf.int32)
    weights = tf.constant(rng.integers(0, 2, (4, 5)), tf.float32)
    loss, hits = tasks._weighted_xent_and_hits(logits, labels, weights)
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    np.testing.assert_allclose(loss, tf.reduce_sum(xent * weights), rtol=1e-5)
    assert float(hits) == float(tf.reduce_sum(tasks._hits(logits, labels) * weights))
