"""Optimizers: BERT's AdamW and LAMB from Keras, with the original weight-decay exclusions."""

from __future__ import annotations

import dataclasses

import keras

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

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")


class _PreReducedGradients:
    """Takes gradients that the training step has already summed over replicas.

    Keras optimizers all-reduce gradients inside `apply` under a replica
    context; the step does it once itself so that it can clip by the global
    norm of the summed gradient first, as single-device training would.
    """

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)


def _pre_reduced(cls):
    return type(cls.__name__, (_PreReducedGradients, cls), {})


def create_optimizer(config: OptimizerConfig, mixed_precision: str = "float32") -> keras.optimizers.Optimizer:
    """Builds the optimizer; mixed_float16 wraps it in dynamic loss scaling."""
    schedule = WarmupPolynomialDecay(config.learning_rate, config.num_train_steps,
                                     config.num_warmup_steps, config.end_learning_rate,
                                     config.decay_power)
    common = dict(learning_rate=schedule, beta_1=config.beta_1, beta_2=config.beta_2,
                  epsilon=config.epsilon)
    if config.optimizer == "adamw":
        optimizer = _pre_reduced(keras.optimizers.AdamW)(weight_decay=config.weight_decay, **common)
    elif config.optimizer == "lamb":
        optimizer = _pre_reduced(keras.optimizers.Lamb)(weight_decay=config.weight_decay or None,
                                                        **common)
    else:
        optimizer = _pre_reduced(keras.optimizers.Adam)(**common)
    if config.optimizer != "adam":
        optimizer.exclude_from_weight_decay(var_names=NO_DECAY_NAMES)
    if mixed_precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
