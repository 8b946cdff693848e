"""One run per output directory: a second run on a live run's directory exits 2 naming
it and the holder; the lock dies with its process, so a SIGKILLed run never blocks
its rerun (real processes throughout)."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from bert_tf import load_pretrainer, load_task_model
from bert_tf.training.output_lock import lock_output_dir
from tests.conftest import own_stderr_lines
from tests.pretraining_helpers import ENV, ROOT, pretrain_flags, run_pretrain


HOLD = """
import sys, tensorflow as tf
from bert_tf.training.output_lock import lock_output_dir
with lock_output_dir(sys.argv[1], tf.distribute.get_strategy()):
    print("locked", flush=True)
    sys.stdin.read()
"""


def test_lock_refuses_a_second_holder_and_dies_with_its_process(tmp_path):
    directory = str(tmp_path / "run")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, directory], cwd=ROOT, env=ENV,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(OSError) as refused:
            with lock_output_dir(directory, tf.distribute.get_strategy()):
                pass
        message = str(refused.value)
        assert directory in message and f"pid {holder.pid} on {socket.gethostname()}" in message
    finally:
        holder.kill()  # SIGKILL: no cleanup runs, the kernel releases the lock
        holder.wait()
    with lock_output_dir(directory, tf.distribute.get_strategy()):
        assert open(os.path.join(directory, ".lock")).read() == f"pid {os.getpid()} on {socket.gethostname()}"


def _start_and_wait_for_lock(script, args, directory):
    """Starts a driver; returns it once it holds `directory`'s lock."""
    process = subprocess.Popen([sys.executable, script, *args], cwd=ROOT, env=ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock, deadline = os.path.join(directory, ".lock"), time.time() + 120
    while not (os.path.exists(lock) and open(lock).read().startswith(f"pid {process.pid} ")):
        assert process.poll() is None and time.time() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.05)
    return process


def test_second_pretraining_run_on_a_live_directory_exits_2(corpus, tmp_path):
    out = str(tmp_path / "run")
    args = pretrain_flags(corpus, out)
    first = _start_and_wait_for_lock("run_pretraining.py", args, out)
    first.send_signal(signal.SIGSTOP)  # keeps it live, holding the lock, however fast it trains
    try:
        second = run_pretrain([*args, "--log_steps=3"])
    finally:
        first.send_signal(signal.SIGCONT)
    _, first_stderr = first.communicate(timeout=300)
    assert second.returncode == 2, second.stderr[-3000:]
    lines = own_stderr_lines(second.stderr)
    assert len(lines) == 1 and lines[0].startswith("run_pretraining.py: error: "), lines
    assert out in lines[0] and f"pid {first.pid} on {socket.gethostname()}" in lines[0], lines
    assert first.returncode == 0, first_stderr[-3000:]
    assert "--log_steps=1\n" in open(os.path.join(out, "flags.txt")).read()  # the refused run wrote nothing
    assert tf.train.latest_checkpoint(os.path.join(out, "checkpoints")).endswith("ckpt-4")
    load_pretrainer(os.path.join(out, "model"))


def test_sigkilled_finetuning_run_does_not_block_its_rerun(minilm_dir, tmp_path):
    from tests.finetuning_helpers import run_driver, tiny_model_dir

    pretrained = tiny_model_dir(tmp_path / "pretrained", minilm_dir)
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f"{w} movie,{i % 2}\n" for i, w in
                                              enumerate(["good", "bad", "fine", "awful"] * 4)))
    out = str(tmp_path / "run")
    args = [f"--train_file={train}", f"--init_checkpoint={pretrained}", "--do_train",
            "--train_batch_size=4", "--num_train_epochs=1", "--max_seq_length=16", f"--output_dir={out}"]
    killed = _start_and_wait_for_lock("run_classifier.py", args, out)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    rerun = run_driver("run_classifier.py", *args)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert load_task_model(os.path.join(out, "best")).task_info["labels"] == ["0", "1"]
