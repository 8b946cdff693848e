"""Shared pieces of the fine-tuning driver tests: a tiny pretrained model directory
with the real MiniLM vocab, and the driver runner."""

import os
import subprocess

from bert_tf import checkpoints
from bert_tf.configs import BertConfig
from bert_tf.modeling.pretrainer import BertPretrainer
from tests import driver_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "tests", "testdata")
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}


def tiny_model_dir(directory, minilm_dir) -> str:
    """A randomly initialised 2-layer BERT over MiniLM's 30,522-token uncased vocab."""
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128)
    return checkpoints.save_model_dir(BertPretrainer(config), directory,
                                      os.path.join(minilm_dir, "vocab.txt"))


def run_driver(script: str, *args: str) -> subprocess.CompletedProcess:
    """`python script args` as a fork of the warm driver process (tests/driver_runs.py)."""
    return driver_runs.run([script, *args], env=ENV)
