"""run_pretraining.py end to end on a tiny model: demo path, resume after SIGKILL,
distribution (bad flags: tests/reliability/test_bad_inputs.py)."""

import json
import os
import signal
import socket
import time

import tensorflow as tf

from tests import driver_runs
from tests.pretraining_helpers import ENV, pretrain_flags, run_pretrain


def test_pretrains_from_text_and_writes_everything(corpus, tmp_path):
    out = str(tmp_path / "run")
    result = run_pretrain(pretrain_flags(corpus, out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"checkpoints", "train", "eval", "model", "data", "flags.txt"} <= set(os.listdir(out))
    assert {"vocab.txt", "train.txt", "eval.txt", "train_32.tfrecord", "eval_32.tfrecord"} <= set(
        os.listdir(os.path.join(out, "data")))
    assert "--max_seq_length=32" in open(os.path.join(out, "flags.txt")).read()
    model = os.listdir(os.path.join(out, "model"))
    assert {"bert_config.json", "vocab.txt", "bert_model.ckpt.index"} <= set(model)
    # The hparams plugin's session record is in the train events.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(os.path.join(out, "train")).Reload()
    assert "_hparams_/session_start_info" in events.Tags()["tensors"]


def test_resumes_after_sigkill(corpus, tmp_path):
    out = str(tmp_path / "run")
    args = pretrain_flags(corpus, out, num_train_steps=30, save_checkpoints_steps=3, eval_every_steps=100)
    process = driver_runs.start(["run_pretraining.py", *args])
    checkpoint_dir = os.path.join(out, "checkpoints")
    deadline = time.time() + 240
    while time.time() < deadline and not (os.path.isdir(checkpoint_dir)
                                          and tf.train.latest_checkpoint(checkpoint_dir)):
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    killed_at = int(tf.train.latest_checkpoint(checkpoint_dir).rsplit("-", 1)[1])
    assert 3 <= killed_at < 30 and not os.path.exists(os.path.join(out, "model"))
    result = run_pretrain(args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"at step {killed_at}" in result.stderr and "resuming from checkpoint" in result.stderr
    assert f"step {killed_at + 1}/30" in result.stderr and "step 1/30" not in result.stderr
    assert tf.train.latest_checkpoint(checkpoint_dir).endswith("ckpt-30")


def test_two_replica_mirrored_run(corpus, tmp_path):
    # With activation recomputation, the memory-saving setting of multi-GPU long-sequence runs.
    result = run_pretrain(pretrain_flags(corpus, str(tmp_path / "run"), distribution_strategy="mirrored",
                         num_cpu_devices=2, num_train_steps=2, recompute_activations=True))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MirroredStrategy: 2 replica(s) on 1 worker(s)" in result.stderr
    assert "--recompute_activations=True" in open(tmp_path / "run" / "flags.txt").read()


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_worker_multi_worker_mirrored_run(corpus, tmp_path):
    out = str(tmp_path / "run")
    # Records first, so the two workers do not both write them.
    assert run_pretrain(pretrain_flags(corpus, out, num_train_steps=1, stop_at_step=1)).returncode == 0
    workers = [f"127.0.0.1:{p}" for p in _free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = {**ENV, "TF_CONFIG": json.dumps(tf_config)}
        processes.append(driver_runs.start(
            ["run_pretraining.py",
             *pretrain_flags(corpus, out, distribution_strategy="multi_worker_mirrored", num_train_steps=3)],
            env=env))
    results = [p.communicate(timeout=300) for p in processes]
    logs = "\n".join(f"--- worker {i} ---\n{err[-3000:]}" for i, (_, err) in enumerate(results))
    for index, (process, (_, stderr)) in enumerate(zip(processes, results)):
        assert process.returncode == 0, logs
        assert f"2 replica(s) on 2 worker(s); this is worker {index}" in stderr
        # The one-worker checkpoint's input position does not fit two workers; every
        # worker must see that, whatever the chief has written meanwhile.
        assert "the data position starts afresh" in stderr, logs
    assert tf.train.latest_checkpoint(os.path.join(out, "checkpoints")).endswith("ckpt-3")


