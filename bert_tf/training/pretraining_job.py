"""One pretraining job end to end: corpus -> vocab -> TFRecords -> `pretrain`.

`run` is what `run_pretraining.py` calls. Given TFRecords (from
create_pretraining_data.py) it trains on them; given plain text (files or an
embedded corpus) it first learns a vocab when none exists, holds out a few
documents for evaluation and writes the records under `output_dir/data`, each
step skipped when its output is already there (so a rerun resumes).
`pretrain` trains a BertPretrainer on masked LM and next-sentence prediction
through the loop fine-tuning uses too (bert_tf.training.loop).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Sequence

import tensorflow as tf
from absl import logging

from bert_tf import checkpoints, configs
from bert_tf.configs import BertConfig
from bert_tf.data import corpora, vocab_builder
from bert_tf.data.masking import MaskedLmMasker
from bert_tf.data.pretraining.dataset import pretraining_dataset
from bert_tf.data.pretraining.documents import expand_input_patterns, read_documents
from bert_tf.data.pretraining.writer import PretrainingDataOptions, create_pretraining_data
from bert_tf.data.tokenization import BertTokenizer, load_vocab, special_token_ids
from bert_tf.io import write_text_atomically
from bert_tf.modeling.pretrainer import BertPretrainer
from bert_tf.training import distribute, loop, tasks
from bert_tf.training import metrics as metrics_lib
from bert_tf.training.optimization import OptimizerConfig
from bert_tf.training.output_lock import lock_output_dir
from bert_tf.training.step import TrainStep

EMBEDDED_CORPORA = {
    "peoples_daily": lambda: corpora.people_daily_corpus(),
    "peoples_daily_segmented": lambda: corpora.people_daily_corpus(segmented=True),
    "product_reviews": corpora.product_reviews_corpus,
    "tweets": corpora.tweets_corpus,
}


@dataclasses.dataclass(frozen=True)
class PretrainingConfig(loop.TrainingConfig):
    """How to pretrain (the model and optimizer have their own configs).

    The run stops at `stop_step` (default: the optimizer's num_train_steps);
    two-phase pretraining stops phase 1 early and phase 2 resumes from its
    checkpoint.
    """

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    stop_step: int | None = None
    save_checkpoints_steps: int = 1000
    eval_every_steps: int = 1000
    eval_batches: int = 20
    recompute_activations: bool = False  # tf.recompute_grad per Transformer block
    peak_flops: float | None = None
    data_fingerprint: str = ""  # data_fingerprint() of the training input; resume needs the same

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_predictions_per_seq > self.max_seq_length:
            raise ValueError(f"--max_predictions_per_seq={self.max_predictions_per_seq} exceeds "
                             f"--max_seq_length={self.max_seq_length}")


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


def masked_predictions_text(model: BertPretrainer, batch: dict, vocab: Sequence[str], count: int = 3) -> str:
    """Markdown table of a few masked sequences of `batch` with the model's top predictions."""
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


def pretrain(model_config: BertConfig, optimizer_config: OptimizerConfig, config: PretrainingConfig,
             strategy: tf.distribute.Strategy, train_dataset_fn: loop.DatasetFn,
             eval_dataset_fn: loop.DatasetFn | None = None, vocab: Sequence[str] | None = None,
             vocab_file: str | None = None, hparams: dict | None = None) -> dict[str, float]:
    """Pretrains a BertPretrainer with MLM + NSP; resumes from output_dir when it can.

    The shared loop (`loop.train`) writes checkpoints, summaries and at the end
    the model directory `output_dir/model` ready for fine-tuning. Added here:
    evaluation on up to `eval_batches` held-out batches with the unigram
    entropy of their masked tokens as the baseline, the masked predictions as
    text (given `vocab`) and the model FLOPs utilisation of training.

    Returns:
        The last train and eval metrics, keyed "train/NAME" and "eval/NAME".
    """
    replicas = strategy.num_replicas_in_sync
    eval_batches: list[dict[str, tf.Tensor]] = []
    unigram = 0.0

    def read_eval_batches() -> None:
        nonlocal unigram
        # Every worker reads the same, unsharded eval batches: each eval step is a
        # collective that all workers must join, so they need equal batch counts.
        # The all-reduced sums then count every example once per worker, which
        # leaves the ratios (the metrics) unchanged.
        eval_size = config.eval_batch_size // distribute.worker_info(strategy)[0]
        eval_batches.extend(eval_dataset_fn(eval_size, tf.distribute.InputContext())
                            .rebatch(eval_size, drop_remainder=True).take(config.eval_batches))
        if not eval_batches:
            raise ValueError(f"the eval data holds fewer than eval_batch_size={config.eval_batch_size} examples")
        unigram = metrics_lib.unigram_entropy(metrics_lib.masked_token_counts(
            {k: b[k].numpy() for k in ("masked_lm_ids", "masked_lm_weights")} for b in eval_batches))
        logging.info("unigram entropy of the held-out masked tokens: %.4f nats", unigram)

    def evaluate(step: TrainStep) -> dict[str, float]:
        totals: dict[str, float] = {}
        for batch in eval_batches:
            for k, v in step.evaluate(batch).items():
                totals[k] = totals.get(k, 0.0) + float(v)
        return {**step.task.summarize(totals), "unigram_entropy": unigram}

    def sample_text(model: BertPretrainer) -> dict[str, str]:
        return {"masked_predictions": masked_predictions_text(model, eval_batches[0], vocab)}

    def initialise(model: BertPretrainer) -> None:
        checkpoints.load_weights(model, config.init_checkpoint)
        logging.info("initialised weights from %s", config.init_checkpoint)

    flops_per_sequence = metrics_lib.pretraining_flops_per_sequence(
        model_config, config.max_seq_length, config.max_predictions_per_seq)
    peak = config.peak_flops or metrics_lib.measure_matmul_peak(
        tf.bfloat16 if config.mixed_precision == "mixed_bfloat16" else
        tf.float16 if config.mixed_precision == "mixed_float16" else tf.float32)
    held_out = eval_dataset_fn is not None
    hooks = loop.Hooks(
        initialise=initialise if config.init_checkpoint else None,
        prepare=read_eval_batches if held_out else None,
        evaluate=evaluate if held_out else None,
        sample_text=sample_text if vocab is not None and held_out else None,
        train_metrics=lambda sequences_per_second: {
            "mfu": flops_per_sequence * sequences_per_second / (peak * max(1, replicas))})
    schedule = loop.Schedule(total_steps=config.stop_step or optimizer_config.num_train_steps,
                             log_every=config.log_steps, eval_every=config.eval_every_steps,
                             save_every=config.save_checkpoints_steps)
    return loop.train(lambda: BertPretrainer(model_config, config.recompute_activations),
                      tasks.PretrainingTask(), optimizer_config, config, strategy, train_dataset_fn,
                      schedule, hooks, data_fingerprint=config.data_fingerprint, vocab_file=vocab_file,
                      hparams=hparams)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where pretraining examples come from and how they are made.

    Exactly one of `input_files` (TFRecord globs), `input_text_files` (plain
    text globs) and `text_corpus` (an embedded corpus name) is set.
    """

    input_files: tuple[str, ...] = ()
    eval_input_files: tuple[str, ...] = ()
    input_text_files: tuple[str, ...] = ()
    text_corpus: str | None = None
    vocab_file: str | None = None
    vocab_size: int = 8000
    do_lower_case: bool = True
    allow_case_mismatch: bool = False
    dynamic_masking: bool = False
    masked_lm_prob: float = 0.15
    dupe_factor: int = 5
    short_seq_prob: float = 0.1
    do_whole_word_mask: bool = False
    word_boundaries: str = "wordpiece"
    original_rng: bool = False
    balanced_nsp: bool = False
    skip_corrupt_records: bool = False
    eval_documents: int = 200
    seed: int = 12345

    def __post_init__(self) -> None:
        given = [bool(self.input_files), bool(self.input_text_files), bool(self.text_corpus)]
        if sum(given) != 1:
            raise ValueError("give exactly one of --input_file, --input_text_file and --text_corpus")
        if self.text_corpus and self.text_corpus not in EMBEDDED_CORPORA:
            raise ValueError(f"--text_corpus={self.text_corpus}: not one of {', '.join(EMBEDDED_CORPORA)}")
        if self.input_files and not self.vocab_file:
            raise ValueError("--vocab_file is required with --input_file")


def _split_documents(text_files: list[str], directory: str, eval_documents: int) -> tuple[str, str]:
    """Writes train.txt and eval.txt, holding out every n-th document for eval."""
    train_path, eval_path = os.path.join(directory, "train.txt"), os.path.join(directory, "eval.txt")
    if not (os.path.exists(train_path) and os.path.exists(eval_path)):
        documents = read_documents(text_files)
        if len(documents) < 2:
            raise ValueError(f"{', '.join(text_files)}: need at least 2 documents, found {len(documents)}")
        every = max(2, len(documents) // max(1, eval_documents))
        corpora.write_documents(eval_path, documents[::every])
        corpora.write_documents(train_path, [d for i, d in enumerate(documents) if i % every])
    return train_path, eval_path


def prepare_text_data(data: DataConfig, directory: str, max_seq_length: int,
                      max_predictions_per_seq: int) -> tuple[str, list[str], list[str]]:
    """Vocab and train/eval TFRecords from plain text; returns (vocab, train, eval) files."""
    os.makedirs(directory, exist_ok=True)
    if data.text_corpus:
        text_files = [str(EMBEDDED_CORPORA[data.text_corpus]())]
    else:
        text_files = expand_input_patterns(data.input_text_files)
    train_text, eval_text = _split_documents(text_files, directory, data.eval_documents)
    vocab_file = data.vocab_file or os.path.join(directory, "vocab.txt")
    if not os.path.exists(vocab_file):
        logging.info("learning a %d-token WordPiece vocab from %s", data.vocab_size, train_text)
        vocab_builder.build_vocab([train_text], data.vocab_size, data.do_lower_case, vocab_file)
    tokenizer = BertTokenizer(vocab_file, lower_case=data.do_lower_case)
    outputs = []
    for name, text, dupe, static in (("train", train_text, data.dupe_factor, not data.dynamic_masking),
                                     ("eval", eval_text, 1, True)):
        output = os.path.join(directory, f"{name}_{max_seq_length}.tfrecord")
        if not os.path.exists(output):
            stats = create_pretraining_data(PretrainingDataOptions(
                input_files=[text], output_file=output, vocab_file=vocab_file,
                do_lower_case=data.do_lower_case, max_seq_length=max_seq_length,
                max_predictions_per_seq=max_predictions_per_seq, masked_lm_prob=data.masked_lm_prob,
                dupe_factor=dupe, random_seed=data.seed, short_seq_prob=data.short_seq_prob,
                do_whole_word_mask=data.do_whole_word_mask, word_boundaries=data.word_boundaries,
                static_masking=static, original_rng=data.original_rng,
                balanced_nsp=data.balanced_nsp), tokenizer)
            logging.info("%s: %d examples", output, stats.examples)
        outputs.append([output])
    return vocab_file, outputs[0], outputs[1]


def resolve_model_config(bert_config_file: str | None, preset: str | None,
                         vocab: list[str], do_lower_case: bool) -> BertConfig:
    """The model config: a file, or a preset sized to the vocab."""
    if bert_config_file:
        config = BertConfig.from_json_file(bert_config_file)
        if config.vocab_size < len(vocab):
            raise ValueError(f"--bert_config_file={bert_config_file}: vocab_size {config.vocab_size} "
                             f"is smaller than the vocab ({len(vocab)} tokens)")
        return config
    return configs.get_preset(preset or "base_uncased").replace(
        vocab_size=len(vocab), do_lower_case=do_lower_case)


def run(data: DataConfig, model_preset: str | None, bert_config_file: str | None,
        optimizer: OptimizerConfig, training: PretrainingConfig, strategy: tf.distribute.Strategy,
        hparams: dict | None = None) -> dict[str, float]:
    """Prepares the data when given text, then pretrains. Returns the last metrics.

    Raises:
        checkpoints.CaseMismatchError: `data.do_lower_case` contradicts the
            casing `training.init_checkpoint` records and
            `data.allow_case_mismatch` is false.
        OSError: another live run holds the output directory (lock_output_dir).
        ValueError: `training.stop_step` is past `optimizer.num_train_steps`, or
            the data or model do not fit the settings.
    """
    if training.stop_step and training.stop_step > optimizer.num_train_steps:
        raise ValueError(f"--stop_at_step={training.stop_step} exceeds --num_train_steps={optimizer.num_train_steps}")
    checkpoints.resolve_lower_case(data.do_lower_case, training.init_checkpoint,
                                   allow_mismatch=data.allow_case_mismatch)
    with lock_output_dir(training.output_dir, strategy):
        if hparams:  # the driver's flags: output_dir/flags.txt repeats the run
            write_text_atomically(os.path.join(training.output_dir, "flags.txt"), "".join(
                f"--{name}={','.join(map(str, value)) if isinstance(value, list) else value}\n"
                for name, value in hparams.items()))
        seq, predictions = training.max_seq_length, training.max_predictions_per_seq
        if data.input_files:
            vocab_file, train_files = data.vocab_file, list(data.input_files)
            eval_files = list(data.eval_input_files)
        else:
            vocab_file, train_files, eval_files = prepare_text_data(
                data, os.path.join(training.output_dir, "data"), seq, predictions)
        vocab = load_vocab(vocab_file)
        special = special_token_ids(vocab, vocab_file)
        model_config = resolve_model_config(bert_config_file, model_preset, vocab, data.do_lower_case)
        if seq > model_config.max_position_embeddings:
            raise ValueError(f"--max_seq_length={seq} exceeds max_position_embeddings="
                             f"{model_config.max_position_embeddings} of the model")
        masker = None
        if data.dynamic_masking:
            masker = MaskedLmMasker(vocab_size=len(vocab), mask_id=special["[MASK]"],
                                    pad_id=special["[PAD]"],
                                    unmaskable_ids=(special["[CLS]"], special["[SEP]"], special["[PAD]"]),
                                    max_predictions_per_seq=predictions, masked_lm_prob=data.masked_lm_prob)

        def train_dataset_fn(batch_size, context):
            return pretraining_dataset(train_files, batch_size=batch_size, max_seq_length=seq,
                                       max_predictions_per_seq=predictions, is_training=True,
                                       masker=masker, whole_word_mask=data.do_whole_word_mask,
                                       seed=data.seed, input_context=context,
                                       skip_corrupt_records=data.skip_corrupt_records)

        def eval_dataset_fn(batch_size, context):
            return pretraining_dataset(eval_files, batch_size=batch_size, max_seq_length=seq,
                                       max_predictions_per_seq=predictions, is_training=False,
                                       input_context=context, skip_corrupt_records=data.skip_corrupt_records)

        fingerprint = data_fingerprint(
            expand_input_patterns(train_files), max_seq_length=seq,
            max_predictions_per_seq=predictions, train_batch_size=training.train_batch_size,
            dynamic_masking=data.dynamic_masking, masked_lm_prob=data.masked_lm_prob,
            do_whole_word_mask=data.do_whole_word_mask, seed=data.seed,
            skip_corrupt_records=data.skip_corrupt_records)
        training = dataclasses.replace(training, data_fingerprint=fingerprint)
        return pretrain(model_config, optimizer, training, strategy, train_dataset_fn,
                        eval_dataset_fn if eval_files else None, vocab=vocab,
                        vocab_file=vocab_file, hparams=hparams)
