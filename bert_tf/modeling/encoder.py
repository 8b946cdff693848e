"""BertEncoder: embeddings, N Transformer blocks and the pooler as one Keras model."""

from __future__ import annotations

import keras

from bert_tf.configs import INPUT_NAMES, BertConfig
from bert_tf.modeling.layers import BertEmbeddings, Pooler, TransformerBlock, config_from


def encoder_inputs(prefix_shape: tuple = (None,)) -> dict[str, keras.KerasTensor]:
    """Symbolic int32 `[B, S]` inputs named as the encoder expects them."""
    return {name: keras.Input(shape=prefix_shape, dtype="int32", name=name) for name in INPUT_NAMES}


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEncoder(keras.Model):
    """The BERT Transformer encoder (Devlin et al., 2018), post-LN.

    Inputs: a dict of int32 `[batch_size, seq_length]` tensors
    `input_word_ids`, `input_mask` (1 = token, 0 = padding) and
    `input_type_ids` (segment A = 0, B = 1).

    Outputs: a dict with `sequence_output` `[batch_size, seq_length, hidden_size]`,
    `pooled_output` `[batch_size, hidden_size]` (tanh dense on the first token)
    and `encoder_outputs`, the list of every block's `[batch_size, seq_length,
    hidden_size]` output (the last one is `sequence_output`). Outputs are in the
    dtype policy's compute dtype.

    Args:
        config: a BertConfig (or its dict form, as get_config writes it).
        recompute_activations: recompute each Transformer block's activations
            in the backward pass instead of keeping them (`TransformerBlock`):
            less memory for long sequences, one more forward pass per step.
    """

    def __init__(self, config: BertConfig | dict, recompute_activations: bool = False, **kwargs):
        config = config_from(config)
        kwargs.setdefault("name", "bert")

        # === Layers ===
        self.embeddings = BertEmbeddings(config)
        self.transformer_layers = [
            TransformerBlock(config, recompute_activations, name=f"layer_{i}") for i in range(config.num_hidden_layers)
        ]
        self.pooler = Pooler(config)

        # === Functional model ===
        inputs = encoder_inputs()
        x = self.embeddings(inputs["input_word_ids"], inputs["input_type_ids"])
        encoder_outputs = []
        for block in self.transformer_layers:
            x = block(x, inputs["input_mask"])
            encoder_outputs.append(x)
        outputs = {
            "sequence_output": x,
            "pooled_output": self.pooler(x),
            "encoder_outputs": encoder_outputs,
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.config = config
        self.recompute_activations = recompute_activations

    def get_config(self) -> dict:
        return {"config": self.config.to_dict(), "recompute_activations": self.recompute_activations,
                "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config: dict) -> "BertEncoder":
        return cls(**config)
