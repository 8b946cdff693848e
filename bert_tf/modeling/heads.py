"""Fine-tuning heads on the encoder's outputs.

Classification heads (the seed's list), selected by name:
  pooled         dropout + dense on the tanh-pooled [CLS] (the original BERT head)
  conv           1-D convolutions over the sequence output, max over time (TextCNN)
  conv_avg_max   the same convolutions, then masked average and max pooling, concatenated
  concat_last_n  the [CLS] vectors of the last N layers, concatenated
Every head ends in `OutputLogits` to `num_classes` logits (1 for regression), in float32.
The pooled head is the original's exactly, so its weights are saved under the
original names (`output_weights`, `output_bias`; see bert_tf.checkpoints); the
other heads have no original counterpart and keep their Keras paths.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.configs import BertConfig
from bert_tf.modeling.layers import BitDropout, Conv1D, config_from, initializer

HEADS = ("pooled", "conv", "conv_avg_max", "concat_last_n")


@keras.saving.register_keras_serializable(package="bert_tf")
class OutputLogits(keras.layers.Layer):
    """A dense layer to float32 logits, weights laid out as google-research/bert's task heads.

    The original's run_classifier.py and run_squad.py hold `output_weights`
    `[num_outputs, in]` (a Keras Dense kernel transposed) and `output_bias`
    `[num_outputs]`; keeping that layout lets their checkpoints load as they are.

    Args:
        num_outputs: logits per input vector.
        config: the encoder's BertConfig (its initializer_range).
    """

    def __init__(self, num_outputs: int, config: BertConfig | dict, **kwargs):
        kwargs.setdefault("name", "output")
        super().__init__(**kwargs)
        self.num_outputs = num_outputs
        self.config = config_from(config)

    def build(self, input_shape) -> None:
        self.output_weights = self.add_weight(
            name="output_weights", shape=(self.num_outputs, input_shape[-1]),
            initializer=initializer(self.config))
        # Added to float32 logits: kept float32 under mixed precision.
        self.output_bias = self.add_weight(name="output_bias", shape=(self.num_outputs,),
                                           initializer="zeros", autocast=False)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        """`[..., in]` -> float32 `[..., num_outputs]`."""
        logits = tf.einsum("...I,OI->...O", x, tf.cast(self.output_weights, x.dtype))
        return tf.cast(logits, tf.float32) + self.output_bias

    def get_config(self) -> dict:
        return {**super().get_config(), "num_outputs": self.num_outputs,
                "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package="bert_tf")
class ClassificationHead(keras.layers.Layer):
    """Maps the encoder outputs to float32 `[B, num_classes]` logits.

    Args:
        config: the encoder's BertConfig (hidden size, dropout, initializer).
        num_classes: number of labels; 1 for regression.
        head: one of HEADS.
        conv_filters: filters per kernel size for the conv heads.
        conv_kernel_sizes: kernel widths (tokens) of the conv heads.
        last_n: layers whose [CLS] vectors `concat_last_n` concatenates; by default the
            last four, or every layer of a shallower encoder (BERT-Tiny has two).
    """

    def __init__(self, config: BertConfig | dict, num_classes: int, head: str = "pooled",
                 conv_filters: int = 128, conv_kernel_sizes: tuple[int, ...] = (2, 3, 4),
                 last_n: int | None = None, **kwargs):
        kwargs.setdefault("name", "classifier")
        super().__init__(**kwargs)
        if head not in HEADS:
            raise ValueError(f"head must be one of {', '.join(HEADS)}, got {head!r}")
        self.config = config_from(config)
        last_n = min(4, self.config.num_hidden_layers) if last_n is None else last_n
        if head == "concat_last_n" and not 1 <= last_n <= self.config.num_hidden_layers:
            raise ValueError(f"last_n={last_n} must be in [1, num_hidden_layers="
                             f"{self.config.num_hidden_layers}]")
        self.num_classes = num_classes
        self.head = head
        self.conv_filters = conv_filters
        self.conv_kernel_sizes = tuple(conv_kernel_sizes)
        self.last_n = last_n
        self.dropout = BitDropout(self.config.hidden_dropout_prob)
        self.convs = [Conv1D(conv_filters, k, padding="same", activation="relu",
                             kernel_initializer=initializer(self.config), name=f"conv_{k}")
                      for k in self.conv_kernel_sizes] if head.startswith("conv") else []
        self.dense = OutputLogits(num_classes, self.config, name="output")

    def call(self, encoder_outputs: dict, input_mask: tf.Tensor,
             training: bool | None = None) -> tf.Tensor:
        """Encoder output dict and int32 `[B, S]` mask -> float32 `[B, num_classes]`."""
        if self.head == "pooled":
            features = encoder_outputs["pooled_output"]
        elif self.head == "concat_last_n":
            layers = encoder_outputs["encoder_outputs"][-self.last_n:]
            features = tf.concat([x[:, 0] for x in layers], axis=-1)
        else:
            x = self.dropout(encoder_outputs["sequence_output"], training=training)
            mask = tf.cast(input_mask, x.dtype)[:, :, tf.newaxis]  # [B, S, 1]
            # Zero the padding first: a window at the end of the text then sees the
            # same zeros as Keras's own "same" padding, whatever the batch's length.
            conv = tf.concat([c(x * mask) for c in self.convs], axis=-1) * mask  # [B, S, F]
            # ReLU outputs are >= 0, so zeroed padding cannot win the max.
            features = tf.reduce_max(conv, axis=1)
            if self.head == "conv_avg_max":
                average = tf.reduce_sum(conv, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
                features = tf.concat([average, features], axis=-1)
        return self.dense(self.dropout(features, training=training))

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "num_classes": self.num_classes, "head": self.head,
                "conv_filters": self.conv_filters, "conv_kernel_sizes": list(self.conv_kernel_sizes),
                "last_n": self.last_n}
