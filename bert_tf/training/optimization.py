"""Optimizers: BERT's AdamW (google-research/bert's AdamWeightDecayOptimizer by default) and
LAMB from Keras, with the original weight-decay exclusions."""

from __future__ import annotations

import dataclasses
import re

import keras
import tensorflow as tf

from bert_tf.training.schedules import WarmupPolynomialDecay

OPTIMIZERS = ("adamw", "lamb", "adam")
# BERT applies no weight decay to LayerNorm parameters (gamma, beta) or biases.
NO_DECAY_NAMES = ["gamma", "beta", "bias"]


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """Optimizer and learning-rate schedule.

    `clip_norm` is applied by the training step to the gradients summed over
    replicas and accumulation steps (the global norm), not by the optimizer.
    """

    optimizer: str = "adamw"
    learning_rate: float = 1e-4
    num_train_steps: int = 1_000_000
    num_warmup_steps: int = 10_000
    end_learning_rate: float = 0.0
    decay_power: float = 1.0
    weight_decay: float = 0.01
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    clip_norm: float | None = 1.0
    # Off, as in google-research/bert's AdamWeightDecayOptimizer, which pretrained
    # and fine-tuned BERT without it; used by adamw and adam (LAMB always corrects).
    adam_bias_correction: bool = False
    # Layer-wise learning-rate decay (fine-tuning): see `layerwise_lr_scale`; 1.0 is off.
    layerwise_lr_decay: float = 1.0

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.num_warmup_steps > self.num_train_steps:
            raise ValueError(f"--num_warmup_steps={self.num_warmup_steps} exceeds "
                             f"--num_train_steps={self.num_train_steps}")
        if not 0.0 < self.layerwise_lr_decay <= 1.0:
            raise ValueError(f"layerwise_lr_decay must be in (0, 1], got {self.layerwise_lr_decay}")
        if self.layerwise_lr_decay != 1.0 and self.optimizer == "lamb":
            raise ValueError("--layerwise_lr_decay needs --optimizer=adamw or adam (LAMB scales its own steps)")


def layerwise_lr_scale(path: str, num_layers: int, decay: float) -> float:
    """The factor on the learning rate of the variable at `path` under layer-wise decay.

    decay ** (distance from the top): the pooler and the task head are the top
    (factor 1), Transformer block i (`layer_i/...`) is num_layers - i below it
    and the embeddings num_layers + 1, the lowest.
    """
    block = re.match(r"layer_(\d+)/", path)
    if block:
        return decay ** (num_layers - int(block.group(1)))
    return decay ** (num_layers + 1) if path.startswith("embeddings/") else 1.0


class _PreReducedGradients:
    """Takes gradients that the training step has already summed over replicas.

    Keras optimizers all-reduce gradients inside `apply` under a replica
    context; the step does it once itself so that it can clip by the global
    norm of the summed gradient first, as single-device training would.
    """

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)


def _adamw_update(variable: tf.Variable, m: tf.Variable, v: tf.Variable, gradient: tf.Tensor,
                  alpha: tf.Tensor, decay: tf.Tensor, beta_1: float, beta_2: float,
                  epsilon: float) -> None:
    """One AdamW update of one variable as a single XLA kernel (one pass over its memory).

    `alpha` is the step size (the learning rate, times Adam's bias correction when it is on);
    `decay` is learning rate x weight decay, or 0 for excluded variables.
    """
    g = tf.cast(gradient, variable.dtype)
    m.assign_add((g - m) * (1.0 - beta_1))
    v.assign_add((tf.square(g) - v) * (1.0 - beta_2))
    variable.assign_sub(variable * decay + m * alpha / (tf.sqrt(v) + epsilon))


def _local_copy(slot: tf.Variable, variable: tf.Variable) -> tf.Variable:
    """The copy of an optimizer slot that lives on `variable`'s device.

    Under a multi-replica strategy `update_step` runs once per replica with that
    replica's copy of the model variable, while the slots are mirrored containers;
    the XLA kernel needs plain variables.
    """
    if not isinstance(slot, tf.distribute.DistributedValues):
        return slot
    for copy in slot.values:
        if copy.device == variable.device:
            return copy
    raise ValueError(f"no copy of optimizer slot {slot.name} on {variable.device}")


class FusedAdamW(keras.optimizers.AdamW):
    """AdamW with each variable's decay and Adam update fused into one XLA kernel
    (instead of about ten elementwise ops, each a pass over the variable's memory).

    Slots and weight-decay exclusions are Keras AdamW's. With `bias_correction`
    the update is Keras AdamW's; without it, google-research/bert's
    AdamWeightDecayOptimizer: param -= lr * (m / (sqrt(v) + epsilon) + weight_decay * param)
    with m and v the raw moving averages. Its early steps are larger (with the default
    betas 3.2x at step 1, 6.6x at step 12, 1.3x at step 1000), which the warmup tempers.
    """

    def __init__(self, *args, bias_correction: bool = True, layerwise_lr_decay: float = 1.0,
                 num_layers: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.bias_correction = bias_correction
        self.layerwise_lr_decay, self.num_layers = layerwise_lr_decay, num_layers

    def build(self, variables):
        super().build(variables)
        # Each variable's learning-rate factor, by its index (update_step gets replica copies).
        self._lr_scales = [layerwise_lr_scale(v.path, self.num_layers, self.layerwise_lr_decay)
                           for v in variables]
        # One compiled function per optimizer: a module-level one would keep traces
        # that refer to an earlier optimizer's (deleted) variables.
        self._fused_update = tf.function(_adamw_update, jit_compile=True)

    def _apply_weight_decay(self, variables):
        pass  # folded into update_step

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        alpha = tf.cast(learning_rate, dtype) * self._lr_scales[index]
        decay = (alpha * tf.cast(self.weight_decay, dtype) if self._use_weight_decay(variable)
                 else tf.zeros([], dtype))
        if self.bias_correction:
            step = tf.cast(self.iterations + 1, dtype)
            alpha *= tf.sqrt(1.0 - tf.pow(tf.cast(self.beta_2, dtype), step)) / (
                1.0 - tf.pow(tf.cast(self.beta_1, dtype), step))
        m = _local_copy(self._momentums[index].value, variable)
        v = _local_copy(self._velocities[index].value, variable)
        self._fused_update(variable, m, v, gradient, alpha, decay, self.beta_1, self.beta_2,
                           self.epsilon)

    def get_config(self) -> dict:
        return {**super().get_config(), "bias_correction": self.bias_correction,
                "layerwise_lr_decay": self.layerwise_lr_decay, "num_layers": self.num_layers}


def _pre_reduced(cls):
    return type(cls.__name__, (_PreReducedGradients, cls), {})


def create_optimizer(config: OptimizerConfig, mixed_precision: str = "float32",
                     num_layers: int = 0) -> keras.optimizers.Optimizer:
    """Builds the optimizer; mixed_float16 wraps it in dynamic loss scaling.

    `num_layers` (the model's Transformer blocks) places the layers for
    `config.layerwise_lr_decay`.
    """
    schedule = WarmupPolynomialDecay(config.learning_rate, config.num_train_steps,
                                     config.num_warmup_steps, config.end_learning_rate,
                                     config.decay_power)
    common = dict(learning_rate=schedule, beta_1=config.beta_1, beta_2=config.beta_2,
                  epsilon=config.epsilon)
    if config.optimizer == "lamb":
        optimizer = _pre_reduced(keras.optimizers.Lamb)(weight_decay=config.weight_decay or None,
                                                        **common)
    else:  # adam is adamw without decay, so that both take the same update
        weight_decay = config.weight_decay if config.optimizer == "adamw" else 0.0
        optimizer = _pre_reduced(FusedAdamW)(weight_decay=weight_decay,
                                             bias_correction=config.adam_bias_correction,
                                             layerwise_lr_decay=config.layerwise_lr_decay,
                                             num_layers=num_layers, **common)
    if config.optimizer != "adam":
        optimizer.exclude_from_weight_decay(var_names=NO_DECAY_NAMES)
    if mixed_precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
