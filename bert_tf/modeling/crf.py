"""Linear-chain conditional random field (CRF) for sequence tagging.

No maintained CRF exists for Keras 3, so it is written here: the
log-likelihood by the forward algorithm in log space, Viterbi decoding, and
transition constraints: tables of the allowed moves, which the caller makes
(e.g. from a tagging scheme with `bert_tf.data.tag_schemes.allowed_transitions`).

Dimension keys used in shapes:
  B: batch size    S: sequence length    T: number of tags

A path's score is
  start[y_1] + sum_t emissions[t, y_t] + sum_t transitions[y_{t-1}, y_t] + end[y_n]
over the positions where the mask is 1. Masked-out positions are skipped,
not just cut off at the end: the positions kept need not be contiguous, so a
word-piece model can pass the mask of first pieces and the CRF runs over
words, with transitions between consecutive words.

Everything is computed in float32, also under mixed precision: the forward
algorithm sums exponentials over S steps and loses too much in float16.
"""

from __future__ import annotations

from typing import Any, Sequence

import keras
import numpy as np
import tensorflow as tf

# Added to the score of a forbidden move when decoding. Far below any sum of
# emission and transition scores, yet finite, so that max and argmax stay
# well defined in float32.
FORBIDDEN_SCORE = -1e9


def _compact(mask: tf.Tensor, *tensors: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
    # Moves the kept positions of every row to its front, in order, so that
    # the recursions below only deal with lengths.
    mask = tf.cast(mask, tf.bool)
    order = tf.argsort(tf.cast(~mask, tf.int32), axis=1, stable=True)
    lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
    return order, lengths, [tf.gather(t, order, batch_dims=1) for t in tensors]


def _mask_or_ones(emissions: tf.Tensor, mask: tf.Tensor | None) -> tf.Tensor:
    return tf.ones(tf.shape(emissions)[:2], tf.bool) if mask is None else tf.cast(mask, tf.bool)


def crf_sequence_score(emissions: tf.Tensor, tags: tf.Tensor, mask: tf.Tensor | None,
                       transitions: tf.Tensor, start_transitions: tf.Tensor,
                       end_transitions: tf.Tensor) -> tf.Tensor:
    """Unnormalised score of given tag paths.

    Args:
      emissions: float Tensor [B, S, T], per-position tag scores (logits).
      tags: int Tensor [B, S]; values at masked-out positions are ignored
        (-1 allowed there).
      mask: bool or int Tensor [B, S], 1 on positions of the sequence; None
        for all positions.
      transitions: float Tensor [T, T], score of moving from tag i to tag j.
      start_transitions: float Tensor [T], score of starting with a tag.
      end_transitions: float Tensor [T], score of ending with a tag.

    Returns:
      float32 Tensor [B]; 0 for a sequence with no position.
    """
    emissions = tf.cast(emissions, tf.float32)
    mask = _mask_or_ones(emissions, mask)
    tags = tf.where(mask, tf.cast(tags, tf.int32), 0)
    _, lengths, (emissions, tags) = _compact(mask, emissions, tags)
    seq_len = tf.shape(tags)[1]
    valid = tf.sequence_mask(lengths, seq_len, tf.float32)
    score = tf.reduce_sum(tf.gather(emissions, tags, batch_dims=2) * valid, axis=1)
    pairs = tf.stack([tags[:, :-1], tags[:, 1:]], axis=-1)
    score += tf.reduce_sum(tf.gather_nd(tf.cast(transitions, tf.float32), pairs) * valid[:, 1:], axis=1)
    last = tf.gather(tags, tf.maximum(lengths - 1, 0), batch_dims=1)
    ends = (tf.gather(tf.cast(start_transitions, tf.float32), tags[:, 0])
            + tf.gather(tf.cast(end_transitions, tf.float32), last))
    return score + tf.where(lengths > 0, ends, 0.0)


def crf_log_partition(emissions: tf.Tensor, mask: tf.Tensor | None, transitions: tf.Tensor,
                      start_transitions: tf.Tensor, end_transitions: tf.Tensor) -> tf.Tensor:
    """Log of the sum of exp(score) over all tag paths (forward algorithm).

    Args: as `crf_sequence_score`, without tags.

    Returns:
      float32 Tensor [B]; 0 for a sequence with no position.
    """
    emissions = tf.cast(emissions, tf.float32)
    transitions = tf.cast(transitions, tf.float32)
    _, lengths, (emissions,) = _compact(_mask_or_ones(emissions, mask), emissions)
    alpha = tf.cast(start_transitions, tf.float32)[None] + emissions[:, 0]  # [B, T]
    steps = tf.range(1, tf.shape(emissions)[1])

    def step(alpha: tf.Tensor, inputs: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        emission, t = inputs  # [B, T], scalar
        moved = tf.reduce_logsumexp(alpha[:, :, None] + transitions[None], axis=1) + emission
        return tf.where((t < lengths)[:, None], moved, alpha)

    alpha = tf.foldl(step, (tf.transpose(emissions[:, 1:], [1, 0, 2]), steps), initializer=alpha)
    log_z = tf.reduce_logsumexp(alpha + tf.cast(end_transitions, tf.float32)[None], axis=1)
    return tf.where(lengths > 0, log_z, 0.0)


def crf_log_likelihood(emissions: tf.Tensor, tags: tf.Tensor, mask: tf.Tensor | None,
                       transitions: tf.Tensor, start_transitions: tf.Tensor,
                       end_transitions: tf.Tensor) -> tf.Tensor:
    """Log-probability of the given tag paths.

    Args: as `crf_sequence_score`.

    Returns:
      float32 Tensor [B], score minus log-partition; 0 for a sequence with no
      position.
    """
    return (crf_sequence_score(emissions, tags, mask, transitions, start_transitions, end_transitions)
            - crf_log_partition(emissions, mask, transitions, start_transitions, end_transitions))


def viterbi_decode(emissions: tf.Tensor, mask: tf.Tensor | None, transitions: tf.Tensor,
                   start_transitions: tf.Tensor, end_transitions: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The highest-scoring tag path of every sequence.

    Args: as `crf_sequence_score`, without tags.

    Returns:
      (paths, scores): int32 Tensor [B, S], the best tag at every kept
      position and 0 at masked-out ones; float32 Tensor [B], the score of
      each best path (0 for a sequence with no position).
    """
    emissions = tf.cast(emissions, tf.float32)
    transitions = tf.cast(transitions, tf.float32)
    mask = _mask_or_ones(emissions, mask)
    order, lengths, (emissions,) = _compact(mask, emissions)
    batch_size, num_tags = tf.shape(emissions)[0], tf.shape(emissions)[2]
    # At steps past a sequence's end the score is carried unchanged and the
    # back-pointers are the identity, so back-tracking passes through them.
    identity = tf.broadcast_to(tf.range(num_tags)[None], [batch_size, num_tags])
    score = tf.cast(start_transitions, tf.float32)[None] + emissions[:, 0]

    def step(carry: tuple[tf.Tensor, tf.Tensor], inputs: tuple[tf.Tensor, tf.Tensor]):
        score, _ = carry
        emission, t = inputs
        candidates = score[:, :, None] + transitions[None]  # [B, T from, T to]
        active = (t < lengths)[:, None]
        new_score = tf.where(active, tf.reduce_max(candidates, axis=1) + emission, score)
        pointers = tf.where(active, tf.argmax(candidates, axis=1, output_type=tf.int32), identity)
        return new_score, pointers

    steps = tf.range(1, tf.shape(emissions)[1])
    scores, pointers = tf.scan(step, (tf.transpose(emissions[:, 1:], [1, 0, 2]), steps),
                               initializer=(score, identity))  # [S - 1, B, T] each
    final = tf.concat([score[None], scores], axis=0)[-1] + tf.cast(end_transitions, tf.float32)[None]
    last_tag = tf.argmax(final, axis=1, output_type=tf.int32)  # [B]
    earlier = tf.scan(lambda tag, ptr: tf.gather(ptr, tag, batch_dims=1), pointers,
                      initializer=last_tag, reverse=True)  # [S - 1, B]
    paths = tf.transpose(tf.concat([earlier, last_tag[None]], axis=0))  # [B, S], compacted
    paths = tf.gather(paths, tf.argsort(order, axis=1), batch_dims=1)
    best = tf.where(lengths > 0, tf.reduce_max(final, axis=1), 0.0)
    return tf.where(mask, paths, 0), best


@keras.saving.register_keras_serializable(package="bert_tf")
class CRF(keras.layers.Layer):
    """Linear-chain CRF over per-position tag scores.

    Call it on emissions float [B, S, T] (and a mask [B, S]) to decode the
    best paths, int32 [B, S]; train with `negative_log_likelihood`.

    Moves that `allowed` forbids (e.g. O -> I-PER or B-PER -> I-LOC in BIO, a
    start at I-X, an end at B-X in BIOES) get `FORBIDDEN_SCORE` when decoding,
    so they are never output. The likelihood is left unconstrained: a gold
    path cut by truncation can end inside a BIOES entity, and a constrained
    likelihood would make its loss enormous. Learning makes invalid moves
    unlikely; decoding excludes them.

    Attributes:
      transitions: float32 weight [T, T]; times `learning_rate_multiplier`, the
        score of moving from tag i to tag j.
      start_transitions: float32 weight [T]; scaled likewise, the score of
        starting with a tag.
      end_transitions: float32 weight [T]; scaled likewise, the score of ending
        with a tag.
    """

    def __init__(self, num_tags: int, allowed: Sequence[Any] | None = None,
                 learning_rate_multiplier: float = 1.0, **kwargs: Any) -> None:
        """Creates the weights (zeros) and the constraint tables.

        Args:
          num_tags: T.
          allowed: (transitions, start, end), bool array-likes of shape
            [T, T] (from, to), [T] (may start a sequence) and [T] (may end
            one), as `bert_tf.data.tag_schemes.allowed_transitions` makes
            them; None allows every move.
          learning_rate_multiplier: the scores are the weights times this. Under
            Adam a weight moves about the learning rate per step whatever its
            gradient's scale, so the scores move this many times faster: the
            zero-initialised transitions can then learn at a fine-tuning rate
            made for the pretrained encoder (BERT-CRF taggers commonly give
            the CRF a rate about 100x the encoder's).
          **kwargs: `keras.layers.Layer` arguments; dtype defaults to float32.

        Raises:
          ValueError: `allowed` is not three tables of those shapes.
        """
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.num_tags = num_tags
        self.learning_rate_multiplier = float(learning_rate_multiplier)
        if allowed is None:
            tables = [np.ones([num_tags, num_tags], bool), np.ones([num_tags], bool), np.ones([num_tags], bool)]
        else:
            tables = [np.asarray(a, bool) for a in allowed]
            shapes = [table.shape for table in tables]
            if shapes != [(num_tags, num_tags), (num_tags,), (num_tags,)]:
                raise ValueError(f"allowed: tables of shapes {shapes}; expected [{num_tags}, {num_tags}], "
                                 f"[{num_tags}] and [{num_tags}] (transitions, start, end)")
        self.allowed = None if allowed is None else tuple(tables)
        # Penalties added to the weights when decoding: 0 or FORBIDDEN_SCORE.
        self._penalties = [np.where(a, 0.0, FORBIDDEN_SCORE).astype(np.float32) for a in tables]
        # The shapes depend on num_tags only, so the weights exist before the
        # first call and `negative_log_likelihood` may come first.
        zeros = keras.initializers.Zeros()
        self.transitions = self.add_weight(shape=(num_tags, num_tags), initializer=zeros,
                                           name="transitions", dtype="float32")
        self.start_transitions = self.add_weight(shape=(num_tags,), initializer=zeros,
                                                 name="start_transitions", dtype="float32")
        self.end_transitions = self.add_weight(shape=(num_tags,), initializer=zeros,
                                               name="end_transitions", dtype="float32")
        self.built = True

    def _weights(self, constrained: bool) -> list[tf.Tensor]:
        weights = [tf.convert_to_tensor(w) * self.learning_rate_multiplier for w in
                   (self.transitions, self.start_transitions, self.end_transitions)]
        if constrained:
            weights = [w + p for w, p in zip(weights, self._penalties)]
        return weights

    def call(self, emissions: tf.Tensor, mask: tf.Tensor | None = None) -> tf.Tensor:
        """Decodes the best valid paths.

        Args:
          emissions: float Tensor [B, S, T].
          mask: bool or int Tensor [B, S], 1 on the positions to tag; None for
            all.

        Returns:
          int32 Tensor [B, S]: tag ids, 0 at masked-out positions.
        """
        return viterbi_decode(emissions, mask, *self._weights(constrained=True))[0]

    def log_likelihood(self, emissions: tf.Tensor, tags: tf.Tensor,
                       mask: tf.Tensor | None = None) -> tf.Tensor:
        """Log-probability of the gold paths, float32 Tensor [B].

        Args: emissions and mask as `call`; tags: int Tensor [B, S], ignored
        (may be -1) at masked-out positions.
        """
        return crf_log_likelihood(emissions, tags, mask, *self._weights(constrained=False))

    def negative_log_likelihood(self, emissions: tf.Tensor, tags: tf.Tensor,
                                mask: tf.Tensor | None = None) -> tf.Tensor:
        """The training loss: mean over the batch of -log_likelihood, float32 scalar."""
        return -tf.reduce_mean(self.log_likelihood(emissions, tags, mask))

    def compute_output_shape(self, emissions_shape: tuple) -> tuple:
        return tuple(emissions_shape[:2])

    def compute_output_spec(self, emissions: Any, mask: Any = None) -> keras.KerasTensor:
        return keras.KerasTensor(emissions.shape[:2], dtype="int32")

    def get_config(self) -> dict[str, Any]:
        allowed = None if self.allowed is None else [table.tolist() for table in self.allowed]
        return {**super().get_config(), "num_tags": self.num_tags, "allowed": allowed,
                "learning_rate_multiplier": self.learning_rate_multiplier}
