"""Encoding classification examples into the model's fixed-length inputs.

`BertTokenizer` and `pack_segments` (the packing shared with pretraining and
serving) turn examples into NumPy arrays; each example keeps its token count
before truncation for the length filter (`bert_tf.data.length_filter`).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import tensorflow as tf

from bert_tf.configs import INPUT_NAMES
from bert_tf.data.classification.reading import Examples
from bert_tf.data.packing import pack_segments
from bert_tf.data.tokenization import BertTokenizer

LABEL_IDS = "label_ids"
REGRESSION_LABELS = "labels"


@dataclasses.dataclass(frozen=True)
class EncodedExamples:
    """Examples as model inputs, NumPy arrays with N rows.

    Attributes:
      features: `input_word_ids`, `input_mask`, `input_type_ids` (int32
        [N, S]) and, for labelled examples, `label_ids` (int32 [N], index in
        the label list) or, for regression, `labels` (float32 [N]).
      num_tokens: int32 [N], the packed length of each example before
        truncation: word pieces of every text plus [CLS] and the [SEP]s. More
        than S means the example was truncated.
      ids: the example ids, to write predictions against.
    """

    features: dict[str, np.ndarray]
    num_tokens: np.ndarray
    ids: list[str]

    def __len__(self) -> int:
        return len(self.num_tokens)

    def select(self, keep: np.ndarray) -> EncodedExamples:
        """The examples where the boolean mask `keep` [N] is true, in order."""
        indices = np.flatnonzero(keep)
        return EncodedExamples({name: value[indices] for name, value in self.features.items()},
                               self.num_tokens[indices], [self.ids[i] for i in indices])


def encode_examples(examples: Examples, tokenizer: BertTokenizer, max_seq_length: int, *,
                    label_list: Sequence[str] | None = None, regression: bool = False,
                    batch_size: int = 1024) -> EncodedExamples:
    """Tokenizes and packs examples into fixed-length model inputs.

    Args:
      examples: from `read_examples` or `glue.read_glue`.
      tokenizer: the model's `BertTokenizer`.
      max_seq_length: S; longer examples are trimmed round-robin by
        `pack_segments`.
      label_list: label names in id order; needed for labelled
        classification examples.
      regression: labels are floats (`labels`), not ids (`label_ids`).
      batch_size: examples tokenized per call (memory, not results).

    Returns:
      The encoded examples (see `EncodedExamples`).

    Raises:
      ValueError: labelled classification examples without `label_list`,
        or with a label outside it.
    """
    segments_per_example = 1 if examples.text_pairs is None else 2
    columns = [examples.texts] + ([examples.text_pairs] if examples.text_pairs is not None else [])
    packed: dict[str, list[np.ndarray]] = {name: [] for name in INPUT_NAMES}
    num_tokens = []
    for start in range(0, len(examples), batch_size):
        segments = [tokenizer(tf.constant(column[start:start + batch_size], tf.string))
                    for column in columns]
        for name, value in pack_segments(
                segments, max_seq_length=max_seq_length, cls_id=tokenizer.cls_id,
                sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id).items():
            packed[name].append(value.numpy())
        num_tokens.append(sum(s.row_lengths().numpy() for s in segments) + 1 + segments_per_example)
    features = {name: (np.concatenate(values) if values
                       else np.zeros((0, max_seq_length), np.int32))
                for name, values in packed.items()}
    if examples.labels is not None:
        if regression:
            features[REGRESSION_LABELS] = np.asarray(examples.labels, np.float32)
        else:
            if label_list is None:
                raise ValueError("encoding labelled classification examples needs the label_list")
            index = {label: i for i, label in enumerate(label_list)}
            unknown = sorted(set(examples.labels) - index.keys())
            if unknown:
                raise ValueError(f"{examples.path}: labels {unknown} are not in the label list "
                                 f"{list(label_list)}")
            features[LABEL_IDS] = np.array([index[label] for label in examples.labels], np.int32)
    tokens = np.concatenate(num_tokens).astype(np.int32) if num_tokens else np.zeros(0, np.int32)
    return EncodedExamples(features, tokens, list(examples.ids))
