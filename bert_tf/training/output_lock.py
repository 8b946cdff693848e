"""One run at a time per output directory."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from typing import Iterator

import tensorflow as tf

from bert_tf.training.distribute import worker_info


@contextlib.contextmanager
def lock_output_dir(output_dir: str, strategy: tf.distribute.Strategy) -> Iterator[None]:
    """Holds `output_dir/.lock` while the block runs, creating the directory.

    An advisory lock (flock), not a pid file: the kernel releases it when its
    process ends however it ends, so a run killed with SIGKILL never blocks its
    own rerun. The holder writes its pid and host into the file for the
    message of a run it turns away. The workers of one multi-worker run share
    output_dir, so worker k > 0 takes `.worker_k.lock` instead: each worker
    slot is held by one process at a time.

    Raises:
        OSError: another live process holds the lock; the message names the
            directory and that process.
    """
    _, worker = worker_info(strategy)
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, ".lock" if worker == 0 else f".worker_{worker}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "pid not yet written"
            raise OSError(f"{output_dir} is in use by another run ({holder}); wait for it to end "
                          "or choose another --output_dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        os.close(fd)
