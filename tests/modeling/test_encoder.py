import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.layers import (BertEmbeddings, Conv1D, Dense, Pooler, PositionEmbedding,
                                     TransformerBlock)
from tests.conftest import encoder_features, random_batch


def _outputs(model, features, training=False):
    out = model(features, training=training)
    return {"sequence_output": out["sequence_output"].numpy(),
            "pooled_output": out["pooled_output"].numpy(),
            "encoder_outputs": [x.numpy() for x in out["encoder_outputs"]]}


def test_output_shapes(tiny_config):
    model = BertEncoder(tiny_config)
    out = _outputs(model, encoder_features(random_batch(tiny_config, batch=3, seq=11)))
    assert out["sequence_output"].shape == (3, 11, 32)
    assert out["pooled_output"].shape == (3, 32)
    assert len(out["encoder_outputs"]) == tiny_config.num_hidden_layers
    np.testing.assert_array_equal(out["encoder_outputs"][-1], out["sequence_output"])
    assert set(model.input) == {"input_word_ids", "input_mask", "input_type_ids"}


def test_padding_does_not_change_tokens(tiny_config):
    model = BertEncoder(tiny_config)
    batch = encoder_features(random_batch(tiny_config, batch=3, seq=11))
    rng = np.random.default_rng(1)
    padded = {k: np.pad(v, ((0, 0), (0, 9))) for k, v in batch.items()}
    # Garbage in the padding: random ids and segment ids that the mask must hide.
    pad = padded["input_mask"] == 0
    padded["input_word_ids"][pad] = rng.integers(1, tiny_config.vocab_size, pad.sum())
    padded["input_type_ids"][pad] = 1
    short, long = _outputs(model, batch), _outputs(model, padded)
    keep = batch["input_mask"].astype(bool)
    np.testing.assert_allclose(long["sequence_output"][:, :11][keep],
                               short["sequence_output"][keep], atol=1e-6)
    np.testing.assert_allclose(long["pooled_output"], short["pooled_output"], atol=1e-6)


def test_dropout_only_in_training(tiny_config):
    model = BertEncoder(tiny_config)
    features = encoder_features(random_batch(tiny_config))
    a, b = _outputs(model, features), _outputs(model, features)
    np.testing.assert_array_equal(a["sequence_output"], b["sequence_output"])
    c = _outputs(model, features, training=True)
    assert np.abs(c["sequence_output"] - a["sequence_output"]).max() > 1e-3


def test_get_config_round_trip(tiny_config):
    model = BertEncoder(tiny_config)
    clone = BertEncoder.from_config(model.get_config())
    assert model.get_config() == clone.get_config()
    assert set(model.get_config()) == {"config", "recompute_activations", "name", "trainable"}
    assert set(model.get_config()["config"]) == set(tiny_config.to_dict())
    clone.set_weights(model.get_weights())
    features = encoder_features(random_batch(tiny_config))
    a, b = _outputs(model, features), _outputs(clone, features)
    np.testing.assert_allclose(a["sequence_output"], b["sequence_output"], atol=1e-6)
    np.testing.assert_allclose(a["pooled_output"], b["pooled_output"], atol=1e-6)


@pytest.mark.parametrize("make, args", [
    (lambda c: BertEmbeddings(c), lambda b, c: (b["input_word_ids"], b["input_type_ids"])),
    (lambda c: TransformerBlock(c, name="layer_0"),
     lambda b, c: (np.random.default_rng(0).normal(size=b["input_mask"].shape + (c.hidden_size,))
                   .astype("float32"), b["input_mask"])),
    (lambda c: Pooler(c),
     lambda b, c: (np.ones(b["input_mask"].shape + (c.hidden_size,), "float32"),)),
    (lambda c: PositionEmbedding(c.max_position_embeddings, c.hidden_size),
     lambda b, c: (np.zeros(b["input_mask"].shape + (c.hidden_size,), "float32"),)),
])
def test_layer_round_trip(tiny_config, make, args):
    layer = make(tiny_config)
    inputs = args(random_batch(tiny_config), tiny_config)
    expected = layer(*inputs)
    clone = layer.__class__.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    clone(*inputs)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(clone(*inputs), expected, atol=1e-6)


def test_saving_round_trip(tiny_config, tmp_path):
    model = BertEncoder(tiny_config)
    features = encoder_features(random_batch(tiny_config))
    path = str(tmp_path / "encoder.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, BertEncoder) and restored.config == tiny_config
    a, b = _outputs(model, features), _outputs(restored, features)
    np.testing.assert_allclose(a["sequence_output"], b["sequence_output"], atol=1e-6)
    np.testing.assert_allclose(a["pooled_output"], b["pooled_output"], atol=1e-6)


def test_variable_paths_are_the_original_scopes(tiny_config):
    paths = {v.path for v in BertEncoder(tiny_config).weights}
    for expected in ("embeddings/word_embeddings/embeddings", "embeddings/LayerNorm/gamma",
                     "layer_1/attention/self/query/kernel", "layer_1/attention/output/LayerNorm/beta",
                     "layer_0/intermediate/dense/kernel", "layer_0/output/dense/bias",
                     "pooler/dense/kernel"):
        assert expected in paths


def test_initializer_is_truncated_normal(tiny_config):
    model = BertEncoder(tiny_config.replace(vocab_size=5000))
    table = model.embeddings.word_embeddings.embeddings.numpy()
    assert np.abs(table).max() <= 2 * tiny_config.initializer_range + 1e-7
    assert abs(table.std() - 0.88 * tiny_config.initializer_range) < 0.002


@pytest.mark.parametrize("policy, atol", [("mixed_bfloat16", 0.05), ("mixed_float16", 0.01)])
def test_mixed_precision(tiny_config, policy, atol):
    features = encoder_features(random_batch(tiny_config))
    reference = BertEncoder(tiny_config)
    expected = _outputs(reference, features)
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = BertEncoder(tiny_config)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    model.set_weights(reference.get_weights())
    compute = policy.split("_")[1]
    assert all(v.dtype == "float32" for v in model.weights)
    layer_norms = [l for l in model._flatten_layers() if isinstance(l, keras.layers.LayerNormalization)]
    assert len(layer_norms) == 1 + 2 * tiny_config.num_hidden_layers
    assert all(l.compute_dtype == "float32" for l in layer_norms)
    out = model(features)
    assert out["sequence_output"].dtype == compute
    np.testing.assert_allclose(tf.cast(out["sequence_output"], tf.float32), expected["sequence_output"],
                               atol=atol)
    np.testing.assert_allclose(tf.cast(out["pooled_output"], tf.float32), expected["pooled_output"],
                               atol=atol)


def test_gelu_value_and_written_out_gradient_match_autodiff():
    from bert_tf.modeling.layers import gelu

    x = tf.constant(np.linspace(-8, 8, 1001), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours, reference = gelu(x), keras.activations.gelu(x, approximate=False)
    np.testing.assert_allclose(ours, reference, atol=1e-6)
    np.testing.assert_allclose(tape.gradient(ours, x), tape.gradient(reference, x), atol=1e-6)
    assert gelu(tf.cast(x, tf.bfloat16)).dtype == tf.bfloat16


@pytest.mark.parametrize("dtype, atol", [(tf.float32, 1e-5), (tf.bfloat16, 0.02)])
def test_biased_activation_matches_autodiff_of_the_activation_after_a_bias_add(dtype, atol):
    from bert_tf.modeling.layers import biased_activation

    rng = np.random.default_rng(2)
    x, dy = (tf.constant(rng.normal(size=(3, 20, 48)), dtype) for _ in range(2))
    bias = tf.constant(rng.normal(size=48), dtype)
    for name in ("gelu", "relu"):
        results = []
        for fn in (biased_activation(name), lambda x, b: keras.activations.get(name)(
                tf.cast(tf.cast(x, tf.float32) + tf.cast(b, tf.float32), dtype))):
            with tf.GradientTape() as tape:
                tape.watch([x, bias])
                out = fn(x, bias)
            results.append([out, *tape.gradient(out, [x, bias], output_gradients=dy)])
        for what, ours, reference in zip(("value", "x", "bias"), *results):
            assert ours.dtype == reference.dtype == dtype, (name, what)
            ours, reference = tf.cast(ours, tf.float32).numpy(), tf.cast(reference, tf.float32).numpy()
            np.testing.assert_allclose(ours, reference, atol=atol * np.abs(reference).max(), err_msg=f"{name} {what}")


@pytest.mark.parametrize("policy, rtol", [("float32", 1e-4), ("mixed_bfloat16", 0.05)])
def test_training_kernels_compute_what_the_inference_ops_compute(tiny_config, policy, rtol):
    # With no dropout, a training call (XLA-fused softmax, add + LayerNorm and GELU)
    # and an inference call (plain ops) are the same function: values and gradients.
    config = tiny_config.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    features = encoder_features(random_batch(config, batch=3, seq=11))
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = BertEncoder(config)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    results = []
    for training in (False, True):
        with tf.GradientTape() as tape:
            out = tf.cast(model(features, training=training)["sequence_output"], tf.float32)
            loss = tf.reduce_sum(out * tf.sin(tf.range(32, dtype=tf.float32)))
        results.append((out.numpy(), tape.gradient(loss, model.trainable_variables)))
    (plain, plain_grads), (fused, fused_grads) = results
    np.testing.assert_allclose(fused, plain, rtol=rtol, atol=rtol)
    total = tf.linalg.global_norm([g for g in plain_grads if g is not None]).numpy()
    for variable, a, b in zip(model.trainable_variables, plain_grads, fused_grads):
        if a is None or b is None:  # the pooler does not reach sequence_output
            assert a is None and b is None and "pooler" in variable.path
            continue
        a, b = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy()
        if "key/bias" in variable.path:
            # 0 in exact arithmetic (a shift shared by all keys): both only rounding noise.
            assert max(np.linalg.norm(a), np.linalg.norm(b)) <= 1e-6 * total, variable.path
            continue
        assert np.linalg.norm(a - b) <= rtol * np.linalg.norm(a) + rtol * 2e-3, variable.path


def test_training_kernels_take_sequences_of_unknown_length(tiny_config):
    # Fine-tuning traces its step with the sequence length unknown: no kernel may need it static.
    model = BertEncoder(tiny_config)
    spec = {name: tf.TensorSpec([None, None], tf.int32)
            for name in ("input_word_ids", "input_mask", "input_type_ids")}

    @tf.function(input_signature=[spec])
    def gradients(features):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(model(features, training=True)["sequence_output"], tf.float32))
        return tape.gradient(loss, model.trainable_variables)

    for seq in (7, 12):
        grads = gradients(encoder_features(random_batch(tiny_config, batch=2, seq=seq)))
        assert all(np.isfinite(tf.convert_to_tensor(g).numpy()).all() for g in grads if g is not None)


@pytest.mark.parametrize("width", [1, 7, 24, 128])
def test_row_max_by_halves_is_the_maximum(width):
    from bert_tf.modeling.layers import _row_max

    x = np.random.default_rng(width).normal(size=(3, 5, width)).astype(np.float32)
    x[1, 2, -1] = 50.0  # a maximum in the last column, which every halving moves to a new column
    compiled = tf.function(_row_max, jit_compile=True)
    for fn in (_row_max, compiled):
        np.testing.assert_array_equal(fn(tf.constant(x)), x.max(-1, keepdims=True))
    unknown = tf.function(_row_max, input_signature=[tf.TensorSpec([None, None, None], tf.float32)])
    np.testing.assert_array_equal(unknown(tf.constant(x)), x.max(-1, keepdims=True))


def test_dropout_kernels_drop_at_the_rate_and_rescale():
    from bert_tf.modeling.layers import (drop_threshold, dropout_add_norm, dropout_bits, norm_dropout,
                                         softmax_dropout)

    rng = np.random.default_rng(0)
    scores = tf.constant(rng.normal(size=(4, 2, 64, 64)), tf.float32)
    seed = tf.constant([7, 8])
    probs = softmax_dropout(scores, tf.zeros([4, 1, 1, 64]), seed, 0.25).numpy()
    bits = dropout_bits(scores, seed).numpy()
    expected = tf.nn.softmax(scores).numpy() / 0.75 * (bits >= 16384)
    np.testing.assert_allclose(probs, expected, rtol=1e-6, atol=1e-7)
    assert drop_threshold(0.1) == 6554 and drop_threshold(1.0) == 65535
    x, y = (tf.constant(rng.normal(size=(8, 16)), tf.float32) for _ in range(2))
    bits = dropout_bits(y, seed).numpy()
    gamma, beta = tf.constant(rng.normal(size=16), tf.float32), tf.constant(rng.normal(size=16), tf.float32)
    bias = tf.constant(rng.normal(size=16), tf.float32)
    h = x.numpy() + (y.numpy() + bias.numpy()) * (65536 / (65536 - 6554)) * (bits >= 6554)
    normed = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(dropout_add_norm(x, y, bias, seed, gamma, beta, 0.1, 1e-12),
                               normed * gamma.numpy() + beta.numpy(), rtol=1e-5, atol=1e-5)
    bits = dropout_bits(x, seed).numpy()
    h = x.numpy()
    normed = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(norm_dropout(x, seed, gamma, beta, 0.1, 1e-12),
                               (normed * gamma.numpy() + beta.numpy()) * (65536 / (65536 - 6554)) * (bits >= 6554),
                               rtol=1e-5, atol=1e-5)


def test_bit_dropout_keeps_the_rate_and_rescales_exactly_in_bfloat16():
    # Keras' own Dropout draws bfloat16 uniforms here and drops 10.15% at rate 0.1, and
    # multiplying by 1/0.9 rounded to bfloat16 would shrink every kept unit by 0.16%.
    from bert_tf.modeling.layers import BitDropout

    layer = BitDropout(0.1, dtype="mixed_bfloat16")
    x = tf.cast(tf.random.stateless_uniform([1000, 1001], [5, 6], 1.0, 2.0), tf.bfloat16)
    assert layer(x, training=False) is x
    y = layer(x, training=True)
    assert y.dtype == tf.bfloat16
    dropped = (y.numpy() == 0).mean()
    sd = np.sqrt(0.1 * 0.9 / x.shape.num_elements())
    assert abs(dropped - 0.1) < 5 * sd
    kept = y.numpy() != 0
    exact = tf.cast(tf.cast(x, tf.float32) * (65536 / (65536 - 6554)), tf.bfloat16).numpy()
    np.testing.assert_array_equal(y.numpy()[kept], exact[kept])  # kept units: x / P(keep), rounded once
    assert (layer(x, training=True).numpy() != y.numpy()).mean() > 0.1  # a new mask every call
    with pytest.raises(ValueError, match="noise_shape"):
        BitDropout(0.1, noise_shape=(1, None))


@pytest.mark.parametrize("dtype, atol", [(tf.float32, 1e-4), (tf.bfloat16, 0.05)])
def test_layer_norm_kernels_written_out_gradients_match_autodiff(dtype, atol):
    from bert_tf.modeling.layers import dropout_add_norm, dropout_bits, dropout_from_bits, norm_dropout

    rng = np.random.default_rng(1)
    x, y, dz = (tf.constant(rng.normal(size=(3, 40, 32)), dtype) for _ in range(3))
    seed = tf.constant([1, 2])
    bits = dropout_bits(y, seed)
    gamma, beta = (tf.constant(rng.normal(size=32), tf.float32) for _ in range(2))
    bias = tf.constant(rng.normal(size=32), dtype)

    def layer_norm(h, gamma, beta):
        mean, variance = tf.nn.moments(h, axes=[-1], keepdims=True)
        return (h - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta

    def autodiff(x, y, bias, gamma, beta):  # dropout_add_norm
        h = tf.cast(x, tf.float32) + dropout_from_bits(tf.cast(y + bias, tf.float32), bits, 0.1)
        return tf.cast(layer_norm(h, gamma, beta), dtype)

    def autodiff_norm_dropout(x, y, bias, gamma, beta):  # y and bias unused
        return tf.cast(dropout_from_bits(layer_norm(tf.cast(x, tf.float32), gamma, beta), bits, 0.1), dtype)

    inputs = [x, y, bias, gamma, beta]
    _assert_same_gradients(lambda x, y, bias, *a: dropout_add_norm(x, y, bias, seed, *a, 0.1, 1e-12),
                           autodiff, inputs, dz, atol)
    _assert_same_gradients(lambda x, y, bias, *a: norm_dropout(x, seed, *a, 0.1, 1e-12),
                           autodiff_norm_dropout, inputs, dz, atol)


@pytest.mark.parametrize("dtype, atol", [(tf.float32, 1e-5), (tf.bfloat16, 0.02)])
def test_softmax_dropout_written_out_gradient_matches_autodiff(dtype, atol):
    from bert_tf.modeling.layers import dropout_bits, dropout_from_bits, softmax_dropout

    rng = np.random.default_rng(3)
    scores, dz = (tf.constant(rng.normal(size=(2, 3, 24, 24)) * 3, dtype) for _ in range(2))
    bias = tf.constant(-10000.0 * (np.arange(24) >= 20), tf.float32)[tf.newaxis, tf.newaxis, tf.newaxis]
    seed = tf.constant([5, 6])
    bits = dropout_bits(scores, seed)

    def autodiff(scores):
        return tf.cast(dropout_from_bits(tf.nn.softmax(tf.cast(scores, tf.float32) + bias), bits, 0.1), dtype)

    _assert_same_gradients(lambda scores: softmax_dropout(scores, bias, seed, 0.1), autodiff, [scores], dz, atol)


def _assert_same_gradients(ours, reference, inputs, dz, atol):
    """Gradients of ours and reference: the same dtypes, equal to atol times the largest (or both None)."""
    grads = []
    for fn in (ours, reference):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            out = fn(*inputs)
        grads.append(tape.gradient(out, inputs, output_gradients=dz))
    for name, ours, reference in zip(("x", "y", "bias", "gamma", "beta"), *grads):
        if ours is None and reference is None:
            continue
        assert ours.dtype == reference.dtype, name
        scale = np.abs(tf.cast(reference, tf.float32)).max()
        np.testing.assert_allclose(tf.cast(ours, tf.float32), tf.cast(reference, tf.float32),
                                   atol=atol * scale, err_msg=name)


def test_dropout_bits_drop_at_the_rate_independently_and_keep_the_mean():
    # Each unit's 16 bits are the top of one SplitMix64 word. The drop rate must be the
    # layer's (a bfloat16 uniform would drop 10.2% at rate 0.1), the mean kept
    # (E[dropout(x)] = x), the 16-bit values uniform, neighbouring units and the
    # masks of neighbouring seeds independent, and the same seed
    # must give the same mask in TensorFlow's kernels and in XLA's (the backward
    # pass and recomputation draw it again).
    from scipy import stats

    from bert_tf.modeling.layers import dropout, dropout_bits, dropout_from_bits

    n_rows, n_cols = 500, 2001
    x = tf.ones([n_rows, n_cols], tf.bfloat16)
    bits = dropout_bits(x, tf.constant([3, 4]))
    assert bits.dtype == tf.uint16 and bits.shape == x.shape
    np.testing.assert_array_equal(bits, tf.function(dropout_bits, jit_compile=True)(x, tf.constant([3, 4])))
    other_seed = dropout_bits(x, tf.constant([3, 5])).numpy()
    assert (bits.numpy() != other_seed).mean() > 0.99
    values = bits.numpy().ravel().astype(np.int64)
    for low_or_high in (values & 255, values >> 8):  # each byte uniform over 256 values
        assert stats.chisquare(np.bincount(low_or_high, minlength=256)).pvalue > 1e-4
    for rate in (0.1, 0.5):
        kept = dropout_from_bits(tf.cast(x, tf.float32), bits, rate).numpy()
        np.testing.assert_array_equal(kept, dropout(tf.cast(x, tf.float32), tf.constant([3, 4]), rate))
        dropped = (kept == 0).ravel()
        n = dropped.size
        sd = np.sqrt(rate * (1 - rate) / n)
        assert abs(dropped.mean() - rate) < 5 * sd, (rate, dropped.mean())
        assert abs(kept.mean() - 1.0) < 5 * sd / (1 - rate)
        for lag in (1, 2, 3, 4, n_cols):  # neighbours along a row and down a column
            assert abs(np.corrcoef(dropped[:-lag], dropped[lag:])[0, 1]) < 5 / np.sqrt(n), lag
        other = other_seed.ravel() < round(rate * 65536)
        assert abs(np.corrcoef(dropped, other)[0, 1]) < 5 / np.sqrt(n)


@pytest.mark.parametrize("dtype, atol", [(tf.float32, 1e-5), (tf.bfloat16, 0.02)])
def test_projection_written_out_gradient_matches_autodiff(dtype, atol):
    from bert_tf.modeling.layers import project

    rng = np.random.default_rng(3)
    x, kernel, dz = (tf.constant(rng.normal(size=shape), dtype) for shape in ((3, 40, 32), (32, 48), (3, 40, 48)))
    ours = project(x, kernel)
    assert ours.shape == (3, 40, 48) and ours.dtype == dtype
    np.testing.assert_allclose(tf.cast(ours, tf.float32), tf.cast(keras.ops.matmul(x, kernel), tf.float32),
                               atol=atol * 10)
    _assert_same_gradients(project, keras.ops.matmul, [x, kernel], dz, atol)
    # A sequence length unknown when traced.
    traced = tf.function(project, input_signature=[tf.TensorSpec([None, None, 32], dtype),
                                                  tf.TensorSpec([32, 48], dtype)])
    assert traced(x, kernel).shape == (3, 40, 48)


@pytest.mark.parametrize("make, shape", [(lambda: Dense(3), [4096, 5]),
                                         (lambda: Conv1D(3, 2, padding="same"), [8, 512, 5])])
def test_bias_gradient_sums_in_float32_under_mixed_bfloat16(make, shape):
    # TensorFlow's BiasAddGrad, which Keras' own layers reach, sums bfloat16 in
    # bfloat16 on a CPU: 4096 ones came out 256.
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        layer = make()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    x = tf.ones(shape, tf.bfloat16)
    layer(x)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(layer(x), tf.float32))
    assert layer.bias.dtype == "float32"
    np.testing.assert_array_equal(tape.gradient(loss, layer.bias).numpy(), [4096.0] * 3)

