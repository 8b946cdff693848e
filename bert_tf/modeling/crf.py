"""Linear-chain conditional random field (CRF) for sequence tagging.

No maintained CRF exists for Keras 3, so it is written here: the
log-likelihood by the forward algorithm in log space, Viterbi decoding, and
transition constraints that forbid moves invalid in the BIO, IOB1 or BIOES
tagging scheme.

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

# BIO is IOB2: every entity starts with B-. In IOB1 an entity starts with I-,
# and B- only starts an entity that directly follows one of the same type.
# BIOES (IOBES) marks single-token entities S- and last tokens E-.
SCHEMES = ("BIO", "IOB1", "BIOES")
# The prefixes of entity tags in each scheme.
PREFIXES = {"BIO": "BI", "IOB1": "BI", "BIOES": "BIES"}
# Added to the score of a forbidden move when decoding. Far below any sum of
# emission and transition scores, yet finite, so that max and argmax stay
# well defined in float32.
FORBIDDEN_SCORE = -1e9


def split_tag(tag: str, scheme: str) -> tuple[str, str]:
    """Splits a tag into its prefix and entity type.

    Args:
      tag: "O", or a prefix of `scheme` + "-" + a non-empty type, e.g. "B-PER".
      scheme: one of `SCHEMES`.

    Returns:
      ("O", "") for "O", else (prefix, type), e.g. ("B", "PER").

    Raises:
      ValueError: the tag has no such form.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown tagging scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    if tag == "O":
        return "O", ""
    prefix, dash, entity_type = tag.partition("-")
    if not dash or not entity_type or prefix not in PREFIXES[scheme]:
        prefixes = "-, ".join(PREFIXES[scheme])
        raise ValueError(f"tag {tag!r} is neither O nor {prefixes}- followed by a type ({scheme})")
    return prefix, entity_type


def transition_allowed(from_tag: str | None, to_tag: str | None, scheme: str) -> bool:
    """Whether `to_tag` may follow `from_tag` in `scheme`.

    Args:
      from_tag: the previous tag, or None at the start of a sequence.
      to_tag: the next tag, or None at the end of a sequence.
      scheme: one of `SCHEMES`.

    Returns:
      True if the move is valid.

    Raises:
      ValueError: a tag is not of the scheme's form (see `split_tag`).
    """
    prev, prev_type = split_tag(from_tag, scheme) if from_tag is not None else ("O", "")
    if to_tag is None:
        # BIOES entities close explicitly; BIO and IOB1 ones close anywhere.
        return scheme != "BIOES" or prev in "OES"
    next_, next_type = split_tag(to_tag, scheme)
    same_entity = prev != "O" and prev_type == next_type
    if scheme == "BIO":
        return next_ != "I" or same_entity
    if scheme == "IOB1":
        return next_ != "B" or same_entity
    # BIOES: inside an entity only I- or E- of its type may follow.
    if prev in "BI":
        return next_ in "IE" and same_entity
    return next_ in "OBS"


def allowed_transitions(tags: Sequence[str], scheme: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tables of the valid moves between the tags of a tag list.

    Args:
      tags: the T tag names, in id order.
      scheme: one of `SCHEMES`.

    Returns:
      (transitions, start, end): bool arrays of shape [T, T] (from, to), [T]
      (may start a sequence) and [T] (may end a sequence).

    Raises:
      ValueError: a tag is not of the scheme's form.
    """
    transitions = np.array([[transition_allowed(a, b, scheme) for b in tags] for a in tags], bool)
    start = np.array([transition_allowed(None, tag, scheme) for tag in tags], bool)
    end = np.array([transition_allowed(tag, None, scheme) for tag in tags], bool)
    return transitions.reshape(len(tags), len(tags)), start, end


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

    Given a tag list and a scheme, moves invalid in that scheme (e.g. O ->
    I-PER or B-PER -> I-LOC in BIO, a start at I-X, an end at B-X in BIOES)
    get `FORBIDDEN_SCORE` when decoding, so they are never output. The
    likelihood is left unconstrained: a gold path cut by truncation can end
    inside a BIOES entity, and a constrained likelihood would make its loss
    enormous. Learning makes invalid moves unlikely; decoding excludes them.

    Attributes:
      transitions: float32 weight [T, T]; times `learning_rate_multiplier`, the
        score of moving from tag i to tag j.
      start_transitions: float32 weight [T]; scaled likewise, the score of
        starting with a tag.
      end_transitions: float32 weight [T]; scaled likewise, the score of ending
        with a tag.
    """

    def __init__(self, num_tags: int, tags: Sequence[str] | None = None, scheme: str | None = None,
                 learning_rate_multiplier: float = 1.0, **kwargs: Any) -> None:
        """Creates the weights (zeros) and the constraint tables.

        Args:
          num_tags: T.
          tags: the T tag names in id order; with `scheme`, enables the
            constraints.
          scheme: one of `SCHEMES`; needs `tags`.
          learning_rate_multiplier: the scores are the weights times this. Under
            Adam a weight moves about the learning rate per step whatever its
            gradient's scale, so the scores move this many times faster: the
            zero-initialised transitions can then learn at a fine-tuning rate
            made for the pretrained encoder (BERT-CRF taggers commonly give
            the CRF a rate about 100x the encoder's).
          **kwargs: `keras.layers.Layer` arguments; dtype defaults to float32.

        Raises:
          ValueError: `tags` and `num_tags` disagree, only one of `tags` and
            `scheme` is given, or a tag is not of the scheme's form.
        """
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        if tags is not None and len(tags) != num_tags:
            raise ValueError(f"num_tags={num_tags} but {len(tags)} tags given")
        if (tags is None) != (scheme is None):
            raise ValueError("transition constraints need both tags and scheme")
        self.num_tags = num_tags
        self.tags = list(tags) if tags is not None else None
        self.scheme = scheme
        self.learning_rate_multiplier = float(learning_rate_multiplier)
        if tags is None:
            allowed = (np.ones([num_tags, num_tags], bool), np.ones([num_tags], bool), np.ones([num_tags], bool))
        else:
            allowed = allowed_transitions(tags, scheme)
        # Penalties added to the weights when decoding: 0 or FORBIDDEN_SCORE.
        self._penalties = [np.where(a, 0.0, FORBIDDEN_SCORE).astype(np.float32) for a in allowed]
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
        return {**super().get_config(), "num_tags": self.num_tags, "tags": self.tags,
                "scheme": self.scheme, "learning_rate_multiplier": self.learning_rate_multiplier}
