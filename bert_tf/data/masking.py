"""Masked-LM masking of packed sequences: 15% of tokens, 80/10/10, whole words.

The recipe of google-research/bert `create_pretraining_data.py`, vectorised
over a batch and driven by stateless random ops, so that a seed fixes the
result whatever the parallelism of the `tf.data` pipeline around it. Both the
static TFRecord writer and dynamic (per-epoch) masking call `MaskedLmMasker`.
`mask_like_original` is the same recipe one instance at a time, drawing from a
`random.Random` exactly as the original script does (`--original_rng`), so its
records can be reproduced example for example.

Why not tensorflow-text's `RandomItemSelector` / `MaskValuesChooser`: both draw
from the stateful global generator (`tf.random.shuffle`, `tf.random.uniform`),
so parallel `tf.data` maps cannot be made deterministic, and the selector
rounds the count up (`ceil`) and caps whole words by word count, not by
`max_predictions_per_seq` tokens as the original does.

Dimensions: B batch size, S sequence length, P max_predictions_per_seq.
"""

from __future__ import annotations

import random
from typing import Sequence

import tensorflow as tf


class MaskedLmMasker:
    """Chooses and replaces the masked-LM targets of a batch of packed sequences.

    For each sequence, `num_to_predict = min(P, max(1, round(n * masked_lm_prob)))`
    where n counts the sequence's tokens, [CLS] and [SEP] included (all but
    `pad_id`), as the original's `len(tokens)` does; only tokens other than
    `unmaskable_ids` ([CLS], [SEP], padding) are chosen. Words are taken in random order while they fit in
    `num_to_predict`; a word is one token, or with whole-word masking a run of
    tokens starting where `word_starts` is true. Each chosen token becomes
    `[MASK]` with probability `mask_token_rate`, a uniformly random vocab id
    with probability `random_token_rate`, and stays unchanged otherwise.
    """

    def __init__(self, *, vocab_size: int, mask_id: int, pad_id: int, unmaskable_ids: Sequence[int],
                 max_predictions_per_seq: int, masked_lm_prob: float = 0.15,
                 mask_token_rate: float = 0.8, random_token_rate: float = 0.1) -> None:
        if not 0.0 < masked_lm_prob < 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1), got {masked_lm_prob}")
        if max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be positive, got {max_predictions_per_seq}")
        if mask_token_rate < 0 or random_token_rate < 0 or mask_token_rate + random_token_rate > 1:
            raise ValueError("mask_token_rate and random_token_rate must be >= 0 and sum to <= 1")
        self.vocab_size = vocab_size
        self.mask_id = mask_id
        self.pad_id = pad_id
        self.unmaskable_ids = tuple(unmaskable_ids)
        self.max_predictions_per_seq = max_predictions_per_seq
        self.masked_lm_prob = masked_lm_prob
        self.mask_token_rate = mask_token_rate
        self.random_token_rate = random_token_rate

    def __call__(self, input_word_ids: tf.Tensor, seed: tf.Tensor,
                 word_starts: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """Masks a batch.

        Args:
          input_word_ids: int32 Tensor of shape [B, S], packed sequences.
          seed: int Tensor of shape [2], the stateless seed of this batch.
          word_starts: optional bool Tensor of shape [B, S], true where a token
            starts a word (whole-word masking); None masks single tokens.

        Returns:
          A dict: `input_word_ids` int32 [B, S] with the replacements made;
          `masked_lm_positions` and `masked_lm_ids` (the original tokens)
          int32 [B, P], ascending positions then zeros; `masked_lm_weights`
          float32 [B, P], 1.0 on real targets and 0.0 on padding.
        """
        ids = tf.cast(input_word_ids, tf.int32)
        seq_length = tf.shape(ids)[1]
        if ids.shape[1] is not None and ids.shape[1] < self.max_predictions_per_seq:
            raise ValueError(f"max_predictions_per_seq={self.max_predictions_per_seq} exceeds "
                             f"the sequence length {ids.shape[1]}")
        seed_select, seed_choice, seed_random = tf.unstack(tf.random.split(seed, 3))

        maskable = tf.reduce_all(ids[:, :, None] != tf.constant(self.unmaskable_ids, tf.int32),
                                 axis=-1)  # [B, S]
        num_maskable = tf.reduce_sum(tf.cast(maskable, tf.int32), axis=1)  # [B]
        num_tokens = tf.reduce_sum(tf.cast(ids != self.pad_id, tf.int32), axis=1)  # [B]
        # tf.round, like Python's round, rounds halves to even.
        num_to_predict = tf.cast(tf.round(tf.cast(num_tokens, tf.float32) * self.masked_lm_prob),
                                 tf.int32)
        num_to_predict = tf.minimum(self.max_predictions_per_seq, tf.maximum(1, num_to_predict))
        num_to_predict = tf.where(num_maskable > 0, num_to_predict, 0)  # [B]

        keys = tf.random.stateless_uniform(tf.shape(ids), seed_select)  # [B, S]
        if word_starts is None:
            selected = self._select_tokens(maskable, keys, num_to_predict)
        else:
            selected = self._select_words(maskable, tf.cast(word_starts, tf.bool), keys,
                                          num_to_predict)

        choice = tf.random.stateless_uniform(tf.shape(ids), seed_choice)  # [B, S]
        random_ids = tf.random.stateless_uniform(tf.shape(ids), seed_random, minval=0,
                                                 maxval=self.vocab_size, dtype=tf.int32)
        replacement = tf.where(
            choice < self.mask_token_rate, self.mask_id,
            tf.where(choice < self.mask_token_rate + self.random_token_rate, random_ids, ids))
        masked_input = tf.where(selected, replacement, ids)

        # Selected positions first, in ascending order, then the rest: the first
        # P of them are the targets (at most P are selected).
        positions = tf.range(seq_length)[None, :]
        order = tf.argsort(tf.where(selected, positions, seq_length + positions), axis=1)
        order = order[:, :self.max_predictions_per_seq]  # [B, P]
        is_target = tf.gather(selected, order, batch_dims=1)
        return {
            "input_word_ids": masked_input,
            "masked_lm_positions": tf.where(is_target, order, 0),
            "masked_lm_ids": tf.where(is_target, tf.gather(ids, order, batch_dims=1), 0),
            "masked_lm_weights": tf.cast(is_target, tf.float32),
        }

    @staticmethod
    def _select_tokens(maskable: tf.Tensor, keys: tf.Tensor, num_to_predict: tf.Tensor) -> tf.Tensor:
        """bool [B, S]: the num_to_predict maskable tokens of smallest key."""
        keys = tf.where(maskable, keys, 2.0)
        rank = tf.argsort(tf.argsort(keys, axis=1), axis=1)
        return rank < num_to_predict[:, None]

    @staticmethod
    def _select_words(maskable: tf.Tensor, word_starts: tf.Tensor, keys: tf.Tensor,
                      num_to_predict: tf.Tensor) -> tf.Tensor:
        """bool [B, S]: whole words, in random order, while they fit in num_to_predict.

        W (= S) indexes words within a sequence.
        """
        batch_size, seq_length = tf.shape(maskable)[0], tf.shape(maskable)[1]
        # A word starts where flagged, or where a maskable run starts after a
        # special token (so words never span [SEP]).
        after_unmaskable = tf.pad(~maskable[:, :-1], [[0, 0], [1, 0]], constant_values=True)
        starts = maskable & (word_starts | after_unmaskable)  # [B, S]
        word_index = tf.maximum(tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, 0)  # [B, S]
        num_words = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)  # [B]

        # Per (row, word) segment ids; the extra last segment collects the rest.
        rows = tf.range(batch_size)[:, None] * seq_length
        trash = batch_size * seq_length
        num_segments = trash + 1
        length_segment = tf.where(maskable, rows + word_index, trash)
        word_length = tf.math.unsorted_segment_sum(
            tf.ones_like(word_index), length_segment, num_segments)[:-1]
        word_length = tf.reshape(word_length, [batch_size, seq_length])  # [B, W]
        key_segment = tf.where(starts, rows + word_index, trash)
        word_key = tf.math.unsorted_segment_max(keys, key_segment, num_segments)[:-1]
        word_key = tf.reshape(word_key, [batch_size, seq_length])  # [B, W]
        is_word = tf.range(seq_length)[None, :] < num_words[:, None]
        word_key = tf.where(is_word, word_key, 2.0)

        order = tf.argsort(word_key, axis=1)  # [B, W], random order of the real words
        sorted_length = tf.gather(word_length, order, batch_dims=1)  # [B, W]

        def take_if_fits(state, length):
            taken, _ = state
            fits = (length > 0) & (taken + length <= num_to_predict)
            return taken + tf.where(fits, length, 0), fits

        _, sorted_taken = tf.scan(
            take_if_fits, tf.transpose(sorted_length),
            initializer=(tf.zeros_like(num_to_predict), tf.zeros_like(num_to_predict, tf.bool)))
        sorted_taken = tf.transpose(sorted_taken)  # [B, W]
        word_taken = tf.gather(sorted_taken, tf.argsort(order, axis=1), batch_dims=1)  # [B, W]
        return maskable & tf.gather(word_taken, word_index, batch_dims=1)


def mask_batch(batch: dict[str, tf.Tensor], seed: tf.Tensor, masker: MaskedLmMasker,
               whole_word_mask: bool) -> dict[str, tf.Tensor]:
    """Masks a packed batch; returns the model's input dict (no `word_starts`).

    Args:
      batch: `input_word_ids`, `input_mask`, `input_type_ids`, `word_starts`
        (needed only for whole-word masking) ([B, S]) and
        `next_sentence_labels` ([B]).
      seed: int64 Tensor of shape [2].
      masker: the masking recipe.
      whole_word_mask: mask whole words (by `word_starts`) or single tokens.
    """
    masked = masker(batch["input_word_ids"], seed,
                    batch["word_starts"] if whole_word_mask else None)
    return {
        "input_word_ids": masked["input_word_ids"],
        "input_mask": batch["input_mask"],
        "input_type_ids": batch["input_type_ids"],
        "masked_lm_positions": masked["masked_lm_positions"],
        "masked_lm_ids": masked["masked_lm_ids"],
        "masked_lm_weights": masked["masked_lm_weights"],
        "next_sentence_labels": batch["next_sentence_labels"],
    }


def mask_like_original(tokens: Sequence[int], maskable: Sequence[bool], word_starts: Sequence[bool],
                       rng: random.Random, *, vocab_size: int, mask_id: int,
                       max_predictions_per_seq: int, masked_lm_prob: float = 0.15,
                       whole_word_mask: bool = False) -> tuple[list[int], list[int], list[int]]:
    """Masks one packed sequence with the original script's draws, in its order.

    The draws are those of `create_masked_lm_predictions` in google-research/bert's
    `create_pretraining_data.py`: one shuffle of the candidate words, then for
    each chosen token a draw for [MASK] (80%), a second one for keep or random
    (10% each) and, for a random token, a uniform vocab id. A candidate word is
    a maskable token or, with whole-word masking, a run of them that continues
    while `word_starts` is false; as in the original, [CLS] and [SEP] are
    skipped without ending a word.

    Args:
      tokens: ids of [CLS] A [SEP] B [SEP], unpadded.
      maskable: per token, whether it may be chosen (false on [CLS] and [SEP]).
      word_starts: per token, whether it starts a word.
      rng: the writer's one random source.
      vocab_size: random replacements are drawn from [0, vocab_size).
      mask_id: id of [MASK].
      max_predictions_per_seq: most targets.
      masked_lm_prob: fraction of `len(tokens)` to choose.
      whole_word_mask: choose whole words.

    Returns:
      (masked tokens, target positions ascending, original ids at them).
    """
    words: list[list[int]] = []
    for index, can_mask in enumerate(maskable):
        if not can_mask:
            continue
        if whole_word_mask and words and not word_starts[index]:
            words[-1].append(index)
        else:
            words.append([index])
    rng.shuffle(words)
    num_to_predict = min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob)))
    output = list(tokens)
    chosen: list[int] = []
    for word in words:
        if len(chosen) >= num_to_predict:
            break
        # Words are disjoint, so the original's covered-index check never fires.
        if len(chosen) + len(word) > num_to_predict:
            continue
        for index in word:
            if rng.random() < 0.8:
                output[index] = mask_id
            elif rng.random() >= 0.5:  # the original keeps the token when < 0.5
                output[index] = rng.randint(0, vocab_size - 1)
            chosen.append(index)
    chosen.sort()
    return output, chosen, [tokens[index] for index in chosen]
