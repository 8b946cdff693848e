import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import checkpoints
from bert_tf.configs import INPUT_NAMES, BertConfig
from bert_tf.modeling.heads import HEADS, ClassificationHead
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
    model = BertClassifier(tiny_config, num_classes=3, head=head)  # concat_last_n: both layers
    features = _classification_features(tiny_config, n=4)
    inputs = {k: features[k] for k in INPUT_NAMES}
    padded = {k: np.pad(v, ((0, 0), (0, 8))) for k, v in inputs.items()}
    padded["input_word_ids"][:, -8:] = 5
    np.testing.assert_allclose(model(inputs)["logits"], model(padded)["logits"], atol=1e-5)
    assert model(inputs)["logits"].shape == (4, 3)


def test_concat_last_n_takes_four_layers_or_every_layer_of_a_shallower_encoder(tiny_config):
    deep = dataclasses.replace(tiny_config, num_hidden_layers=6)
    assert ClassificationHead(deep, 2, head="concat_last_n").last_n == 4
    assert ClassificationHead(tiny_config, 2, head="concat_last_n").last_n == 2  # 2 layers, as BERT-Tiny
    with pytest.raises(ValueError, match="last_n=3 must be in"):
        ClassificationHead(tiny_config, 2, head="concat_last_n", last_n=3)


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
        OptimizerConfig(learning_rate=3e-3, num_train_steps=0, num_warmup_steps=0), config,
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


def _mixed_length_features(config, n=96, seq=48, seed=3):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, seq + 1, n)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
    return {"input_word_ids": rng.integers(1, config.vocab_size, (n, seq)).astype(np.int32) * mask,
            "input_mask": mask, "input_type_ids": np.zeros((n, seq), np.int32),
            "label_ids": rng.integers(0, 2, n).astype(np.int32), "row": np.arange(n, dtype=np.int32)}


def test_length_bucketing_batches_rows_of_one_bucket_and_resumes(tiny_config, tmp_path):
    features = _mixed_length_features(tiny_config)
    lengths = features["input_mask"].sum(axis=1)
    context = tf.distribute.InputContext()
    iterator = iter(finetuning.train_dataset(features, 8, seed=1, context=context, length_bucketing=True))
    seen, widths = [], []
    for _ in range(60):
        batch = next(iterator)
        rows = batch["row"].numpy()
        buckets = (lengths[rows] + 7) // 8
        assert len(set(buckets)) == 1, lengths[rows]
        assert batch["input_word_ids"].shape == (8, min(48, 8 * buckets[0]))
        np.testing.assert_array_equal(batch["input_mask"].numpy().sum(1), lengths[rows])
        seen.extend(rows)
        widths.append(batch["input_word_ids"].shape[1])
    assert len(set(seen)) > 0.9 * len(lengths)  # ~5 epochs: all but a rare bucket's last rows
    # Without bucketing, a batch is padded to its longest row: more padding on these lengths.
    plain = iter(finetuning.train_dataset(features, 8, seed=1, context=context))
    assert np.mean([next(plain)["input_word_ids"].shape[1] for _ in range(60)]) > 1.3 * np.mean(widths)
    # The iterator (shuffle and bucket buffers) checkpoints and restores mid-epoch.
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    path = checkpoint.write(str(tmp_path / "it"))
    expected = [next(iterator)["row"].numpy() for _ in range(5)]
    checkpoint.read(path).assert_consumed()
    np.testing.assert_array_equal([next(iterator)["row"].numpy() for _ in range(5)], expected)


def test_predict_batches_by_length_and_returns_rows_in_order(tiny_config):
    model = BertSpanLabeler(tiny_config)
    features = _mixed_length_features(tiny_config, n=13)
    lengths = features["input_mask"].sum(axis=1)
    out = finetuning.predict(model, features, 4, seq_outputs=("start_logits", "end_logits"))
    assert out["start_logits"].shape == (13, 48)
    for row in range(13):
        one = {k: features[k][row:row + 1, :lengths[row]] for k in INPUT_NAMES}
        np.testing.assert_allclose(out["start_logits"][row, :lengths[row]],
                                   model(one)["start_logits"][0], atol=1e-5)


def test_reinit_top_layers_keeps_fresh_values_for_the_top_blocks_and_pooler(tmp_path):
    config = BertConfig(vocab_size=99, hidden_size=128, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=256, max_position_embeddings=64)
    pretrained = BertPretrainer(config)
    for variable in pretrained.weights:  # values no initialiser gives: every one tells where it came from
        variable.assign(variable.numpy() + 0.5)
    model_dir = checkpoints.save_model_dir(pretrained, tmp_path / "pretrained")
    stored = {v.path: v.numpy() for v in pretrained.encoder.weights}

    model = BertClassifier(config, 2)
    built = {v.path: v.numpy() for v in model.encoder.weights}
    finetuning.initialise_encoder(model, model_dir, reinit_top_layers=1)
    fresh = [p for p in built if p.startswith(("layer_2/", "pooler/"))]
    assert len(fresh) == 18 and {p.split("/")[0] for p in fresh} == {"layer_2", "pooler"}
    for variable in model.encoder.weights:
        expected = built if variable.path in fresh else stored
        np.testing.assert_array_equal(variable.numpy(), expected[variable.path], err_msg=variable.path)
    # BERT's initialisation: truncated normal (stddev 0.02, cut at 2 stddev) kernels, zero biases,
    # LayerNorm gamma 1 and beta 0.
    kernels = np.concatenate([built[p].ravel() for p in fresh if p.endswith("kernel")])
    assert abs(kernels.mean()) < 5e-4 and 0.016 < kernels.std() < 0.019 and np.abs(kernels).max() <= 0.04
    for path in fresh:
        if path.endswith(("bias", "beta")):
            assert not built[path].any(), path
        elif path.endswith("gamma"):
            assert (built[path] == 1).all(), path

    untouched = BertClassifier(config, 2)
    finetuning.initialise_encoder(untouched, model_dir)
    for variable in untouched.encoder.weights:
        np.testing.assert_array_equal(variable.numpy(), stored[variable.path], err_msg=variable.path)
    with pytest.raises(ValueError, match="--reinit_top_layers=4 exceeds the model's 3 layers"):
        finetuning.initialise_encoder(BertClassifier(config, 2), model_dir, reinit_top_layers=4)
