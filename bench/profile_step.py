r"""Where the pretraining step's time goes: TensorFlow's profiler on bert_tf's default step.

    python bench/profile_step.py [--precision=mixed_bfloat16 --preset=mini_uncased --seq=128 --batch=32]
    python bench/profile_step.py --quick --output_json=/tmp/profile.json

Builds the same step as `bench/pretrain_throughput.py` (its `--preset`, `--seq`, `--batch`,
`--predictions` flags; `--precision` defaults to what `--mixed_precision=auto` resolves to),
warms it up, traces `--steps` steps with `tf.profiler.experimental` and reads the trace
(the XSpace protobuf the profiler writes): the time of every TensorFlow kernel, grouped
by op type and by op (layer indices merged), and of the XLA kernels the step launches
(bert_tf's fused softmax + dropout, LayerNorms with dropout, GELU, masked-LM head and loss
pieces, AdamW updates), those also split by the compiled function each runs, forward and
backward apart (the function of the op that launched it, looked up in the runtime's
function library). TensorFlow runs one op at a time here (one inter-op thread, both
cores inside each op), so the kernels' times add up to the step instead of overlapping; on
2 cores this setting ran the step as fast as the default one (537 against 530-610 ms,
alternating processes) in one test and at 0.95x in another (483-497 against 450-475 ms).
What no kernel accounts for is the executor's own time.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bert_tf  # noqa: F401  (first: on x86 Linux it turns oneDNN on before TensorFlow loads)
import tensorflow as tf

tf.config.threading.set_inter_op_parallelism_threads(1)

from absl import app, flags  # noqa: E402
from tensorflow.python.eager import context  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

import bench_util  # noqa: E402
import pretrain_throughput  # noqa: E402  (its model flags and step builder)
from bert_tf.training.distribute import resolve_precision  # noqa: E402

flags.DEFINE_string("precision", None, "Keras policy to profile; default: what --mixed_precision=auto picks.")
flags.DEFINE_integer("top", 10, "How many groups to print.", lower_bound=1)
FLAGS = flags.FLAGS

XLA_KERNEL = "XLA kernels (softmax+dropout, LayerNorms+dropout, GELU, MLM head/loss, AdamW)"


def op_group(op_type: str) -> str:
    """A readable group for a TensorFlow op type."""
    if "MatMul" in op_type or "Einsum" in op_type:
        return "matmuls (oneDNN)"
    return op_type


def called_functions() -> dict[str, str]:
    """Op name -> the function it calls, for every call op in the runtime's function library."""
    ctx = context.context()
    calls = {}
    for function in ctx.list_function_names():
        for node in ctx.get_function_def(function).node_def:
            if node.op in ("PartitionedCall", "StatefulPartitionedCall"):
                calls[node.name] = node.attr["f"].func.name
    return calls


def kernel_name(function: str) -> str:
    """`__inference___backward_dropout_add_norm_5042_5255` -> `dropout_add_norm (backward)`."""
    match = re.fullmatch(r"__(?:inference___(backward)_|(forward)_|inference_)(.+?)(?:_\d+)+", function)
    if not match:
        return function
    kind = match.group(1) or match.group(2)
    return match.group(3) + (f" ({kind})" if kind else "")


def kernel_times(logdir: str, steps: int, calls: dict[str, str]
                 ) -> tuple[collections.Counter, collections.Counter, collections.Counter]:
    """ms per step by group, by op and by XLA kernel, read from the profiler's trace in `logdir`.

    An XLA kernel is named after the function of the op whose execution (the
    executor's `ProcessAsync` event just before it on the same thread) launched it.
    """
    path = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    host = next(plane for plane in space.planes if plane.name == "/host:CPU")
    stat_names = {key: meta.name for key, meta in host.stat_metadata.items()}
    groups: collections.Counter = collections.Counter()
    ops: collections.Counter = collections.Counter()
    kernels: collections.Counter = collections.Counter()
    for line in host.lines:
        if not line.name.startswith("tf_Compute"):
            continue  # the python thread and the kernels' own worker threads
        launcher = None
        for event in sorted(line.events, key=lambda e: e.offset_ps):
            name = host.event_metadata[event.metadata_id].name
            ms = event.duration_ps / 1e9 / steps
            if name == "ExecutorState::ProcessAsync::Start":
                launcher = next((stat_names.get(s.ref_value, s.str_value) for s in event.stats
                                 if stat_names.get(s.metadata_id) == "name"), None)
            elif name == "CpuExecutable::ExecuteAsyncOnStream":
                groups[XLA_KERNEL] += ms
                op = re.sub(r"^StatefulPartitionedCall/", "", launcher or "")
                kernels[kernel_name(calls.get(op, "unknown"))] += ms
            elif ":" in name and "::" not in name:
                op, op_type = name.rsplit(":", 1)
                groups[op_group(op_type)] += ms
                op = re.sub(r"^StatefulPartitionedCall/", "", op)
                op = re.sub(r"layer_\d+(_\d+)?/", "layer_*/", op)
                ops[f"{re.sub(r'_[0-9]+(?=/)', '', op)} ({op_type})"] += ms
    return groups, ops, kernels


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.quick:
        FLAGS.preset, FLAGS.seq, FLAGS.batch, FLAGS.predictions = "tiny_uncased", 32, 8, 5
        FLAGS.steps = 2
    precision = FLAGS.precision or resolve_precision("auto")
    config = pretrain_throughput.model_config()
    batch = pretrain_throughput.random_batch(config.vocab_size, FLAGS.batch, FLAGS.seq, FLAGS.predictions)
    step = pretrain_throughput.ours(config, precision, False, batch)
    for _ in range(3):
        float(step())
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        for _ in range(FLAGS.steps):
            out = step()
        float(out)
        step_ms = 1e3 * (time.perf_counter() - start) / FLAGS.steps
        tf.profiler.experimental.stop()
        groups, ops, kernels = kernel_times(logdir, FLAGS.steps, called_functions())
    groups["executor and other (no kernel)"] = max(0.0, step_ms - sum(groups.values()))
    print(f"bert_tf pretraining step, {FLAGS.preset}, batch {FLAGS.batch}, seq {FLAGS.seq}, "
          f"{precision}: {step_ms:.1f} ms per step under the profiler ({FLAGS.steps} steps)")
    figures: dict = {"preset": FLAGS.preset, "seq": FLAGS.seq, "batch": FLAGS.batch,
                     "precision": precision, "step_ms": step_ms}
    print(f"top {FLAGS.top} groups (ms per step, share of the step):")
    for rank, (group, ms) in enumerate(groups.most_common(FLAGS.top), 1):
        print(f"  {ms:7.1f} ms {100 * ms / step_ms:5.1f}%  {group}")
        figures[f"group_{rank}"], figures[f"group_{rank}_ms"] = group, ms
        figures[f"group_{rank}_share"] = ms / step_ms
    print(f"top {FLAGS.top} ops, layers merged:")
    for rank, (op, ms) in enumerate(ops.most_common(FLAGS.top), 1):
        print(f"  {ms:7.1f} ms {100 * ms / step_ms:5.1f}%  {op}")
        figures[f"op_{rank}"], figures[f"op_{rank}_ms"] = op, ms
    print(f"top {FLAGS.top} XLA kernels, by the function they run (layers merged):")
    for rank, (kernel, ms) in enumerate(kernels.most_common(FLAGS.top), 1):
        print(f"  {ms:7.1f} ms {100 * ms / step_ms:5.1f}%  {kernel}")
        figures[f"xla_{rank}"], figures[f"xla_{rank}_ms"] = kernel, ms
    bench_util.write_json(FLAGS.output_json, "profile_step", figures)


if __name__ == "__main__":
    app.run(main)
