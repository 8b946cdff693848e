import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.layers import BertEmbeddings, Pooler, PositionEmbedding, TransformerBlock
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
    assert set(model.get_config()) == {"config", "name", "trainable"}
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
