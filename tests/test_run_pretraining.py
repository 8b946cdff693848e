"""run_pretraining.py end to end on a tiny model: demo path, resume after SIGKILL,
distribution, bad flags."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.configs import BertConfig
from bert_tf.data.tokenization import load_vocab
from tests.conftest import own_stderr_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, minilm_dir):
    """60 documents of sentences made of real English words, and a tiny config."""
    directory = tmp_path_factory.mktemp("corpus")
    words = [w for w in load_vocab(os.path.join(minilm_dir, "vocab.txt"))[2000:6000]
             if w.isalpha() and w.isascii()]
    rng = np.random.default_rng(0)
    documents = []
    for d in range(60):
        topic = rng.choice(words, 40)  # each document draws from its own words: NSP is learnable
        documents.append("\n".join(" ".join(rng.choice(topic, rng.integers(5, 15))) + "."
                                   for _ in range(rng.integers(3, 9))))
    text = directory / "corpus.txt"
    text.write_text("\n\n".join(documents) + "\n")
    config = BertConfig(vocab_size=600, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    config_file = directory / "bert_config.json"
    config.to_json_file(config_file)
    return {"text": str(text), "config": str(config_file)}


def _flags(corpus, output_dir, **extra):
    values = {"input_text_file": corpus["text"], "bert_config_file": corpus["config"],
              "vocab_size": 600, "output_dir": output_dir, "max_seq_length": 32,
              "max_predictions_per_seq": 5, "dupe_factor": 2, "train_batch_size": 8,
              "eval_batch_size": 8, "learning_rate": 1e-3, "num_train_steps": 4,
              "num_warmup_steps": 1, "log_steps": 1, "eval_every_steps": 2, "max_eval_steps": 2,
              "save_checkpoints_steps": 2, "peak_tflops": 1.0}
    values.update(extra)
    return [f"--{k}={v}" for k, v in values.items()]


def _run(args, env=ENV, **kwargs):
    return subprocess.run([sys.executable, "run_pretraining.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, **kwargs)


def test_pretrains_from_text_and_writes_everything(corpus, tmp_path):
    out = str(tmp_path / "run")
    result = _run(_flags(corpus, out))
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
    args = _flags(corpus, out, num_train_steps=30, save_checkpoints_steps=3, eval_every_steps=100)
    process = subprocess.Popen([sys.executable, "run_pretraining.py", *args], cwd=ROOT, env=ENV,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    checkpoint_dir = os.path.join(out, "checkpoints")
    deadline = time.time() + 240
    while time.time() < deadline and not (os.path.isdir(checkpoint_dir)
                                          and tf.train.latest_checkpoint(checkpoint_dir)):
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    killed_at = int(tf.train.latest_checkpoint(checkpoint_dir).rsplit("-", 1)[1])
    assert 3 <= killed_at < 30 and not os.path.exists(os.path.join(out, "model"))
    result = _run(args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"at step {killed_at}" in result.stderr and "resuming from checkpoint" in result.stderr
    assert f"step {killed_at + 1}/30" in result.stderr and "step 1/30" not in result.stderr
    assert tf.train.latest_checkpoint(checkpoint_dir).endswith("ckpt-30")


def test_two_replica_mirrored_run(corpus, tmp_path):
    result = _run(_flags(corpus, str(tmp_path / "run"), distribution_strategy="mirrored",
                         num_cpu_devices=2, num_train_steps=2))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MirroredStrategy: 2 replica(s) on 1 worker(s)" in result.stderr


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
    assert _run(_flags(corpus, out, num_train_steps=1, stop_at_step=1)).returncode == 0
    workers = [f"127.0.0.1:{p}" for p in _free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = {**ENV, "TF_CONFIG": json.dumps(tf_config)}
        processes.append(subprocess.Popen(
            [sys.executable, "run_pretraining.py",
             *_flags(corpus, out, distribution_strategy="multi_worker_mirrored", num_train_steps=3)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [p.communicate(timeout=300) for p in processes]
    logs = "\n".join(f"--- worker {i} ---\n{err[-3000:]}" for i, (_, err) in enumerate(results))
    for index, (process, (_, stderr)) in enumerate(zip(processes, results)):
        assert process.returncode == 0, logs
        assert f"2 replica(s) on 2 worker(s); this is worker {index}" in stderr
        # The one-worker checkpoint's input position does not fit two workers; every
        # worker must see that, whatever the chief has written meanwhile.
        assert "the data position starts afresh" in stderr, logs
    assert tf.train.latest_checkpoint(os.path.join(out, "checkpoints")).endswith("ckpt-3")


@pytest.mark.parametrize("extra, message", [
    ({"max_predictions_per_seq": 40}, "--max_predictions_per_seq must not exceed --max_seq_length"),
    ({"gradient_accumulation_steps": 3}, "--train_batch_size must be divisible by --gradient_accumulation_steps"),
    ({"num_warmup_steps": 9}, "--num_warmup_steps must not exceed --num_train_steps"),
    ({"input_text_file": "/nonexistent/*.txt"}, "/nonexistent/*.txt"),
    ({"max_seq_length": 128}, "max_position_embeddings"),
    ({"text_corpus": "peoples_daily"}, "give exactly one of --input_file, --input_text_file and --text_corpus"),
])
def test_bad_flags_give_one_line_and_exit_2(corpus, tmp_path, extra, message):
    result = _run(_flags(corpus, str(tmp_path / "run"), **extra))
    assert result.returncode == 2
    lines = own_stderr_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("run_pretraining.py: error: ") and message in lines[0], lines


def test_output_dir_that_is_a_file(corpus, tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    result = _run(_flags(corpus, str(path)))
    assert result.returncode == 2
    assert own_stderr_lines(result.stderr) == [
        "run_pretraining.py: error: flag --output_dir=" + str(path)
        + ": --output_dir is an existing file, not a directory"]
