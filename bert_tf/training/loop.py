"""The one training loop, of pretraining and fine-tuning alike.

`train` builds the model, optimizer and TrainStep, resumes from the latest
checkpoint (weights, optimizer, step, dropout streams, input position), then
runs steps to the end of its `Schedule`: the steps' sums over a logging
window, the non-finite guard, TensorBoard scalars, text and hparams, periodic
evaluation and checkpoints, and at the end the model directory. What differs
between pretraining and fine-tuning (pretrained weights, evaluation, extra
logged figures, sample predictions, keeping the best model) comes in as `Hooks`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from typing import Callable

import keras
import tensorflow as tf
from absl import logging

from bert_tf import checkpoints
from bert_tf.io import write_json
from bert_tf.training import distribute
from bert_tf.training import metrics as metrics_lib
from bert_tf.training import tasks
from bert_tf.training.optimization import OptimizerConfig
from bert_tf.training.step import PRECISIONS, TrainStep, build_for_training, check_batch_sizes, training_state

# dataset_fn(global_batch_size, input_context) -> tf.data.Dataset of fixed-shape
# batches with the model's feature names, of this worker's share of the global
# batch (input_context.get_per_replica_batch_size). One input pipeline per
# worker feeds all of its local replicas, so the context counts one "replica"
# per worker; the step slices each replica's rows.
DatasetFn = Callable[[int, tf.distribute.InputContext], tf.data.Dataset]

BEST_RESULTS = "best_eval_results.json"


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """How to run any training (PretrainingConfig and FinetuningConfig add their own fields).

    `train_batch_size` is the global batch of one optimizer step: per-replica
    micro-batch x replicas x `gradient_accumulation_steps`.
    """

    output_dir: str
    train_batch_size: int = 32
    eval_batch_size: int = 32
    gradient_accumulation_steps: int = 1
    log_steps: int = 100
    keep_checkpoint_max: int = 5
    init_checkpoint: str | None = None
    mixed_precision: str = "float32"
    jit_compile: bool = False
    seed: int = 12345
    deterministic: bool = False  # enable_op_determinism: bitwise-repeatable runs on one machine

    def __post_init__(self) -> None:
        if self.mixed_precision not in PRECISIONS:
            raise ValueError(f"mixed_precision must be one of {', '.join(PRECISIONS)}")
        if os.path.isfile(self.output_dir):
            raise ValueError(f"--output_dir={self.output_dir} is an existing file, not a directory")
        if self.train_batch_size % self.gradient_accumulation_steps:
            raise ValueError(f"--train_batch_size={self.train_batch_size} is not divisible by "
                             f"--gradient_accumulation_steps={self.gradient_accumulation_steps}")


@dataclasses.dataclass(frozen=True)
class Schedule:
    """When the loop logs, evaluates and saves; each also happens at the last step.

    With `epoch_steps` (fine-tuning) a log line also closes every epoch and
    tells the epoch.
    """

    total_steps: int
    log_every: int
    eval_every: int
    save_every: int
    epoch_steps: int | None = None

    def logs_at(self, step: int) -> bool:
        return (step % self.log_every == 0 or step == self.total_steps
                or (self.epoch_steps is not None and step % self.epoch_steps == 0))

    def evaluates_at(self, step: int) -> bool:
        return step % self.eval_every == 0 or step == self.total_steps

    def saves_at(self, step: int) -> bool:
        return step % self.save_every == 0 or step == self.total_steps


@dataclasses.dataclass(frozen=True)
class Hooks:
    """What a kind of training adds to the loop; every hook is optional.

    Attributes:
        initialise: model -> None; a fresh run (no checkpoint to resume) loads
            pretrained weights with it.
        prepare: called once the model is built and restored or initialised,
            before the first step (pretraining reads its eval batches then, so
            bad batch sizes or checkpoints are reported before bad eval data).
        evaluate: step -> eval metrics (higher or lower is better by name); it
            may use `step.model` or the compiled `step.evaluate`.
        sample_text: model -> {name: markdown}, written as eval text summaries
            after each evaluation (pretraining's masked-token predictions).
        train_metrics: examples per second -> extra logged train figures
            (pretraining's MFU).
        keep_best: keep the model of the best evaluation in output_dir/best
            (fine-tuning); without `evaluate` the last model is kept there.
            The returned "eval/NAME" metrics are then the best ones, else the last.
        best_metric: the metric that picks the best model (higher is better);
            default: the first one `evaluate` returns.
    """

    initialise: Callable[[keras.Model], None] | None = None
    prepare: Callable[[], None] | None = None
    evaluate: Callable[[TrainStep], dict[str, float]] | None = None
    sample_text: Callable[[keras.Model], dict[str, str]] | None = None
    train_metrics: Callable[[float], dict[str, float]] | None = None
    keep_best: bool = False
    best_metric: str | None = None


def save_checkpoint(manager: tf.train.CheckpointManager, step: int) -> None:
    """Saves checkpoint `step`; a failed write (disk full, quota) is an OSError naming it.

    TensorFlow writes into a temporary folder and records the checkpoint only
    once it is complete, so the previous checkpoint stays the latest; the
    partial files are removed.
    """
    previous = manager.latest_checkpoint
    try:
        manager.save(checkpoint_number=step)
    except tf.errors.OpError as e:
        shutil.rmtree(os.path.join(manager.directory, f"ckpt-{step}_temp"), ignore_errors=True)
        reason = e.message.splitlines()[0].rsplit(";", 1)[-1].strip()
        raise OSError(f"{manager.directory}/ckpt-{step}: could not write the checkpoint ({reason}); "
                      f"the last complete one is {previous or 'none'}") from None


class NonFiniteGuard:
    """Reads the steps' `nonfinite` flags at each host sync (log or save), not every step.

    Under dynamic loss scaling (mixed_float16) the optimizer itself skips a step
    whose gradients overflow and lowers the scale: such steps are counted and
    logged. Otherwise a non-finite loss or gradient stops the run, naming the
    first bad step and the last good checkpoint; the caller checks before every
    save, so no checkpoint of non-finite weights is written.
    """

    def __init__(self, loss_scaled: bool):
        self.loss_scaled = loss_scaled
        self.skipped = 0
        self._pending: list[tuple[int, tf.Tensor]] = []

    def add(self, step: int, sums: dict[str, tf.Tensor]) -> None:
        self._pending.append((step, sums["nonfinite"]))

    def check(self, last_checkpoint: str | None) -> None:
        bad = [step for step, flag in self._pending if float(flag)]
        self._pending = []
        if not bad:
            return
        if self.loss_scaled:
            self.skipped += len(bad)
            logging.warning("skipped %d step(s) with non-finite gradients (first: step %d; %d in this "
                            "run); the loss scale was lowered", len(bad), bad[0], self.skipped)
            return
        raise FloatingPointError(f"non-finite loss or gradients at step {bad[0]}; stopping without "
                                 f"saving. Last good checkpoint: {last_checkpoint or 'none'}")


class _Summaries:
    """TensorBoard writers for train and eval (the chief writes; other workers do not)."""

    def __init__(self, output_dir: str, enabled: bool):
        self.enabled = enabled
        if enabled:
            self.train = tf.summary.create_file_writer(os.path.join(output_dir, "train"))
            self.eval = tf.summary.create_file_writer(os.path.join(output_dir, "eval"))

    def scalars(self, writer_name: str, values: dict[str, float], step: int) -> None:
        if not self.enabled:
            return
        writer = getattr(self, writer_name)
        with writer.as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(name, value)
        writer.flush()

    def text(self, name: str, value: str, step: int) -> None:
        if self.enabled:
            with self.eval.as_default(step=step):
                tf.summary.text(name, value)
            self.eval.flush()

    def hparams(self, values: dict) -> None:
        if not self.enabled:
            return
        from tensorboard.plugins.hparams import api as hp

        clean = {k: (v if isinstance(v, (bool, int, float, str)) else str(v))
                 for k, v in values.items()}
        with self.train.as_default():
            hp.hparams(clean)
        self.train.flush()


def _resume(state: dict, iterator, output_dir: str, worker: int, num_workers: int, keep: int,
            data_fingerprint: str | None) -> tuple[tf.train.CheckpointManager, str | None]:
    """The checkpoint manager of this worker, after restoring the chief's latest checkpoint if any.

    With a `data_fingerprint`, the input position is restored only for the same
    input; otherwise (a new phase or new files) weights, optimizer and step only.
    """
    directory = os.path.join(output_dir, "checkpoints")
    extra = {"iterator": iterator}
    if data_fingerprint is not None:
        # The input position only means something for the same pipeline: same files and
        # shapes (the caller's fingerprint) and the same sharding over workers. The
        # fingerprint lives in the checkpoint itself, so every worker reads the one its
        # checkpoint was written with (a side file would race with the chief rewriting it).
        extra["data_fingerprint"] = tf.Variable(f"{data_fingerprint}/workers={num_workers}", trainable=False)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(**state, **extra),
        # Every worker writes; only the chief's files are kept.
        directory if worker == 0 else os.path.join(output_dir, f".worker_{worker}_checkpoints"),
        max_to_keep=keep, step_counter=state["step"])
    latest = tf.train.latest_checkpoint(directory)
    if not latest:
        return manager, None
    if data_fingerprint is None:
        manager.checkpoint.restore(latest).assert_existing_objects_matched()
    else:
        reader = tf.train.load_checkpoint(latest)
        key = "data_fingerprint/.ATTRIBUTES/VARIABLE_VALUE"
        if reader.has_tensor(key) and reader.get_tensor(key) == extra["data_fingerprint"].numpy():
            manager.checkpoint.restore(latest).assert_existing_objects_matched()
        else:
            tf.train.Checkpoint(**state).restore(latest).expect_partial()
            logging.info("input changed since %s: the data position starts afresh", latest)
    logging.info("resuming from checkpoint %s at step %d", latest, int(state["step"].numpy()))
    return manager, latest


def train(build_model: Callable[[], keras.Model], task: tasks.Task, optimizer_config: OptimizerConfig,
          config: TrainingConfig, strategy: tf.distribute.Strategy, train_dataset_fn: DatasetFn,
          schedule: Schedule, hooks: Hooks = Hooks(), *, data_fingerprint: str | None = None,
          vocab_file: str | None = None, task_info: dict | None = None,
          hparams: dict | None = None) -> dict[str, float]:
    """Trains a model on a task to `schedule.total_steps`; resumes from output_dir when it can.

    Writes checkpoints (model, optimizer, step, dropout streams, input position)
    under `output_dir/checkpoints`, TensorBoard events under `output_dir/train`
    and `output_dir/eval`, and at the end the model directory `output_dir/model`
    (bert_config.json, vocab.txt, bert_model.ckpt, task.json with `task_info`).

    Args:
        build_model: builds the model (called under the strategy's scope and the
            mixed-precision policy); it must have `.config`.
        task: its inputs, loss and metric sums.
        optimizer_config: the optimizer and its schedule.
        config: how to run.
        strategy: a tf.distribute strategy.
        train_dataset_fn: the training batches (see DatasetFn).
        schedule: when to stop, log, evaluate and save.
        hooks: what this kind of training adds.
        data_fingerprint: identifies the input stream; when given, a checkpoint
            of another stream restores all but the input position.
        vocab_file: copied into the saved model directories.
        task_info: written as task.json beside the saved model.
        hparams: written as the TensorBoard hparams of the run.

    Returns:
        The last train metrics ("train/NAME") and the last (or, with
        `hooks.keep_best`, the best) eval metrics ("eval/NAME").
    """
    replicas = strategy.num_replicas_in_sync
    check_batch_sizes(config.train_batch_size, config.eval_batch_size, replicas,
                      config.gradient_accumulation_steps)
    num_workers, worker = distribute.worker_info(strategy)
    chief = worker == 0
    logging.info("%s: %d replica(s) on %d worker(s); this is worker %d", type(strategy).__name__,
                 replicas, num_workers, worker)
    os.makedirs(config.output_dir, exist_ok=True)

    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)
    model, optimizer, global_step = build_for_training(build_model, optimizer_config,
                                                       config.mixed_precision, strategy)
    context = tf.distribute.InputContext(num_workers, worker, num_workers)
    iterator = iter(train_dataset_fn(config.train_batch_size, context))
    manager, latest = _resume(training_state(model, optimizer, global_step), iterator, config.output_dir,
                              worker, num_workers, config.keep_checkpoint_max, data_fingerprint)
    if not latest and hooks.initialise is not None:
        hooks.initialise(model)
    if hooks.prepare is not None:
        hooks.prepare()
    best_file = os.path.join(config.output_dir, BEST_RESULTS)
    best = None
    if hooks.keep_best and latest and os.path.exists(best_file):
        with open(best_file) as f:
            best = json.load(f)

    steps = TrainStep(model, optimizer, strategy, task, train_batch_size=config.train_batch_size,
                      eval_batch_size=config.eval_batch_size,
                      gradient_accumulation_steps=config.gradient_accumulation_steps,
                      jit_compile=config.jit_compile, num_workers=num_workers,
                      clip_norm=optimizer_config.clip_norm)
    summaries = _Summaries(config.output_dir, chief)
    if hparams:
        summaries.hparams(hparams)

    def save_model(name: str) -> None:
        checkpoints.save_model_dir(model, os.path.join(config.output_dir, name), vocab_file, task_info)

    step = int(global_step.numpy())
    total = schedule.total_steps
    guard = NonFiniteGuard(steps.loss_scaled)
    results: dict[str, float] = {f"eval/{k}": v for k, v in (best or {}).items()}
    window: dict[str, tf.Tensor] = {}
    window_start, window_steps, run_start, start_step = time.perf_counter(), 0, time.perf_counter(), step
    while step < total:
        sums = steps.train(iterator)
        global_step.assign_add(1)
        step += 1
        window = {k: window[k] + v if k in window else v for k, v in sums.items()}
        window_steps += 1
        guard.add(step, sums)
        if schedule.logs_at(step):
            guard.check(manager.latest_checkpoint)
            totals = {k: float(v) for k, v in window.items()}
            examples_per_second = window_steps * config.train_batch_size / (time.perf_counter() - window_start)
            logged = task.summarize(totals)
            logged.update(learning_rate=steps.learning_rate(), grad_norm=totals["grad_norm"] / window_steps,
                          examples_per_second=examples_per_second)
            if hooks.train_metrics is not None:
                logged.update(hooks.train_metrics(examples_per_second))
            summaries.scalars("train", logged, step)
            results.update({f"train/{k}": v for k, v in logged.items()})
            rate = (step - start_step) / (time.perf_counter() - run_start)
            epoch = f" epoch {step / schedule.epoch_steps:.2f}" if schedule.epoch_steps else ""
            figures = " ".join(f"{k}={v:.4g}" for k, v in logged.items()
                               if k not in ("learning_rate", "examples_per_second"))
            logging.info("step %d/%d%s %s lr=%.3g %.1f examples/s eta %s", step, total, epoch, figures,
                         logged["learning_rate"], examples_per_second,
                         metrics_lib.format_duration((total - step) / max(rate, 1e-9)))
            window, window_steps, window_start = {}, 0, time.perf_counter()
        if hooks.evaluate is not None and schedule.evaluates_at(step):
            eval_start = time.perf_counter()
            metrics = hooks.evaluate(steps)
            if hooks.sample_text is not None:
                for name, text in hooks.sample_text(model).items():
                    summaries.text(name, text, step)
            # What the evaluation cost, beside its figures (bench/demo_time_to_quality.py leaves it out).
            summaries.scalars("eval", {**metrics, "seconds": time.perf_counter() - eval_start}, step)
            logging.info("eval step %d: %s", step, " ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items())))
            if not hooks.keep_best:
                results.update({f"eval/{k}": v for k, v in metrics.items()})
            else:
                key = hooks.best_metric or next(iter(metrics))
                if chief and (best is None or metrics[key] > best[key]):
                    best = metrics
                    save_model("best")
                    write_json(best_file, best)
                    results.update({f"eval/{k}": v for k, v in best.items()})
        if schedule.saves_at(step):
            guard.check(manager.latest_checkpoint)
            save_checkpoint(manager, step)
            logging.info("saved checkpoint %s", manager.latest_checkpoint)
    if chief:
        save_model("model")
        if hooks.keep_best and hooks.evaluate is None:
            save_model("best")
    return results
