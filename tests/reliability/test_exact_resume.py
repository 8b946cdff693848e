"""Deterministic runs and exact resume: a run killed and restarted ends bitwise equal
to one that was never interrupted (tiny model, CPU)."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tests.test_run_pretraining import ROOT, ENV, _flags, _run, corpus  # noqa: F401  (fixture)

STEPS = 8


def _variables(checkpoint_prefix):
    reader = tf.train.load_checkpoint(checkpoint_prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith(("save_counter", "iterator", "data_fingerprint", "_CHECKPOINTABLE"))}


def _assert_bitwise_equal(a_dir, b_dir):
    a = _variables(tf.train.latest_checkpoint(os.path.join(a_dir, "checkpoints")))
    b = _variables(tf.train.latest_checkpoint(os.path.join(b_dir, "checkpoints")))
    assert a.keys() == b.keys() and len(a) > 40
    different = [k for k in a if np.asarray(a[k]).tobytes() != np.asarray(b[k]).tobytes()]
    assert not different, different[:5]


def _args(corpus, out, **extra):
    return _flags(corpus, out, num_train_steps=STEPS, save_checkpoints_steps=2, eval_every_steps=100,
                  deterministic=True, **extra)


@pytest.fixture(scope="module", params=[False, True], ids=["static", "dynamic"])
def uninterrupted(request, corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("whole") / "run")
    result = _run(_args(corpus, out, dynamic_masking=request.param))
    assert result.returncode == 0, result.stderr[-3000:]
    return request.param, out


def test_same_command_twice_is_bitwise_identical(corpus, uninterrupted, tmp_path):
    dynamic, whole = uninterrupted
    out = str(tmp_path / "run")
    assert _run(_args(corpus, out, dynamic_masking=dynamic)).returncode == 0
    _assert_bitwise_equal(whole, out)


@pytest.mark.parametrize("stop_at", [2, 5])
def test_stop_and_rerun_is_bitwise_identical(corpus, uninterrupted, tmp_path, stop_at):
    dynamic, whole = uninterrupted
    out = str(tmp_path / "run")
    first = _run(_args(corpus, out, dynamic_masking=dynamic, stop_at_step=stop_at))
    assert first.returncode == 0, first.stderr[-3000:]
    second = _run(_args(corpus, out, dynamic_masking=dynamic))
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"at step {stop_at}" in second.stderr
    _assert_bitwise_equal(whole, out)
