"""The exported SQuAD model answers what run_squad.py's evaluation predicts, window for window."""

import json
import os

import keras
import numpy as np
import pytest

from bert_tf import checkpoints, export
from bert_tf.configs import INPUT_NAMES, BertConfig
from bert_tf.data.squad import features as squad_features, reading
from bert_tf.data.tokenization import BertTokenizer
from bert_tf.modeling.task_models import BertSpanLabeler
from tests.finetuning_helpers import TESTDATA, run_driver

SHAPE = dict(max_seq_length=64, doc_stride=16, max_query_length=12)
# The long context ends with the answer of "last", which only the last of its
# windows scores; the model is made to point at it. "middle" is answered
# however the model answers it.
LONG_QUESTIONS = [("last", "What had everyone heard before?", "heard them before"),
                  ("middle", "What was the exhibition about?", "ancient navigation")]


def _long_paragraph():
    with open(os.path.join(TESTDATA, "en_corpus.txt"), encoding="utf-8") as f:
        context = " ".join(f.read().split())
    assert context.endswith("although they had heard them before.")
    qas = [{"id": qid, "question": question,
            "answers": [{"text": answer, "answer_start": context.rindex(answer)}]}
           for qid, question, answer in LONG_QUESTIONS]
    return {"context": context, "qas": qas}


def _with_long_paragraph(fixture, directory):
    """The fixture file with the long context added as one more article."""
    with open(os.path.join(TESTDATA, fixture), encoding="utf-8") as f:
        dataset = json.load(f)
    dataset["data"].append({"title": "long", "paragraphs": [_long_paragraph()]})
    path = os.path.join(directory, fixture)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(dataset, f)
    return path


def _pointing_model(tokenizer, path):
    """A random tiny span model whose head points at the answer of question "last" of `path`.

    Its start (end) weights are the mean final hidden state of the answers'
    first (last) pieces minus that of all pieces, scaled so that logits
    spread over tens: the span it picks is far from a tie.
    """
    keras.utils.set_random_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=128)
    model = BertSpanLabeler(config)
    examples = [e for e in reading.read_squad_examples(path, is_training=True)[0] if e.qas_id == "last"]
    arrays, _ = squad_features.convert_examples_to_features(examples, tokenizer, is_training=True, **SHAPE)
    hidden = model.encoder({k: arrays[k] for k in INPUT_NAMES})["sequence_output"].numpy()
    mean = hidden[arrays["input_mask"] > 0].mean(axis=0)
    rows = np.flatnonzero(arrays["start_positions"] > 0)
    weights = np.stack([hidden[rows, arrays[name][rows]].mean(axis=0) - mean
                        for name in squad_features.POSITION_NAMES])
    model.span.output_weights.assign(20 * weights / np.sum(weights ** 2, axis=1, keepdims=True))
    return model


@pytest.fixture(scope="module")
def setup(tmp_path_factory, minilm_dir):
    """v2 -> (SQuAD file, model directory, loaded export): one model, two task.json."""
    root = tmp_path_factory.mktemp("squad_serving")
    vocab = os.path.join(minilm_dir, "vocab.txt")
    files = {v2: _with_long_paragraph(name, root) for v2, name in ((False, "squad_v1.1.json"),
                                                                  (True, "squad_v2.0.json"))}
    model = _pointing_model(BertTokenizer(vocab), files[False])
    models = {}
    for v2 in (False, True):
        task_info = {"task": "squad", "max_seq_length": SHAPE["max_seq_length"], "doc_stride": SHAPE["doc_stride"],
                     "max_query_length": SHAPE["max_query_length"], "n_best_size": 7, "max_answer_length": 10,
                     "version_2_with_negative": v2, "null_score_diff_threshold": 0.5, "do_lower_case": True}
        model_dir = checkpoints.save_model_dir(model, root / f"model_v2_{v2}", vocab, task_info)
        models[v2] = (files[v2], model_dir, export.load_saved_model(
            export.export_saved_model(model_dir, root / "export", f"squad_v2_{v2}")))
    return models


def _predictions_json(model_dir, path, v2, out):
    """run_squad.py --do_predict with the settings of the model's task.json, in float32."""
    args = [f"--predict_file={path}", f"--init_checkpoint={model_dir}", f"--output_dir={out}", "--do_predict",
            "--max_seq_length=64", "--doc_stride=16", "--max_query_length=12", "--n_best_size=7",
            "--max_answer_length=10", "--null_score_diff_threshold=0.5", "--mixed_precision=float32",
            "--eval_batch_size=3"]
    if v2:
        args.append("--version_2_with_negative")
    result = run_driver("run_squad.py", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out / "predictions.json", encoding="utf-8") as f:
        predictions = json.load(f)
    null_odds = None
    if v2:
        with open(out / "null_odds.json", encoding="utf-8") as f:
            null_odds = json.load(f)
    return predictions, null_odds


@pytest.mark.parametrize("v2", [False, True])
def test_export_answers_equal_run_squad_predictions(setup, tmp_path, v2):
    # Every question of the fixture and of the long context.
    path, model_dir, loaded = setup[v2]
    expected, null_odds = _predictions_json(model_dir, path, v2, tmp_path / "out")
    examples, _ = reading.read_squad_examples(path, is_training=False, version_2_with_negative=v2)
    out = export.serve_text(loaded, [e.question for e in examples], [e.context.text for e in examples])
    answers = {e.qas_id: a.decode("utf-8") for e, a in zip(examples, out["answer"])}
    assert answers == expected
    assert any(expected.values())
    for example, answer, start, end in zip(examples, answers.values(), out["answer_start"], out["answer_end"]):
        if answer:
            assert example.context.text[start:end] == answer
        else:
            assert (start, end) == (-1, -1)
    if v2:
        assert dict(zip(answers, out["null_odds"].tolist())) == pytest.approx(null_odds, abs=1e-4)
        assert set(out) == {"answer", "answer_start", "answer_end", "answer_score", "null_odds"}
    # The long context: several windows; the answer of "last" is scored in the last one only.
    assert {"last", "middle"} <= set(answers)
    if not v2:
        tokenizer = BertTokenizer(os.path.join(model_dir, "vocab.txt"))
        training, _ = reading.read_squad_examples(path, is_training=True)
        arrays, windows = squad_features.convert_examples_to_features(training, tokenizer, is_training=True, **SHAPE)
        last = [row for row, w in enumerate(windows) if w.example.qas_id == "last"]
        assert len(last) > 5
        start = arrays["start_positions"][last[-1]]
        assert start > 0 and windows[last[-1]].is_max_context[start - windows[last[-1]].doc_offset]
        assert all(arrays["start_positions"][row] == 0 or not windows[row].is_max_context[
            arrays["start_positions"][row] - windows[row].doc_offset] for row in last[:-1])
    assert answers["last"] == "heard them before"


def test_export_refuses_a_length_without_room_for_the_context(setup, tmp_path):
    _, model_dir, _ = setup[False]
    with pytest.raises(export.ExportError, match="--max_seq_length=15 leaves no room for a context"):
        export.export_saved_model(model_dir, tmp_path / "export", "squad", max_seq_length=15)
    assert not os.path.exists(tmp_path / "export" / "squad" / "1")
