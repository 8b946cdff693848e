"""The fine-tuning loop: the pretraining step machinery on labelled features, by epochs.

Shared with pretraining: TrainStep (replicas, accumulation, clipping, mixed
precision), the optimizer and schedule, checkpoints with the input position,
TensorBoard writers. Added here: epochs, dynamic padding, evaluation on the dev
set with the task's own metric after every epoch, and keeping the best model.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Callable

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import checkpoints
from bert_tf.io import write_json
from bert_tf.data.packing import trim_padding
from bert_tf.training import distribute, tasks
from bert_tf.training.optimization import OptimizerConfig
from bert_tf.training.trainer import (PRECISIONS, NonFiniteGuard, TrainStep, _Summaries,
                                     build_for_training, save_checkpoint, training_state)

Features = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class FinetuningConfig:
    """How to fine-tune. `train_batch_size` is the global batch of one optimizer step."""

    output_dir: str
    train_batch_size: int = 32
    eval_batch_size: int = 32
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    gradient_accumulation_steps: int = 1
    log_steps: int = 50
    keep_checkpoint_max: int = 2
    init_checkpoint: str | None = None
    mixed_precision: str = "float32"
    jit_compile: bool = False
    length_bucketing: bool = False  # batches of rows of similar length (train_dataset)
    seed: int = 12345
    deterministic: bool = False  # enable_op_determinism: bitwise-repeatable runs on one machine
    best_metric: str | None = None  # the dev metric that picks the kept model (higher is better)
    reinit_top_layers: int = 0  # top encoder blocks (and the pooler) not taken from init_checkpoint

    def __post_init__(self) -> None:
        if self.mixed_precision not in PRECISIONS:
            raise ValueError(f"mixed_precision must be one of {', '.join(PRECISIONS)}")
        if self.num_train_epochs <= 0:
            raise ValueError(f"num_train_epochs must be positive, got {self.num_train_epochs}")
        if self.reinit_top_layers < 0:
            raise ValueError(f"reinit_top_layers must be >= 0, got {self.reinit_top_layers}")


def initialise_encoder(model: keras.Model, init_checkpoint: str, reinit_top_layers: int = 0) -> None:
    """Loads the pretrained encoder into a freshly built task model, except its top blocks.

    The top `reinit_top_layers` Transformer blocks and, with any, the pooler keep
    the values the model was built with (BERT's initialisation: truncated normal
    kernels and embeddings, zero biases, LayerNorm 1 and 0), as the task head does.

    Raises:
        ValueError: more blocks to re-initialise than the encoder has.
    """
    layers = model.config.num_hidden_layers
    if reinit_top_layers > layers:
        raise ValueError(f"--reinit_top_layers={reinit_top_layers} exceeds the model's {layers} layers")
    fresh = tuple(f"layer_{i}/" for i in range(layers - reinit_top_layers, layers))
    fresh += ("pooler/",) if reinit_top_layers else ()
    kept = [(v, v.numpy()) for v in model.encoder.weights if v.path.startswith(fresh)]
    checkpoints.load_weights(model.encoder, init_checkpoint)
    for variable, value in kept:
        variable.assign(value)


def _seq_keys(features: Features) -> tuple[str, ...]:
    length = features["input_word_ids"].shape[1]
    return tuple(k for k, v in features.items() if v.ndim == 2 and v.shape[1] == length)


BUCKET_WIDTH = 8  # batches are cut to a multiple of this; length buckets are this wide


def train_dataset(features: Features, batch_size: int, seed: int,
                  context: tf.distribute.InputContext, length_bucketing: bool = False) -> tf.data.Dataset:
    """Shuffled, repeated, dynamically padded batches of this worker's share.

    The shuffle runs over row indices, so a checkpointed iterator holds indices,
    not copies of the features. With `length_bucketing`, the shuffled rows are
    grouped by length (buckets of BUCKET_WIDTH tokens) and each batch is taken
    from one bucket, so a batch of short rows is not padded to one long row;
    a rare bucket's rows wait until a batch of them has come.
    """
    tensors = {k: tf.constant(v) for k, v in features.items()}
    count = len(features["input_word_ids"])
    seq_keys = _seq_keys(features)
    per_replica = context.get_per_replica_batch_size(batch_size)
    ds = tf.data.Dataset.range(count).shard(context.num_input_pipelines, context.input_pipeline_id)
    ds = ds.shuffle(count, seed=seed, reshuffle_each_iteration=True).repeat()
    if length_bucketing:
        lengths = tf.constant(features["input_mask"].sum(axis=1), tf.int64)
        ds = ds.group_by_window(
            key_func=lambda row: (tf.gather(lengths, row) + BUCKET_WIDTH - 1) // BUCKET_WIDTH,
            reduce_func=lambda _, rows: rows.batch(per_replica, drop_remainder=True),
            window_size=per_replica)
    else:
        ds = ds.batch(per_replica, drop_remainder=True)
    ds = ds.map(lambda rows: trim_padding({k: tf.gather(v, rows) for k, v in tensors.items()}, seq_keys,
                                          BUCKET_WIDTH),
                num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def predict(model: keras.Model, features: Features, batch_size: int,
            seq_outputs: tuple[str, ...] = (),
            inputs: tuple[str, ...] = tasks.ENCODER_INPUTS) -> dict[str, np.ndarray]:
    """Runs the model over all rows with dynamic padding; returns numpy outputs in row order.

    Rows are batched in order of length, so each batch is padded only to rows
    of about its own length. The per-token outputs named in `seq_outputs` are
    padded back to the features' sequence length so that batches concatenate.
    """
    length = features["input_word_ids"].shape[1]
    order = np.argsort(features["input_mask"].sum(axis=1), kind="stable")
    call = tf.function(lambda x: model(x, training=False), reduce_retracing=True)
    pieces: dict[str, list] = {}
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        batch = trim_padding({k: tf.constant(features[k][rows]) for k in inputs}, inputs)
        for name, value in call(batch).items():
            value = np.asarray(value)
            if name in seq_outputs:
                value = np.pad(value, [(0, 0), (0, length - value.shape[1])] + [(0, 0)] * (value.ndim - 2))
            pieces.setdefault(name, []).append(value)
    outputs = {}
    for name, values in pieces.items():
        outputs[name] = np.empty_like(values[0], shape=(len(order),) + values[0].shape[1:])
        outputs[name][order] = np.concatenate(values)
    return outputs


def run_finetuning(build_model: Callable[[], keras.Model], task: tasks.Task,
                   optimizer_config: OptimizerConfig, config: FinetuningConfig,
                   strategy: tf.distribute.Strategy, train_features: Features,
                   evaluate: Callable[[keras.Model], dict[str, float]] | None = None,
                   vocab_file: str | None = None, task_info: dict | None = None) -> dict[str, float]:
    """Fine-tunes a task model; resumes from output_dir when it can.

    Args:
        build_model: builds the task model (called under the strategy's scope and
            the mixed-precision policy); it must have `.encoder` and `.config`.
        task: its loss and metric sums.
        optimizer_config: num_train_steps and num_warmup_steps are filled in from
            the epochs and warmup_proportion when left at 0.
        config: how to run.
        strategy: a tf.distribute strategy.
        train_features: numpy features with the model's input names and labels.
        evaluate: model -> dev metrics; called after every epoch.
        vocab_file: copied into the saved model directories.
        task_info: written as task.json beside the saved model.

    Returns:
        The last train metrics ("train/NAME") and the best dev metrics ("eval/NAME").
    """
    num_workers, worker = distribute.worker_info(strategy)
    examples = len(train_features["input_word_ids"])
    steps_per_epoch = max(1, examples // config.train_batch_size)
    total_steps = max(1, math.ceil(steps_per_epoch * config.num_train_epochs))
    if not optimizer_config.num_train_steps:
        optimizer_config = dataclasses.replace(
            optimizer_config, num_train_steps=total_steps,
            num_warmup_steps=int(total_steps * config.warmup_proportion))
    logging.info("%d training examples, %d steps per epoch, %d steps", examples, steps_per_epoch, total_steps)
    os.makedirs(config.output_dir, exist_ok=True)

    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)
    model, optimizer, global_step = build_for_training(build_model, optimizer_config,
                                                       config.mixed_precision, strategy)

    context = tf.distribute.InputContext(num_workers, worker, num_workers)
    iterator = iter(train_dataset(train_features, config.train_batch_size, config.seed, context,
                                  config.length_bucketing))
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(**training_state(model, optimizer, global_step), iterator=iterator),
        os.path.join(config.output_dir, "checkpoints" if worker == 0 else f".worker_{worker}_checkpoints"),
        max_to_keep=config.keep_checkpoint_max, step_counter=global_step)
    latest = tf.train.latest_checkpoint(os.path.join(config.output_dir, "checkpoints"))
    best_file = os.path.join(config.output_dir, "best_eval_results.json")
    best = json.load(open(best_file)) if latest and os.path.exists(best_file) else None
    if latest:
        manager.checkpoint.restore(latest).assert_existing_objects_matched()
        logging.info("resuming from checkpoint %s at step %d", latest, int(global_step.numpy()))
    elif config.init_checkpoint:
        initialise_encoder(model, config.init_checkpoint, config.reinit_top_layers)
        logging.info("initialised the encoder from %s%s", config.init_checkpoint,
                     f" but its top {config.reinit_top_layers} layer(s) and pooler"
                     if config.reinit_top_layers else "")

    steps = TrainStep(model, optimizer, strategy, task, train_batch_size=config.train_batch_size,
                      eval_batch_size=config.eval_batch_size,
                      gradient_accumulation_steps=config.gradient_accumulation_steps,
                      jit_compile=config.jit_compile, num_workers=num_workers,
                      clip_norm=optimizer_config.clip_norm)
    summaries = _Summaries(config.output_dir, worker == 0)
    results: dict[str, float] = {f"eval/{k}": v for k, v in (best or {}).items()}
    step = int(global_step.numpy())
    window: dict[str, tf.Tensor] = {}
    window_start, window_steps = time.perf_counter(), 0
    guard = NonFiniteGuard(steps.loss_scaled)
    while step < total_steps:
        sums = steps.train(iterator)
        global_step.assign_add(1)
        step += 1
        window_steps += 1
        window = {k: window[k] + v if k in window else v for k, v in sums.items()}
        guard.add(step, sums)
        if step % config.log_steps == 0 or step % steps_per_epoch == 0 or step == total_steps:
            guard.check(manager.latest_checkpoint)
            totals = {k: float(v) for k, v in window.items()}
            logged = task.summarize(totals)
            logged.update(learning_rate=float(getattr(optimizer, "inner_optimizer", optimizer).learning_rate),
                          examples_per_second=totals["examples"] / (time.perf_counter() - window_start),
                          grad_norm=totals["grad_norm"] / window_steps)
            summaries.scalars("train", logged, step)
            results.update({f"train/{k}": v for k, v in logged.items()})
            logging.info("step %d/%d epoch %.2f loss=%.4f lr=%.3g %.1f examples/s", step, total_steps,
                         step / steps_per_epoch, logged["loss"], logged["learning_rate"],
                         logged["examples_per_second"])
            window, window_start, window_steps = {}, time.perf_counter(), 0
        if step % steps_per_epoch == 0 or step == total_steps:
            if evaluate is not None:
                metrics = evaluate(model)
                summaries.scalars("eval", metrics, step)
                logging.info("eval step %d: %s", step, " ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items())))
                key = config.best_metric or next(iter(metrics))
                if worker == 0 and (best is None or metrics[key] > best[key]):
                    best = metrics
                    checkpoints.save_model_dir(model, os.path.join(config.output_dir, "best"),
                                               vocab_file, task_info)
                    write_json(best_file, best)
                    results.update({f"eval/{k}": v for k, v in best.items()})
            save_checkpoint(manager, step)
    if worker == 0:
        checkpoints.save_model_dir(model, os.path.join(config.output_dir, "model"), vocab_file, task_info)
        if evaluate is None:  # without a dev set, the last model is the one kept
            checkpoints.save_model_dir(model, os.path.join(config.output_dir, "best"), vocab_file, task_info)
    return results
