"""Writing Hugging Face directories and keras-hub presets, and reading them back.

Every round trip compares outputs (fp32, atol 1e-5) on the real MiniLM
checkpoint and on a small random "demo" pretrainer with heads, and the token
ids of each ecosystem's tokenizer against bert_tf's.
"""

import json
import os
import subprocess

import keras_hub
import numpy as np
import pytest
import torch
import transformers

from bert_tf import checkpoints
from bert_tf.configs import BertConfig
from bert_tf.data.tokenization import BertTokenizer
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.pretrainer import BertPretrainer
from tests import driver_runs
from tests.conftest import encoder_features, own_stderr_lines, pretrainer_features, random_batch

# The uncased English vocab of MiniLM, small hidden size: a demo-sized model, cased on purpose
# so that the casing recorded in the tokenizer files is checked both ways.
DEMO = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=128, do_lower_case=False)
SENTENCES = ["The quick brown fox jumped over the lazy dog.",
             "Café déjà vu: naïve façade, 3.14 × 2 = 6.28!",
             "Don't worry; 東京 and Zürich are (very) far apart.",
             "unaffable\tUNAFFABLE  Ünïcödé"]
ATOL = 1e-5


def _cli(*args: str) -> subprocess.CompletedProcess:
    return driver_runs.run(["-m", "bert_tf.tools.convert_checkpoint", *args])


@pytest.fixture(scope="module")
def batch() -> dict:
    return random_batch(DEMO, batch=3, seq=16)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory, minilm_dir) -> str:
    """A project model directory of a random pretrainer, heads included."""
    model = BertPretrainer(DEMO)
    rng = np.random.default_rng(0)
    for variable in model.weights:  # LayerNorms start at 1/0, biases at 0: make every value distinct
        variable.assign(variable.numpy() + 0.05 * rng.standard_normal(variable.shape).astype(np.float32))
    return checkpoints.save_model_dir(model, tmp_path_factory.mktemp("demo") / "model",
                                      os.path.join(minilm_dir, "vocab.txt"))


@pytest.fixture(scope="module")
def minilm(minilm_dir) -> BertEncoder:
    return checkpoints.load_encoder(minilm_dir)


@pytest.fixture(scope="module")
def minilm_tanh(minilm_dir) -> BertEncoder:
    """MiniLM's weights with tanh GELU: what keras-hub's BertBackbone computes."""
    encoder = BertEncoder(checkpoints.read_config(checkpoints.locate(minilm_dir)).replace(hidden_act="gelu_tanh"))
    checkpoints.load_weights(encoder, minilm_dir)
    encoder.vocab_file = os.path.join(minilm_dir, "vocab.txt")
    return encoder


def _ours(model, batch) -> dict[str, np.ndarray]:
    if isinstance(model, BertPretrainer):
        out = model(pretrainer_features(batch))
        out = {**model.encoder(encoder_features(batch)), **out}
    else:
        out = model(encoder_features(batch))
    return {k: np.asarray(out[k]) for k in ("sequence_output", "pooled_output", "mlm_logits", "nsp_logits")
            if k in out}


def _hf(model, batch) -> dict[str, np.ndarray]:
    inputs = {"input_ids": torch.tensor(batch["input_word_ids"], dtype=torch.long),
              "attention_mask": torch.tensor(batch["input_mask"], dtype=torch.long),
              "token_type_ids": torch.tensor(batch["input_type_ids"], dtype=torch.long)}
    with torch.no_grad():
        if isinstance(model, transformers.BertForPreTraining):
            out = model(**inputs)
            return {**_hf(model.bert, batch), "nsp_logits": out.seq_relationship_logits.numpy(),
                    "mlm_logits": np.take_along_axis(out.prediction_logits.numpy(),
                                                     batch["masked_lm_positions"][..., None], axis=1)}
        out = model(**inputs)
        return {"sequence_output": out.last_hidden_state.numpy(), "pooled_output": out.pooler_output.numpy()}


def _max_differences(ours: dict, theirs: dict, mask: np.ndarray) -> dict[str, float]:
    """|difference| per output; padding positions of the sequence output carry no meaning."""
    keep = mask.astype(bool)
    return {k: float(np.abs(ours[k][keep] - theirs[k][keep]).max() if k == "sequence_output"
                     else np.abs(ours[k] - theirs[k]).max()) for k in ours}


def _assert_equal_outputs(ours: dict, theirs: dict, batch: dict) -> None:
    differences = _max_differences(ours, theirs, batch["input_mask"])
    assert set(differences) == set(ours) and max(differences.values()) <= ATOL, differences


def _our_ids(vocab_file: str, lower: bool) -> list[list[int]]:
    return BertTokenizer(vocab_file, lower_case=lower)(SENTENCES).to_list()


def _hf_loaded(cls, directory):
    model, info = cls.from_pretrained(directory, output_loading_info=True)
    return model.eval(), info


def test_pretrainer_to_hugging_face_and_back(demo_dir, batch, tmp_path):
    out = str(tmp_path / "hf")
    result = _cli(f"--input={demo_dir}", "--output_format=hf", f"--output_dir={out}")
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
    config = json.loads(open(os.path.join(out, "config.json")).read())
    assert (config["model_type"], config["architectures"], config["hidden_act"]) == \
        ("bert", ["BertForPreTraining"], "gelu")
    ours = _ours(checkpoints.load_pretrainer(demo_dir), batch)

    # Every tensor has its place: nothing missing (the tied MLM decoder included), nothing extra.
    pretraining, info = _hf_loaded(transformers.BertForPreTraining, out)
    assert {k: v for k, v in info.items() if v} == {}
    _assert_equal_outputs(ours, _hf(pretraining, batch), batch)
    encoder, info = _hf_loaded(transformers.BertModel, out)
    assert not info["missing_keys"] and all(k.startswith("cls.") for k in info["unexpected_keys"])

    _assert_equal_outputs(ours, _ours(checkpoints.load_pretrainer(out), batch), batch)
    # The model directory's casing (cased) reaches the tokenizer.
    assert checkpoints.recorded_casing(out)[0] is False
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer(SENTENCES, add_special_tokens=False)["input_ids"] == \
        _our_ids(os.path.join(demo_dir, "vocab.txt"), lower=False)


@pytest.mark.slow
def test_minilm_to_hugging_face_and_back(minilm, minilm_tanh, batch, tmp_path):
    for encoder, act in ((minilm, "gelu"), (minilm_tanh, "gelu_pytorch_tanh")):
        out = checkpoints.save_hf_dir(encoder, tmp_path / act, encoder.vocab_file, do_lower_case=True)
        assert json.loads(open(os.path.join(out, "config.json")).read())["hidden_act"] == act
        model, info = _hf_loaded(transformers.BertModel, out)
        assert {k: v for k, v in info.items() if v} == {}
        ours = _ours(encoder, batch)
        _assert_equal_outputs(ours, _hf(model, batch), batch)
        _assert_equal_outputs(ours, _ours(checkpoints.load_encoder(out), batch), batch)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer(SENTENCES, add_special_tokens=False)["input_ids"] == _our_ids(minilm.vocab_file, lower=True)


@pytest.mark.slow
def test_minilm_to_keras_hub_and_back(minilm, minilm_tanh, batch, tmp_path):
    out = checkpoints.save_keras_hub_preset(minilm_tanh, tmp_path / "preset", minilm_tanh.vocab_file)
    ours = _ours(minilm_tanh, batch)
    backbone = keras_hub.models.BertBackbone.from_preset(out)
    theirs = backbone({"token_ids": batch["input_word_ids"], "padding_mask": batch["input_mask"],
                       "segment_ids": batch["input_type_ids"]})
    _assert_equal_outputs(ours, {k: np.asarray(theirs[k]) for k in ours}, batch)

    loaded = checkpoints.load_encoder(out)
    assert loaded.config == minilm_tanh.config
    assert loaded.vocab_file == os.path.join(out, "assets", "tokenizer", "vocabulary.txt")
    _assert_equal_outputs(ours, _ours(loaded, batch), batch)
    tokenizer = keras_hub.models.BertTokenizer.from_preset(out)
    assert [list(ids) for ids in tokenizer(SENTENCES)] == _our_ids(loaded.vocab_file, lower=True)

    # Exact GELU in keras-hub's tanh backbone is an approximation: refused unless allowed, then measured.
    with pytest.raises(ValueError, match="tanh-approximated GELU.*allow_gelu_approximation"):
        checkpoints.to_keras_hub(minilm)
    difference = checkpoints.keras_hub_max_difference(
        minilm, checkpoints.to_keras_hub(minilm, allow_gelu_approximation=True))
    assert 1e-4 < difference < 1e-1
    assert checkpoints.keras_hub_max_difference(minilm_tanh, backbone) <= ATOL


def test_keras_hub_cli_refuses_exact_gelu_unless_allowed(demo_dir, batch, tmp_path):
    out = tmp_path / "preset"
    result = _cli(f"--input={demo_dir}", "--output_format=keras_hub", f"--output_dir={out}")
    assert result.returncode == 2
    assert own_stderr_lines(result.stderr) == [
        "convert_checkpoint: error: keras-hub's BertBackbone uses tanh-approximated GELU; this encoder "
        "uses hidden_act='gelu' (pass allow_gelu_approximation, --allow_gelu_approximation, to export "
        "it anyway)"]
    assert not os.path.exists(out) and not [p for p in os.listdir(tmp_path) if ".tmp-" in p]

    result = _cli(f"--input={demo_dir}", "--output_format=keras_hub", "--allow_gelu_approximation",
                  f"--output_dir={out}")
    assert result.returncode == 0, result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.startswith("keras-hub's tanh GELU: the preset's outputs differ from the input's by at most ")
    assert 0 < float(last.split()[-5]) < 1e-2

    # What the preset holds is the demo encoder's weights, under tanh GELU; cased, as the model.
    tanh = BertEncoder(DEMO.replace(hidden_act="gelu_tanh"))
    checkpoints.load_weights(tanh, demo_dir)
    loaded = checkpoints.load_encoder(out)
    assert loaded.config == tanh.config
    _assert_equal_outputs(_ours(tanh, batch), _ours(loaded, batch), batch)
    tokenizer = keras_hub.models.BertTokenizer.from_preset(str(out))
    assert [list(ids) for ids in tokenizer(SENTENCES)] == _our_ids(loaded.vocab_file, lower=False)

    # And back to a project model directory, detected as a keras-hub preset.
    from bert_tf.tools.convert_checkpoint import convert

    directory = convert(str(out), None, str(tmp_path / "model"))
    restored = checkpoints.load_encoder(directory)
    assert restored.config == tanh.config
    _assert_equal_outputs(_ours(tanh, batch), _ours(restored, batch), batch)


def test_finetuning_starts_from_a_keras_hub_preset(demo_dir, tmp_path):
    """The drivers read a preset's config (tanh GELU, its casing) as they read its weights."""
    encoder = BertEncoder(DEMO.replace(hidden_act="gelu_tanh"))
    checkpoints.load_weights(encoder, demo_dir)
    preset = checkpoints.save_keras_hub_preset(encoder, tmp_path / "preset",
                                               os.path.join(demo_dir, "vocab.txt"))
    out = tmp_path / "ner"
    result = driver_runs.run(["run_ner.py", "--train_file=tests/testdata/ner_train.txt",
                              f"--init_checkpoint={preset}", f"--output_dir={out}", "--do_train",
                              "--max_seq_length=32", "--train_batch_size=8", "--num_train_epochs=1"])
    assert result.returncode == 0, result.stderr[-3000:]
    tagger = checkpoints.load_task_model(str(out / "best"))
    assert tagger.config == encoder.config
