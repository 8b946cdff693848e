"""Non-finite losses: the run stops naming the step and the last good checkpoint, and
never saves non-finite weights; under dynamic loss scaling such steps are skipped and counted."""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.training.loop import NonFiniteGuard
from tests.conftest import own_stderr_lines
from tests.pretraining_helpers import pretrain_flags, run_pretrain


def test_guard_counts_under_loss_scaling_and_stops_otherwise():
    scaled = NonFiniteGuard(loss_scaled=True)
    for step, flag in [(1, 0.0), (2, 1.0), (3, 1.0), (4, 0.0)]:
        scaled.add(step, {"nonfinite": tf.constant(flag)})
    scaled.check("ckpt-0")
    assert scaled.skipped == 2

    plain = NonFiniteGuard(loss_scaled=False)
    for step, flag in [(5, 0.0), (6, 1.0), (7, 1.0)]:
        plain.add(step, {"nonfinite": tf.constant(flag)})
    with pytest.raises(FloatingPointError, match="at step 6; .* Last good checkpoint: ckpt-4"):
        plain.check("ckpt-4")
    plain.check("ckpt-4")  # the flags were consumed


def test_diverging_run_stops_without_saving_nonfinite_weights(corpus, tmp_path):
    out = str(tmp_path / "run")
    result = run_pretrain(pretrain_flags(corpus, out, learning_rate=1e30, num_train_steps=6, num_warmup_steps=0,
                         save_checkpoints_steps=1, log_steps=3, eval_every_steps=100))
    assert result.returncode == 2, result.stderr[-3000:]
    lines = own_stderr_lines(result.stderr)
    assert len(lines) == 1 and "non-finite loss or gradients at step " in lines[0], lines
    bad_step = int(lines[0].split("at step ")[1].split(";")[0])
    checkpoint_dir = os.path.join(out, "checkpoints")
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    assert latest and latest in lines[0] and int(latest.rsplit("-", 1)[1]) < bad_step
    reader = tf.train.load_checkpoint(latest)
    for name, dtype in reader.get_variable_to_dtype_map().items():
        if dtype.is_floating:
            assert np.isfinite(reader.get_tensor(name)).all(), name
    assert not os.path.exists(os.path.join(out, "model"))
