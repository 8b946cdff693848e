"""Fine-tuning: labelled features by epochs through the training loop pretraining uses too.

Shared with pretraining (bert_tf.training.loop and .step): the step (replicas,
accumulation, clipping, mixed precision), checkpoints with the input position,
the non-finite guard, TensorBoard summaries. Added here: epochs, dynamic
padding, initialising the encoder from a pretrained model, evaluation with the
task's own metric after every epoch, and keeping the best model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import checkpoints
from bert_tf.configs import INPUT_NAMES, BertConfig
from bert_tf.data.packing import trim_padding
from bert_tf.data.tokenization import BertTokenizer
from bert_tf.training import loop, tasks
from bert_tf.training.optimization import OptimizerConfig

Features = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class FinetuningConfig(loop.TrainingConfig):
    """How to fine-tune: the shared training settings and the epochs, warmup and model kept."""

    log_steps: int = 50
    keep_checkpoint_max: int = 2
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    length_bucketing: bool = False  # batches of rows of similar length (train_dataset)
    best_metric: str | None = None  # the dev metric that picks the kept model (higher is better)
    reinit_top_layers: int = 0  # top encoder blocks (and the pooler) not taken from init_checkpoint

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_train_epochs <= 0:
            raise ValueError(f"num_train_epochs must be positive, got {self.num_train_epochs}")
        if self.reinit_top_layers < 0:
            raise ValueError(f"reinit_top_layers must be >= 0, got {self.reinit_top_layers}")


@dataclasses.dataclass(frozen=True)
class JobOptions:
    """What a fine-tuning job (classifier, NER, SQuAD) is asked to do, and the model it starts from.

    Training starts from the pretrained model `init_checkpoint` names
    (`bert_config_file` overrides its config); evaluating or predicting alone
    loads the fine-tuned model directory it names. The vocab defaults to the
    one beside the checkpoint and the casing to the model's. The job writes to
    its FinetuningConfig's output_dir.
    """

    init_checkpoint: str | None
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    max_seq_length: int = 128
    do_lower_case: bool | None = None
    vocab_file: str | None = None
    bert_config_file: str | None = None
    allow_case_mismatch: bool = False

    def __post_init__(self) -> None:
        if not self.init_checkpoint:
            raise ValueError("--init_checkpoint is required: a model directory, TF1 checkpoint or HF directory")
        if not (self.do_train or self.do_eval or self.do_predict):
            raise ValueError("at least one of --do_train, --do_eval and --do_predict must be true")


@dataclasses.dataclass(frozen=True)
class StartingPoint:
    """What a fine-tuning job starts from (`starting_point`)."""

    model_config: BertConfig  # do_lower_case set to the casing the job uses
    tokenizer: BertTokenizer
    vocab_file: str
    trained: keras.Model | None  # the fine-tuned model when the job only evaluates or predicts


def starting_point(job: JobOptions) -> StartingPoint:
    """The model config, vocab and tokenizer of a fine-tuning job (and its fine-tuned model, if it does not train).

    Raises:
        ValueError: no vocab, or a sequence longer than the model's positions.
        checkpoints.CaseMismatchError: `job.do_lower_case` contradicts the
            checkpoint's casing and `job.allow_case_mismatch` is false.
    """
    files = checkpoints.locate(job.init_checkpoint)
    trained = None if job.do_train else checkpoints.load_task_model(job.init_checkpoint)
    if trained is not None:
        model_config = trained.config
    elif job.bert_config_file:
        model_config = BertConfig.from_json_file(job.bert_config_file)
    else:
        model_config = checkpoints.read_config(files)
    vocab_file = job.vocab_file or files.vocab_file
    if not vocab_file:
        raise ValueError(f"--vocab_file is required: {job.init_checkpoint} has no vocab.txt")
    if job.max_seq_length > model_config.max_position_embeddings:
        raise ValueError(f"--max_seq_length={job.max_seq_length} exceeds max_position_embeddings="
                         f"{model_config.max_position_embeddings} of {job.init_checkpoint}")
    lower = checkpoints.resolve_lower_case(job.do_lower_case, job.init_checkpoint,
                                           default=model_config.do_lower_case,
                                           allow_mismatch=job.allow_case_mismatch)
    return StartingPoint(model_config.replace(do_lower_case=lower), BertTokenizer(vocab_file, lower_case=lower),
                         vocab_file, trained)


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
            inputs: tuple[str, ...] = INPUT_NAMES) -> dict[str, np.ndarray]:
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
    """Fine-tunes a task model by epochs through the shared loop; resumes from output_dir when it can.

    Evaluates after every epoch and keeps the model of the best evaluation in
    `output_dir/best` (the last model when there is no `evaluate`), its metrics
    in `output_dir/best_eval_results.json`; the last model goes to `output_dir/model`.

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
    examples = len(train_features["input_word_ids"])
    steps_per_epoch = max(1, examples // config.train_batch_size)
    total_steps = max(1, math.ceil(steps_per_epoch * config.num_train_epochs))
    if not optimizer_config.num_train_steps:
        optimizer_config = dataclasses.replace(
            optimizer_config, num_train_steps=total_steps,
            num_warmup_steps=int(total_steps * config.warmup_proportion))
    logging.info("%d training examples, %d steps per epoch, %d steps", examples, steps_per_epoch, total_steps)

    def initialise(model: keras.Model) -> None:
        initialise_encoder(model, config.init_checkpoint, config.reinit_top_layers)
        logging.info("initialised the encoder from %s%s", config.init_checkpoint,
                     f" but its top {config.reinit_top_layers} layer(s) and pooler"
                     if config.reinit_top_layers else "")

    hooks = loop.Hooks(initialise=initialise if config.init_checkpoint else None,
                       evaluate=None if evaluate is None else lambda step: evaluate(step.model),
                       keep_best=True, best_metric=config.best_metric)
    schedule = loop.Schedule(total_steps=total_steps, log_every=config.log_steps, eval_every=steps_per_epoch,
                             save_every=steps_per_epoch, epoch_steps=steps_per_epoch)
    return loop.train(build_model, task, optimizer_config, config, strategy,
                      lambda batch_size, context: train_dataset(train_features, batch_size, config.seed, context,
                                                                config.length_bucketing),
                      schedule, hooks, vocab_file=vocab_file, task_info=task_info)
