"""The compiled training step: replicas, gradient accumulation, clipping, mixed precision.

Pretraining, fine-tuning (through `bert_tf.training.loop`) and the benchmarks
build their model, optimizer and step here.
"""

from __future__ import annotations

from typing import Callable

import keras
import tensorflow as tf

from bert_tf.training import tasks
from bert_tf.training.optimization import OptimizerConfig, create_optimizer

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def check_batch_sizes(train_batch_size: int, eval_batch_size: int, replicas: int,
                      gradient_accumulation_steps: int) -> None:
    """Raises ValueError when a micro-batch or the eval batch does not split evenly over replicas.

    (TrainingConfig checks that the global batch splits into micro-batches.)
    """
    micro_batch = train_batch_size // gradient_accumulation_steps
    if micro_batch % replicas:
        raise ValueError(f"train_batch_size {train_batch_size} / gradient_accumulation_steps "
                         f"{gradient_accumulation_steps} = {micro_batch} is not divisible by replicas ({replicas})")
    if eval_batch_size % replicas:
        raise ValueError(f"eval_batch_size {eval_batch_size} is not divisible by replicas ({replicas})")


def build_for_training(build_model: Callable[[], keras.Model], optimizer_config: OptimizerConfig,
                       mixed_precision: str, strategy: tf.distribute.Strategy):
    """Builds (model, optimizer, global step) under the strategy's scope and the precision policy.

    The optimizer's slots are built at once, so that a checkpoint restores them.
    """
    previous_policy = keras.config.dtype_policy()
    keras.mixed_precision.set_global_policy(mixed_precision)
    try:
        with strategy.scope():
            model = build_model()
            optimizer = create_optimizer(optimizer_config, mixed_precision,
                                         num_layers=model.config.num_hidden_layers)
            optimizer.build(model.trainable_variables)
            global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
    return model, optimizer, global_step


def training_state(model: keras.Model, optimizer, global_step: tf.Variable) -> dict:
    """What a checkpoint must hold to continue a run exactly (the input position aside).

    Besides weights, optimizer slots (and the loss scale, an optimizer
    variable) and the step: the state of every dropout layer's random stream
    (Keras SeedGenerators), which Keras does not track for tf.train.Checkpoint,
    so that a resumed run draws the dropout masks the uninterrupted run would.
    """
    rng = [generator.state for layer in model._flatten_layers()
           for generator in getattr(layer, "_seed_generators", ())]
    return dict(model=model, optimizer=optimizer, step=global_step, rng=rng)


class TrainStep:
    """The compiled train and eval steps of a model, optimizer and task (benchmarks use it too).

    `train(iterator)` takes one per-worker batch of `train_batch_size // workers`
    rows, gives each replica its rows, runs `gradient_accumulation_steps`
    micro-batches, sums the gradients over micro-batches and replicas, clips them
    by their global norm and applies them once. It returns the step's sums
    (loss terms, weights, metric sums, grad_norm, nonfinite), identical on every
    worker.
    """

    def __init__(self, model: keras.Model, optimizer, strategy, task: tasks.Task, *,
                 train_batch_size: int, eval_batch_size: int, gradient_accumulation_steps: int = 1,
                 jit_compile: bool = False, num_workers: int = 1, clip_norm: float | None = None):
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy
        self.task = task
        task.bind(model)
        self.replicas = strategy.num_replicas_in_sync
        check_batch_sizes(train_batch_size, eval_batch_size, self.replicas, gradient_accumulation_steps)
        self.local_replicas = self.replicas // num_workers
        self.accum = gradient_accumulation_steps
        self.micro_batch = train_batch_size // (self.replicas * self.accum)
        self.eval_batch = eval_batch_size // self.replicas
        self.clip_norm = clip_norm
        self.loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self._forward_backward = tf.function(self._micro_step, jit_compile=jit_compile,
                                             reduce_retracing=True)
        self.train = tf.function(self._train, reduce_retracing=True)
        self.evaluate = tf.function(self._evaluate, reduce_retracing=True)

    def _local_slice(self, batch: dict, size: int) -> dict:
        """This replica's rows of a per-worker batch."""
        ctx = tf.distribute.get_replica_context()
        index = ctx.replica_id_in_sync_group % self.local_replicas
        return {k: v[index * size:(index + 1) * size] for k, v in batch.items()}

    def _micro_step(self, features: dict, weight_totals: dict):
        """Gradients of one micro-batch's share of the global loss, and its sums."""
        with tf.GradientTape() as tape:
            outputs = self.model({k: features[k] for k in self.task.model_inputs}, training=True)
            sums = self.task.sums(features, outputs)
            # Normalised by the totals over all replicas and micro-batches, so the
            # summed gradient equals that of one big batch.
            loss = tf.add_n([tf.math.divide_no_nan(sums[term], weight_totals[weight])
                             for term, weight in self.task.loss_terms.items()])
            scaled = self.optimizer.scale_loss(loss)
        variables = self.model.trainable_variables
        grads = tape.gradient(scaled, variables)
        # Unused variables (the pooler under a conv head) get zeros, so every
        # gradient can be summed and all-reduced alike.
        return [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                for g, v in zip(grads, variables)], sums

    def _replica_train(self, batch: dict):
        ctx = tf.distribute.get_replica_context()
        local = self._local_slice(batch, self.micro_batch * self.accum)
        weights = self.task.weights(local)
        weight_totals = ctx.all_reduce("sum", weights)
        if self.accum == 1:
            grads, sums = self._forward_backward(local, weight_totals)
        else:
            micro = {k: tf.reshape(v, tf.concat([[self.accum, self.micro_batch], tf.shape(v)[1:]], 0))
                     for k, v in local.items()}
            grads = [tf.zeros_like(v) for v in self.model.trainable_variables]
            sums = None
            for i in tf.range(self.accum):
                g, s = self._forward_backward({k: v[i] for k, v in micro.items()}, weight_totals)
                grads = [a + b for a, b in zip(grads, g)]
                sums = s if sums is None else {k: sums[k] + s[k] for k in s}
        grads = ctx.all_reduce("sum", grads)
        sums = ctx.all_reduce("sum", sums)
        sums.update(weight_totals)
        scale = tf.cast(self.optimizer.dynamic_scale, tf.float32) if self.loss_scaled else 1.0
        grad_norm = tf.linalg.global_norm(grads) / scale
        if self.clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, self.clip_norm * scale,
                                              use_norm=grad_norm * scale)
        self.optimizer.apply(grads, self.model.trainable_variables)
        sums["grad_norm"] = grad_norm
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(tf.cast(v, tf.float32)))
                                for v in [grad_norm, *sums.values()]])
        sums["nonfinite"] = 1.0 - tf.cast(finite, tf.float32)
        return sums

    def _train(self, iterator):
        batch = next(iterator)
        sums = self.strategy.run(self._replica_train, args=(batch,))
        return self.strategy.experimental_local_results(sums)[0]

    def _replica_evaluate(self, batch: dict):
        ctx = tf.distribute.get_replica_context()
        local = self._local_slice(batch, self.eval_batch)
        outputs = self.model({k: local[k] for k in self.task.model_inputs}, training=False)
        return ctx.all_reduce("sum", {**self.task.sums(local, outputs), **self.task.weights(local)})

    def _evaluate(self, batch):
        sums = self.strategy.run(self._replica_evaluate, args=(batch,))
        return self.strategy.experimental_local_results(sums)[0]

    def tracing_count(self) -> int:
        """How many graphs the train step has traced so far (input shapes that each cost a compile)."""
        return (self.train.experimental_get_tracing_count()
                + self._forward_backward.experimental_get_tracing_count())

    def learning_rate(self) -> float:
        """The optimizer's current learning rate (of the inner optimizer under loss scaling)."""
        return float(getattr(self.optimizer, "inner_optimizer", self.optimizer).learning_rate)
