"""Speed of a pretraining step in float32, mixed_bfloat16 and with XLA, as ratios.

    python bench/pretrain_precision.py [--preset=mini_uncased --seq=128 --batch=32 --steps=10]

One run; settings alternate round by round so that machine noise hits them alike. Prints the
median sequences/second of each setting and its ratio to float32 without XLA. Figures are
ratios from one run on a shared machine, not guarantees.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from bert_tf.configs import get_preset
from bert_tf.modeling.pretrainer import BertPretrainer
from bert_tf.training.optimization import OptimizerConfig, create_optimizer
from bert_tf.training.tasks import PretrainingTask
from bert_tf.training.trainer import TrainStep

SETTINGS = [("float32", False), ("float32", True), ("mixed_bfloat16", False), ("mixed_bfloat16", True)]


def batch(vocab_size: int, size: int, seq: int, predictions: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "input_word_ids": rng.integers(5, vocab_size, (size, seq)).astype(np.int32),
        "input_mask": np.ones((size, seq), np.int32),
        "input_type_ids": (np.arange(seq)[None] >= seq // 2).repeat(size, 0).astype(np.int32),
        "masked_lm_positions": np.sort(rng.choice(np.arange(1, seq), (size, predictions)), -1).astype(np.int32),
        "masked_lm_ids": rng.integers(5, vocab_size, (size, predictions)).astype(np.int32),
        "masked_lm_weights": np.ones((size, predictions), np.float32),
        "next_sentence_labels": rng.integers(0, 2, size).astype(np.int32),
    }


def build(config, precision: str, jit: bool, args) -> tuple[TrainStep, object]:
    strategy = tf.distribute.OneDeviceStrategy("/gpu:0" if tf.config.list_physical_devices("GPU") else "/cpu:0")
    keras.mixed_precision.set_global_policy(precision)
    try:
        with strategy.scope():
            model = BertPretrainer(config)
            optimizer = create_optimizer(OptimizerConfig(num_train_steps=1000, num_warmup_steps=10), precision)
            optimizer.build(model.trainable_variables)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    step = TrainStep(model, optimizer, strategy, PretrainingTask(), train_batch_size=args.batch,
                     eval_batch_size=args.batch, jit_compile=jit, clip_norm=1.0)
    data = tf.data.Dataset.from_tensors(batch(config.vocab_size, args.batch, args.seq, args.predictions)).repeat()
    return step, iter(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="mini_uncased")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--predictions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = get_preset(args.preset)
    runs = {s: build(config, *s, args) for s in SETTINGS}
    for step, iterator in runs.values():  # compile and warm up
        for _ in range(2):
            step.train(iterator)["mlm_loss"].numpy()
    speed: dict = {s: [] for s in SETTINGS}
    for _ in range(args.rounds):
        for setting, (step, iterator) in runs.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                out = step.train(iterator)
            out["mlm_loss"].numpy()
            speed[setting].append(args.steps * args.batch / (time.perf_counter() - start))
    base = statistics.median(speed[SETTINGS[0]])
    print(f"pretraining step, {args.preset}, batch {args.batch}, seq {args.seq}, "
          f"{args.predictions} predictions, {tf.config.list_logical_devices()[0].device_type}")
    for (precision, jit), values in speed.items():
        median = statistics.median(values)
        print(f"  {precision:15s} xla={'on ' if jit else 'off'}  {median:8.1f} seq/s  x{median / base:.2f}")


if __name__ == "__main__":
    main()
