"""Token tagging (NER, slot filling) end to end: what run_ner.py calls."""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf
from absl import logging

from bert_tf import checkpoints
from bert_tf.configs import INPUT_NAMES
from bert_tf.data import tag_schemes
from bert_tf.data.ner import conll, people_daily, prediction
from bert_tf.data.ner.dictionary import dictionary_tags
from bert_tf.data.ner.features import convert_to_features, first_pieces
from bert_tf.data.ner.scoring import entity_scores
from bert_tf.data.length_filter import LengthFilter, length_mask
from bert_tf.modeling.task_models import CRF_LEARNING_RATE_MULTIPLIER, BertTagger, build_task_model
from bert_tf.training import finetuning, tasks
from bert_tf.io import write_json
from bert_tf.training.finetuning import FinetuningConfig
from bert_tf.training.optimization import OptimizerConfig
from bert_tf.training.output_lock import lock_output_dir


@dataclasses.dataclass(frozen=True)
class NerData:
    """CoNLL files, or the embedded People's Daily demo (`demo="peoples_daily"`)."""

    train_file: str | None = None
    dev_file: str | None = None
    test_file: str | None = None
    demo: str | None = None
    demo_subsample: int = 0
    scheme: str = "BIO"
    skip_bad_rows: bool = False
    length_filter: LengthFilter = LengthFilter()  # applied to the training sentences only

    def __post_init__(self) -> None:
        if bool(self.demo) == bool(self.train_file or self.dev_file or self.test_file):
            raise ValueError("give either --demo or --train_file/--dev_file/--test_file")
        if self.demo and self.demo != "peoples_daily":
            raise ValueError(f"--demo={self.demo}: the NER demo is peoples_daily")


def predict_tags(model: BertTagger, features: dict, tags: list[str], batch_size: int) -> list[list[str]]:
    """One tag per word of each sentence, by `prediction.word_tags` as the exported model tags.

    The CRF's best valid path over first pieces, or per-token argmax; "O" for
    words without a first piece.
    """
    logits = finetuning.predict(model, features, batch_size, seq_outputs=("logits",))["logits"]
    firsts = first_pieces(features)
    decode = tf.function(lambda logits, firsts: prediction.word_tags(logits, firsts, tags, model.decode),
                         reduce_retracing=True)
    rows = [row for i in range(0, len(logits), batch_size)
            for row in decode(tf.constant(logits[i:i + batch_size]), firsts[i:i + batch_size]).to_list()]
    return [[tag.decode() for tag in row] for row in rows]


def evaluate(model: BertTagger, data: conll.ConllFile, features: dict, tags: list[str],
             batch_size: int) -> dict:
    """Entity-level precision, recall, F1 (conlleval rules), overall and per type."""
    return entity_scores([s.tags for s in data.sentences], predict_tags(model, features, tags, batch_size))


def run(data: NerData, job: finetuning.JobOptions, optimizer: OptimizerConfig,
        config: FinetuningConfig, strategy: tf.distribute.Strategy, *, use_crf: bool = True) -> dict:
    """Trains, evaluates and predicts as asked; returns the figures written to JSON.

    Raises:
        ValueError: bad data or settings (the message names the file or flag).
        checkpoints.CaseMismatchError: see `finetuning.starting_point`.
        OSError: another live run holds the output directory (lock_output_dir).
    """
    start = finetuning.starting_point(job)
    model_config, tokenizer, trained = start.model_config, start.tokenizer, start.trained
    output_dir, max_seq_length = config.output_dir, job.max_seq_length
    tags = None
    if trained is not None:
        tags = trained.task_info["labels"]
        data = dataclasses.replace(data, scheme=trained.task_info.get("scheme", data.scheme))
    paths = {"train": data.train_file, "dev": data.dev_file, "test": data.test_file}
    if data.demo:
        paths = {k: str(v) for k, v in people_daily.people_daily_ner().items()}
    read = lambda name, tags=None: conll.read_conll(  # noqa: E731
        paths[name], scheme=data.scheme, tags=tags, skip_bad_rows=data.skip_bad_rows)
    report: dict = {}
    with lock_output_dir(output_dir, strategy):
        if job.do_train:
            train = read("train")
            if data.demo_subsample:
                train = dataclasses.replace(train, sentences=train.sentences[:data.demo_subsample])
            tags = conll.learn_tags(train.sentences, data.scheme)
            logging.info("%d training sentences (%d skipped), tags %s", len(train.sentences),
                         len(train.skipped), tags)
            dev = read("dev", tags) if paths["dev"] else None
            dev_features = convert_to_features(dev.sentences, tokenizer, tags, max_seq_length) if dev else None
            features = convert_to_features(train.sentences, tokenizer, tags, max_seq_length)
            keep, counts = length_mask(features["num_tokens"], data.length_filter)
            report["length_filter"] = dataclasses.asdict(counts)
            model_inputs = {k: features[k][keep]
                            for k in INPUT_NAMES + ("label_ids",)}
            task_info = {"task": "tagging", "labels": tags, "crf": use_crf, "scheme": data.scheme,
                         "crf_learning_rate_multiplier": CRF_LEARNING_RATE_MULTIPLIER,
                         "max_seq_length": max_seq_length, "do_lower_case": tokenizer.lower_case}
            crf_allowed = tag_schemes.allowed_transitions(tags, data.scheme) if use_crf else None

            def dev_scores(model):
                scores = evaluate(model, dev, dev_features, tags, config.eval_batch_size)
                return {k: scores[k] for k in ("f1", "precision", "recall")}

            report["train"] = finetuning.run_finetuning(
                lambda: build_task_model(model_config, task_info, crf_allowed),
                tasks.TaggingTask(use_crf), optimizer,
                dataclasses.replace(config, init_checkpoint=job.init_checkpoint,
                                    best_metric="f1"),
                strategy, model_inputs, dev_scores if dev else None, start.vocab_file, task_info)
            trained = checkpoints.load_task_model(os.path.join(output_dir, "best"))
        for name, wanted in (("dev", job.do_eval), ("test", job.do_predict)):
            if not (wanted and paths[name]):
                continue
            split = read(name, tags)
            features = convert_to_features(split.sentences, tokenizer, tags, max_seq_length)
            predicted = predict_tags(trained, features, tags, config.eval_batch_size)
            if name == "test":
                conll.write_conll(os.path.join(output_dir, "test_predictions.txt"),
                                [dataclasses.replace(s, tags=t) for s, t in zip(split.sentences, predicted)])
            if any(tag != "O" for s in split.sentences for tag in s.tags) or name == "dev":
                report[name] = entity_scores([s.tags for s in split.sentences], predicted)
                write_json(os.path.join(output_dir, f"{'eval' if name == 'dev' else 'test'}_results.json"),
                           report[name])
        if data.demo and "test" in report:
            train, test = read("train"), read("test", tags)
            baseline = dictionary_tags(train.sentences, [s.words for s in test.sentences], data.scheme)
            report["baseline_dictionary"] = entity_scores([s.tags for s in test.sentences], baseline)
        return report
