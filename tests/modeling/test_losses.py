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
    total, hits = losses.masked_lm_sums(labels, logits, weights)
    assert np.isclose(float(total), expected * 9, rtol=1e-6)
    assert float(hits) == ((logits.argmax(-1) == labels) * weights).sum()


def test_argmax_hits_is_argmax_with_its_ties_inside_and_outside_xla():
    # Integer logits in a narrow range tie often: the lowest tied index must win, as in argmax.
    rng = np.random.default_rng(3)
    logits = rng.integers(-2, 3, (64, 6, 9)).astype(np.float32)
    labels = rng.integers(0, 9, (64, 6))
    expected = (logits.argmax(-1) == labels).astype(np.float32)
    assert 0 < expected.mean() < 1 and ((logits == logits.max(-1, keepdims=True)).sum(-1) > 1).mean() > 0.3
    np.testing.assert_array_equal(losses.argmax_hits(logits, labels), expected)
    compiled = tf.function(losses.argmax_hits, jit_compile=True)
    np.testing.assert_array_equal(compiled(tf.constant(logits, tf.bfloat16), labels), expected)
    _, hits = losses.masked_lm_sums(labels, logits, np.ones(labels.shape, np.float32))
    assert float(hits) == expected.sum()


def test_masked_lm_sums_gradient_is_autodiffs_of_the_textbook_loss():
    """The written-out gradient, (softmax - one_hot) * weight, against autodiff of
    sparse_softmax_cross_entropy_with_logits, zero-weight slots included."""
    rng = np.random.default_rng(4)
    logits = tf.constant(rng.normal(scale=3.0, size=(4, 5, 37)), tf.float32)
    labels = rng.integers(0, 37, (4, 5))
    weights = tf.constant(rng.integers(0, 2, (4, 5)), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        total, _ = losses.masked_lm_sums(labels, logits, weights)
        reference = tf.reduce_sum(weights * tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    np.testing.assert_allclose(total, reference, rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(total, logits), tape.gradient(reference, logits), atol=1e-7)
    half = tf.cast(logits, tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(half)
        total, _ = losses.masked_lm_sums(labels, half, weights)
    gradient = tape.gradient(total, half)
    assert gradient.dtype == tf.bfloat16
    widened = tf.cast(half, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(widened)
        reference = tf.reduce_sum(weights * tf.nn.sparse_softmax_cross_entropy_with_logits(labels, widened))
    expected = tf.cast(tf.cast(tape.gradient(reference, widened), tf.bfloat16), tf.float32)
    np.testing.assert_allclose(tf.cast(gradient, tf.float32), expected, rtol=2**-8, atol=1e-7)  # 1 bf16 ulp


def test_masked_lm_sums_at_vocab_size_far_labels_and_ties():
    """Rows as long as BERT's vocab: a label 2,000 nats below the top logit gives a finite,
    exact loss (its probability underflows float32), and argmax ties go to the lowest index."""
    rng = np.random.default_rng(5)
    logits = rng.integers(-2, 3, (2, 10, 30522)).astype(np.float32)
    logits[0, :, -1] = 3.0  # the top logit last in the row
    labels = rng.integers(0, 30522, (2, 10))
    labels[1, :5] = logits[1, :5].argmax(-1)  # some hits
    logits[1, 5:, 7] = -2000.0
    labels[1, 5:] = 7
    weights = np.ones(labels.shape, np.float32)
    total, hits = losses.masked_lm_sums(labels, logits, weights)
    assert np.isclose(float(total), _cross_entropy(logits.astype(np.float64), labels).sum(), rtol=1e-6)
    assert float(hits) == (logits.argmax(-1) == labels).sum() == 5


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


def test_training_sums_and_the_public_loss_are_one_loss():
    """What the training step divides (PretrainingTask's sums by its weights) is `pretraining_loss`."""
    from bert_tf.training import tasks

    rng = np.random.default_rng(0)
    features = {"input_word_ids": np.zeros((4, 8), np.int32),
                "masked_lm_ids": rng.integers(0, 50, (4, 5)).astype(np.int32),
                "masked_lm_weights": rng.integers(0, 2, (4, 5)).astype(np.float32),
                "next_sentence_labels": rng.integers(0, 2, (4,)).astype(np.int32)}
    outputs = {"mlm_logits": tf.constant(rng.normal(size=(4, 5, 50)), tf.bfloat16),
               "nsp_logits": tf.constant(rng.normal(size=(4, 2)), tf.bfloat16)}
    task = tasks.PretrainingTask()
    totals = {k: float(v) for k, v in {**task.sums(features, outputs), **task.weights(features)}.items()}
    trained = task.summarize(totals)
    public = {k: float(v) for k, v in losses.pretraining_loss(features, outputs).items()}
    assert public.keys() <= trained.keys()
    for key, value in public.items():
        assert np.isclose(trained[key], value, rtol=1e-6), key
    mlm_logits = np.asarray(tf.cast(outputs["mlm_logits"], tf.float32))
    expected_hits = ((mlm_logits.argmax(-1) == features["masked_lm_ids"]) * features["masked_lm_weights"]).sum()
    assert totals["mlm_correct"] == expected_hits
    assert np.isclose(trained["mlm_accuracy"], expected_hits / features["masked_lm_weights"].sum())
