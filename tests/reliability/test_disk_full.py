"""A checkpoint write that fails (disk full simulated by a file-size limit) ends the run
with one line naming it; the previous checkpoint stays the latest and a rerun resumes."""

import os
import resource
import subprocess
import sys

import tensorflow as tf

from tests.conftest import own_stderr_lines
from tests.pretraining_helpers import ENV, ROOT, pretrain_flags, run_pretrain


def test_failed_checkpoint_write(corpus, tmp_path):
    out = str(tmp_path / "run")
    args = pretrain_flags(corpus, out, num_train_steps=4, save_checkpoints_steps=2, eval_every_steps=100)
    assert run_pretrain([*args, "--stop_at_step=2"]).returncode == 0
    checkpoint_dir = os.path.join(out, "checkpoints")
    first = tf.train.latest_checkpoint(checkpoint_dir)
    assert first.endswith("ckpt-2")

    def small_files():  # writes past 200 kB fail with EFBIG (Python ignores SIGXFSZ)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    limited = subprocess.run([sys.executable, "run_pretraining.py", *args], cwd=ROOT, env=ENV,
                             capture_output=True, text=True, timeout=300, preexec_fn=small_files)
    lines = own_stderr_lines(limited.stderr)
    assert limited.returncode == 2 and len(lines) == 1, limited.stderr[-3000:]
    assert f"{checkpoint_dir}/ckpt-4: could not write the checkpoint" in lines[0]
    assert "File too large" in lines[0] and first in lines[0]
    assert tf.train.latest_checkpoint(checkpoint_dir) == first
    assert not [n for n in os.listdir(checkpoint_dir) if "temp" in n]

    again = run_pretrain(args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "at step 2" in again.stderr and tf.train.latest_checkpoint(checkpoint_dir).endswith("ckpt-4")
