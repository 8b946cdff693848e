"""BertPretrainer: the encoder with the masked-LM and next-sentence heads."""

from __future__ import annotations

import keras

from bert_tf.configs import BertConfig
from bert_tf.modeling.encoder import BertEncoder, encoder_inputs
from bert_tf.modeling.layers import MaskedLMHead, NextSentenceHead, config_from


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPretrainer(keras.Model):
    """BERT with its two pretraining heads.

    Inputs: the encoder's three int32 `[batch_size, seq_length]` tensors plus
    `masked_lm_positions`, int32 `[batch_size, max_predictions_per_seq]`
    (positions of the masked tokens; padding slots may hold 0).

    Outputs: a dict with `mlm_logits`, float32 `[batch_size,
    max_predictions_per_seq, vocab_size]` (computed only at the gathered
    positions), and `nsp_logits`, float32 `[batch_size, 2]`.

    Args:
        config: a BertConfig (or its dict form).
        recompute_activations: passed to the BertEncoder.
    """

    def __init__(self, config: BertConfig | dict, recompute_activations: bool = False, **kwargs):
        config = config_from(config)
        kwargs.setdefault("name", "bert_pretrainer")

        # === Layers ===
        self.encoder = BertEncoder(config, recompute_activations)
        self.masked_lm = MaskedLMHead(config, self.encoder.embeddings.word_embeddings)
        self.next_sentence = NextSentenceHead(config)

        # === Functional model ===
        inputs = encoder_inputs()
        inputs["masked_lm_positions"] = keras.Input(
            shape=(None,), dtype="int32", name="masked_lm_positions")
        encoded = self.encoder({name: inputs[name] for name in self.encoder.input})
        outputs = {
            "mlm_logits": self.masked_lm(encoded["sequence_output"], inputs["masked_lm_positions"]),
            "nsp_logits": self.next_sentence(encoded["pooled_output"]),
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.config = config
        self.recompute_activations = recompute_activations

    def get_config(self) -> dict:
        return {"config": self.config.to_dict(), "recompute_activations": self.recompute_activations,
                "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config: dict) -> "BertPretrainer":
        return cls(**config)
