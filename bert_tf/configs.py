"""BertConfig: the hyperparameters of a BERT model, keyed as in bert_config.json."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from bert_tf.io import write_json

# Activation names as written in bert_config.json / Hugging Face config.json.
# "gelu" is the exact erf form (Hugging Face's meaning, and what its converted
# google-research checkpoints use); the tanh approximation has its own names.
ACTIVATIONS = ("gelu", "gelu_tanh", "gelu_new", "gelu_pytorch_tanh", "relu")

ENGLISH_UNCASED_VOCAB_SIZE = 30522
CHINESE_VOCAB_SIZE = 21128

# The model inputs, int32 [batch_size, seq_length] each: the names every reader, task and
# signature uses.
INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Hyperparameters of a BERT encoder.

    Field names are the keys of the original google-research/bert
    `bert_config.json`, plus `layer_norm_eps` and `do_lower_case`.
    """

    vocab_size: int = ENGLISH_UNCASED_VOCAB_SIZE
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    do_lower_case: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers",
                     "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(
                f"BertConfig.hidden_act {self.hidden_act!r} is not one of {', '.join(ACTIVATIONS)}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"BertConfig.{name} must be positive, got {getattr(self, name)!r}")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> "BertConfig":
        """Builds a config from a dict; keys that BertConfig does not know are ignored.

        Hugging Face configs carry extra keys (architectures, model_type, ...);
        those are not hyperparameters of the encoder.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in values.items() if k in names}
        missing = sorted(names - set(known) - {"layer_norm_eps", "do_lower_case"})
        if missing:
            raise ValueError(f"{source}: missing BERT config key(s): {', '.join(missing)}")
        return cls(**known)

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "BertConfig":
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: config file not found") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not a valid JSON config ({e})") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: a BERT config must be a JSON object")
        try:
            return cls.from_dict(values, source=path)
        except ValueError as e:
            message = str(e)
            raise ValueError(message if message.startswith(path) else f"{path}: {message}") from None

    def to_json_file(self, path: str | os.PathLike) -> None:
        """Writes the config atomically (temporary name, then rename)."""
        write_json(path, self.to_dict())

    def replace(self, **changes: Any) -> "BertConfig":
        return dataclasses.replace(self, **changes)


# Published sizes (Turc et al. 2019 for the small ones; Devlin et al. 2018 for
# base and large): name -> (num_hidden_layers, hidden_size).
_SIZES = {
    "tiny": (2, 128),
    "mini": (4, 256),
    "small": (4, 512),
    "medium": (8, 512),
    "base": (12, 768),
    "large": (24, 1024),
}
# Google's Chinese BERT (chinese_L-12_H-768_A-12) is uncased too: lower-casing
# leaves CJK characters alone and folds the Latin letters mixed into Chinese text.
_VOCABS = {"uncased": (ENGLISH_UNCASED_VOCAB_SIZE, True), "chinese": (CHINESE_VOCAB_SIZE, True)}


def _preset(layers: int, hidden: int, vocab: str) -> BertConfig:
    vocab_size, lower = _VOCABS[vocab]
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        intermediate_size=4 * hidden,
        do_lower_case=lower,
    )


PRESETS: dict[str, BertConfig] = {
    f"{size}_{vocab}": _preset(layers, hidden, vocab)
    for size, (layers, hidden) in _SIZES.items()
    for vocab in _VOCABS
}


def get_preset(name: str) -> BertConfig:
    """Returns a preset config, e.g. "base_uncased", "mini_chinese"."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
