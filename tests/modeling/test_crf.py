"""CRF: forward algorithm and Viterbi against brute-force enumeration, constraints, Keras plumbing."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import tag_schemes
from bert_tf.modeling import crf

TAGS = {
    "BIO": ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"],
    "IOB1": ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"],
    "BIOES": ["O", "B-LOC", "B-PER", "E-LOC", "E-PER", "I-LOC", "I-PER", "S-LOC", "S-PER"],
}


def _random_case(rng, num_tags, seq_len, batch=4):
    """Emissions, weights and masks with every shape of mask: full, empty, length 1, holes."""
    emissions = rng.normal(scale=2.0, size=(batch, seq_len, num_tags)).astype(np.float32)
    weights = [rng.normal(size=shape).astype(np.float32)
               for shape in ((num_tags, num_tags), (num_tags,), (num_tags,))]
    mask = rng.integers(0, 2, size=(batch, seq_len))
    mask[0] = 1
    mask[1] = 0
    mask[2] = 0
    mask[2, rng.integers(seq_len)] = 1
    return emissions, weights, mask


def _paths(seq_len, num_tags):
    return itertools.product(range(num_tags), repeat=seq_len)


def _path_score(emissions, path, weights):
    transitions, start, end = (w.astype(np.float64) for w in weights)
    if not path:
        return 0.0
    score = start[path[0]] + end[path[-1]] + sum(emissions[t, y] for t, y in enumerate(path))
    return score + sum(transitions[a, b] for a, b in zip(path, path[1:]))


def _brute_force(emissions, mask, weights):
    """log Z, best path (over the kept positions) and its score, in float64."""
    kept = emissions[mask.astype(bool)].astype(np.float64)
    scores = {path: _path_score(kept, path, weights) for path in _paths(len(kept), emissions.shape[-1])}
    best = max(scores, key=scores.get)
    log_z = np.logaddexp.reduce(list(scores.values())) if len(kept) else 0.0
    return log_z, best, scores[best]


CASES = [(num_tags, seq_len, seed) for num_tags in (1, 2, 3, 4) for seq_len in (1, 2, 3, 5)
         for seed in range(2)]


@pytest.mark.parametrize("num_tags, seq_len, seed", CASES)
def test_forward_and_viterbi_equal_enumeration(num_tags, seq_len, seed):
    rng = np.random.default_rng(100 * num_tags + 10 * seq_len + seed)
    emissions, weights, mask = _random_case(rng, num_tags, seq_len)
    tags = np.where(mask, rng.integers(0, num_tags, size=mask.shape), -1)
    log_z = crf.crf_log_partition(emissions, mask, *weights).numpy()
    score = crf.crf_sequence_score(emissions, tags, mask, *weights).numpy()
    paths, best = (x.numpy() for x in crf.viterbi_decode(emissions, mask, *weights))
    for b in range(len(emissions)):
        want_z, want_path, want_best = _brute_force(emissions[b], mask[b], weights)
        kept = mask[b].astype(bool)
        np.testing.assert_allclose(log_z[b], want_z, atol=1e-5, rtol=0)
        np.testing.assert_allclose(score[b], _path_score(emissions[b][kept], tuple(tags[b][kept]), weights),
                                   atol=1e-5, rtol=0)
        assert tuple(paths[b][kept]) == want_path
        assert not paths[b][~kept].any()
        np.testing.assert_allclose(best[b], want_best, atol=1e-5, rtol=0)


def test_masked_positions_are_skipped_not_cut():
    # Holes in the mask must give the same result as removing those positions.
    rng = np.random.default_rng(7)
    emissions, weights, _ = _random_case(rng, 3, 6)
    emissions = emissions[:1]
    mask = np.array([[1, 0, 1, 1, 0, 1]])
    tags = np.array([[2, -1, 0, 1, -1, 2]])
    dense = emissions[:, mask[0].astype(bool)]
    np.testing.assert_allclose(crf.crf_log_likelihood(emissions, tags, mask, *weights),
                               crf.crf_log_likelihood(dense, tags[:, mask[0].astype(bool)], None, *weights),
                               atol=1e-6)
    paths = crf.viterbi_decode(emissions, mask, *weights)[0].numpy()
    dense_paths = crf.viterbi_decode(dense, None, *weights)[0].numpy()
    np.testing.assert_array_equal(paths[:, mask[0].astype(bool)], dense_paths)


def _is_valid(tags, scheme):
    sequence = [None, *tags, None]
    return all(tag_schemes.transition_allowed(a, b, scheme) for a, b in zip(sequence, sequence[1:]))


def _constrained(tags, scheme, **kwargs):
    return crf.CRF(len(tags), tag_schemes.allowed_transitions(tags, scheme), **kwargs)


@pytest.mark.parametrize("scheme", tag_schemes.SCHEMES)
def test_constrained_decoding_never_invalid(scheme):
    tags = TAGS[scheme]
    rng = np.random.default_rng(3)
    layer = _constrained(tags, scheme)
    layer.set_weights([rng.normal(scale=3.0, size=w.shape) for w in layer.get_weights()])
    emissions = rng.normal(scale=5.0, size=(200, 9, len(tags))).astype(np.float32)
    mask = np.arange(9)[None] < rng.integers(1, 10, size=(200, 1))
    decoded = layer(emissions, mask).numpy()
    free = crf.viterbi_decode(emissions, mask, *layer.get_weights())[0].numpy()
    invalid_free = 0
    for row, free_row, keep in zip(decoded, free, mask):
        assert _is_valid([tags[i] for i in row[keep]], scheme)
        invalid_free += not _is_valid([tags[i] for i in free_row[keep]], scheme)
    # Without the constraints these emissions do decode invalid paths.
    assert invalid_free > 50


def test_constrained_decoding_is_best_valid_path():
    tags = TAGS["BIO"]
    rng = np.random.default_rng(4)
    layer = _constrained(tags, "BIO")
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in layer.get_weights()]
    layer.set_weights(weights)
    emissions = rng.normal(scale=3.0, size=(6, 4, len(tags))).astype(np.float32)
    decoded = layer(emissions).numpy()
    for row, e in zip(decoded, emissions):
        valid = [p for p in _paths(4, len(tags)) if _is_valid([tags[i] for i in p], "BIO")]
        assert tuple(row) == max(valid, key=lambda p: _path_score(e, p, weights))


def _brute_force_marginals(emissions, mask, weights):
    """Tag marginals [S, T] (0 at masked-out positions) and expected transition counts [T, T]."""
    kept = np.flatnonzero(mask)
    num_tags = emissions.shape[-1]
    log_z = _brute_force(emissions, mask, weights)[0]
    tag_marginals = np.zeros(emissions.shape)
    transition_counts = np.zeros([num_tags, num_tags])
    for path in _paths(len(kept), num_tags):
        p = np.exp(_path_score(emissions[kept], path, weights) - log_z)
        tag_marginals[kept, path] += p
        for a, b in zip(path, path[1:]):
            transition_counts[a, b] += p
    return tag_marginals, transition_counts


def test_gradients_are_marginals():
    # d log Z / d emissions are the tag marginals, d log Z / d transitions the
    # expected transition counts.
    rng = np.random.default_rng(5)
    emissions, weights, mask = _random_case(rng, 3, 5)
    emissions = tf.constant(emissions)
    transitions = tf.Variable(weights[0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(emissions)
        log_z = crf.crf_log_partition(emissions, mask, transitions, *weights[1:])
        rows = [log_z[b] for b in range(len(mask))]
    for b, row in enumerate(rows):
        marginals, counts = _brute_force_marginals(emissions[b].numpy(), mask[b], weights)
        d_emissions, d_transitions = tape.gradient(row, [emissions, transitions])
        np.testing.assert_allclose(d_emissions[b], marginals, atol=1e-5)
        np.testing.assert_allclose(d_transitions, counts, atol=1e-5)


def test_loss_gradient_is_finite():
    rng = np.random.default_rng(5)
    emissions, weights, mask = _random_case(rng, 4, 5)
    layer = crf.CRF(4)
    layer.set_weights(weights)
    tags = np.where(mask, rng.integers(0, 4, size=mask.shape), -1)
    with tf.GradientTape() as tape:
        loss = layer.negative_log_likelihood(emissions, tags, mask)
    grads = tape.gradient(loss, layer.trainable_weights)
    assert all(np.isfinite(g.numpy()).all() and np.abs(g.numpy()).max() > 0 for g in grads)
    assert np.isfinite(loss.numpy()) and loss.numpy() > 0


def _model(tags, scheme):
    emissions = keras.Input((None, len(tags)), name="emissions")
    mask = keras.Input((None,), dtype="int32", name="mask")
    return keras.Model([emissions, mask], _constrained(tags, scheme, name="crf")(emissions, mask))


def test_config_and_saving_round_trip(tmp_path):
    tags = TAGS["BIOES"]
    rng = np.random.default_rng(6)
    model = _model(tags, "BIOES")
    layer = model.get_layer("crf")
    layer.set_weights([rng.normal(scale=3.0, size=w.shape) for w in layer.get_weights()])
    emissions = rng.normal(scale=3.0, size=(8, 7, len(tags))).astype(np.float32)
    mask = (np.arange(7)[None] < rng.integers(1, 8, size=(8, 1))).astype(np.int32)
    want = model.predict([emissions, mask], verbose=0)
    assert want.dtype == np.int32 and want.shape == (8, 7)

    clone = crf.CRF.from_config(layer.get_config())
    assert clone.num_tags == len(tags)
    for table, expected in zip(clone.allowed, tag_schemes.allowed_transitions(tags, "BIOES"), strict=True):
        np.testing.assert_array_equal(table, expected)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(clone(emissions, mask), want)

    model.save(tmp_path / "crf.keras")
    loaded = keras.saving.load_model(tmp_path / "crf.keras")
    np.testing.assert_array_equal(loaded.predict([emissions, mask], verbose=0), want)


def test_float32_under_mixed_precision():
    rng = np.random.default_rng(8)
    emissions, weights, mask = _random_case(rng, 4, 5)
    tags = np.where(mask, rng.integers(0, 4, size=mask.shape), -1)
    reference = crf.CRF(4)
    reference.set_weights(weights)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        layer = crf.CRF(4)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    layer.set_weights(weights)
    half = tf.constant(emissions, tf.float16)
    likelihood = layer.log_likelihood(half, tags, mask)
    assert likelihood.dtype == tf.float32 and layer.compute_dtype == "float32"
    np.testing.assert_allclose(likelihood, reference.log_likelihood(tf.cast(half, tf.float32), tags, mask),
                               atol=1e-6)


def test_xla_matches_eager():
    rng = np.random.default_rng(9)
    emissions, weights, mask = _random_case(rng, 4, 5)
    tags = np.where(mask, rng.integers(0, 4, size=mask.shape), -1)
    layer = crf.CRF(4)
    layer.set_weights(weights)

    @tf.function(jit_compile=True)
    def run(emissions, tags, mask):
        return layer(emissions, mask), layer.log_likelihood(emissions, tags, mask)

    paths, likelihood = run(emissions, tags, mask)
    np.testing.assert_array_equal(paths, layer(emissions, mask))
    np.testing.assert_allclose(likelihood, layer.log_likelihood(emissions, tags, mask), atol=1e-5)


def test_learns_transitions_from_tags_alone():
    # Emissions carry no information, so only the transition weights can learn
    # the gold paths: B-PER I-PER then O, of lengths 3 to 6.
    tags = TAGS["BIO"]
    layer = _constrained(tags, "BIO")
    optimizer = keras.optimizers.Adam(0.1)
    emissions = np.zeros([4, 6, len(tags)], np.float32)
    mask = np.arange(6)[None] < np.array([[3], [4], [5], [6]])
    gold = np.where(mask, [[2, 4, 0, 0, 0, 0]], -1)
    for _ in range(60):
        with tf.GradientTape() as tape:
            loss = layer.negative_log_likelihood(emissions, gold, mask)
        optimizer.apply_gradients(zip(tape.gradient(loss, layer.trainable_weights), layer.trainable_weights))
    assert loss.numpy() < 0.1
    np.testing.assert_array_equal(layer(emissions, mask), np.where(mask, gold, 0))


def test_learning_rate_multiplier_scales_scores_and_speeds_adam():
    rng = np.random.default_rng(10)
    emissions, weights, mask = _random_case(rng, 4, 5)
    tags = np.where(mask, rng.integers(0, 4, size=mask.shape), -1)
    plain, scaled = crf.CRF(4), crf.CRF(4, learning_rate_multiplier=50.0)
    plain.set_weights(weights)
    scaled.set_weights([w / 50.0 for w in weights])
    np.testing.assert_allclose(scaled.log_likelihood(emissions, tags, mask),
                               plain.log_likelihood(emissions, tags, mask), rtol=1e-5)
    np.testing.assert_array_equal(scaled(emissions, mask), plain(emissions, mask))
    assert crf.CRF.from_config(scaled.get_config()).learning_rate_multiplier == 50.0

    def moved(layer):  # how far the transition scores move in 5 Adam steps from zero
        layer.set_weights([np.zeros_like(w) for w in weights])
        optimizer = keras.optimizers.Adam(1e-3)
        for _ in range(5):
            with tf.GradientTape() as tape:
                loss = layer.negative_log_likelihood(emissions, tags, mask)
            optimizer.apply_gradients(zip(tape.gradient(loss, layer.trainable_weights),
                                          layer.trainable_weights))
        return np.abs(layer.transitions.numpy() * layer.learning_rate_multiplier).max()

    np.testing.assert_allclose(moved(scaled) / moved(plain), 50.0, rtol=0.05)


def test_allowed_tables_must_fit_num_tags():
    with pytest.raises(ValueError, match=r"allowed: tables of shapes \[\(2, 2\), \(2,\), \(2,\)\]; expected \[3, 3\]"):
        crf.CRF(3, [np.ones([2, 2]), np.ones(2), np.ones(2)])
    assert crf.CRF.from_config(crf.CRF(3).get_config()).allowed is None
