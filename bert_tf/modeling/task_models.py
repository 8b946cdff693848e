"""Task models: the encoder with a classification, tagging or span head."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from bert_tf.configs import BertConfig
from bert_tf.modeling.crf import CRF
from bert_tf.modeling.encoder import BertEncoder, encoder_inputs
from bert_tf.modeling.heads import ClassificationHead, OutputLogits
from bert_tf.modeling.layers import BitDropout, Dense, config_from, initializer

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
        config = config_from(config)
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

    With a CRF (`use_crf`) the logits are the CRF's emission scores and
    `self.crf` decodes them, never making a move that `crf_allowed` forbids;
    without, a softmax over each token. `decode` turns logits into tag ids
    either way.
    """

    def __init__(self, config: BertConfig | dict, num_tags: int, use_crf: bool = False,
                 crf_allowed: list | None = None,
                 crf_learning_rate_multiplier: float = CRF_LEARNING_RATE_MULTIPLIER, **kwargs):
        """Args:
            config: the encoder's BertConfig.
            num_tags: T.
            use_crf: a CRF head, else a softmax per token.
            crf_allowed: the CRF's allowed moves, (transitions [T, T], start
                [T], end [T]) bools (see `CRF`); None allows every move.
            crf_learning_rate_multiplier: see `CRF`.
        """
        config = config_from(config)
        kwargs.setdefault("name", "bert_tagger")
        # === Layers ===
        self.encoder = BertEncoder(config)
        self.dropout = BitDropout(config.hidden_dropout_prob)
        self.emissions = Dense(num_tags, kernel_initializer=initializer(config), name="tagger")
        self.crf = None
        if use_crf:
            self.crf = CRF(num_tags, allowed=crf_allowed,
                           learning_rate_multiplier=crf_learning_rate_multiplier, name="crf")
        # === Functional model ===
        inputs = encoder_inputs()
        sequence = self.encoder(inputs)["sequence_output"]
        logits = keras.ops.cast(self.emissions(self.dropout(sequence)), "float32")
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)
        # === Config ===
        self.config = config
        self._task_args = {"num_tags": num_tags, "use_crf": use_crf,
                           "crf_allowed": None if crf_allowed is None else [
                               np.asarray(table, bool).tolist() for table in crf_allowed],
                           "crf_learning_rate_multiplier": crf_learning_rate_multiplier}

    def decode(self, logits: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """Tag ids from logits: the CRF's best valid path over the masked positions, or argmax per position.

        Args:
            logits: float32 Tensor [B, S, T], the model's `logits`.
            mask: bool Tensor [B, S], the positions to tag (the CRF runs over
                these only, e.g. the words' first pieces).

        Returns:
            int32 Tensor [B, S]; with a CRF 0 at masked-out positions.
        """
        if self.crf is None:
            return tf.argmax(logits, axis=-1, output_type=tf.int32)
        return self.crf(logits, mask)


@_REGISTER
class BertSpanLabeler(_TaskModel):
    """Extractive QA: `start_logits` and `end_logits`, float32 `[batch_size, seq_length]`."""

    def __init__(self, config: BertConfig | dict, **kwargs):
        config = config_from(config)
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


def build_task_model(config: BertConfig, task_info: dict, crf_allowed: list | None = None) -> keras.Model:
    """Builds the model that a task.json describes (weights not loaded).

    Args:
        config: the encoder's BertConfig.
        task_info: the task.json contents.
        crf_allowed: for a CRF tagger, the allowed moves of its tag list in its
            scheme (`BertTagger`); models do not read tagging schemes, the
            caller computes them.

    Raises:
        ValueError: an unknown task, or a CRF tagger without `crf_allowed`.
    """
    kind = task_info.get("task")
    if kind == "classification":
        labels = task_info.get("labels") or []
        return BertClassifier(config, num_classes=len(labels) if labels else 1,
                              head=task_info.get("head", "pooled"), head_args=task_info.get("head_args"))
    if kind == "tagging":
        if task_info.get("crf") and crf_allowed is None:
            raise ValueError("a CRF tagger needs crf_allowed, the moves its tagging scheme allows "
                             "(bert_tf.data.tag_schemes.allowed_transitions)")
        return BertTagger(config, num_tags=len(task_info["labels"]), use_crf=bool(task_info.get("crf")),
                          crf_allowed=crf_allowed,
                          crf_learning_rate_multiplier=task_info.get("crf_learning_rate_multiplier",
                                                                    CRF_LEARNING_RATE_MULTIPLIER))
    if kind == "squad":
        return BertSpanLabeler(config)
    raise ValueError(f"unknown task type {kind!r} in task.json")
