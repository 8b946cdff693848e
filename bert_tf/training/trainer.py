"""The pretraining loop: distributed steps, gradient accumulation, checkpoints, summaries."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from typing import Callable, Sequence

import keras
import tensorflow as tf
from absl import logging

from bert_tf import checkpoints
from bert_tf.configs import BertConfig
from bert_tf.modeling.pretrainer import BertPretrainer
from bert_tf.training import distribute
from bert_tf.training import metrics as metrics_lib
from bert_tf.training import tasks
from bert_tf.training.optimization import OptimizerConfig, create_optimizer

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")

# dataset_fn(global_batch_size, input_context) -> tf.data.Dataset of fixed-shape
# batches with the model's feature names, of this worker's share of the global
# batch (input_context.get_per_replica_batch_size). One input pipeline per
# worker feeds all of its local replicas, so the context counts one "replica"
# per worker; the step slices each replica's rows.
DatasetFn = Callable[[int, tf.distribute.InputContext], tf.data.Dataset]


@dataclasses.dataclass(frozen=True)
class PretrainingConfig:
    """How to run pretraining (the model and optimizer have their own configs).

    `train_batch_size` is the global batch of one optimizer step: per-replica
    micro-batch x replicas x `gradient_accumulation_steps`. The run stops at
    `stop_step` (default: the optimizer's num_train_steps); two-phase
    pretraining stops phase 1 early and phase 2 resumes from its checkpoint.
    """

    output_dir: str
    train_batch_size: int = 32
    eval_batch_size: int = 32
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    gradient_accumulation_steps: int = 1
    stop_step: int | None = None
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_steps: int = 100
    eval_every_steps: int = 1000
    eval_batches: int = 20
    init_checkpoint: str | None = None
    mixed_precision: str = "float32"
    jit_compile: bool = False
    recompute_activations: bool = False  # tf.recompute_grad per Transformer block
    peak_flops: float | None = None
    seed: int = 12345
    deterministic: bool = False  # enable_op_determinism: bitwise-repeatable runs on one machine
    data_fingerprint: str = ""  # data_fingerprint() of the training input; resume needs the same

    def __post_init__(self) -> None:
        if self.mixed_precision not in PRECISIONS:
            raise ValueError(f"mixed_precision must be one of {', '.join(PRECISIONS)}")


def data_fingerprint(files: Sequence[str], **settings) -> str:
    """What identifies a training input stream, wherever its files now live.

    A checkpointed input position only means something for the same stream:
    the same files in the same order and the same settings that shape it
    (sequence length, batch, masking, seed...). Files count by their path
    relative to the folder they share and by their size, not by their absolute
    path, so a run directory moved or copied elsewhere (records written under
    output_dir/data move with it) resumes at its input position.
    """
    files = [os.path.abspath(f) for f in files]
    root = os.path.commonpath([os.path.dirname(f) for f in files])
    named = [(os.path.relpath(f, root), os.path.getsize(f)) for f in files]
    return hashlib.sha256(json.dumps([named, sorted(settings.items())]).encode()).hexdigest()


def check_batch_sizes(train_batch_size: int, eval_batch_size: int, replicas: int,
                      gradient_accumulation_steps: int) -> None:
    """Raises ValueError when a global batch does not split evenly over replicas and micro-batches."""
    if train_batch_size % (replicas * gradient_accumulation_steps):
        raise ValueError(f"train_batch_size {train_batch_size} is not divisible by replicas "
                         f"({replicas}) x gradient_accumulation_steps ({gradient_accumulation_steps})")
    if eval_batch_size % replicas:
        raise ValueError(f"eval_batch_size {eval_batch_size} is not divisible by replicas ({replicas})")


def build_for_training(build_model: Callable[[], keras.Model], optimizer_config: OptimizerConfig,
                       mixed_precision: str, strategy: tf.distribute.Strategy):
    """Builds (model, optimizer, global step) under the strategy's scope and the precision policy.

    The optimizer's slots are built at once, so that a checkpoint restores them.
    """
    previous_policy = keras.config.dtype_policy()
    keras.mixed_precision.set_global_policy(mixed_precision)
    try:
        with strategy.scope():
            model = build_model()
            optimizer = create_optimizer(optimizer_config, mixed_precision,
                                         num_layers=model.config.num_hidden_layers)
            optimizer.build(model.trainable_variables)
            global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
    return model, optimizer, global_step


def training_state(model: keras.Model, optimizer, global_step: tf.Variable) -> dict:
    """What a checkpoint must hold to continue a run exactly (the input position aside).

    Besides weights, optimizer slots (and the loss scale, an optimizer
    variable) and the step: the state of every dropout layer's random stream
    (Keras SeedGenerators), which Keras does not track for tf.train.Checkpoint,
    so that a resumed run draws the dropout masks the uninterrupted run would.
    """
    rng = [generator.state for layer in model._flatten_layers()
           for generator in getattr(layer, "_seed_generators", ())]
    return dict(model=model, optimizer=optimizer, step=global_step, rng=rng)


class TrainStep:
    """The compiled train and eval steps of a model, optimizer and task (benchmarks use it too).

    `train(iterator)` takes one per-worker batch of `train_batch_size // workers`
    rows, gives each replica its rows, runs `gradient_accumulation_steps`
    micro-batches, sums the gradients over micro-batches and replicas, clips them
    by their global norm and applies them once. It returns the step's sums
    (loss terms, weights, metric sums, grad_norm, nonfinite), identical on every
    worker.
    """

    def __init__(self, model: keras.Model, optimizer, strategy, task: tasks.Task, *,
                 train_batch_size: int, eval_batch_size: int, gradient_accumulation_steps: int = 1,
                 jit_compile: bool = False, num_workers: int = 1, clip_norm: float | None = None):
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy
        self.task = task
        task.bind(model)
        self.replicas = strategy.num_replicas_in_sync
        check_batch_sizes(train_batch_size, eval_batch_size, self.replicas, gradient_accumulation_steps)
        self.local_replicas = self.replicas // num_workers
        self.accum = gradient_accumulation_steps
        self.micro_batch = train_batch_size // (self.replicas * self.accum)
        self.eval_batch = eval_batch_size // self.replicas
        self.clip_norm = clip_norm
        self.loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self._forward_backward = tf.function(self._micro_step, jit_compile=jit_compile,
                                             reduce_retracing=True)
        self.train = tf.function(self._train, reduce_retracing=True)
        self.evaluate = tf.function(self._evaluate, reduce_retracing=True)

    def _local_slice(self, batch: dict, size: int) -> dict:
        """This replica's rows of a per-worker batch."""
        ctx = tf.distribute.get_replica_context()
        index = ctx.replica_id_in_sync_group % self.local_replicas
        return {k: v[index * size:(index + 1) * size] for k, v in batch.items()}

    def _micro_step(self, features: dict, weight_totals: dict):
        """Gradients of one micro-batch's share of the global loss, and its sums."""
        with tf.GradientTape() as tape:
            outputs = self.model({k: features[k] for k in self.task.model_inputs}, training=True)
            sums = self.task.sums(features, outputs)
            # Normalised by the totals over all replicas and micro-batches, so the
            # summed gradient equals that of one big batch.
            loss = tf.add_n([tf.math.divide_no_nan(sums[term], weight_totals[weight])
                             for term, weight in self.task.loss_terms.items()])
            scaled = self.optimizer.scale_loss(loss)
        variables = self.model.trainable_variables
        grads = tape.gradient(scaled, variables)
        # Unused variables (the pooler under a conv head) get zeros, so every
        # gradient can be summed and all-reduced alike.
        return [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                for g, v in zip(grads, variables)], sums

    def _replica_train(self, batch: dict):
        ctx = tf.distribute.get_replica_context()
        local = self._local_slice(batch, self.micro_batch * self.accum)
        weights = self.task.weights(local)
        weight_totals = ctx.all_reduce("sum", weights)
        if self.accum == 1:
            grads, sums = self._forward_backward(local, weight_totals)
        else:
            micro = {k: tf.reshape(v, tf.concat([[self.accum, self.micro_batch], tf.shape(v)[1:]], 0))
                     for k, v in local.items()}
            grads = [tf.zeros_like(v) for v in self.model.trainable_variables]
            sums = None
            for i in tf.range(self.accum):
                g, s = self._forward_backward({k: v[i] for k, v in micro.items()}, weight_totals)
                grads = [a + b for a, b in zip(grads, g)]
                sums = s if sums is None else {k: sums[k] + s[k] for k in s}
        grads = ctx.all_reduce("sum", grads)
        sums = ctx.all_reduce("sum", sums)
        sums.update(weight_totals)
        scale = tf.cast(self.optimizer.dynamic_scale, tf.float32) if self.loss_scaled else 1.0
        grad_norm = tf.linalg.global_norm(grads) / scale
        if self.clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, self.clip_norm * scale,
                                              use_norm=grad_norm * scale)
        self.optimizer.apply(grads, self.model.trainable_variables)
        sums["grad_norm"] = grad_norm
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(tf.cast(v, tf.float32)))
                                for v in [grad_norm, *sums.values()]])
        sums["nonfinite"] = 1.0 - tf.cast(finite, tf.float32)
        return sums

    def _train(self, iterator):
        batch = next(iterator)
        sums = self.strategy.run(self._replica_train, args=(batch,))
        return self.strategy.experimental_local_results(sums)[0]

    def _replica_evaluate(self, batch: dict):
        ctx = tf.distribute.get_replica_context()
        local = self._local_slice(batch, self.eval_batch)
        outputs = self.model({k: local[k] for k in self.task.model_inputs}, training=False)
        return ctx.all_reduce("sum", {**self.task.sums(local, outputs), **self.task.weights(local)})

    def _evaluate(self, batch):
        sums = self.strategy.run(self._replica_evaluate, args=(batch,))
        return self.strategy.experimental_local_results(sums)[0]


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


def _masked_examples_text(model: BertPretrainer, batch: dict, vocab: Sequence[str], count: int = 3) -> str:
    """Markdown table of a few masked sequences with the model's top predictions."""
    outputs = model({k: batch[k][:count] for k in tasks.PretrainingTask.model_inputs}, training=False)
    predicted = tf.argmax(outputs["mlm_logits"], -1).numpy()

    def token(i) -> str:  # the model's vocab_size may exceed the vocab file's length
        return vocab[int(i)] if int(i) < len(vocab) else f"<{int(i)}>"

    rows = ["| masked input | position: truth -> prediction |", "|---|---|"]
    for i in range(min(count, len(predicted))):
        ids = batch["input_word_ids"][i].numpy()
        length = int(batch["input_mask"][i].numpy().sum())
        text = " ".join(token(t) for t in ids[:length])
        pairs = [f"{int(p)}: {token(t)} -> {token(q)}"
                 for p, t, q, w in zip(batch["masked_lm_positions"][i].numpy(),
                                       batch["masked_lm_ids"][i].numpy(), predicted[i],
                                       batch["masked_lm_weights"][i].numpy()) if w > 0]
        rows.append(f"| {text} | {'; '.join(pairs)} |")
    return "\n".join(rows)


def run_pretraining(model_config: BertConfig, optimizer_config: OptimizerConfig,
                    config: PretrainingConfig, strategy: tf.distribute.Strategy,
                    train_dataset_fn: DatasetFn, eval_dataset_fn: DatasetFn | None = None,
                    vocab: Sequence[str] | None = None, vocab_file: str | None = None,
                    hparams: dict | None = None) -> dict[str, float]:
    """Pretrains a BertPretrainer with MLM + NSP; resumes from output_dir when it can.

    Writes checkpoints (model, optimizer, step, input position) under
    `output_dir/checkpoints`, TensorBoard events under `output_dir/train` and
    `output_dir/eval`, and at the end the model directory `output_dir/model`
    (bert_config.json, vocab.txt, bert_model.ckpt) ready for fine-tuning.

    Returns:
        The last train and eval metrics, keyed "train/NAME" and "eval/NAME".
    """
    replicas = strategy.num_replicas_in_sync
    check_batch_sizes(config.train_batch_size, config.eval_batch_size, replicas,
                      config.gradient_accumulation_steps)
    num_workers, worker = distribute.worker_info(strategy)
    chief = worker == 0
    logging.info("%s: %d replica(s) on %d worker(s); this is worker %d", type(strategy).__name__,
                 replicas, num_workers, worker)
    stop_step = config.stop_step or optimizer_config.num_train_steps
    os.makedirs(config.output_dir, exist_ok=True)

    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)
    model, optimizer, global_step = build_for_training(
        lambda: BertPretrainer(model_config, config.recompute_activations), optimizer_config, config.mixed_precision, strategy)

    context = tf.distribute.InputContext(num_workers, worker, num_workers)
    train_dataset = train_dataset_fn(config.train_batch_size, context)
    iterator = iter(train_dataset)
    checkpoint_dir = os.path.join(config.output_dir, "checkpoints")
    if not chief:  # every worker writes; only the chief's files are kept
        checkpoint_dir = os.path.join(config.output_dir, f".worker_{worker}_checkpoints")
    # The input position only means something for the same pipeline: same files and
    # shapes (the caller's fingerprint) and the same sharding over workers. The
    # fingerprint lives in the checkpoint itself, so every worker reads the one its
    # checkpoint was written with (a side file would race with the chief rewriting it).
    fingerprint = tf.Variable(f"{config.data_fingerprint}/workers={num_workers}", trainable=False)
    state = training_state(model, optimizer, global_step)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(**state, iterator=iterator, data_fingerprint=fingerprint),
        checkpoint_dir, max_to_keep=config.keep_checkpoint_max, step_counter=global_step)
    latest = tf.train.latest_checkpoint(os.path.join(config.output_dir, "checkpoints"))
    if latest:
        reader = tf.train.load_checkpoint(latest)
        key = "data_fingerprint/.ATTRIBUTES/VARIABLE_VALUE"
        if reader.has_tensor(key) and reader.get_tensor(key) == fingerprint.numpy():
            manager.checkpoint.restore(latest).assert_existing_objects_matched()
        else:  # a new phase or new files: weights, optimizer and step only
            tf.train.Checkpoint(**state).restore(latest).expect_partial()
            logging.info("input changed since %s: the data position starts afresh", latest)
        logging.info("resuming from checkpoint %s at step %d", latest, int(global_step.numpy()))
    elif config.init_checkpoint:
        checkpoints.load_weights(model, config.init_checkpoint)
        logging.info("initialised weights from %s", config.init_checkpoint)

    task = tasks.PretrainingTask()
    steps = TrainStep(model, optimizer, strategy, task, train_batch_size=config.train_batch_size,
                      eval_batch_size=config.eval_batch_size,
                      gradient_accumulation_steps=config.gradient_accumulation_steps,
                      jit_compile=config.jit_compile, num_workers=num_workers,
                      clip_norm=optimizer_config.clip_norm)
    summaries = _Summaries(config.output_dir, chief)
    if hparams:
        summaries.hparams(hparams)
    flops_per_sequence = metrics_lib.pretraining_flops_per_sequence(
        model_config, config.max_seq_length, config.max_predictions_per_seq)
    peak = config.peak_flops or metrics_lib.measure_matmul_peak(
        tf.bfloat16 if config.mixed_precision == "mixed_bfloat16" else
        tf.float16 if config.mixed_precision == "mixed_float16" else tf.float32)

    eval_batches, unigram = [], None
    if eval_dataset_fn is not None:
        # Every worker reads the same, unsharded eval batches: each eval step is a
        # collective that all workers must join, so they need equal batch counts.
        # The all-reduced sums then count every example once per worker, which
        # leaves the ratios (the metrics) unchanged.
        eval_size = config.eval_batch_size // num_workers
        eval_batches = list(eval_dataset_fn(eval_size, tf.distribute.InputContext())
                            .rebatch(eval_size, drop_remainder=True).take(config.eval_batches))
        if not eval_batches:
            raise ValueError(f"the eval data holds fewer than eval_batch_size={config.eval_batch_size} examples")
        unigram = metrics_lib.unigram_entropy(metrics_lib.masked_token_counts(
            {k: b[k].numpy() for k in ("masked_lm_ids", "masked_lm_weights")} for b in eval_batches))
        logging.info("unigram entropy of the held-out masked tokens: %.4f nats", unigram)

    def evaluate(step: int) -> dict[str, float]:
        totals: dict[str, float] = {}
        for batch in eval_batches:
            for k, v in steps.evaluate(batch).items():
                totals[k] = totals.get(k, 0.0) + float(v)
        results = task.summarize(totals)
        if unigram is not None:
            results["unigram_entropy"] = unigram
        summaries.scalars("eval", results, step)
        if vocab is not None and eval_batches:
            summaries.text("masked_predictions", _masked_examples_text(model, eval_batches[0], vocab), step)
        logging.info("eval step %d: %s", step,
                     " ".join(f"{k}={v:.4f}" for k, v in sorted(results.items())))
        return results

    def save(step: int) -> None:
        save_checkpoint(manager, step)
        logging.info("saved checkpoint %s", manager.latest_checkpoint)

    step = int(global_step.numpy())
    guard = NonFiniteGuard(steps.loss_scaled)
    results: dict[str, float] = {}
    window: dict[str, tf.Tensor] = {}
    window_start, window_steps, run_start, start_step = time.perf_counter(), 0, time.perf_counter(), step
    while step < stop_step:
        sums = steps.train(iterator)
        global_step.assign_add(1)
        step += 1
        window = {k: window[k] + v if k in window else v for k, v in sums.items()}
        window_steps += 1
        guard.add(step, sums)
        if step % config.log_steps == 0 or step == stop_step:
            guard.check(manager.latest_checkpoint)
            totals = {k: float(v) for k, v in window.items()}
            elapsed = time.perf_counter() - window_start
            sequences_per_second = window_steps * config.train_batch_size / elapsed
            logged = task.summarize(totals)
            logged.update(
                learning_rate=float(_learning_rate(optimizer)),
                grad_norm=totals["grad_norm"] / window_steps,
                examples_per_second=sequences_per_second,
                mfu=flops_per_sequence * sequences_per_second / (peak * max(1, replicas)),
            )
            summaries.scalars("train", logged, step)
            results.update({f"train/{k}": v for k, v in logged.items()})
            rate = (step - start_step) / (time.perf_counter() - run_start)
            logging.info("step %d/%d loss=%.4f mlm_acc=%.3f nsp_acc=%.3f lr=%.3g %.1f seq/s "
                         "mfu=%.1f%% eta %s", step, stop_step, logged["loss"],
                         logged["mlm_accuracy"], logged["nsp_accuracy"], logged["learning_rate"],
                         sequences_per_second, 100 * logged["mfu"],
                         metrics_lib.format_duration((stop_step - step) / max(rate, 1e-9)))
            window, window_steps, window_start = {}, 0, time.perf_counter()
        if eval_batches and (step % config.eval_every_steps == 0 or step == stop_step):
            results.update({f"eval/{k}": v for k, v in evaluate(step).items()})
        if step % config.save_checkpoints_steps == 0 or step == stop_step:
            guard.check(manager.latest_checkpoint)
            save(step)
    if chief:
        checkpoints.save_model_dir(model, os.path.join(config.output_dir, "model"), vocab_file)
    return results


def _learning_rate(optimizer) -> tf.Tensor:
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return inner.learning_rate
