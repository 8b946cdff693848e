"""What a training step needs to know about a task: its inputs, loss and metric sums.

A step normalises each loss term by its weight summed over all replicas and
accumulated micro-batches, so the summed gradient equals that of one big
batch; a task therefore reports un-normalised float32 sums, and the weights
(known from the features alone) that divide them.
"""

from __future__ import annotations

import tensorflow as tf

from bert_tf.configs import INPUT_NAMES
from bert_tf.modeling import losses


def _examples(features: dict) -> tf.Tensor:
    return tf.cast(tf.shape(features["input_word_ids"])[0], tf.float32)


class Task:
    """Base: `model_inputs` fed to the model; `loss_terms` maps sum key -> weight key."""

    model_inputs: tuple[str, ...] = INPUT_NAMES
    loss_terms: dict[str, str] = {"loss": "examples"}

    def bind(self, model) -> None:
        """Called once with the model the step trains (tasks that use its layers keep them)."""

    def weights(self, features: dict) -> dict[str, tf.Tensor]:
        return {"examples": _examples(features)}

    def sums(self, features: dict, outputs: dict) -> dict[str, tf.Tensor]:
        raise NotImplementedError

    def summarize(self, totals: dict[str, float]) -> dict[str, float]:
        """Sums over steps (weights included) -> the logged metrics."""
        return {term: totals[term] / max(totals[weight], 1e-9)
                for term, weight in self.loss_terms.items()}


class PretrainingTask(Task):
    """Masked LM (weighted by masked_lm_weights) + next-sentence prediction: the sums of
    `bert_tf.modeling.losses`, whose means are `pretraining_loss`."""

    model_inputs = INPUT_NAMES + ("masked_lm_positions",)
    loss_terms = {"mlm_loss": "mlm_weight", "nsp_loss": "examples"}

    def weights(self, features):
        return {"mlm_weight": tf.reduce_sum(tf.cast(features["masked_lm_weights"], tf.float32)),
                "examples": _examples(features)}

    def sums(self, features, outputs):
        mlm_loss, mlm_correct = losses.masked_lm_sums(features["masked_lm_ids"], outputs["mlm_logits"],
                                                      features["masked_lm_weights"])
        nsp_loss, nsp_correct = losses.next_sentence_sums(features["next_sentence_labels"],
                                                          outputs["nsp_logits"])
        return {"mlm_loss": mlm_loss, "mlm_correct": mlm_correct,
                "nsp_loss": nsp_loss, "nsp_correct": nsp_correct}

    def summarize(self, totals):
        out = super().summarize(totals)
        out["mlm_accuracy"] = totals["mlm_correct"] / max(totals["mlm_weight"], 1e-9)
        out["nsp_accuracy"] = totals["nsp_correct"] / max(totals["examples"], 1e-9)
        out["loss"] = out["mlm_loss"] + out["nsp_loss"]
        return out


class ClassificationTask(Task):
    """Cross-entropy on `label_ids` [B], or squared error on float `labels` [B] (regression)."""

    def __init__(self, regression: bool = False):
        self.regression = regression

    def sums(self, features, outputs):
        logits = tf.cast(outputs["logits"], tf.float32)
        if self.regression:
            error = logits[:, 0] - tf.cast(features["labels"], tf.float32)
            return {"loss": tf.reduce_sum(tf.square(error))}
        labels = tf.cast(features["label_ids"], tf.int32)
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        return {"loss": tf.reduce_sum(loss), "correct": tf.reduce_sum(losses.argmax_hits(logits, labels))}

    def summarize(self, totals):
        out = super().summarize(totals)
        if not self.regression:
            out["accuracy"] = totals["correct"] / max(totals["examples"], 1e-9)
        return out


class TaggingTask(Task):
    """Per-token cross-entropy on `label_ids` [B, S] (-1 = ignored), or, with `use_crf`,
    the negative log-likelihood per sequence of the model's CRF."""

    def __init__(self, use_crf: bool = False):
        self.use_crf = use_crf
        self.crf = None
        self.loss_terms = {"loss": "examples" if use_crf else "tokens"}

    def bind(self, model) -> None:
        self.crf = model.crf if self.use_crf else None

    def weights(self, features):
        labeled = tf.cast(features["label_ids"] >= 0, tf.float32)
        return {"examples": _examples(features), "tokens": tf.reduce_sum(labeled)}

    def sums(self, features, outputs):
        labels = tf.cast(features["label_ids"], tf.int32)
        labeled = labels >= 0
        logits = tf.cast(outputs["logits"], tf.float32)
        safe = tf.where(labeled, labels, 0)
        hits = tf.reduce_sum(losses.argmax_hits(logits, safe) * tf.cast(labeled, tf.float32))
        if self.use_crf:  # the CRF runs over the labelled (first-piece) positions
            return {"loss": -tf.reduce_sum(self.crf.log_likelihood(logits, safe, labeled)),
                    "correct": hits}
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe, logits=logits)
        return {"loss": tf.reduce_sum(loss * tf.cast(labeled, tf.float32)), "correct": hits}

    def summarize(self, totals):
        out = super().summarize(totals)
        out["token_accuracy"] = totals["correct"] / max(totals["tokens"], 1e-9)
        return out


class SpanTask(Task):
    """Mean of start and end cross-entropy on `start_positions` / `end_positions` [B]."""

    def sums(self, features, outputs):
        total = 0.0
        for side in ("start", "end"):
            total += tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.cast(features[f"{side}_positions"], tf.int32),
                logits=tf.cast(outputs[f"{side}_logits"], tf.float32))
        return {"loss": tf.reduce_sum(total) / 2.0}
