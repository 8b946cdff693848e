"""Deterministic runs and exact resume: a run stopped or killed, moved elsewhere and
restarted ends bitwise equal to one that was never interrupted (tiny model, CPU).

The uninterrupted reference runs in a new interpreter and the others in forks of
the warm driver process (tests/driver_runs.py), so equality also shows that a run
does not depend on its process (hash seed, import order): the same command gives
the same bytes."""

import os
import shutil
import signal
import time

import numpy as np
import pytest
import tensorflow as tf

from tests import driver_runs
from tests.pretraining_helpers import pretrain_flags, run_pretrain

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
    return pretrain_flags(corpus, out, num_train_steps=STEPS, save_checkpoints_steps=2, eval_every_steps=100,
                  deterministic=True, **extra)


@pytest.fixture(scope="module", params=[False, True], ids=["static", "dynamic"])
def uninterrupted(request, corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("whole") / "run")
    # A new interpreter: the runs compared with it are forks of the warm driver process.
    result = run_pretrain(_args(corpus, out, dynamic_masking=request.param), fresh_interpreter=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return request.param, out


def test_stop_move_and_rerun_is_bitwise_identical(corpus, uninterrupted, tmp_path, stop_at=5):
    """Portable resume too: the stopped run's directory (its records under data/ with it)
    is moved and renamed; the rerun there resumes at the same step and input position."""
    dynamic, whole = uninterrupted
    out, moved = str(tmp_path / "run"), str(tmp_path / "elsewhere" / "renamed")
    first = run_pretrain(_args(corpus, out, dynamic_masking=dynamic, stop_at_step=stop_at))
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.move(out, moved)  # nothing is left at the old path to read from
    second = run_pretrain(_args(corpus, moved, dynamic_masking=dynamic))
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resuming from checkpoint {moved}/checkpoints/ckpt-{stop_at} at step {stop_at}" in second.stderr
    assert "the data position starts afresh" not in second.stderr and not os.path.exists(out)
    _assert_bitwise_equal(whole, moved)


def _kill_after_checkpoint(args, checkpoint_dir, number, script="run_pretraining.py"):
    """Starts the driver and SIGKILLs it as soon as checkpoint `number` exists."""
    process = driver_runs.start([script, *args])
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        latest = os.path.isdir(checkpoint_dir) and tf.train.latest_checkpoint(checkpoint_dir)
        if latest and int(latest.rsplit("-", 1)[1]) >= number:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    return int(tf.train.latest_checkpoint(checkpoint_dir).rsplit("-", 1)[1])


def test_sigkill_and_a_torn_checkpoint_write_resume_bitwise(corpus, uninterrupted, tmp_path):
    dynamic, whole = uninterrupted
    out = str(tmp_path / "run")
    args = _args(corpus, out, dynamic_masking=dynamic)
    checkpoint_dir = os.path.join(out, "checkpoints")
    killed_at = _kill_after_checkpoint(args, checkpoint_dir, 2)
    assert killed_at < STEPS
    # What a kill in the middle of writing the next checkpoint leaves: a temp
    # folder and data/index files that the `checkpoint` state file never named.
    following = os.path.join(checkpoint_dir, f"ckpt-{killed_at + 2}")
    os.makedirs(following + "_temp", exist_ok=True)
    open(os.path.join(following + "_temp", "part-00000-of-00001.data-00000-of-00001"), "wb").write(b"\0" * 99)
    open(following + ".index", "wb").write(b"torn")
    result = run_pretrain(args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"at step {killed_at}" in result.stderr
    _assert_bitwise_equal(whole, out)


def test_finetuning_resume_is_bitwise(minilm_dir, tmp_path):
    from tests.finetuning_helpers import run_driver, tiny_model_dir

    pretrained = tiny_model_dir(tmp_path / "pretrained", minilm_dir)
    rng = np.random.default_rng(0)
    words = ["good", "bad", "fine", "awful", "movie", "plot", "actors", "great", "boring", "fun"]
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f"{' '.join(rng.choice(words, 6))},{rng.integers(2)}\n"
                                              for _ in range(240)))
    common = [f"--train_file={train}", f"--init_checkpoint={pretrained}", "--do_train",
              "--train_batch_size=4", "--num_train_epochs=3", "--max_seq_length=16",
              "--learning_rate=1e-3", "--deterministic"]
    whole = tmp_path / "whole"
    result = run_driver("run_classifier.py", *common, f"--output_dir={whole}")
    assert result.returncode == 0, result.stderr[-3000:]
    out = str(tmp_path / "resumed")
    killed_at = _kill_after_checkpoint([*common, f"--output_dir={out}"], os.path.join(out, "checkpoints"), 1,
                                       script="run_classifier.py")
    result = run_driver("run_classifier.py", *common, f"--output_dir={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming from checkpoint {out}/checkpoints/ckpt-{killed_at}" in result.stderr, result.stderr[-2000:]
    assert killed_at in (60, 120)  # an epoch's end: the kill came during a later epoch
    _assert_bitwise_equal(str(whole), out)
