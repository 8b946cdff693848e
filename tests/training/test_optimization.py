import keras
import numpy as np
import tensorflow as tf

from bert_tf.training.optimization import NO_DECAY_NAMES, OptimizerConfig, create_optimizer
from bert_tf.training.schedules import WarmupPolynomialDecay

NAMES = ("kernel", "gamma", "bias", "embeddings")


def _train(optimizer, steps=6):
    rng = np.random.default_rng(0)
    variables = [keras.Variable(rng.normal(size=shape).astype(np.float32), name=name)
                 for name, shape in zip(NAMES, ((7, 5), (5,), (5,), (11, 5)))]
    apply = tf.function(lambda grads: optimizer.apply(grads, variables))
    for step in range(steps):
        grads_rng = np.random.default_rng(100 + step)
        apply([tf.constant(grads_rng.normal(size=v.shape).astype(np.float32)) for v in variables])
    return {name: v.numpy() for name, v in zip(NAMES, variables)}


def test_fused_adamw_updates_as_keras_adamw_with_the_bert_exclusions():
    config = OptimizerConfig(learning_rate=1e-2, num_train_steps=10, num_warmup_steps=3, weight_decay=0.05)
    reference = keras.optimizers.AdamW(
        learning_rate=WarmupPolynomialDecay(config.learning_rate, config.num_train_steps,
                                            config.num_warmup_steps),
        weight_decay=config.weight_decay, beta_1=config.beta_1, beta_2=config.beta_2,
        epsilon=config.epsilon)
    reference.exclude_from_weight_decay(var_names=NO_DECAY_NAMES)
    ours, expected = _train(create_optimizer(config)), _train(reference)
    for name in NAMES:
        np.testing.assert_allclose(ours[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # Decay moved the kernel and the table, and not LayerNorm's gamma or the bias.
    no_decay = _train(create_optimizer(OptimizerConfig(**{**config.__dict__, "weight_decay": 0.0})))
    for name in NAMES:
        decayed = not np.allclose(ours[name], no_decay[name], rtol=0, atol=1e-7)
        assert decayed == (name in ("kernel", "embeddings")), name
