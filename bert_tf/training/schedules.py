"""Learning-rate schedules."""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="bert_tf")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """BERT's schedule: linear warmup, then polynomial decay to `end_learning_rate`.

    As in the original, the decay is measured from step 0 over
    `num_train_steps`, and warmup replaces it for the first
    `num_warmup_steps` steps: lr(step) = peak * step / warmup during warmup,
    else (peak - end) * (1 - step / num_train_steps) ** power + end.
    Past `num_train_steps` the rate stays at `end_learning_rate`.
    """

    def __init__(self, learning_rate: float, num_train_steps: int, num_warmup_steps: int = 0,
                 end_learning_rate: float = 0.0, power: float = 1.0):
        self.learning_rate = learning_rate
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.end_learning_rate = end_learning_rate
        self.power = power

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        done = tf.minimum(step / float(max(1, self.num_train_steps)), 1.0)
        decayed = ((self.learning_rate - self.end_learning_rate) * (1.0 - done) ** self.power
                   + self.end_learning_rate)
        if not self.num_warmup_steps:
            return decayed
        warmup = self.learning_rate * step / float(self.num_warmup_steps)
        return tf.where(step < self.num_warmup_steps, warmup, decayed)

    def get_config(self) -> dict:
        return {"learning_rate": self.learning_rate, "num_train_steps": self.num_train_steps,
                "num_warmup_steps": self.num_warmup_steps,
                "end_learning_rate": self.end_learning_rate, "power": self.power}
