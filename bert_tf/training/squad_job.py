"""Extractive question answering (SQuAD v1.1 / v2.0) end to end: what run_squad.py calls."""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf
from absl import logging

from bert_tf import checkpoints
from bert_tf.data.squad import features, metrics, predictions as squad_predictions, reading
from bert_tf.modeling.task_models import BertSpanLabeler
from bert_tf.training import finetuning, tasks
from bert_tf.io import write_json
from bert_tf.training.finetuning import FinetuningConfig
from bert_tf.training.optimization import OptimizerConfig
from bert_tf.training.output_lock import lock_output_dir


@dataclasses.dataclass(frozen=True)
class SquadConfig:
    """The original run_squad.py data settings."""

    train_file: str | None = None
    predict_file: str | None = None
    version_2_with_negative: bool = False
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    null_score_diff_threshold: float = 0.0
    skip_bad_rows: bool = False


def _read(path: str, is_training: bool, tokenizer, squad_config: SquadConfig, max_seq_length: int):
    """(examples, skipped questions, feature arrays, window features) of one SQuAD file."""
    examples, skipped = reading.read_squad_examples(
        path, is_training=is_training, version_2_with_negative=squad_config.version_2_with_negative,
        skip_bad_rows=squad_config.skip_bad_rows)
    arrays, windows = features.convert_examples_to_features(
        examples, tokenizer, max_seq_length=max_seq_length, doc_stride=squad_config.doc_stride,
        max_query_length=squad_config.max_query_length, is_training=is_training)
    return examples, skipped, arrays, windows


def _predict(model, tokenizer, squad_config: SquadConfig, max_seq_length: int, batch_size: int,
             output_dir: str | None = None) -> dict[str, float]:
    """Decodes answers for predict_file, writes the prediction files, returns EM/F1."""
    examples, skipped, arrays, windows = _read(squad_config.predict_file, False, tokenizer,
                                               squad_config, max_seq_length)
    logits = finetuning.predict(model, arrays, batch_size, seq_outputs=("start_logits", "end_logits"))
    predictions = squad_predictions.decode_predictions(
        windows, logits["start_logits"], logits["end_logits"], n_best_size=squad_config.n_best_size,
        max_answer_length=squad_config.max_answer_length,
        version_2_with_negative=squad_config.version_2_with_negative,
        null_score_diff_threshold=squad_config.null_score_diff_threshold)
    if output_dir is not None:
        for path in squad_predictions.write_predictions(output_dir, predictions):
            logging.info("wrote %s", path)
    gold = reading.gold_answers(examples)
    if squad_config.version_2_with_negative:
        scores = metrics.squad_v2_metrics(gold, predictions.predictions, na_probs=predictions.null_odds)
    else:
        scores = metrics.squad_v1_metrics(gold, predictions.predictions)
    return {**scores, "skipped_questions": float(skipped)}


def run(squad_config: SquadConfig, job: finetuning.JobOptions, optimizer: OptimizerConfig,
        config: FinetuningConfig, strategy: tf.distribute.Strategy) -> dict:
    """Trains on train_file and/or predicts predict_file; returns the figures written to JSON.

    Predicting scores the predictions against the answers predict_file holds;
    `do_eval` asks for the same.

    Raises:
        ValueError: bad data or settings (the message names the file or flag).
        checkpoints.CaseMismatchError: see `finetuning.starting_point`.
        OSError: another live run holds the output directory (lock_output_dir).
    """
    start = finetuning.starting_point(job)
    model_config, tokenizer, trained = start.model_config, start.tokenizer, start.trained
    output_dir, max_seq_length = config.output_dir, job.max_seq_length
    predict = job.do_predict or job.do_eval
    if job.do_train and not squad_config.train_file:
        raise ValueError("--do_train needs --train_file")
    if predict and not squad_config.predict_file:
        raise ValueError("--do_predict needs --predict_file")
    report: dict = {}
    with lock_output_dir(output_dir, strategy):
        if job.do_train:
            examples, skipped, arrays, _ = _read(squad_config.train_file, True, tokenizer,
                                                 squad_config, max_seq_length)
            logging.info("%d questions (%d skipped) -> %d windows", len(examples), skipped,
                         len(arrays["input_word_ids"]))
            evaluate = None
            if squad_config.predict_file:
                evaluate = lambda model: {k: v for k, v in _predict(  # noqa: E731
                    model, tokenizer, squad_config, max_seq_length, config.eval_batch_size).items()
                    if k in ("exact_match", "exact", "f1")}
            task_info = {"task": "squad", "max_seq_length": max_seq_length,
                         "version_2_with_negative": squad_config.version_2_with_negative,
                         "max_query_length": squad_config.max_query_length,
                         "doc_stride": squad_config.doc_stride, "n_best_size": squad_config.n_best_size,
                         "max_answer_length": squad_config.max_answer_length,
                         "null_score_diff_threshold": squad_config.null_score_diff_threshold,
                         "do_lower_case": tokenizer.lower_case}
            report["train"] = finetuning.run_finetuning(
                lambda: BertSpanLabeler(model_config), tasks.SpanTask(), optimizer,
                dataclasses.replace(config, init_checkpoint=job.init_checkpoint,
                                    best_metric="f1" if evaluate else None),
                strategy, arrays, evaluate, start.vocab_file, task_info)
            trained = checkpoints.load_task_model(os.path.join(output_dir, "best"))
        if predict:
            report["eval"] = _predict(trained, tokenizer, squad_config, max_seq_length,
                                      config.eval_batch_size, output_dir)
            write_json(os.path.join(output_dir, "eval_results.json"), report["eval"])
        return report
