"""Task models: the encoder with a classification, tagging or span head."""

from __future__ import annotations

import keras

from bert_tf.configs import BertConfig
from bert_tf.modeling.encoder import BertEncoder, encoder_inputs
from bert_tf.modeling.heads import ClassificationHead, OutputLogits
from bert_tf.modeling.layers import _config_from, initializer

_REGISTER = keras.saving.register_keras_serializable(package="bert_tf")


class _TaskModel(keras.Model):
    """Shared config plumbing: constructor args == get_config keys."""

    def get_config(self) -> dict:
        return {**self._task_args, "config": self.config.to_dict(), "name": self.name,
                "trainable": self.trainable}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**config)


@_REGISTER
class BertClassifier(_TaskModel):
    """Sentence (pair) classification or regression.

    Outputs `logits`, float32 `[batch_size, num_classes]` (`num_classes=1`:
    the regression score).

    Args:
        config: the encoder's BertConfig.
        num_classes: number of labels, 1 for regression.
        head: "pooled", "conv", "conv_avg_max" or "concat_last_n" (see heads.py).
        head_args: extra ClassificationHead arguments (conv_filters, last_n, ...).
    """

    def __init__(self, config: BertConfig | dict, num_classes: int, head: str = "pooled",
                 head_args: dict | None = None, **kwargs):
        config = _config_from(config)
        kwargs.setdefault("name", "bert_classifier")
        # === Layers ===
        self.encoder = BertEncoder(config)
        self.head = ClassificationHead(config, num_classes, head, **(head_args or {}))
        # === Functional model ===
        inputs = encoder_inputs()
        logits = self.head(self.encoder(inputs), inputs["input_mask"])
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)
        # === Config ===
        self.config = config
        self._task_args = {"num_classes": num_classes, "head": head, "head_args": head_args}


# The CRF's scores learn this many times faster than the encoder (see CRF).
CRF_LEARNING_RATE_MULTIPLIER = 100.0


@_REGISTER
class BertTagger(_TaskModel):
    """Token tagging: per-token `logits`, float32 `[batch_size, seq_length, num_tags]`.

    With a CRF (`crf_tags` given) the logits are the CRF's emission scores and
    `self.crf` decodes them, never making a move that `scheme` forbids;
    without, a softmax over each token.
    """

    def __init__(self, config: BertConfig | dict, num_tags: int, crf_tags: list[str] | None = None,
                 scheme: str = "BIO",
                 crf_learning_rate_multiplier: float = CRF_LEARNING_RATE_MULTIPLIER, **kwargs):
        config = _config_from(config)
        kwargs.setdefault("name", "bert_tagger")
        # === Layers ===
        self.encoder = BertEncoder(config)
        self.dropout = keras.layers.Dropout(config.hidden_dropout_prob)
        self.emissions = keras.layers.Dense(num_tags, kernel_initializer=initializer(config),
                                            name="tagger")
        self.crf = None
        if crf_tags is not None:
            from bert_tf.modeling.crf import CRF

            self.crf = CRF(num_tags, tags=crf_tags, scheme=scheme,
                           learning_rate_multiplier=crf_learning_rate_multiplier, name="crf")
        # === Functional model ===
        inputs = encoder_inputs()
        sequence = self.encoder(inputs)["sequence_output"]
        logits = keras.ops.cast(self.emissions(self.dropout(sequence)), "float32")
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)
        # === Config ===
        self.config = config
        self._task_args = {"num_tags": num_tags, "crf_tags": crf_tags, "scheme": scheme,
                           "crf_learning_rate_multiplier": crf_learning_rate_multiplier}


@_REGISTER
class BertSpanLabeler(_TaskModel):
    """Extractive QA: `start_logits` and `end_logits`, float32 `[batch_size, seq_length]`."""

    def __init__(self, config: BertConfig | dict, **kwargs):
        config = _config_from(config)
        kwargs.setdefault("name", "bert_span_labeler")
        # === Layers ===
        self.encoder = BertEncoder(config)
        # The original's cls/squad head: output_weights [2, H], output_bias [2].
        self.span = OutputLogits(2, config, name="squad")
        # === Functional model ===
        inputs = encoder_inputs()
        logits = self.span(self.encoder(inputs)["sequence_output"])  # float32 [B, S, 2]
        outputs = {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.config = config
        self._task_args = {}


def build_task_model(config: BertConfig, task_info: dict) -> keras.Model:
    """Builds the model that a task.json describes (weights not loaded)."""
    kind = task_info.get("task")
    if kind == "classification":
        labels = task_info.get("labels") or []
        return BertClassifier(config, num_classes=len(labels) if labels else 1,
                              head=task_info.get("head", "pooled"), head_args=task_info.get("head_args"))
    if kind == "tagging":
        tags = task_info["labels"]
        return BertTagger(config, num_tags=len(tags), crf_tags=tags if task_info.get("crf") else None,
                          scheme=task_info.get("scheme", "BIO"),
                          crf_learning_rate_multiplier=task_info.get("crf_learning_rate_multiplier",
                                                                    CRF_LEARNING_RATE_MULTIPLIER))
    if kind == "squad":
        return BertSpanLabeler(config)
    raise ValueError(f"unknown task type {kind!r} in task.json")
