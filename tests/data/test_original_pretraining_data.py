"""Pretraining records against google-research/bert's own create_pretraining_data.py.

Two references: the records in tests/testdata/original_pretraining_data, written by the
original's current script (whole-word masking included; their README gives the flags),
and `bert-tensorflow`, the original's code before whole-word masking, run live. It runs
in a subprocess because its module defines absl flags that clash with the project's.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import corpora
from bert_tf.data.pretraining.records import masked_feature_spec
from bert_tf.data.pretraining.writer import PretrainingDataOptions, create_pretraining_data

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "testdata",
                        "original_pretraining_data")
ZH_VOCAB = os.path.join(FIXTURES, "zh_vocab.txt")

_ORIGINAL_SCRIPT = """
import json, random, sys
import absl.flags
absl.flags.FLAGS.mark_as_parsed()
from bert import create_pretraining_data as original, tokenization
a = json.loads(sys.argv[1])
tokenizer = tokenization.FullTokenizer(a["vocab"], do_lower_case=True)
instances = original.create_training_instances(
    [a["input"]], tokenizer, a["max_seq_length"], a["dupe_factor"], 0.1, 0.15,
    a["max_predictions_per_seq"], random.Random(a["random_seed"]))
original.write_instance_to_example_files(
    instances, tokenizer, a["max_seq_length"], a["max_predictions_per_seq"], [a["output"]])
"""


def _run_original(**args) -> None:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-c", _ORIGINAL_SCRIPT, json.dumps(args)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def _run_ours(**args) -> None:
    create_pretraining_data(PretrainingDataOptions(
        input_files=[args.pop("input")], output_file=args.pop("output"),
        vocab_file=args.pop("vocab"), **args))


def _read(path: str, max_seq_length: int, max_predictions_per_seq: int) -> dict[str, np.ndarray]:
    spec = masked_feature_spec(max_seq_length, max_predictions_per_seq)
    records = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    return {name: value.numpy() for name, value in tf.io.parse_example(records, spec).items()}


def _assert_same_examples(ours: dict, original: dict) -> None:
    assert len(ours["input_ids"]) == len(original["input_ids"])
    for name in original:
        rows = np.nonzero((ours[name] != original[name]).any(axis=1))[0]
        assert not len(rows), f"{name} differs in examples {rows[:10]} of {len(rows)}"


def _documents(path, first: int, count: int, tmp_path) -> str:
    documents = open(path, encoding="utf-8").read().split("\n\n")[first:first + count]
    out = tmp_path / os.path.basename(path)
    out.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return str(out)


@pytest.mark.parametrize("name, docs, english, flags", [
    ("en_tweets", "en_tweets_docs.txt", True, dict(max_seq_length=128, max_predictions_per_seq=20)),
    ("en_tweets_wwm", "en_tweets_docs.txt", True,
     dict(max_seq_length=128, max_predictions_per_seq=20, do_whole_word_mask=True)),
    ("zh_people_daily", "zh_people_daily_docs.txt", False,
     dict(max_seq_length=64, max_predictions_per_seq=10)),
])
def test_original_rng_writes_the_original_scripts_records(name, docs, english, flags, minilm_dir,
                                                          tmp_path):
    output = str(tmp_path / f"{name}.tfrecord")
    _run_ours(input=os.path.join(FIXTURES, docs), output=output,
              vocab=os.path.join(minilm_dir, "vocab.txt") if english else ZH_VOCAB,
              do_lower_case=True, masked_lm_prob=0.15, random_seed=12345, dupe_factor=2,
              original_rng=True, **flags)
    shape = flags["max_seq_length"], flags["max_predictions_per_seq"]
    _assert_same_examples(_read(output, *shape), _read(os.path.join(FIXTURES, f"{name}.tfrecord"),
                                                       *shape))


@pytest.mark.parametrize("language", ["en", "zh"])
def test_original_rng_equals_bert_tensorflow_run_live(language, minilm_dir, tmp_path):
    # Other text than the fixtures': tweets (one a document) and later articles.
    if language == "en":
        text = _documents(corpora.tweets_corpus(), 2000, 400, tmp_path)
        vocab = os.path.join(minilm_dir, "vocab.txt")
    else:
        text, vocab = _documents(corpora.people_daily_corpus(), 100, 40, tmp_path), ZH_VOCAB
    flags = dict(input=text, vocab=vocab, max_seq_length=48, max_predictions_per_seq=8,
                 dupe_factor=3, random_seed=7)
    _run_original(output=str(tmp_path / "original.tfrecord"), **flags)
    _run_ours(output=str(tmp_path / "ours.tfrecord"), original_rng=True, **flags)
    original = _read(str(tmp_path / "original.tfrecord"), 48, 8)
    assert len(original["input_ids"]) > 100
    _assert_same_examples(_read(str(tmp_path / "ours.tfrecord"), 48, 8), original)


@pytest.mark.parametrize("corpus, documents, dupe_factor, vocab", [
    ("tweets", 3000, 2, None), ("people_daily", 600, 4, ZH_VOCAB)])
def test_default_writer_has_the_original_statistics(corpus, documents, dupe_factor, vocab,
                                                    minilm_dir, tmp_path):
    """The vectorised masks and this project's pair stream: the original's shares."""
    source = {"tweets": corpora.tweets_corpus, "people_daily": corpora.people_daily_corpus}[corpus]
    flags = dict(input=_documents(source(), 0, documents, tmp_path),
                 vocab=vocab or os.path.join(minilm_dir, "vocab.txt"), max_seq_length=128,
                 max_predictions_per_seq=20, dupe_factor=dupe_factor, random_seed=3)
    _run_original(output=str(tmp_path / "original.tfrecord"), **flags)
    _run_ours(output=str(tmp_path / "ours.tfrecord"), **flags)
    ours, original = (_read(str(tmp_path / f"{name}.tfrecord"), 128, 20)
                      for name in ("ours", "original"))
    for records in (ours, original):  # The count of the original: [CLS] and [SEP] count.
        length = records["input_mask"].sum(axis=1)
        np.testing.assert_array_equal(records["masked_lm_weights"].sum(axis=1),
                                      np.minimum(20, np.maximum(1, np.round(length * 0.15))))
    random_next = [r["next_sentence_labels"].mean() for r in (ours, original)]
    masked = [r["masked_lm_weights"].sum(axis=1).mean() for r in (ours, original)]
    print(f"{corpus}: random next {random_next}, masked per example {masked}, "
          f"examples {len(ours['input_ids'])} vs {len(original['input_ids'])}")
    # Well above half: one-sentence chunks always take a random B, as in the original.
    assert random_next[1] > 0.55
    assert abs(random_next[0] - random_next[1]) < 0.03
    assert abs(masked[0] / masked[1] - 1) < 0.02
    assert abs(len(ours["input_ids"]) / len(original["input_ids"]) - 1) < 0.03
