"""Runs the drivers (`python SCRIPT ARGS`, `python -m MODULE ARGS`) as forks of one warm process.

Starting Python and importing TensorFlow, Keras and bert_tf costs about 5 s of CPU,
more than most driver runs in the tests spend on their own work. One server
process imports them once (without touching the TensorFlow runtime, defining no
flags); each run is a fork of it: a real process with its own pid, environment,
working directory, stdout/stderr and exit code, that runs the script as
`__main__` exactly as the command line would. It can be killed like any process
(`send_signal`), and its exit code is the one `subprocess` would report (negative
for a signal).

Differences from a fresh interpreter, and why they do not matter here: Python's
hash seed is the server's (the drivers' outputs never depend on dict order of
strings; the exact-resume tests that compare two runs use real subprocesses),
and the `random`/NumPy global generators are reseeded from os.urandom in each
fork as a fresh process would seed them.

    result = driver_runs.run(["run_pretraining.py", "--flagfile=f"])   # CompletedProcess
    process = driver_runs.start(["-m", "bert_tf.tools.build_vocab", ...])  # Popen-like
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}


class Run:
    """A forked driver run, with the part of `subprocess.Popen`'s interface the tests use."""

    def __init__(self, args: list[str], pid: int, directory: str):
        self.args, self.pid, self.directory = args, pid, directory
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                with open(os.path.join(self.directory, "rc"), encoding="utf-8") as f:
                    self.returncode = int(f.read())
            except FileNotFoundError:
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(9)

    def output(self, name: str) -> str:
        with open(os.path.join(self.directory, name), encoding="utf-8", errors="replace") as f:
            return f.read()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise
        return self.output("stdout"), self.output("stderr")


class _Server:
    def __init__(self) -> None:
        self._process = subprocess.Popen([sys.executable, "-m", "tests.driver_runs"], cwd=ROOT, env=ENV,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True)
        self._lock = threading.Lock()
        if self._process.stdout.readline().strip() != "ready":
            raise RuntimeError("the driver fork server did not start")

    def start(self, command: list[str], cwd: str, env: dict) -> Run:
        directory = tempfile.mkdtemp(prefix="driver_run_")
        request = {"argv": list(command), "cwd": cwd, "env": dict(env), "dir": directory}
        with self._lock:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            pid = int(self._process.stdout.readline())
        return Run(list(command), pid, directory)


_server: _Server | None = None
_server_lock = threading.Lock()


def start(command: list[str], cwd: str = ROOT, env: dict | None = None) -> Run:
    """Starts `python *command` (a script path or `-m MODULE`, then its arguments) as a fork."""
    global _server
    if command and command[0] == sys.executable:
        command = command[1:]
    with _server_lock:
        if _server is None:
            _server = _Server()
    return _server.start(command, cwd, ENV if env is None else env)


def run(command: list[str], cwd: str = ROOT, env: dict | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess:
    """Runs `python *command` to the end: a CompletedProcess with text stdout and stderr."""
    process = start(command, cwd, env)
    try:
        stdout, stderr = process.communicate(timeout)
    finally:
        shutil.rmtree(process.directory, ignore_errors=True)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


# --- the server side -------------------------------------------------------------------------


def _child(request: dict, server_fd: int) -> None:
    """In the fork: becomes `python ARGV` and never returns."""
    import random
    import runpy
    import traceback

    import numpy as np

    code = 1
    try:
        os.close(server_fd)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            target = os.open(os.path.join(request["dir"], name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        random.seed()
        np.random.seed()
        argv = request["argv"]
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = request["cwd"]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(argv[0])
            sys.argv = [argv[0], *argv[1:]]
            sys.path[0] = os.path.dirname(script)
            runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter would: traceback, exit 1
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _reap(pid: int, directory: str) -> None:
    _, status = os.waitpid(pid, 0)
    with open(os.path.join(directory, "rc.tmp"), "w", encoding="utf-8") as f:
        f.write(str(os.waitstatus_to_exitcode(status)))
    os.replace(os.path.join(directory, "rc.tmp"), os.path.join(directory, "rc"))


_WARM_MODULES = ("tensorflow", "tensorflow_text", "keras", "keras_hub", "bert_tf.flags", "bert_tf.export",
                 "bert_tf.training.pretraining_job", "bert_tf.training.classifier_job",
                 "bert_tf.training.ner_job", "bert_tf.training.squad_job")


def _serve() -> None:
    import importlib

    # The replies go to the original stdout alone; anything an import prints goes to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    # What the drivers import; none of these defines a flag or starts the TensorFlow runtime.
    for module in _WARM_MODULES:
        importlib.import_module(module)

    print("ready", file=out, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request, out.fileno())
        threading.Thread(target=_reap, args=(pid, request["dir"]), daemon=True).start()
        print(pid, file=out, flush=True)
    # stdin closed: the tests are over; let the running forks finish.
    while threading.active_count() > 1:
        time.sleep(0.1)


if __name__ == "__main__":
    _serve()
