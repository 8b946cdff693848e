"""tf.distribute strategies by name."""

from __future__ import annotations

import tensorflow as tf

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker_mirrored", "tpu")


def get_strategy(name: str = "auto", tpu_address: str | None = None) -> tf.distribute.Strategy:
    """Returns the strategy called `name`.

    "auto" picks MirroredStrategy when several GPUs are visible, else one device.
    "multi_worker_mirrored" reads the cluster from the TF_CONFIG environment
    variable. "tpu" connects to `tpu_address` (coded, not tested here: no TPU).
    """
    if name not in STRATEGIES:
        raise ValueError(f"distribution_strategy must be one of {', '.join(STRATEGIES)}, got {name!r}")
    if name == "multi_worker_mirrored":
        # Collective ops must be configured before anything initialises the runtime
        # (listing devices does), so this strategy comes first.
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        name = "mirrored" if len(gpus) > 1 else "one_device"
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        # Without GPUs, use the logical CPU devices (tests split the CPU in two).
        cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(None if gpus else cpus)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address or "")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def worker_info(strategy: tf.distribute.Strategy) -> tuple[int, int]:
    """(number of workers, this worker's index)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return 1, 0
    return resolver.cluster_spec().num_tasks("worker"), resolver.task_id or 0


def split_cpu(num_devices: int) -> None:
    """Splits the host CPU into `num_devices` logical devices (before TF initialises)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])


def resolve_precision(name: str) -> str:
    """Maps "auto" to mixed_bfloat16 where bfloat16 matmuls are fast, else float32.

    Fast means a GPU of compute capability 8.0 or newer, or a CPU with AMX or
    AVX512-BF16 instructions (read from /proc/cpuinfo); other names pass through.
    """
    if name != "auto":
        return name
    for gpu in tf.config.list_physical_devices("GPU"):
        capability = tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))
        return "mixed_bfloat16" if capability >= (8, 0) else "float32"
    return "mixed_bfloat16" if cpu_flags() & {"amx_bf16", "avx512_bf16"} else "float32"


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return set()
