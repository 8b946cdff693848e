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
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        name = "mirrored" if len(gpus) > 1 else "one_device"
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        # Without GPUs, use the logical CPU devices (tests split the CPU in two).
        cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(None if gpus else cpus)
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address or "")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def split_cpu(num_devices: int) -> None:
    """Splits the host CPU into `num_devices` logical devices (before TF initialises)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])
