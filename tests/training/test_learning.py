"""Pretraining learns: a tiny model pretrained for a bounded number of steps on a small
corpus of real English words predicts held-out masked tokens better than their own
unigram distribution does, and tells true next sentences from random ones.

The corpus (tests/pretraining_helpers.py) has documents on 20 topics of 10 words each;
held-out documents are new text on those topics. Beating the unigram entropy of the
held-out masked tokens, computed here from the held-out records, needs the context of
the masked position; NSP needs comparing the two segments, on balanced labels. An
untrained model (learning_rate=0) fails both thresholds."""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data.pretraining.dataset import pretraining_dataset
from bert_tf.training import pretraining_job
from bert_tf.training.optimization import OptimizerConfig
from tests.pretraining_helpers import make_corpus

SEQ, PREDICTIONS, EVAL_BATCH, EVAL_BATCHES = 32, 5, 32, 20
STEPS = 600


@pytest.fixture(scope="module")
def topic_corpus(tmp_path_factory, minilm_dir):
    return make_corpus(tmp_path_factory.mktemp("topics"), minilm_dir, documents=300, topic_words=10, topics=20)


def pretrain(corpus: dict, output_dir: str, learning_rate: float) -> dict[str, float]:
    """Pretrains the corpus's tiny model from text (vocab, records and all) and returns
    the final metrics."""
    data = pretraining_job.DataConfig(input_text_files=(corpus["text"],), vocab_size=600, dupe_factor=2,
                                      eval_documents=60, balanced_nsp=True)
    optimizer = OptimizerConfig(learning_rate=learning_rate, num_train_steps=STEPS, num_warmup_steps=STEPS // 10)
    training = pretraining_job.PretrainingConfig(
        output_dir=output_dir, train_batch_size=32, eval_batch_size=EVAL_BATCH, max_seq_length=SEQ,
        max_predictions_per_seq=PREDICTIONS, log_steps=100, save_checkpoints_steps=STEPS,
        eval_every_steps=STEPS, eval_batches=EVAL_BATCHES,
        peak_flops=1e12, deterministic=True)
    return pretraining_job.run(data, None, corpus["config"], optimizer, training,
                               tf.distribute.OneDeviceStrategy("/cpu:0"))


def held_out(output_dir: str) -> tuple[float, float]:
    """(unigram entropy in nats of the masked_lm_ids, share of the commoner NSP label) of
    the held-out batches the run evaluates on: its first EVAL_BATCHES full batches."""
    records = pretraining_dataset([os.path.join(output_dir, "data", f"eval_{SEQ}.tfrecord")],
                                  batch_size=EVAL_BATCH, max_seq_length=SEQ,
                                  max_predictions_per_seq=PREDICTIONS, is_training=False)
    batches = [b for b in records if len(b["masked_lm_ids"]) == EVAL_BATCH][:EVAL_BATCHES]
    ids = np.concatenate([b["masked_lm_ids"].numpy()[b["masked_lm_weights"].numpy() > 0] for b in batches])
    _, counts = np.unique(ids, return_counts=True)
    probs = counts / counts.sum()
    labels = np.concatenate([b["next_sentence_labels"].numpy().ravel() for b in batches])
    return float(-(probs * np.log(probs)).sum()), max(labels.mean(), 1 - labels.mean())


def test_pretraining_beats_the_unigram_baseline_and_learns_nsp(topic_corpus, tmp_path):
    out = str(tmp_path / "run")
    results = pretrain(topic_corpus, out, learning_rate=1e-3)
    unigram, majority = held_out(out)
    assert majority < 0.6  # NSP accuracy above 60% is not the commoner label alone
    assert results["eval/unigram_entropy"] == pytest.approx(unigram, rel=1e-6)
    assert results["eval/mlm_loss"] < unigram - 0.5, (results, unigram)
    assert results["eval/nsp_accuracy"] > 0.6, results
