"""Static pretraining data: text corpora to TFRecords (`create_pretraining_data.py`).

Reads and tokenizes the corpus, builds `dupe_factor` passes of instances with
the original recipe, packs and (unless masking is left to the input pipeline)
masks them, and writes tf.train.Example records with the original feature
names. One `random.Random` drives every choice, so a seed gives the same bytes.

By default the masks are drawn in batches by the vectorised `MaskedLmMasker`
(seeded from that `random.Random`): the original's rules, not its random
stream. With `original_rng` each instance is masked as it is drawn, from the
same `random.Random` and in the order google-research/bert's script draws,
so the same corpus, vocab, flags and seed give the original's examples in the
original's order.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.data.masking import MaskedLmMasker, mask_batch, mask_like_original
from bert_tf.data.packing import SpecialTokenIds, pack_pairs
from bert_tf.data.pretraining.records import serialize_batch
from bert_tf.data.pretraining.documents import (INPUT_FORMATS, WORD_BOUNDARIES, CorpusStats, Tokenizer,
                                                expand_input_patterns, filter_documents, read_documents,
                                                tokenize_documents)
from bert_tf.data.pretraining.instances import Instance, create_instances

_WRITE_BATCH = 256


@dataclasses.dataclass(frozen=True)
class PretrainingDataOptions:
    """What `create_pretraining_data.py` does; the fields are its flags.

    `max_position_embeddings` is the model's (from `--bert_config_file`), or
    None when no model config is given.
    """

    input_files: Sequence[str]
    output_file: str
    vocab_file: str
    input_format: str = "sentences"
    do_lower_case: bool = True
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    dupe_factor: int = 10
    random_seed: int = 12345
    short_seq_prob: float = 0.1
    do_whole_word_mask: bool = False
    word_boundaries: str = "wordpiece"
    static_masking: bool = True
    num_shards: int = 1
    shard_index: int = 0
    min_tokens: int = 0
    max_tokens: int = 0
    original_rng: bool = False
    balanced_nsp: bool = False
    max_position_embeddings: int | None = None

    def __post_init__(self) -> None:
        if not self.input_files:
            raise ValueError("--input_file: no input given")
        if self.max_seq_length < 5:
            raise ValueError(f"--max_seq_length={self.max_seq_length}: must be at least 5")
        if self.max_position_embeddings is not None and self.max_seq_length > self.max_position_embeddings:
            raise ValueError(
                f"--max_seq_length={self.max_seq_length} exceeds the model's "
                f"max_position_embeddings={self.max_position_embeddings} (--bert_config_file)")
        if not 1 <= self.max_predictions_per_seq <= self.max_seq_length:
            raise ValueError(
                f"--max_predictions_per_seq={self.max_predictions_per_seq} must be in "
                f"[1, --max_seq_length={self.max_seq_length}]")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ValueError(f"--masked_lm_prob={self.masked_lm_prob}: must be in (0, 1)")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"--short_seq_prob={self.short_seq_prob}: must be in [0, 1]")
        if self.dupe_factor < 1:
            raise ValueError(f"--dupe_factor={self.dupe_factor}: must be positive")
        if self.input_format not in INPUT_FORMATS:
            raise ValueError(f"--input_format={self.input_format}: must be one of "
                             f"{', '.join(INPUT_FORMATS)}")
        if self.word_boundaries not in WORD_BOUNDARIES:
            raise ValueError(f"--word_boundaries={self.word_boundaries}: must be one of "
                             f"{', '.join(WORD_BOUNDARIES)}")
        if not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"--shard_index={self.shard_index} must be in [0, --num_shards={self.num_shards})")
        if self.min_tokens < 0 or self.max_tokens < 0:
            raise ValueError("--min_tokens and --max_tokens must not be negative")
        if self.max_tokens and self.min_tokens > self.max_tokens:
            raise ValueError(f"--min_tokens={self.min_tokens} exceeds --max_tokens={self.max_tokens}")
        if self.original_rng and not self.static_masking:
            raise ValueError("--original_rng masks as it draws: it needs static masking "
                             "(--static_masking / no --dynamic_masking)")

    @property
    def shard_output_file(self) -> str:
        """`output_file`, suffixed `-KKKKK-of-NNNNN` when the corpus is sharded."""
        if self.num_shards == 1:
            return self.output_file
        return f"{self.output_file}-{self.shard_index:05d}-of-{self.num_shards:05d}"


@dataclasses.dataclass
class PretrainingDataStats:
    """What `create_pretraining_data` read and wrote."""

    corpus: CorpusStats
    examples: int
    random_next: int
    output_file: str


def create_pretraining_data(options: PretrainingDataOptions,
                            tokenizer: Tokenizer | None = None) -> PretrainingDataStats:
    """Writes the TFRecords of one shard of the corpus.

    Shard K of N takes every N-th document starting at the K-th (NSP negatives
    come from the same shard) and writes `options.shard_output_file`.

    Args:
      options: see `PretrainingDataOptions`.
      tokenizer: defaults to `BertTokenizer(options.vocab_file, options.do_lower_case)`.

    Returns:
      Counts and the file written.

    Raises:
      FileNotFoundError: a missing input or vocab file or output folder (named
        in the message).
      ValueError: an empty corpus or a bad vocab (named in the message).
    """
    files = expand_input_patterns(options.input_files)
    output = options.shard_output_file
    if not os.path.isdir(os.path.dirname(os.path.abspath(output))):
        raise FileNotFoundError(f"--output_file={options.output_file}: its folder does not exist")
    if tokenizer is None:
        from bert_tf.data.tokenization import BertTokenizer

        tokenizer = BertTokenizer(options.vocab_file, lower_case=options.do_lower_case)
    texts = read_documents(files, options.input_format)
    texts = texts[options.shard_index::options.num_shards]
    documents = tokenize_documents(texts, tokenizer,
                                               word_boundaries=options.word_boundaries)
    documents, corpus = filter_documents(
        documents, min_tokens=options.min_tokens, max_tokens=options.max_tokens)
    logging.info("documents: %d kept, %d shorter than --min_tokens, %d longer than --max_tokens",
                 corpus.documents, corpus.dropped_short, corpus.dropped_long)
    if not documents:
        raise ValueError(f"{', '.join(files)}: no documents with tokens"
                         + (f" in shard {options.shard_index} of {options.num_shards}"
                            if options.num_shards > 1 else "")
                         + (" after --min_tokens/--max_tokens" if corpus.dropped_short
                            or corpus.dropped_long else ""))

    # An integer seed, as the original's `random.Random(FLAGS.random_seed)`.
    rng = random.Random(options.random_seed if options.num_shards == 1
                        else f"{options.random_seed}/{options.shard_index}")
    instances = create_instances(
        documents, max_seq_length=options.max_seq_length, short_seq_prob=options.short_seq_prob,
        dupe_factor=options.dupe_factor, rng=rng, balanced_nsp=options.balanced_nsp,
        each=_masker_like_original(options, tokenizer, rng) if options.original_rng else None)
    masker = MaskedLmMasker(
        vocab_size=tokenizer.vocab_size, mask_id=tokenizer.mask_id, pad_id=tokenizer.pad_id,
        unmaskable_ids=(tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id),
        max_predictions_per_seq=options.max_predictions_per_seq,
        masked_lm_prob=options.masked_lm_prob)

    tmp = f"{output}.tmp-{os.getpid()}"
    try:
        with tf.io.TFRecordWriter(tmp) as writer:
            for start in range(0, len(instances), _WRITE_BATCH):
                chunk = instances[start:start + _WRITE_BATCH]
                batch = _pack_instances(chunk, options, tokenizer)
                if options.original_rng:
                    batch = _with_targets(batch, chunk, options.max_predictions_per_seq)
                elif options.static_masking:
                    seed = tf.constant([rng.getrandbits(63), rng.getrandbits(63)], tf.int64)
                    batch = mask_batch(batch, seed, masker,
                                                           options.do_whole_word_mask)
                for record in serialize_batch(
                        {name: np.asarray(value) for name, value in batch.items()}):
                    writer.write(record)
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    random_next = sum(i.is_random_next for i in instances)
    logging.info("wrote %d examples (%d with a random next segment) to %s",
                 len(instances), random_next, output)
    return PretrainingDataStats(corpus, len(instances), random_next, output)


def _pack_instances(instances: Sequence[Instance], options: PretrainingDataOptions,
                    special: SpecialTokenIds) -> dict[str, tf.Tensor]:
    """Packed, unmasked batch of instances (with `word_starts`)."""
    def ragged(rows: list[list], dtype: np.dtype) -> tf.RaggedTensor:
        values = np.fromiter(itertools.chain.from_iterable(rows), dtype=dtype)
        return tf.RaggedTensor.from_row_lengths(values, [len(row) for row in rows])

    batch = pack_pairs(
        ragged([i.tokens_a for i in instances], np.int32),
        ragged([i.tokens_b for i in instances], np.int32),
        ragged([i.word_starts_a for i in instances], np.bool_),
        ragged([i.word_starts_b for i in instances], np.bool_),
        max_seq_length=options.max_seq_length, special=special)
    batch["next_sentence_labels"] = tf.constant([int(i.is_random_next) for i in instances], tf.int32)
    return batch


def _masker_like_original(options: PretrainingDataOptions, special: Tokenizer,
                          rng: random.Random) -> Callable[[Instance], Instance]:
    """Masks an instance as it is drawn, with `mask_like_original` and the writer's `rng`."""
    def mask(instance: Instance) -> Instance:
        a, b = instance.tokens_a, instance.tokens_b
        tokens = [special.cls_id, *a, special.sep_id, *b, special.sep_id]
        maskable = [False, *[True] * len(a), False, *[True] * len(b), False]
        word_starts = [True, *instance.word_starts_a, True, *instance.word_starts_b, True]
        masked, positions, ids = mask_like_original(
            tokens, maskable, word_starts, rng, vocab_size=special.vocab_size,
            mask_id=special.mask_id, max_predictions_per_seq=options.max_predictions_per_seq,
            masked_lm_prob=options.masked_lm_prob, whole_word_mask=options.do_whole_word_mask)
        return dataclasses.replace(instance, tokens_a=masked[1:1 + len(a)],
                                   tokens_b=masked[2 + len(a):-1],
                                   masked_lm_positions=positions, masked_lm_ids=ids)
    return mask


def _with_targets(batch: dict[str, tf.Tensor], instances: Sequence[Instance],
                  max_predictions_per_seq: int) -> dict[str, tf.Tensor]:
    """A packed batch of instances masked as drawn, with their targets padded to P."""
    positions = np.zeros([len(instances), max_predictions_per_seq], np.int32)
    ids = np.zeros_like(positions)
    for row, instance in enumerate(instances):
        count = len(instance.masked_lm_positions)
        positions[row, :count] = instance.masked_lm_positions
        ids[row, :count] = instance.masked_lm_ids
    batch = {name: value for name, value in batch.items() if name != "word_starts"}
    return {**batch, "masked_lm_positions": positions, "masked_lm_ids": ids,
            "masked_lm_weights": (positions > 0).astype(np.float32)}
