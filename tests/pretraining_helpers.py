"""The tiny English corpus and the run_pretraining.py runner the driver tests share
(the `corpus` fixture itself lives in conftest.py)."""

import os
import subprocess
import sys

import numpy as np

from bert_tf.configs import BertConfig
from bert_tf.data.tokenization import load_vocab
from tests import driver_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


def make_corpus(directory, minilm_dir, documents=60, topic_words=40, topics=None):
    """`documents` documents of sentences made of real English words, and a tiny config.

    Each document draws its sentences from `topic_words` words: its own, or with
    `topics` those of one of that many shared topics (then held-out documents
    are new text on topics seen in training)."""
    words = [w for w in load_vocab(os.path.join(minilm_dir, "vocab.txt"))[2000:6000]
             if w.isalpha() and w.isascii()]
    rng = np.random.default_rng(0)
    shared = [rng.choice(words, topic_words, replace=False) for _ in range(topics or 0)]
    texts = []
    for _ in range(documents):
        # Each document draws from its own (or its topic's) words: NSP is learnable.
        topic = shared[rng.integers(topics)] if topics else rng.choice(words, topic_words)
        texts.append("\n".join(" ".join(rng.choice(topic, rng.integers(5, 15))) + "."
                               for _ in range(rng.integers(3, 9))))
    text = directory / "corpus.txt"
    text.write_text("\n\n".join(texts) + "\n")
    config = BertConfig(vocab_size=600, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    config_file = directory / "bert_config.json"
    config.to_json_file(config_file)
    return {"text": str(text), "config": str(config_file)}


def pretrain_flags(corpus, output_dir, **extra):
    values = {"input_text_file": corpus["text"], "bert_config_file": corpus["config"],
              "vocab_size": 600, "output_dir": output_dir, "max_seq_length": 32,
              "max_predictions_per_seq": 5, "dupe_factor": 2, "train_batch_size": 8,
              "eval_batch_size": 8, "learning_rate": 1e-3, "num_train_steps": 4,
              "num_warmup_steps": 1, "log_steps": 1, "eval_every_steps": 2, "max_eval_steps": 2,
              "save_checkpoints_steps": 2, "peak_tflops": 1.0}
    values.update(extra)
    return [f"--{k}={v}" for k, v in values.items()]


def run_pretrain(args, env=ENV, fresh_interpreter=False):
    """run_pretraining.py with `args`: a fork of the warm driver process (tests/driver_runs.py),
    or with `fresh_interpreter` a new Python process."""
    command = ["run_pretraining.py", *args]
    if fresh_interpreter:
        return subprocess.run([sys.executable, *command], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
    return driver_runs.run(command, env=env, timeout=300)
