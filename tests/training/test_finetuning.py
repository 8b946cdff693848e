import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import checkpoints
from bert_tf.modeling.heads import HEADS
from bert_tf.modeling.pretrainer import BertPretrainer
from bert_tf.modeling.task_models import BertClassifier, BertSpanLabeler
from bert_tf.training import finetuning, tasks
from bert_tf.training.optimization import OptimizerConfig
from tests.conftest import random_batch


def _classification_features(config, n=64, seq=16, seed=0):
    """Label = whether token 7 occurs: learnable in a few steps."""
    rng = np.random.default_rng(seed)
    batch = random_batch(config, batch=n, seq=seq, seed=seed)
    labels = rng.integers(0, 2, n).astype(np.int32)
    ids = batch["input_word_ids"]
    ids[ids == 7] = 8
    ids[labels == 1, 1] = 7
    return {"input_word_ids": ids, "input_mask": batch["input_mask"],
            "input_type_ids": batch["input_type_ids"], "label_ids": labels}


@pytest.mark.parametrize("head", HEADS)
def test_heads_ignore_padding(tiny_config, head):
    model = BertClassifier(tiny_config, num_classes=3, head=head, head_args={"last_n": 2})
    features = _classification_features(tiny_config, n=4)
    inputs = {k: features[k] for k in tasks.ENCODER_INPUTS}
    padded = {k: np.pad(v, ((0, 0), (0, 8))) for k, v in inputs.items()}
    padded["input_word_ids"][:, -8:] = 5
    np.testing.assert_allclose(model(inputs)["logits"], model(padded)["logits"], atol=1e-5)
    assert model(inputs)["logits"].shape == (4, 3)


def test_finetunes_classifier_and_keeps_the_best(tiny_config, tmp_path):
    init = checkpoints.save_model_dir(BertPretrainer(tiny_config), tmp_path / "pretrained")
    train = _classification_features(tiny_config, n=128)
    dev = _classification_features(tiny_config, n=32, seed=1)

    def evaluate(model):
        logits = finetuning.predict(model, dev, 16)["logits"]
        return {"accuracy": float((logits.argmax(-1) == dev["label_ids"]).mean())}

    info = {"task": "classification", "labels": ["no", "yes"], "head": "conv_avg_max"}
    config = finetuning.FinetuningConfig(output_dir=str(tmp_path / "run"), train_batch_size=16,
                                         num_train_epochs=6, init_checkpoint=init, log_steps=4,
                                         best_metric="accuracy")
    results = finetuning.run_finetuning(
        lambda: BertClassifier(tiny_config, 2, head="conv_avg_max"), tasks.ClassificationTask(),
        OptimizerConfig(learning_rate=3e-3, num_train_steps=0), config,
        tf.distribute.OneDeviceStrategy("/cpu:0"), train, evaluate, task_info=info)
    assert results["eval/accuracy"] >= 0.9
    best = json.load(open(tmp_path / "run" / "best_eval_results.json"))
    assert best["accuracy"] == results["eval/accuracy"]
    restored = checkpoints.load_task_model(tmp_path / "run" / "best")
    assert restored.task_info == info and isinstance(restored, BertClassifier)
    assert evaluate(restored)["accuracy"] == best["accuracy"]


def test_span_labeler_outputs_and_round_trip(tiny_config, tmp_path):
    model = BertSpanLabeler(tiny_config)
    features = _classification_features(tiny_config, n=4)
    out = finetuning.predict(model, features, 3, seq_outputs=("start_logits", "end_logits"))
    assert out["start_logits"].shape == out["end_logits"].shape == (4, 16)
    checkpoints.save_model_dir(model, tmp_path / "m", task_info={"task": "squad"})
    restored = checkpoints.load_task_model(tmp_path / "m")
    again = finetuning.predict(restored, features, 3, seq_outputs=("start_logits", "end_logits"))
    np.testing.assert_array_equal(again["start_logits"], out["start_logits"])
