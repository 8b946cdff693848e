"""Checkpoint tables: Hugging Face safetensors, TF1 checkpoints, project model directories."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from bert_tf import checkpoints
from bert_tf.checkpoints import CheckpointMismatchError
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.pretrainer import BertPretrainer
from tests.conftest import encoder_features, own_stderr_lines, pretrainer_features, random_batch

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(94)]


def _hf_config(config):
    return transformers.BertConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size, max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size, hidden_act=config.hidden_act)


@pytest.fixture
def hf_model(tiny_config):
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(_hf_config(tiny_config)).eval()
    with torch.no_grad():  # LayerNorms start at 1/0 and biases at 0: make every value distinct
        for name, param in model.named_parameters():
            param.add_(0.05 * torch.randn_like(param))
    return model


@pytest.fixture
def hf_dir(hf_model, tmp_path):
    path = tmp_path / "hf"
    hf_model.save_pretrained(path, safe_serialization=True)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return str(path)


def _tf1_name(hf_name: str) -> str:
    """HF parameter name -> original TF1 variable name, spelled out independently of the table."""
    name = hf_name.replace("bert.", "bert/", 1) if hf_name.startswith("bert.") else hf_name
    name = re.sub(r"layer\.(\d+)", r"layer_\1", name).replace(".", "/")
    name = re.sub(r"LayerNorm/weight$", "LayerNorm/gamma", name)
    name = re.sub(r"LayerNorm/bias$", "LayerNorm/beta", name)
    name = re.sub(r"_embeddings/weight$", "_embeddings", name)
    name = name.replace("cls/predictions/bias", "cls/predictions/output_bias")
    name = name.replace("cls/seq_relationship/weight", "cls/seq_relationship/output_weights")
    name = name.replace("cls/seq_relationship/bias", "cls/seq_relationship/output_bias")
    return re.sub(r"/weight$", "/kernel", name)


def _tf1_arrays(hf_model) -> dict[str, np.ndarray]:
    arrays = {}
    for name, param in hf_model.state_dict().items():
        if name.endswith("position_ids") or "decoder" in name:
            continue
        value = param.numpy()
        tf1 = _tf1_name(name)
        arrays[tf1] = value.T if tf1.endswith("/kernel") else value
    return arrays


def _write_tf1(directory, config, arrays: dict[str, np.ndarray]) -> str:
    """Writes a checkpoint the way TF1 BERT did: graph-mode variables and a v1 Saver."""
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, "bert_model.ckpt")
    with tf.Graph().as_default():
        variables = [tf.compat.v1.get_variable(name, initializer=value) for name, value in arrays.items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, prefix, write_meta_graph=False)
    config.to_json_file(os.path.join(directory, "bert_config.json"))
    return prefix


def _outputs(model, batch):
    if isinstance(model, BertPretrainer):
        out = model(pretrainer_features(batch))
        return {k: v.numpy() for k, v in out.items()}
    out = model(encoder_features(batch))
    return {"sequence_output": out["sequence_output"].numpy(), "pooled_output": out["pooled_output"].numpy()}


def test_tables_cover_every_variable_once(tiny_config):
    for model, table in ((BertEncoder(tiny_config), checkpoints.encoder_table(tiny_config)),
                         (BertPretrainer(tiny_config), checkpoints.pretrainer_table(tiny_config))):
        paths = sorted(v.path for v in model.weights)
        assert sorted(e.path for e in table) == paths
        assert len({e.tf1 for e in table}) == len({e.hf for e in table}) == len(paths)


def test_hf_directory_matches_transformers(tiny_config, hf_model, hf_dir):
    batch = random_batch(tiny_config)
    with torch.no_grad():
        ref = hf_model(input_ids=torch.tensor(batch["input_word_ids"], dtype=torch.long),
                       attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                       token_type_ids=torch.tensor(batch["input_type_ids"], dtype=torch.long),
                       output_hidden_states=True)
    pretrainer = checkpoints.load_pretrainer(hf_dir)
    out = _outputs(pretrainer, batch)
    expected_mlm = np.take_along_axis(ref.prediction_logits.numpy(),
                                      batch["masked_lm_positions"][..., None], axis=1)
    np.testing.assert_allclose(out["mlm_logits"], expected_mlm, atol=1e-5)
    np.testing.assert_allclose(out["nsp_logits"], ref.seq_relationship_logits.numpy(), atol=1e-5)
    encoder = checkpoints.load_encoder(hf_dir)
    assert encoder.vocab_file == os.path.join(hf_dir, "vocab.txt")
    keep = batch["input_mask"].astype(bool)
    np.testing.assert_allclose(_outputs(encoder, batch)["sequence_output"][keep],
                               ref.hidden_states[-1].numpy()[keep], atol=1e-5)


def test_tf1_values_land_where_the_table_says(tiny_config, hf_model, tmp_path):
    arrays = _tf1_arrays(hf_model)
    prefix = _write_tf1(tmp_path / "tf1", tiny_config, arrays)
    model = checkpoints.load_pretrainer(prefix)
    variables = {v.path: v.numpy() for v in model.weights}
    for entry in checkpoints.pretrainer_table(tiny_config):
        np.testing.assert_array_equal(variables[entry.path], arrays[entry.tf1])
    # Spot checks through the layers themselves, not through the table.
    block = model.encoder.transformer_layers[1]
    np.testing.assert_array_equal(block.query.kernel.numpy(),
                                  arrays["bert/encoder/layer_1/attention/self/query/kernel"])
    np.testing.assert_array_equal(block.output_layer_norm.gamma.numpy(),
                                  arrays["bert/encoder/layer_1/output/LayerNorm/gamma"])
    np.testing.assert_array_equal(model.next_sentence.output_weights.numpy(),
                                  arrays["cls/seq_relationship/output_weights"])
    np.testing.assert_array_equal(model.encoder.embeddings.position_embeddings.embeddings.numpy(),
                                  arrays["bert/embeddings/position_embeddings"])


def test_convert_round_trip_gives_identical_outputs(tiny_config, hf_model, hf_dir, tmp_path):
    from bert_tf.tools.convert_checkpoint import convert

    batch = random_batch(tiny_config)
    prefix = _write_tf1(tmp_path / "tf1", tiny_config, _tf1_arrays(hf_model))
    from_hf = _outputs(checkpoints.load_pretrainer(hf_dir), batch)
    from_tf1 = _outputs(checkpoints.load_pretrainer(prefix), batch)
    converted_tf1 = convert(prefix, "tf1", str(tmp_path / "out_tf1"))
    result = subprocess.run(
        [sys.executable, "-m", "bert_tf.tools.convert_checkpoint", "--input_format=hf",
         f"--input={hf_dir}", f"--output_dir={tmp_path / 'out_hf'}"],
        capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr
    converted_hf = str(tmp_path / "out_hf")
    assert sorted(os.listdir(converted_hf)) == ["bert_config.json", "bert_model.ckpt.data-00000-of-00001",
                                                "bert_model.ckpt.index", "vocab.txt"]
    for source in (converted_tf1, converted_hf):
        out = _outputs(checkpoints.load_pretrainer(source), batch)
        for key in ("mlm_logits", "nsp_logits"):
            np.testing.assert_array_equal(out[key], from_hf[key])
            np.testing.assert_array_equal(out[key], from_tf1[key])
    # The written checkpoint keeps the original names: google-research/bert reads it.
    names = dict(tf.train.list_variables(os.path.join(converted_hf, "bert_model.ckpt")))
    assert names["bert/encoder/layer_1/attention/self/query/kernel"] == [32, 32]
    assert names["cls/seq_relationship/output_weights"] == [2, 32]


def test_model_directory_round_trip(tiny_config, tmp_path):
    model = BertPretrainer(tiny_config)
    batch = random_batch(tiny_config)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    directory = checkpoints.save_model_dir(model, tmp_path / "model", vocab)
    restored = checkpoints.load_pretrainer(directory)
    assert restored.config == tiny_config and restored.vocab_file.endswith("vocab.txt")
    for key, value in _outputs(model, batch).items():
        np.testing.assert_array_equal(_outputs(restored, batch)[key], value)
    # Overwriting keeps a complete directory and leaves no temporary folders behind.
    checkpoints.save_model_dir(restored.encoder, directory, vocab)
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p or ".old-" in p]
    encoder = checkpoints.load_encoder(directory)
    np.testing.assert_array_equal(_outputs(encoder, batch)["pooled_output"],
                                  _outputs(model.encoder, batch)["pooled_output"])
    # An encoder-only checkpoint still builds a pretrainer, with fresh heads.
    assert not checkpoints.has_pretraining_heads(directory)
    checkpoints.load_pretrainer(directory)


def test_strict_errors_name_the_variable(tiny_config, hf_model, tmp_path):
    arrays = _tf1_arrays(hf_model)
    missing = dict(arrays)
    del missing["bert/encoder/layer_1/intermediate/dense/bias"]
    prefix = _write_tf1(tmp_path / "missing", tiny_config, missing)
    with pytest.raises(CheckpointMismatchError, match="missing variable bert/encoder/layer_1/intermediate/dense/bias"):
        checkpoints.load_encoder(prefix)

    extra = {**arrays, "bert/encoder/layer_2/output/dense/bias": np.zeros(32, np.float32)}
    prefix = _write_tf1(tmp_path / "extra", tiny_config, extra)
    with pytest.raises(CheckpointMismatchError, match="unused checkpoint variable bert/encoder/layer_2/output/dense/bias"):
        checkpoints.load_encoder(prefix)

    prefix = _write_tf1(tmp_path / "shape", tiny_config.replace(intermediate_size=40), arrays)
    with pytest.raises(CheckpointMismatchError,
                       match=r"bert/encoder/layer_0/intermediate/dense/kernel has shape \(32, 37\), the model expects \(32, 40\)"):
        checkpoints.load_encoder(prefix)

    partial_heads = dict(arrays)
    del partial_heads["cls/predictions/output_bias"]
    prefix = _write_tf1(tmp_path / "heads", tiny_config, partial_heads)
    with pytest.raises(CheckpointMismatchError, match="missing variable cls/predictions/output_bias"):
        checkpoints.load_pretrainer(prefix)
    checkpoints.load_encoder(prefix)  # an encoder does not need the heads


def test_other_architecture_and_pickles_are_refused(tiny_config, hf_dir, tmp_path):
    from safetensors.numpy import load_file, save_file

    weights = load_file(os.path.join(hf_dir, "model.safetensors"))
    weights["roberta.pooler.extra.weight"] = np.zeros((2, 2), np.float32)
    save_file(weights, os.path.join(hf_dir, "model.safetensors"))
    with pytest.raises(CheckpointMismatchError, match="unused checkpoint variable roberta.pooler.extra.weight"):
        checkpoints.load_encoder(hf_dir)

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text(json.dumps(_hf_config(tiny_config).to_dict()))
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04not really")
    with pytest.raises(CheckpointMismatchError, match="pytorch_model.bin: refusing to load a pickled checkpoint"):
        checkpoints.load_encoder(pickled)

    with pytest.raises(FileNotFoundError, match="no TF checkpoint"):
        checkpoints.load_encoder(tmp_path / "nothing_here")


def test_convert_cli_reports_bad_input_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bert_tf.tools.convert_checkpoint", "--input_format=tf1",
         f"--input={tmp_path / 'absent.ckpt'}", f"--output_dir={tmp_path / 'out'}"],
        capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2
    assert own_stderr_lines(result.stderr) == [f"convert_checkpoint: error: {tmp_path / 'absent.ckpt'}: no TF checkpoint "
                      f"({tmp_path / 'absent.ckpt'}.index) or Hugging Face model found"]
    assert not (tmp_path / "out").exists()
