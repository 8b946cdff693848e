"""Checkpoint tables: Hugging Face safetensors, TF1 checkpoints, project model directories."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from bert_tf import checkpoints
from bert_tf.checkpoints import CheckpointMismatchError
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.pretrainer import BertPretrainer
from tests import driver_runs
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
    result = driver_runs.run(["-m", "bert_tf.tools.convert_checkpoint", "--input_format=hf",
                              f"--input={hf_dir}", f"--output_dir={tmp_path / 'out_hf'}"])
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
    result = driver_runs.run(["-m", "bert_tf.tools.convert_checkpoint", "--input_format=tf1",
                              f"--input={tmp_path / 'absent.ckpt'}", f"--output_dir={tmp_path / 'out'}"])
    assert result.returncode == 2
    assert own_stderr_lines(result.stderr) == [f"convert_checkpoint: error: {tmp_path / 'absent.ckpt'}: no TF checkpoint "
                      f"({tmp_path / 'absent.ckpt'}.index) or Hugging Face model found"]
    assert not (tmp_path / "out").exists()


# Task heads under google-research/bert's names.

def _original_finetuned_dir(directory, config, hf_model, heads: dict[str, np.ndarray]) -> str:
    """A folder as the original run_classifier.py / run_squad.py leave it (model.ckpt-N with
    Adam slots and global_step), plus the pretrained model's bert_config.json and vocab.txt."""
    arrays = {name: value for name, value in _tf1_arrays(hf_model).items() if not name.startswith("cls/")}
    arrays.update(heads)
    os.makedirs(directory, exist_ok=True)
    with tf.Graph().as_default():
        variables = [tf.compat.v1.get_variable(name, initializer=value) for name, value in arrays.items()]
        slots = [tf.compat.v1.get_variable(f"{name}/adam_m", initializer=np.zeros_like(value))
                 for name, value in heads.items()]
        step = tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver(variables + slots + [step])
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, os.path.join(directory, "model.ckpt"), global_step=7, write_meta_graph=False)
    values = config.to_dict()
    del values["do_lower_case"]  # Google's bert_config.json files do not record it
    (directory / "bert_config.json").write_text(json.dumps(values))
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return str(directory)


def _restore_as_the_original(prefix, shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Restores `shapes` (TF1 name -> shape) the way google-research/bert's graph would."""
    with tf.Graph().as_default():
        variables = {name: tf.compat.v1.get_variable(name, shape=shape) for name, shape in shapes.items()}
        with tf.compat.v1.Session() as session:
            tf.compat.v1.train.Saver(variables).restore(session, prefix)
            return session.run(variables)


def _hf_encoder_outputs(hf_model, batch):
    with torch.no_grad():
        out = hf_model.bert(input_ids=torch.tensor(batch["input_word_ids"], dtype=torch.long),
                            attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                            token_type_ids=torch.tensor(batch["input_type_ids"], dtype=torch.long))
    return out.last_hidden_state.numpy(), out.pooler_output.numpy()


@pytest.mark.parametrize("task", ["classification", "squad"])
def test_original_task_heads_load_and_are_written_back(tiny_config, hf_model, tmp_path, task):
    from bert_tf.tools.convert_checkpoint import convert, original_task_info

    rng = np.random.default_rng(0)
    scope, outputs = ("", 3) if task == "classification" else ("cls/squad/", 2)
    heads = {f"{scope}output_weights": rng.normal(size=(outputs, 32)).astype(np.float32),
             f"{scope}output_bias": rng.normal(size=(outputs,)).astype(np.float32)}
    original = _original_finetuned_dir(tmp_path / "original_output", tiny_config, hf_model, heads)
    info = original_task_info(task, original, labels=["a", "b", "c"], max_seq_length=16)
    model = checkpoints.load_task_model(original, info)

    # The original's logits: its head on the encoder outputs (Hugging Face's run of the same weights).
    batch = random_batch(tiny_config)
    sequence, pooled = _hf_encoder_outputs(hf_model, batch)
    out = model(encoder_features(batch))
    if task == "classification":
        # run_classifier.py create_model: tf.matmul(output_layer, output_weights, transpose_b=True) + bias.
        np.testing.assert_allclose(out["logits"], pooled @ heads["output_weights"].T + heads["output_bias"],
                                   atol=1e-5)
    else:
        # run_squad.py create_model: [B*S, H] x [2, H]^T + bias, split into start and end.
        logits = sequence @ heads["cls/squad/output_weights"].T + heads["cls/squad/output_bias"]
        keep = batch["input_mask"].astype(bool)
        np.testing.assert_allclose(out["start_logits"].numpy()[keep], logits[..., 0][keep], atol=1e-5)
        np.testing.assert_allclose(out["end_logits"].numpy()[keep], logits[..., 1][keep], atol=1e-5)

    # Written back: exactly the original graph's names and shapes, readable by its Saver.
    converted = convert(original, "tf1", str(tmp_path / "converted"), task_info=info)
    prefix = os.path.join(converted, "bert_model.ckpt")
    written = dict(tf.train.list_variables(prefix))
    expected = {name: list(value.shape) for name, value in _tf1_arrays(hf_model).items()
                if not name.startswith("cls/")}
    expected.update({name: list(value.shape) for name, value in heads.items()})
    assert written == expected
    restored = _restore_as_the_original(prefix, expected)
    for name, value in heads.items():
        np.testing.assert_array_equal(restored[name], value)
    reloaded = checkpoints.load_task_model(converted)
    assert reloaded.task_info == info and reloaded.config.do_lower_case is True
    for key, value in out.items():
        np.testing.assert_array_equal(reloaded(encoder_features(batch))[key], value)


def test_heads_without_an_original_keep_their_keras_names(tiny_config, tmp_path):
    from bert_tf.modeling.task_models import build_task_model

    info = {"task": "classification", "labels": ["x", "y"], "head": "conv", "max_seq_length": 16}
    directory = checkpoints.save_model_dir(build_task_model(tiny_config, info), tmp_path / "conv",
                                           task_info=info)
    names = dict(tf.train.list_variables(os.path.join(directory, "bert_model.ckpt")))
    assert names["classifier/output/output_weights"] == [2, 3 * 128]
    assert names["classifier/conv_2/kernel"] == [2, 32, 128]
    assert "output_weights" not in names
    checkpoints.load_task_model(directory)


def test_crf_tagger_loads_with_its_schemes_constraints(tiny_config, tmp_path):
    # Models do not read tagging schemes: the builder is given the allowed moves, and
    # load_task_model computes them from task.json's labels and scheme.
    from bert_tf.data import tag_schemes
    from bert_tf.modeling.task_models import BertTagger, build_task_model

    tags = ["O", "B-LOC", "E-LOC", "I-LOC", "S-LOC"]
    info = {"task": "tagging", "labels": tags, "crf": True, "scheme": "BIOES", "max_seq_length": 16}
    with pytest.raises(ValueError, match="a CRF tagger needs crf_allowed"):
        build_task_model(tiny_config, info)
    allowed = tag_schemes.allowed_transitions(tags, "BIOES")
    model = build_task_model(tiny_config, info, allowed)
    model.crf.set_weights([np.random.default_rng(0).normal(size=w.shape) for w in model.crf.get_weights()])
    loaded = checkpoints.load_task_model(checkpoints.save_model_dir(model, tmp_path / "tagger", task_info=info))
    clone = BertTagger.from_config(model.get_config())
    for restored in (loaded.crf, clone.crf):
        for table, expected in zip(restored.allowed, allowed, strict=True):
            np.testing.assert_array_equal(table, expected)
    for got, want in zip(loaded.crf.get_weights(), model.crf.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    logits = tf.random.normal([3, 6, len(tags)], seed=1)
    mask = tf.constant([[True] * 6, [True, False] * 3, [False] * 6])
    np.testing.assert_array_equal(loaded.decode(logits, mask), model.decode(logits, mask))


# Casing: google-research/bert's validate_case_matches_checkpoint.

@pytest.mark.parametrize("name, lower", [
    ("uncased_L-12_H-768_A-12", True), ("uncased_L-24_H-1024_A-16", True), ("uncased_L-2_H-128_A-2", True),
    ("wwm_uncased_L-24_H-1024_A-16", True), ("multilingual_L-12_H-768_A-12", True),
    ("chinese_L-12_H-768_A-12", True), ("cased_L-12_H-768_A-12", False), ("cased_L-24_H-1024_A-16", False),
    ("wwm_cased_L-24_H-1024_A-16", False), ("multi_cased_L-12_H-768_A-12", False),
    ("/models/cased_L-12_H-768_A-12/", False), ("my_uncased_model", None), ("uncased", None),
    ("cased_L-12_H-768", None)])
def test_casing_from_google_checkpoint_names(name, lower):
    assert checkpoints.casing_from_name(name) is lower


def test_case_mismatch_is_refused_unless_allowed(tiny_config, hf_model, tmp_path):
    google = _write_tf1(tmp_path / "cased_L-2_H-32_A-4", tiny_config, _tf1_arrays(hf_model))
    values = json.loads((tmp_path / "cased_L-2_H-32_A-4" / "bert_config.json").read_text())
    del values["do_lower_case"]
    (tmp_path / "cased_L-2_H-32_A-4" / "bert_config.json").write_text(json.dumps(values))
    _write_tf1(tmp_path / "ours", tiny_config.replace(do_lower_case=False), _tf1_arrays(hf_model))
    unnamed = _write_tf1(tmp_path / "unnamed", tiny_config, _tf1_arrays(hf_model))
    os.remove(tmp_path / "unnamed" / "bert_config.json")
    (tmp_path / "unnamed" / "bert_config.json").write_text(json.dumps(values))
    for path in (google, str(tmp_path / "cased_L-2_H-32_A-4"), str(tmp_path / "ours")):
        assert checkpoints.resolve_lower_case(None, path) is False  # unset: the checkpoint's casing
        assert checkpoints.resolve_lower_case(False, path) is False
        with pytest.raises(checkpoints.CaseMismatchError) as error:
            checkpoints.resolve_lower_case(True, path)
        assert "\n" not in str(error.value) and "--do_lower_case=True" in str(error.value)
        assert checkpoints.resolve_lower_case(True, path, allow_mismatch=True) is True
    with pytest.raises(checkpoints.CaseMismatchError, match="cased_L-2_H-32_A-4"):
        checkpoints.resolve_lower_case(True, google)
    with pytest.raises(checkpoints.CaseMismatchError, match=r"ours/bert_config.json \(do_lower_case=False\)"):
        checkpoints.resolve_lower_case(True, str(tmp_path / "ours"))
    # Nothing recorded: any casing goes; unset takes the default.
    assert checkpoints.recorded_casing(unnamed) is None
    assert checkpoints.resolve_lower_case(True, unnamed) is True
    assert checkpoints.resolve_lower_case(None, unnamed, default=False) is False
    assert checkpoints.resolve_lower_case(False, None) is False


def test_hugging_face_casing_comes_from_its_tokenizer_config(hf_dir, minilm_dir):
    assert checkpoints.recorded_casing(hf_dir) is None
    lower, where = checkpoints.recorded_casing(minilm_dir)
    assert lower is True and where.endswith("tokenizer_config.json (do_lower_case=True)")
    with pytest.raises(checkpoints.CaseMismatchError):
        checkpoints.resolve_lower_case(False, minilm_dir)
