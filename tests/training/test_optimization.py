"""The optimizers against their references: Keras AdamW, and google-research/bert's
AdamWeightDecayOptimizer and create_optimizer (TF1 code, run in a compat.v1 graph)."""

import bert.optimization
import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.training.optimization import NO_DECAY_NAMES, OptimizerConfig, create_optimizer
from bert_tf.training.schedules import WarmupPolynomialDecay

# Keras names (what the exclusions match) and the original's TF1 names of the same
# kinds of variable (what its regexes "LayerNorm", "layer_norm", "bias" match).
NAMES = ("kernel", "gamma", "beta", "bias", "embeddings", "output_bias")
TF1_NAMES = ("bert/encoder/layer_0/attention/self/query/kernel",
             "bert/encoder/layer_0/attention/output/LayerNorm/gamma",
             "bert/encoder/layer_0/attention/output/LayerNorm/beta",
             "bert/encoder/layer_0/attention/self/query/bias",
             "bert/embeddings/word_embeddings",
             "cls/predictions/output_bias")
SHAPES = ((7, 5), (5,), (5,), (5,), (11, 5), (11,))
DECAYED = ("kernel", "embeddings")
STEPS = 6


def _initial():
    rng = np.random.default_rng(0)
    return [rng.normal(size=shape).astype(np.float32) for shape in SHAPES]


def _gradients(step):
    """Step `step`'s gradients; global norm about 10, or 0.05 on odd steps (clipping at 1.0 varies)."""
    rng = np.random.default_rng(100 + step)
    scale = 1.0 if step % 2 == 0 else 0.005
    return [(scale * rng.normal(size=shape)).astype(np.float32) for shape in SHAPES]


def _strategy(replicas):
    if replicas == 1:
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])


def _train(make_optimizer, replicas=1, clip_norm=None, steps=STEPS):
    """Final values after `steps` updates applied as the training step applies them.

    Under several replicas each replica applies the same (already summed)
    gradients to its copy, as TrainStep does; the copies must stay equal.
    """
    strategy = _strategy(replicas)
    with strategy.scope():
        variables = [keras.Variable(value, name=name) for name, value in zip(NAMES, _initial())]
        optimizer = make_optimizer()

    def replica_apply(grads):
        if clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        optimizer.apply(grads, variables)

    apply = tf.function(lambda grads: strategy.run(replica_apply, args=(grads,)))
    for step in range(steps):
        apply([tf.constant(g) for g in _gradients(step)])
    finals = {}
    for name, variable in zip(NAMES, variables):
        copies = [c.numpy() for c in strategy.experimental_local_results(variable.value)]
        for copy in copies[1:]:
            np.testing.assert_array_equal(copy, copies[0], err_msg=f"{name}: replicas diverged")
        finals[name] = copies[0]
    return finals


def _run_original(build_train_op, steps=STEPS):
    """Runs the original TF1 code on the same variables and gradients.

    Args:
        build_train_op: (loss, grads, variables) -> (train_op, extra feeds of a step
            as a function of the step). `loss` has gradient `grads` (placeholders).
    """
    graph = tf.Graph()
    with graph.as_default():
        variables = [tf.compat.v1.get_variable(name, initializer=value)
                     for name, value in zip(TF1_NAMES, _initial())]
        grads = [tf.compat.v1.placeholder(tf.float32, shape) for shape in SHAPES]
        loss = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(grads, variables)])
        train_op, feeds = build_train_op(loss, grads, variables)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for step in range(steps):
                session.run(train_op, {**dict(zip(grads, _gradients(step))), **feeds(step)})
            return dict(zip(NAMES, session.run(variables)))


def _assert_close(ours, expected, rtol=1e-6, atol=1e-7):
    for name in NAMES:
        np.testing.assert_allclose(ours[name], expected[name], rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("optimizer", ["adamw", "adam"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_default_adam_update_is_the_original_adam_weight_decay_optimizer(optimizer, replicas):
    config = OptimizerConfig(optimizer=optimizer, learning_rate=1e-2, num_train_steps=10,
                             num_warmup_steps=3, weight_decay=0.05)
    assert not config.adam_bias_correction
    # The same rate at each step: ours is the schedule at optimizer.iterations.
    rates = [float(WarmupPolynomialDecay(config.learning_rate, config.num_train_steps,
                                         config.num_warmup_steps)(step)) for step in range(STEPS)]

    def original(loss, grads, variables):
        learning_rate = tf.compat.v1.placeholder(tf.float32, [])
        reference = bert.optimization.AdamWeightDecayOptimizer(
            learning_rate, weight_decay_rate=config.weight_decay if optimizer == "adamw" else 0.0,
            beta_1=config.beta_1, beta_2=config.beta_2, epsilon=config.epsilon,
            exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
        return (reference.apply_gradients(zip(grads, variables)),
                lambda step: {learning_rate: rates[step]})

    ours = _train(lambda: create_optimizer(config), replicas)
    expected = _run_original(original)
    _assert_close(ours, expected)
    # The comparison can fail: bias correction alone moves every variable by far more.
    corrected = _train(lambda: create_optimizer(
        OptimizerConfig(**{**config.__dict__, "adam_bias_correction": True})))
    for name in NAMES:
        assert np.abs(corrected[name] - expected[name]).max() > 1e-3, name


def test_default_recipe_is_the_original_create_optimizer():
    # The original's whole recipe: its warmup + linear decay schedule, weight decay
    # 0.01, betas, epsilon, exclusions and clipping by global norm 1.0 (which bert_tf
    # does in the training step, so here before `apply`).
    config = OptimizerConfig(learning_rate=1e-2, num_train_steps=10, num_warmup_steps=3)

    def original(loss, grads, variables):
        train_op = bert.optimization.create_optimizer(
            loss, config.learning_rate, config.num_train_steps, config.num_warmup_steps, use_tpu=False)
        return train_op, lambda step: {}

    ours = _train(lambda: create_optimizer(config), clip_norm=config.clip_norm)
    expected = _run_original(original)
    _assert_close(ours, expected)
    # Decay moved the kernel and the table, and not LayerNorm's gamma and beta or the biases.
    no_decay = _train(lambda: create_optimizer(OptimizerConfig(**{**config.__dict__, "weight_decay": 0.0})),
                      clip_norm=config.clip_norm)
    for name in NAMES:
        decayed = not np.allclose(ours[name], no_decay[name], rtol=0, atol=1e-7)
        assert decayed == (name in DECAYED), name


@pytest.mark.parametrize("replicas", [1, 2])
def test_bias_corrected_adamw_updates_as_keras_adamw_with_the_bert_exclusions(replicas):
    config = OptimizerConfig(learning_rate=1e-2, num_train_steps=10, num_warmup_steps=3,
                             weight_decay=0.05, adam_bias_correction=True)

    def reference():
        optimizer = keras.optimizers.AdamW(
            learning_rate=WarmupPolynomialDecay(config.learning_rate, config.num_train_steps,
                                                config.num_warmup_steps),
            weight_decay=config.weight_decay, beta_1=config.beta_1, beta_2=config.beta_2,
            epsilon=config.epsilon)
        optimizer.exclude_from_weight_decay(var_names=NO_DECAY_NAMES)
        return optimizer

    _assert_close(_train(lambda: create_optimizer(config), replicas), _train(reference),
                  rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bias_correction", [False, True])
def test_layerwise_lr_decay_scales_each_variables_step(tiny_config, bias_correction):
    """Each update is the plain one times decay ** (distance from the top): pooler and head 1,
    block i decay ** (layers - i), the embeddings decay ** (layers + 1)."""
    from bert_tf.modeling.task_models import BertClassifier

    model = BertClassifier(tiny_config, 2)
    variables = model.trainable_variables
    start = [v.numpy() for v in variables]
    rng = np.random.default_rng(0)
    gradients = [rng.standard_normal(v.shape).astype(np.float32) for v in variables]

    def step(decay):
        for variable, value in zip(variables, start):
            variable.assign(value)
        optimizer = create_optimizer(OptimizerConfig(
            learning_rate=1e-3, num_train_steps=10, num_warmup_steps=0, weight_decay=0.01,
            adam_bias_correction=bias_correction, layerwise_lr_decay=decay), num_layers=2)
        optimizer.build(variables)
        optimizer.apply([tf.constant(g) for g in gradients], variables)
        return [v.numpy() - s for v, s in zip(variables, start)]

    plain, decayed = step(1.0), step(0.5)
    expected = {"embeddings": 0.5 ** 3, "layer_0": 0.5 ** 2, "layer_1": 0.5, "pooler": 1.0, "classifier": 1.0}
    assert {v.path.split("/")[0] for v in variables} == set(expected)
    for variable, a, b in zip(variables, plain, decayed):
        # Steps are 1e-5 to 1e-3; atol is float32's rounding of a value near 1 (LayerNorm gamma).
        np.testing.assert_allclose(b, a * expected[variable.path.split("/")[0]], rtol=1e-5, atol=2e-7,
                                   err_msg=variable.path)
    with pytest.raises(ValueError, match="layerwise_lr_decay needs"):
        OptimizerConfig(optimizer="lamb", layerwise_lr_decay=0.9)
