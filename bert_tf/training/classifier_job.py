"""Sentence (pair) classification and regression end to end: what run_classifier.py calls.

Data is a GLUE task folder, the user's own CSV/TSV/JSONL files, or an embedded
demo dataset (split deterministically). Train keeps the model that scores best
on the first dev split; eval writes eval_results.json; predict writes GLUE
submission files or a predictions TSV.
"""

from __future__ import annotations

import dataclasses
from typing import Callable
import os

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import checkpoints
from bert_tf.data import classification, glue
from bert_tf.data.length_filter import LengthFilter, length_mask
from bert_tf.modeling.task_models import BertClassifier
from bert_tf.training import finetuning, glue_metrics, tasks
from bert_tf.io import write_json, write_text_atomically
from bert_tf.training.finetuning import FinetuningConfig
from bert_tf.training.optimization import OptimizerConfig
from bert_tf.training.output_lock import lock_output_dir


@dataclasses.dataclass(frozen=True)
class ClassifierData:
    """Where examples come from; exactly one of task_name, train/eval/test files, demo."""

    task_name: str | None = None
    data_dir: str | None = None
    train_file: str | None = None
    dev_file: str | None = None
    test_file: str | None = None
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    regression: bool = False
    demo: str | None = None
    demo_subsample: int = 0
    skip_bad_rows: bool = False
    length_filter: LengthFilter = LengthFilter()  # applied to the training split only

    def __post_init__(self) -> None:
        sources = [bool(self.task_name), bool(self.train_file or self.dev_file or self.test_file),
                   bool(self.demo)]
        if sum(sources) != 1:
            raise ValueError("give exactly one of --task_name (with --data_dir), "
                             "--train_file/--dev_file/--test_file and --demo")
        if self.task_name and not self.data_dir:
            raise ValueError("--data_dir is required with --task_name")


@dataclasses.dataclass(frozen=True)
class _Splits:
    """Readers of each split, the label list and the metrics of the task."""

    train: Callable | None
    evals: dict  # split name -> reader
    tests: dict
    label_list: list[str] | None
    metrics: tuple[str, ...]
    glue_task: glue.GlueTask | None = None


def _splits(data: ClassifierData, label_list: list[str] | None) -> _Splits:
    if data.task_name:
        task = glue.get_task(data.task_name)
        read = lambda split: glue.read_glue(data.data_dir, task.name, split,  # noqa: E731
                                            skip_bad_rows=data.skip_bad_rows)
        return _Splits((lambda: read(task.train_split)) if task.train_split else None,
                       {s: (lambda s=s: read(s)) for s in task.eval_splits},
                       {s: (lambda s=s: read(s)) for s in task.test_splits},
                       list(task.label_list) if task.label_list else None, task.metrics, task)
    files = {"train": data.train_file, "dev": data.dev_file, "test": data.test_file}
    if data.demo:
        demo = classification.make_demo_splits(data.demo, data.demo_subsample)
        files = {"train": str(demo.train), "dev": str(demo.dev), "test": str(demo.test)}
        logging.info("demo %s splits: %s (duplicates removed: %s)", data.demo, demo.sizes,
                     demo.duplicates_removed)
    metrics = glue_metrics.REGRESSION_METRICS if data.regression else glue_metrics.CLASSIFICATION_METRICS

    def reader(path, labelled=True, labels=None):
        return lambda: classification.read_examples(
            path, text_column=data.text_column, text_pair_column=data.text_pair_column,
            label_column=data.label_column if labelled else None, label_list=labels,
            regression=data.regression, skip_bad_rows=data.skip_bad_rows)

    train = reader(files["train"]) if files["train"] else None
    if label_list is None and not data.regression and train is not None:
        label_list = classification.learn_labels(train())
    return _Splits(train, {"dev": reader(files["dev"], labels=label_list)} if files["dev"] else {},
                   {"test": reader(files["test"], labelled=bool(data.demo), labels=label_list)}
                   if files["test"] else {}, label_list, metrics)


def _predictions(model, encoded: classification.EncodedExamples, batch_size: int,
                 regression: bool) -> np.ndarray:
    logits = finetuning.predict(model, encoded.features, batch_size)["logits"]
    return logits[:, 0] if regression else logits.argmax(-1)


def _evaluate(model, encoded, batch_size: int, splits: _Splits, regression: bool) -> dict[str, float]:
    labels = encoded.features["labels" if regression else "label_ids"]
    metrics = glue_metrics.compute_metrics(splits.metrics, labels,
                                           _predictions(model, encoded, batch_size, regression))
    metrics["score"] = glue_metrics.task_score(metrics, splits.metrics)
    return metrics


def run(data: ClassifierData, job: finetuning.JobOptions, optimizer: OptimizerConfig,
        config: FinetuningConfig, strategy: tf.distribute.Strategy, *, head: str = "pooled") -> dict:
    """Trains, evaluates and predicts as asked; returns the figures written to JSON.

    Raises:
        ValueError: bad data or settings (the message names the file or flag).
        checkpoints.CaseMismatchError: see `finetuning.starting_point`.
        OSError: another live run holds the output directory (lock_output_dir).
    """
    start = finetuning.starting_point(job)
    model_config, tokenizer, trained = start.model_config, start.tokenizer, start.trained
    output_dir, max_seq_length = config.output_dir, job.max_seq_length
    if trained is None:
        label_list = None
        regression = data.regression or bool(data.task_name and glue.get_task(data.task_name).is_regression)
    else:  # evaluate or predict with a fine-tuned model directory
        label_list, regression = trained.task_info.get("labels"), not trained.task_info.get("labels")
    data = dataclasses.replace(data, regression=regression)
    splits = _splits(data, label_list)
    label_list = splits.label_list
    encode = lambda examples: classification.encode_examples(  # noqa: E731
        examples, tokenizer, max_seq_length, label_list=label_list, regression=regression)
    report: dict = {}
    with lock_output_dir(output_dir, strategy):

        dev_sets = ({name: encode(read()) for name, read in splits.evals.items()}
                    if job.do_train or job.do_eval else {})
        if job.do_train:
            if splits.train is None:
                raise ValueError("--do_train needs a training split")
            train_examples = splits.train()
            train = encode(train_examples)
            keep, counts = length_mask(train.num_tokens, data.length_filter)
            train = train.select(keep)
            report["length_filter"] = dataclasses.asdict(counts)
            first_dev = next(iter(dev_sets.values()), None)
            evaluate = None if first_dev is None else (
                lambda model: _evaluate(model, first_dev, config.eval_batch_size, splits, regression))
            task_info = {"task": "classification", "labels": label_list, "head": head,
                         "max_seq_length": max_seq_length, "do_lower_case": tokenizer.lower_case,
                         "text_pair": train_examples.text_pairs is not None}
            report["train"] = finetuning.run_finetuning(
                lambda: BertClassifier(model_config, len(label_list) if label_list else 1, head=head),
                tasks.ClassificationTask(regression), optimizer,
                dataclasses.replace(config, init_checkpoint=job.init_checkpoint,
                                    best_metric="score"),
                strategy, train.features, evaluate, start.vocab_file, task_info)
            trained = checkpoints.load_task_model(os.path.join(output_dir, "best"))
        if job.do_eval:
            report["eval"] = {name: _evaluate(trained, encoded, config.eval_batch_size, splits, regression)
                              for name, encoded in dev_sets.items()}
            write_json(os.path.join(output_dir, "eval_results.json"), report["eval"])
        if job.do_predict:
            for name, read in splits.tests.items():
                examples = read()
                encoded = encode(examples)
                predicted = _predictions(trained, encoded, config.eval_batch_size, regression)
                if splits.glue_task is not None:
                    path = glue.write_submission(output_dir, splits.glue_task.name, name, encoded.ids, predicted)
                else:
                    path = _write_predictions(output_dir, name, encoded.ids, predicted, label_list)
                if examples.labels is not None:
                    report.setdefault("test", {})[name] = _evaluate(
                        trained, encoded, config.eval_batch_size, splits, regression)
                logging.info("wrote %s", path)
            if "test" in report:
                write_json(os.path.join(output_dir, "test_results.json"), report["test"])
        if data.demo and "test" in report:
            demo = classification.make_demo_splits(data.demo, data.demo_subsample)
            report["baseline_tfidf_accuracy"] = classification.tfidf_baseline(demo.train, demo.test)
        return report


def _write_predictions(output_dir: str, split: str, ids, predicted, label_list) -> str:
    rows = ["id\tprediction"] + [
        f"{i}\t{label_list[int(p)] if label_list else f'{float(p):.6f}'}" for i, p in zip(ids, predicted)]
    path = os.path.join(output_dir, f"{split}_predictions.tsv")
    write_text_atomically(path, "\n".join(rows) + "\n")
    return path
