import glob
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bert_tf import checkpoints
from bert_tf.modeling.pretrainer import BertPretrainer
from bert_tf.training.optimization import OptimizerConfig
from bert_tf.training.pretraining_job import PretrainingConfig, pretrain
from tests.conftest import random_batch


def synthetic_dataset_fn(config, seq=16, predictions=3, batches=64, seed=0):
    """Deterministic random batches of the pretraining features."""
    data = [random_batch(config, batch=8, seq=seq, predictions=predictions, seed=seed + i)
            for i in range(batches)]
    stacked = {k: np.concatenate([d[k] for d in data]) for k in data[0]}
    # Uneven prediction counts, so that normalising per micro-batch or per
    # replica instead of by the global weight would show.
    rng = np.random.default_rng(seed)
    stacked["masked_lm_weights"] *= rng.random(stacked["masked_lm_weights"].shape) < 0.6

    def dataset_fn(batch_size, input_context):
        ds = tf.data.Dataset.from_tensor_slices(stacked)
        return ds.repeat().batch(input_context.get_per_replica_batch_size(batch_size),
                                 drop_remainder=True)
    return dataset_fn


def _run(tiny_config, tmp_path, name, strategy, **overrides):
    settings = dict(output_dir=str(tmp_path / name), train_batch_size=8, eval_batch_size=8,
                    max_seq_length=16, max_predictions_per_seq=3, log_steps=1,
                    save_checkpoints_steps=2, eval_every_steps=2, eval_batches=2, peak_flops=1e12)
    settings.update(overrides)
    steps = settings.pop("steps", 2)
    optimizer = OptimizerConfig(learning_rate=1e-3, num_train_steps=steps, num_warmup_steps=1)
    return pretrain(tiny_config, optimizer, PretrainingConfig(**settings), strategy,
                    synthetic_dataset_fn(tiny_config), synthetic_dataset_fn(tiny_config, seed=99),
                    vocab=[f"t{i}" for i in range(tiny_config.vocab_size)])


@pytest.fixture
def no_dropout(tiny_config):
    return tiny_config.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@pytest.fixture
def init_dir(no_dropout, tmp_path):
    return checkpoints.save_model_dir(BertPretrainer(no_dropout), tmp_path / "init")


def _weights(output_dir):
    return {v.path: v.numpy() for v in checkpoints.load_pretrainer(os.path.join(output_dir, "model")).weights}


def _assert_same_weights(a, b, atol):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], atol=atol, err_msg=k)


def test_writes_checkpoints_summaries_and_model(tiny_config, tmp_path):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    results = _run(tiny_config, tmp_path, "run", strategy, steps=4)
    out = tmp_path / "run"
    assert {"checkpoints", "train", "eval", "model"} <= set(os.listdir(out))
    assert tf.train.latest_checkpoint(out / "checkpoints").endswith("ckpt-4")
    assert sorted(os.listdir(out / "model"))[0] == "bert_config.json"
    train = EventAccumulator(glob.glob(str(out / "train" / "events*"))[0]).Reload()
    tags = set(train.Tags()["scalars"]) | set(train.Tags()["tensors"])
    for tag in ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy", "learning_rate",
                "grad_norm", "examples_per_second", "mfu"):
        assert tag in tags, tag
        values = [tf.make_ndarray(e.tensor_proto) for e in train.Tensors(tag)]
        assert len(values) == 4 and np.all(np.isfinite(values))
    eval_events = EventAccumulator(glob.glob(str(out / "eval" / "events*"))[0]).Reload()
    assert {"loss", "unigram_entropy", "masked_predictions", "seconds"} <= set(eval_events.Tags()["tensors"])
    assert results["train/learning_rate"] == pytest.approx(0.0, abs=1e-9)  # decayed to 0 at the end
    assert np.isfinite(results["eval/mlm_loss"])


def test_resume_continues_the_step(tiny_config, tmp_path):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    _run(tiny_config, tmp_path, "run", strategy, steps=4, stop_step=2)
    assert tf.train.latest_checkpoint(tmp_path / "run" / "checkpoints").endswith("ckpt-2")
    _run(tiny_config, tmp_path, "run", strategy, steps=4)
    assert tf.train.latest_checkpoint(tmp_path / "run" / "checkpoints").endswith("ckpt-4")


def test_gradient_accumulation_matches_one_big_batch(no_dropout, init_dir, tmp_path):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    big = _run(no_dropout, tmp_path, "big", strategy, steps=2, init_checkpoint=init_dir)
    accum = _run(no_dropout, tmp_path, "accum", strategy, steps=2, init_checkpoint=init_dir,
                 gradient_accumulation_steps=4)
    assert accum["train/grad_norm"] == pytest.approx(big["train/grad_norm"], rel=1e-5)
    assert accum["train/loss"] == pytest.approx(big["train/loss"], rel=1e-6)
    _assert_same_weights(_weights(tmp_path / "big"), _weights(tmp_path / "accum"), atol=2e-6)


def test_two_replicas_match_one_device(no_dropout, init_dir, tmp_path):
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert mirrored.num_replicas_in_sync == 2
    one = _run(no_dropout, tmp_path, "one", tf.distribute.OneDeviceStrategy("/cpu:0"), steps=2,
               init_checkpoint=init_dir)
    two = _run(no_dropout, tmp_path, "two", mirrored, steps=2, init_checkpoint=init_dir)
    assert two["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-5)
    _assert_same_weights(_weights(tmp_path / "one"), _weights(tmp_path / "two"), atol=2e-6)


def test_recomputed_activations_train_the_same_weights(tiny_config, tmp_path):
    # Dropout stays on: the recomputed forward must draw the same masks.
    assert tiny_config.hidden_dropout_prob > 0 and tiny_config.attention_probs_dropout_prob > 0
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    keep = _run(tiny_config, tmp_path, "keep", strategy, steps=3)
    recompute = _run(tiny_config, tmp_path, "recompute", strategy, steps=3, recompute_activations=True)
    assert recompute["train/loss"] == pytest.approx(keep["train/loss"], rel=1e-6)
    _assert_same_weights(_weights(tmp_path / "keep"), _weights(tmp_path / "recompute"), atol=2e-6)


def test_rejects_indivisible_batch(tiny_config, tmp_path):
    with pytest.raises(ValueError, match="--train_batch_size=8 is not divisible by --gradient_accumulation_steps=3"):
        _run(tiny_config, tmp_path, "bad", tf.distribute.OneDeviceStrategy("/cpu:0"),
             gradient_accumulation_steps=3)


@pytest.mark.parametrize("precision, jit", [("mixed_bfloat16", False), ("float32", True),
                                            ("mixed_bfloat16", True), ("mixed_float16", False)])
def test_mixed_precision_and_xla_train(tiny_config, tmp_path, precision, jit):
    results = _run(tiny_config, tmp_path, "run", tf.distribute.OneDeviceStrategy("/cpu:0"), steps=3,
                   mixed_precision=precision, jit_compile=jit)
    assert np.isfinite(results["train/loss"]) and np.isfinite(results["eval/loss"])
    assert results["train/grad_norm"] > 0
    # The saved variables stay float32 whatever the compute dtype.
    model = checkpoints.load_pretrainer(tmp_path / "run" / "model")
    assert all(v.dtype == "float32" for v in model.weights)
