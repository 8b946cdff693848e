"""Soak of an exported SavedModel: many mixed requests in one process, RSS at start and end.

    python bench/serving_soak.py --model_dir=runs/pretrain_demo/model [--requests=10000]
    python bench/serving_soak.py --export=exports/reviews/1

Requests mix ordinary text (English, Chinese), empty strings, over-long text
(20,000 characters) and random bytes (often not UTF-8), in batches of 1 to 8;
every one must return without error. Resident memory is read from
/proc/self/status after a warm-up and at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

import bert_tf  # noqa: F401  (first: on x86 Linux it turns oneDNN on before TensorFlow loads)
import tensorflow as tf

from bert_tf import export


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kib / 1024


def _request(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.4:
        return rng.choice(["The movie was great, I loved it!", "北京是中国的首都，张三在上海工作。",
                           "Is it going to rain tomorrow?", "这个手机很好用"]).encode()
    if kind < 0.55:
        return b""
    if kind < 0.7:
        return ("很长的文本 long text " * 1500).encode()[:rng.randint(10_000, 40_000)]
    return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_dir", help="a model directory to export first")
    parser.add_argument("--export", help="an exported version folder")
    parser.add_argument("--requests", type=int, default=10_000)
    args = parser.parse_args()
    path = args.export or export.export_saved_model(args.model_dir, tempfile.mkdtemp(), "soak")
    model = export.load_saved_model(path)
    serve = model.signatures[export.SERVING_DEFAULT]
    pair = "text_pair" in serve.structured_input_signature[1]
    rng = random.Random(0)

    def call(batch: int) -> None:
        inputs = {"text": tf.constant([_request(rng) for _ in range(batch)])}
        if pair:
            inputs["text_pair"] = tf.constant([_request(rng) for _ in range(batch)])
        serve(**inputs)

    for _ in range(50):  # warm-up: graph building, allocator pools
        call(rng.randint(1, 8))
    start_rss, start, sent = _rss_mib(), time.perf_counter(), 0
    while sent < args.requests:
        batch = min(rng.randint(1, 8), args.requests - sent)
        call(batch)
        sent += batch
    elapsed = time.perf_counter() - start
    print(f"{path}: {sent} requests in {elapsed:.0f} s ({sent / elapsed:.0f}/s), no error; "
          f"RSS {start_rss:.0f} MiB after warm-up, {_rss_mib():.0f} MiB at the end")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
