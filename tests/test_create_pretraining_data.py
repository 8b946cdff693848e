"""create_pretraining_data.py end to end, as its own process: records and bad input."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from tests import driver_runs
from tests.conftest import original_feature_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "testdata", "en_corpus.txt")
S, P = 64, 10
ORIGINAL_SPEC = original_feature_spec(S, P)


# TensorFlow's C++ runtime logs to stderr before absl takes over; those lines are not ours.
_NATIVE_LOG = re.compile(r"^([IWEF]\d{4} |WARNING: All log messages before absl)")


def _our_lines(stderr):
    return [line for line in stderr.splitlines() if line.strip() and not _NATIVE_LOG.match(line)]


def _run(*flags):
    return driver_runs.run(["create_pretraining_data.py", *flags], timeout=300)


def _flags(vocab, output, **overrides):
    values = dict(input_file=CORPUS, input_format="sentences", output_file=output,
                  vocab_file=vocab, do_lower_case="true", max_seq_length=S, max_predictions_per_seq=P, masked_lm_prob=0.15,
                  dupe_factor=5, random_seed=12345, do_whole_word_mask="true", short_seq_prob=0.1)
    values.update(overrides)
    return [f"--{name}={value}" for name, value in values.items()]


def test_writes_records_with_the_original_spec_reproducibly(minilm_dir, tmp_path):
    vocab = os.path.join(minilm_dir, "vocab.txt")
    first = _run(*_flags(vocab, tmp_path / "a.tfrecord", num_shards=2, shard_index=1))
    assert first.returncode == 0, first.stderr
    path = tmp_path / "a.tfrecord-00001-of-00002"
    records = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    assert len(records) > 10
    parsed = tf.io.parse_example(records, ORIGINAL_SPEC)
    vocab_words = open(vocab, encoding="utf-8").read().splitlines()
    cls, sep, mask = (vocab_words.index(t) for t in ("[CLS]", "[SEP]", "[MASK]"))
    ids = parsed["input_ids"].numpy()
    assert (ids[:, 0] == cls).all()
    assert set(parsed["next_sentence_labels"].numpy().ravel()) <= {0, 1}
    weights = parsed["masked_lm_weights"].numpy()
    positions = parsed["masked_lm_positions"].numpy()
    rows, cols = np.nonzero(weights)
    assert len(rows) > 0 and not np.isin(parsed["masked_lm_ids"].numpy()[rows, cols], [cls, sep, 0]).any()
    assert np.mean(ids[rows, positions[rows, cols]] == mask) > 0.5
    # Shard 1 of 2 holds documents 2 and 4 only: every token is from their text.
    shard_words = set(" ".join(open(CORPUS, encoding="utf-8").read().split("\n\n")[1::2]).lower().split())
    assert "museum" not in shard_words and vocab_words.index("museum") not in ids

    again = _run(*_flags(vocab, tmp_path / "b.tfrecord", num_shards=2, shard_index=1))
    other = _run(*_flags(vocab, tmp_path / "c.tfrecord", num_shards=2, shard_index=1, random_seed=1))
    assert again.returncode == 0 and other.returncode == 0
    assert (tmp_path / "b.tfrecord-00001-of-00002").read_bytes() == path.read_bytes()
    assert (tmp_path / "c.tfrecord-00001-of-00002").read_bytes() != path.read_bytes()
    assert sorted(os.listdir(tmp_path)) == sorted(
        f"{n}.tfrecord-00001-of-00002" for n in "abc")


def _bad_inputs(tmp_path, vocab):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n", encoding="utf-8")
    no_mask = tmp_path / "no_mask_vocab.txt"
    no_mask.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n", encoding="utf-8")
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps({
        "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 37, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 32,
        "type_vocab_size": 2, "initializer_range": 0.02}), encoding="utf-8")
    return {
        "missing input": ({"input_file": tmp_path / "missing.txt"}, "missing.txt"),
        "empty corpus": ({"input_file": empty}, "empty.txt"),
        "missing vocab": ({"vocab_file": tmp_path / "nope.txt"}, "nope.txt"),
        "vocab without [MASK]": ({"vocab_file": no_mask}, "[MASK]"),
        "longer than the model": ({"bert_config_file": config}, "--max_seq_length=64"),
        "too many predictions": ({"max_predictions_per_seq": S + 1}, "--max_predictions_per_seq"),
        "no output folder": ({"output_file": tmp_path / "no" / "out.tfrecord"}, "--output_file"),
    }


def test_bad_input_fails_in_one_line_with_exit_code_2(minilm_dir, tmp_path):
    vocab = os.path.join(minilm_dir, "vocab.txt")
    before = set(os.listdir(tmp_path))
    for case, (overrides, named) in _bad_inputs(tmp_path, vocab).items():
        before = set(os.listdir(tmp_path))
        result = _run(*_flags(vocab, tmp_path / "out.tfrecord", **overrides))
        errors = _our_lines(result.stderr)
        assert result.returncode == 2, (case, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, case
        assert len(errors) == 1 and errors[0].startswith("create_pretraining_data.py: error: "), (case, errors)
        assert named in errors[0], (case, errors[0])
        assert set(os.listdir(tmp_path)) == before, f"{case}: left files behind"


@pytest.mark.parametrize("flag", ["--shard_index=2", "--masked_lm_prob=0"])
def test_bad_flag_values_fail_in_one_line(minilm_dir, tmp_path, flag):
    result = _run(*_flags(os.path.join(minilm_dir, "vocab.txt"), tmp_path / "o"), "--num_shards=2", flag)
    errors = _our_lines(result.stderr)
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-2000:]
    assert errors[0].startswith("create_pretraining_data.py: error: ")
    assert flag.split("=")[0] in errors[0]
