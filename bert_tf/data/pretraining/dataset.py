"""tf.data pipelines that feed `BertPretrainer`.

Four sources, one output: batches keyed by the model's input names,
`input_word_ids`, `input_mask`, `input_type_ids` (int32 [B, S]),
`masked_lm_positions`, `masked_lm_ids` (int32 [B, P]), `masked_lm_weights`
(float32 [B, P]) and `next_sentence_labels` (int32 [B]).

- static: masked TFRecords from `create_pretraining_data.py` (or from
  google-research/bert's tool), read as they are;
- dynamic from records: unmasked packed pairs, masked anew for every batch;
- dynamic from text: tokenized documents, pairs and masks drawn anew each epoch;
- dynamic from text pairs: (text A, text B, label) tokenized, packed and
  masked in the graph.

Dynamic masking draws one stateless seed per batch from
`tf.data.Dataset.random`, so with a seed the batches are reproducible however
many parallel calls the maps run, and differ from epoch to epoch.
"""

from __future__ import annotations

import random
from typing import Sequence

import tensorflow as tf
from absl import logging
from tensorflow.python.data.ops import readers  # _TFRecordDataset: see pretraining_dataset()

from bert_tf.data.masking import MaskedLmMasker, mask_batch
from bert_tf.data.packing import SpecialTokenIds, pack_pairs
from bert_tf.data.pretraining.records import masked_feature_spec, parse_batch, unmasked_feature_spec
from bert_tf.data.pretraining.documents import Document, Tokenizer, expand_input_patterns
from bert_tf.data.pretraining.instances import create_instances

AUTOTUNE = tf.data.AUTOTUNE


def _batch_seeds(seed: int | None) -> tf.data.Dataset:
    """An endless stream of int64 [2] stateless seeds, new ones each epoch."""
    return tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)


def _per_replica_batch_size(batch_size: int, input_context: tf.distribute.InputContext | None) -> int:
    if input_context is None:
        return batch_size
    return input_context.get_per_replica_batch_size(batch_size)


def check_record_files(files: list[str], skip_corrupt: bool = False) -> list[str]:
    """The files whose first record reads back; a corrupt one is an error naming it,
    or, with `skip_corrupt`, is left out with a warning (a count of them is logged)."""
    good, bad = [], []
    for path in files:
        try:
            for _ in tf.data.TFRecordDataset(path).take(1):
                pass
            good.append(path)
        except tf.errors.DataLossError as e:
            if not skip_corrupt:
                raise ValueError(f"{path}: corrupt TFRecord data ({e.message.splitlines()[0]}); "
                                 "--skip_corrupt_records leaves such files out") from None
            bad.append(path)
            logging.warning("%s: corrupt TFRecord data, skipped", path)
    if bad:
        logging.warning("skipped %d corrupt TFRecord file(s) of %d", len(bad), len(files))
    if not good:
        raise ValueError(f"no readable TFRecord file among {', '.join(files)}")
    return good


def pretraining_dataset(file_patterns: Sequence[str], *, batch_size: int, max_seq_length: int,
                        max_predictions_per_seq: int, is_training: bool = True,
                        masker: MaskedLmMasker | None = None, whole_word_mask: bool = False,
                        seed: int | None = None,
                        input_context: tf.distribute.InputContext | None = None,
                        shuffle_buffer_size: int = 10000,
                        skip_corrupt_records: bool = False) -> tf.data.Dataset:
    """Batches of model inputs from pretraining TFRecords.

    Args:
      file_patterns: globs of TFRecord files.
      batch_size: global batch size; each input pipeline gets its replica's share.
      max_seq_length: S of the records.
      max_predictions_per_seq: P of the records, or of the dynamic masking.
      is_training: shuffle, repeat forever and drop the last partial batch.
      masker: None reads masked (static) records; a masker reads unmasked
        records and masks every batch anew.
      whole_word_mask: with a masker, mask whole words by the records' `word_starts`.
      seed: fixes file order, shuffling and masking; None draws fresh ones.
      input_context: from `tf.distribute.Strategy.distribute_datasets_from_function`;
        each input pipeline reads its own files (its own records when there
        are fewer files than pipelines).
      shuffle_buffer_size: records in the shuffle buffer.
      skip_corrupt_records: a shard that turns out corrupt part-way (a bad
        length or CRC) ends there with a logged warning instead of stopping
        the run; a shard unreadable from its start is left out at once.

    Returns:
      A dataset of model input dicts of fixed shape.

    Raises:
      FileNotFoundError: a pattern matches no file.
      ValueError: a shard's first record is corrupt (without
        `skip_corrupt_records`; the message names the file).
    """
    files = check_record_files(expand_input_patterns(file_patterns), skip_corrupt_records)
    # File indices, not names, read by the one-file reader (tf.data.TFRecordDataset
    # wraps even one name in a flat_map whose checkpointed state holds the path): a
    # checkpointed iterator then names no file, so a run directory moved elsewhere
    # resumes reading its records where it was.
    ds = tf.data.Dataset.range(len(files))
    pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    shard_files = len(files) >= pipelines
    if shard_files:
        ds = ds.shard(pipelines, pipeline_id)
    if is_training:
        ds = ds.shuffle(len(files), seed=seed)
    names = tf.constant(files)

    def read(index):
        records = readers._TFRecordDataset(names[index])
        return records.ignore_errors(log_warning=True) if skip_corrupt_records else records

    ds = ds.interleave(read, cycle_length=min(len(files), 8), num_parallel_calls=AUTOTUNE,
                       deterministic=True)
    if not shard_files:
        ds = ds.shard(pipelines, pipeline_id)
    if is_training:
        ds = ds.shuffle(shuffle_buffer_size, seed=seed).repeat()
    ds = ds.batch(_per_replica_batch_size(batch_size, input_context), drop_remainder=is_training)

    if masker is None:
        spec = masked_feature_spec(max_seq_length, max_predictions_per_seq)
        ds = ds.map(lambda records: parse_batch(records, spec),
                    num_parallel_calls=AUTOTUNE)
    else:
        if masker.max_predictions_per_seq != max_predictions_per_seq:
            raise ValueError(f"masker.max_predictions_per_seq={masker.max_predictions_per_seq} "
                             f"differs from max_predictions_per_seq={max_predictions_per_seq}")
        spec = unmasked_feature_spec(max_seq_length)
        ds = tf.data.Dataset.zip(ds, _batch_seeds(seed)).map(
            lambda records, batch_seed: mask_batch(
                parse_batch(records, spec), batch_seed, masker, whole_word_mask),
            num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


def text_pretraining_dataset(documents: Sequence[Document], *, batch_size: int,
                             max_seq_length: int, special: SpecialTokenIds,
                             masker: MaskedLmMasker, whole_word_mask: bool = False,
                             short_seq_prob: float = 0.1, is_training: bool = True,
                             seed: int | None = None,
                             input_context: tf.distribute.InputContext | None = None,
                             ) -> tf.data.Dataset:
    """Batches of model inputs drawn from tokenized documents, anew each epoch.

    Each pass over the dataset runs the pair recipe (`create_instances`
    with a dupe factor of 1) with a new random state, then packs and masks in
    the graph.

    Args:
      documents: tokenized documents (`pretraining.tokenize_documents`).
      batch_size: global batch size.
      max_seq_length: S.
      special: the [CLS], [SEP] and [PAD] ids.
      masker: the masking recipe.
      whole_word_mask: mask whole words or single tokens.
      short_seq_prob: probability of a shorter target length.
      is_training: repeat forever and drop the last partial batch.
      seed: fixes pairs and masks; None draws fresh ones.
      input_context: each input pipeline takes every n-th document.

    Returns:
      A dataset of model input dicts of fixed shape.
    """
    if input_context is not None:
        documents = documents[input_context.input_pipeline_id::input_context.num_input_pipelines]
    if not documents:
        raise ValueError("text_pretraining_dataset: no documents")
    epochs = iter(range(1 << 62))

    def instances():
        epoch = next(epochs)
        rng = random.Random(None if seed is None else f"{seed}/{epoch}")
        for instance in create_instances(
                documents, max_seq_length=max_seq_length, short_seq_prob=short_seq_prob,
                dupe_factor=1, rng=rng):
            yield (instance.tokens_a, instance.tokens_b, instance.word_starts_a,
                   instance.word_starts_b, int(instance.is_random_next))

    ds = tf.data.Dataset.from_generator(instances, output_signature=(
        tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([None], tf.bool), tf.TensorSpec([None], tf.bool),
        tf.TensorSpec([], tf.int32)))
    if is_training:
        ds = ds.repeat()
    ds = ds.ragged_batch(_per_replica_batch_size(batch_size, input_context),
                         drop_remainder=is_training)

    def pack_and_mask(pairs, batch_seed):
        tokens_a, tokens_b, starts_a, starts_b, labels = pairs
        batch = pack_pairs(tokens_a, tokens_b, starts_a, starts_b,
                           max_seq_length=max_seq_length, special=special)
        batch["next_sentence_labels"] = labels
        return mask_batch(batch, batch_seed, masker, whole_word_mask)

    ds = tf.data.Dataset.zip(ds, _batch_seeds(seed)).map(pack_and_mask, num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


def text_pair_pretraining_dataset(pairs: tf.data.Dataset, *, tokenizer: Tokenizer,
                                  batch_size: int, max_seq_length: int, masker: MaskedLmMasker,
                                  whole_word_mask: bool = False, is_training: bool = True,
                                  seed: int | None = None) -> tf.data.Dataset:
    """Batches of model inputs from sentence pairs, tokenized and masked in the graph.

    Args:
      pairs: elements (text_a, text_b, next_sentence_label): tf.string scalars
        and an int label (0: B follows A, 1: B is random).
      tokenizer: `BertTokenizer` (tf.string [B] to int RaggedTensor [B, (tokens)]).
      batch_size: examples per batch.
      max_seq_length: S.
      masker: the masking recipe.
      whole_word_mask: mask whole words, a word being a piece and its `##` pieces.
      is_training: drop the last partial batch.
      seed: fixes the masks; None draws fresh ones.

    Returns:
      A dataset of model input dicts.
    """
    is_continuation = tf.constant([t.startswith("##") for t in tokenizer.vocabulary])

    def word_starts(tokens: tf.RaggedTensor) -> tf.RaggedTensor | None:
        if not whole_word_mask:
            return None
        return tf.ragged.map_flat_values(lambda ids: ~tf.gather(is_continuation, ids), tokens)

    def tokenize_pack_and_mask(batch, batch_seed):
        text_a, text_b, labels = batch
        tokens_a, tokens_b = tokenizer(text_a), tokenizer(text_b)
        packed = pack_pairs(tokens_a, tokens_b, word_starts(tokens_a), word_starts(tokens_b),
                            max_seq_length=max_seq_length, special=tokenizer)
        packed["next_sentence_labels"] = tf.cast(labels, tf.int32)
        return mask_batch(packed, batch_seed, masker, whole_word_mask)

    ds = pairs.batch(batch_size, drop_remainder=is_training)
    ds = tf.data.Dataset.zip(ds, _batch_seeds(seed)).map(tokenize_pack_and_mask,
                                                           num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)
