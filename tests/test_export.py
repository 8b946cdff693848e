"""SavedModel export: raw strings in a fresh process give the in-process Keras outputs."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import checkpoints, export
from bert_tf.configs import BertConfig
from bert_tf.data import classification, tag_schemes
from bert_tf.data.ner import conll
from bert_tf.data.ner.features import convert_to_features
from bert_tf.data.tokenization import BertTokenizer, split_words_with_offsets
from bert_tf.modeling.task_models import build_task_model
from bert_tf.training import finetuning, ner_job
from tests.conftest import own_stderr_lines
from tests.finetuning_helpers import ENV, ROOT, TESTDATA, run_driver, tiny_model_dir

LONG = "BERT 模型 " * 1250  # 10,000 characters
TEXTS = ["John Smith lives in New York and works for Acme Corp.", "北京是中国的首都，张三在上海工作。",
         "", LONG, "Ünïcödé, tabs\tand\nnewlines; über-long-hyphenated-words!"]
PAIRS = ["Is it raining?", "是吗", "", "x", LONG]
COMMON = ["--train_batch_size=4", "--eval_batch_size=8", "--num_train_epochs=1", "--max_seq_length=32",
          "--learning_rate=1e-3", "--log_steps=1"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, minilm_dir):
    return tiny_model_dir(tmp_path_factory.mktemp("pretrained") / "model", minilm_dir)


@pytest.fixture(scope="module")
def classifier_dir(pretrained, tmp_path_factory):
    out = tmp_path_factory.mktemp("mrpc")
    result = run_driver("run_classifier.py", "--task_name=MRPC", f"--data_dir={TESTDATA}/glue/MRPC",
                        f"--init_checkpoint={pretrained}", f"--output_dir={out}", "--do_train", *COMMON)
    assert result.returncode == 0, result.stderr[-3000:]
    return str(out / "best")


@pytest.fixture(scope="module")
def tagger_dir(pretrained, tmp_path_factory):
    out = tmp_path_factory.mktemp("ner")
    result = run_driver("run_ner.py", f"--train_file={TESTDATA}/ner_train.txt",
                        f"--init_checkpoint={pretrained}", f"--output_dir={out}", "--do_train",
                        "--use_crf", *COMMON)
    assert result.returncode == 0, result.stderr[-3000:]
    return str(out / "best")


def _serve_in_fresh_process(version_dir, tmp_path, text, text_pair=None):
    """Loads the export with tf.saved_model.load in a new interpreter; its outputs as arrays."""
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"text": text, "text_pair": text_pair}))
    out = tmp_path / "outputs.json"
    script = ("import json, sys, numpy as np, tensorflow as tf, tensorflow_text\n"
              "r = json.load(open(sys.argv[2]))\n"
              "m = tf.saved_model.load(sys.argv[1])\n"
              "inputs = {k: tf.constant(v) for k, v in r.items() if v is not None}\n"
              "out = m.signatures['serving_default'](**inputs)\n"
              "text = lambda v: v.decode() if isinstance(v, bytes) else [text(x) for x in v] if isinstance(v, list) else v\n"
              "json.dump({k: text(v.numpy().tolist()) for k, v in out.items()}, open(sys.argv[3], 'w'))\n")
    result = subprocess.run([sys.executable, "-c", script, version_dir, str(request), str(out)],
                            cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return {k: np.array(v) for k, v in json.loads(out.read_text()).items()}


def _strings(array):
    return [[s.decode() if isinstance(s, bytes) else str(s) for s in row] for row in array]


@pytest.fixture(scope="module")
def classifier_export(classifier_dir, tmp_path_factory):
    export_dir = tmp_path_factory.mktemp("export")
    version_dir = export.export_saved_model(classifier_dir, export_dir, "mrpc")
    assert version_dir == str(export_dir / "mrpc" / "1")
    return version_dir


def test_classifier_export_matches_keras_in_a_fresh_process(classifier_dir, classifier_export, tmp_path):
    version_dir = classifier_export
    served = _serve_in_fresh_process(version_dir, tmp_path, TEXTS, PAIRS)

    model = checkpoints.load_task_model(classifier_dir)
    tokenizer = BertTokenizer(model.vocab_file, lower_case=model.task_info["do_lower_case"])
    examples = classification.Examples(path="request", texts=TEXTS, text_pairs=PAIRS, labels=None,
                                       ids=[str(i) for i in range(len(TEXTS))],
                                       line_numbers=list(range(len(TEXTS))))
    encoded = classification.encode_examples(examples, tokenizer, model.task_info["max_seq_length"])
    logits = finetuning.predict(model, encoded.features, 8)["logits"]
    probabilities = tf.nn.softmax(logits).numpy()
    np.testing.assert_allclose(served["probabilities"], probabilities, atol=1e-5)
    np.testing.assert_array_equal(served["label_id"], probabilities.argmax(-1))
    labels = model.task_info["labels"]
    assert served["label"].tolist() == [labels[i] for i in probabilities.argmax(-1)]


def test_tagger_export_matches_keras_in_a_fresh_process(tagger_dir, tmp_path):
    version_dir = export.export_saved_model(tagger_dir, tmp_path / "export", "ner", version=7)
    served = _serve_in_fresh_process(version_dir, tmp_path, TEXTS)

    model = checkpoints.load_task_model(tagger_dir)
    tags = model.task_info["labels"]
    tokenizer = BertTokenizer(model.vocab_file, lower_case=model.task_info["do_lower_case"])
    words, begin, end = split_words_with_offsets(tf.constant(TEXTS))
    sentences = [conll.TaggedSentence(tuple(w.decode() for w in row), ("O",) * len(row))
                 for row in words.to_list()]
    features = convert_to_features(sentences, tokenizer, tags, model.task_info["max_seq_length"])
    want = ner_job.predict_tags(model, features, tags, 8)
    got = _strings(served["tags"])
    for row, sentence in zip(got, want):
        assert row[:len(sentence)] == sentence and set(row[len(sentence):]) <= {""}
    assert _strings(served["tokens"])[0][:3] == ["John", "Smith", "lives"]

    # Entities: the spans of the tags, as character offsets into the input text.
    chunks = [sorted(_bio_chunks(sentence), key=lambda c: c[1]) for sentence in want]
    for i, text in enumerate(TEXTS):
        char_starts = [len(text.encode()[:b].decode()) for b in begin[i].numpy()]
        char_ends = [len(text.encode()[:e].decode()) for e in end[i].numpy()]
        expected = [(kind, char_starts[a], char_ends[b]) for kind, a, b in chunks[i]]
        n = len(expected)
        got_spans = list(zip(_strings([served["entity_types"][i][:n]])[0],
                             served["entity_starts"][i][:n].tolist(), served["entity_ends"][i][:n].tolist()))
        assert got_spans == expected
        assert (served["entity_starts"][i][n:] == -1).all()
        for (kind, s, e), t in zip(expected, _strings([served["entity_texts"][i][:n]])[0]):
            assert t == text[s:e]


def _bio_chunks(sentence_tags):
    """(type, first word, last word) of each entity, by seqeval's reading of the tags."""
    from seqeval.metrics.sequence_labeling import get_entities

    return [(kind, a, b) for kind, a, b in get_entities(list(sentence_tags))]


def _served_words(fixture, scheme):
    """The sentences of a fixture, split into the words the export splits their text into.

    Each entity keeps its span (now over the served words) and type, written
    in `scheme`, so run_ner.py reads the file, and run_ner.py and the export
    tag the same words (e.g. "U.N." is four words to both).
    """
    sentences = conll.read_conll(os.path.join(TESTDATA, fixture), scheme=scheme).sentences
    words, begin, _ = split_words_with_offsets(tf.constant([" ".join(s.words) for s in sentences]))
    result = []
    for sentence, found, row, row_begin in zip(sentences, tag_schemes.entities([s.tags for s in sentences]),
                                                words.to_list(), begin.to_list()):
        lengths = [len(w.encode()) + 1 for w in sentence.words]  # byte offsets in the joined text
        starts = np.cumsum([0] + lengths)
        inside = lambda a, b: [j for j, offset in enumerate(row_begin) if starts[a] <= offset < starts[b]]  # noqa: E731
        spans = [(kind, inside(a, b + 1)[0], inside(a, b + 1)[-1]) for kind, a, b in found]
        result.append(conll.TaggedSentence(tuple(w.decode() for w in row),
                                           tuple(tag_schemes.entity_tags(len(row), spans, scheme))))
    return result


def _random_tagger(pretrained, directory, tags, scheme, use_crf, max_seq_length):
    """A tagger with random, decisive scores (and CRF transitions): entities of every shape."""
    config = BertConfig.from_json_file(os.path.join(pretrained, "bert_config.json"))
    task_info = {"task": "tagging", "labels": tags, "crf": use_crf, "scheme": scheme,
                 "max_seq_length": max_seq_length, "do_lower_case": True}
    keras.utils.set_random_seed(len(tags))  # the encoder's weights too, whatever ran before in this process
    model = build_task_model(config, task_info, tag_schemes.allowed_transitions(tags, scheme) if use_crf else None)
    rng = np.random.default_rng(len(tags))
    model.emissions.kernel.assign(rng.normal(scale=0.5, size=model.emissions.kernel.shape))
    for weight in model.crf.weights if use_crf else ():
        weight.assign(rng.normal(scale=2.0 / model.crf.learning_rate_multiplier, size=weight.shape))
    return checkpoints.save_model_dir(model, directory, os.path.join(pretrained, "vocab.txt"), task_info)


def _read_predictions(path):
    blocks = [b for b in open(path, encoding="utf-8").read().split("\n\n") if b.strip()]
    return [[tuple(line.split(" ")) for line in b.strip("\n").split("\n")] for b in blocks]


# (scheme, fixture read for prediction, CRF, trained): the trained tagger of `tagger_dir` (which
# may predict few entities), and random taggers, whose entities take every shape; a softmax
# tagger's tags need not be valid in the scheme.
SCHEME_CASES = [("BIO", "ner_dev.txt", True, True), ("BIO", "ner_dev.txt", False, False),
                ("IOB1", "ner_iob1.txt", True, False), ("BIOES", "ner_bioes.txt", False, False)]


@pytest.mark.parametrize("scheme, fixture, use_crf, trained", SCHEME_CASES)
def test_served_entities_equal_run_ner_predictions(pretrained, tagger_dir, tmp_path, scheme, fixture, use_crf,
                                                    trained):
    sentences = _served_words(fixture, scheme)
    predict_file = tmp_path / "predict.txt"
    conll.write_conll(predict_file, sentences)
    if trained:
        model_dir, max_seq_length = tagger_dir, 32
    else:
        max_seq_length = 12  # cuts the longer sentences: their last words are O on both sides
        tags = conll.learn_tags(conll.read_conll(os.path.join(TESTDATA, fixture), scheme=scheme).sentences, scheme)
        model_dir = _random_tagger(pretrained, tmp_path / "tagger", tags, scheme, use_crf, max_seq_length)
    out = tmp_path / "ner"
    result = run_driver("run_ner.py", f"--test_file={predict_file}", f"--init_checkpoint={model_dir}",
                        f"--output_dir={out}", "--do_predict", f"--tagging_scheme={scheme}",
                        f"--max_seq_length={max_seq_length}", "--eval_batch_size=2")
    assert result.returncode == 0, result.stderr[-3000:]
    predicted = _read_predictions(out / "test_predictions.txt")
    assert [[w for w, _ in row] for row in predicted] == [list(s.words) for s in sentences]
    predicted_tags = [[t for _, t in row] for row in predicted]

    texts = [" ".join(s.words) for s in sentences]
    version_dir = export.export_saved_model(model_dir, tmp_path / "export", "ner")
    served = export.serve_text(export.load_saved_model(version_dir), texts)
    found = tag_schemes.entities(predicted_tags)
    assert trained or sum(map(len, found)) >= 3, found  # the comparison is not vacuous
    for i, (text, sentence, tags, entities) in enumerate(zip(texts, sentences, predicted_tags, found)):
        assert _strings(served["tags"])[i] == tags + [""] * (served["tags"].shape[1] - len(tags))
        starts = np.cumsum([0] + [len(w) + 1 for w in sentence.words])  # character offsets
        ends = starts[:-1] + [len(w) for w in sentence.words]
        want = [(kind, int(starts[a]), int(ends[b]), text[starts[a]:ends[b]]) for kind, a, b in entities]
        k = len(want)
        got = list(zip(_strings([served["entity_types"][i][:k]])[0], served["entity_starts"][i][:k].tolist(),
                       served["entity_ends"][i][:k].tolist(), _strings([served["entity_texts"][i][:k]])[0]))
        assert got == want
        assert (served["entity_starts"][i][k:] == -1).all()
        assert set(_strings([served["entity_types"][i][k:]])[0]) <= {""}


def test_encoder_and_squad_exports(pretrained, tmp_path):
    encoder_dir = export.export_saved_model(pretrained, tmp_path / "export", "encoder", max_seq_length=24)
    loaded = export.load_saved_model(encoder_dir)
    outputs = export.serve_text(loaded, TEXTS)
    assert outputs["sequence_output"].shape == (len(TEXTS), 24, 32) and outputs["pooled_output"].shape == (5, 32)
    encoder = checkpoints.load_encoder(pretrained)
    ids = {k: tf.constant(v) for k, v in _packed(pretrained, TEXTS, 24).items()}
    np.testing.assert_allclose(outputs["pooled_output"], encoder(ids)["pooled_output"], atol=1e-5)
    direct = loaded.signatures[export.SERVE_TOKEN_IDS](**ids)
    np.testing.assert_allclose(direct["pooled_output"], outputs["pooled_output"], atol=1e-6)

    # A span model saved as run_squad.py saves one; the answer is the best valid
    # span's words, cut from the context as given.
    config = BertConfig.from_json_file(os.path.join(pretrained, "bert_config.json"))
    task_info = {"task": "squad", "max_seq_length": 48, "max_query_length": 8, "max_answer_length": 5,
                 "version_2_with_negative": False, "do_lower_case": True}
    squad_dir = checkpoints.save_model_dir(build_task_model(config, task_info), tmp_path / "squad",
                                           os.path.join(pretrained, "vocab.txt"), task_info)
    squad = export.load_saved_model(export.export_saved_model(squad_dir, tmp_path / "export", "squad"))
    contexts = ["The Eiffel Tower, in Paris, was built in 1889 by Gustave Eiffel's company.",
                "北京是中国的首都。", ""]
    out = export.serve_text(squad, ["When was it built?", "首都是哪里？", "nothing?"], contexts)
    for context, answer, start, end in zip(contexts, out["answer"], out["answer_start"], out["answer_end"]):
        if not context:
            assert (answer, start, end) == (b"", -1, -1)
        else:
            assert 0 <= start < end <= len(context) and context[start:end] == answer.decode()


def _packed(model_dir, texts, length):
    from bert_tf.data.packing import pack_segments

    tokenizer = BertTokenizer(os.path.join(model_dir, "vocab.txt"))
    return pack_segments([tokenizer(tf.constant(texts))], max_seq_length=length, cls_id=tokenizer.cls_id,
                         sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id)


def test_saved_model_cli_lists_a_string_signature(classifier_export):
    result = subprocess.run([sys.executable, "-m", "bert_tf.tools.saved_model_cli", "show", "--dir",
                             classifier_export, "--all"], cwd=ROOT, env=ENV, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    default = result.stdout.split("signature_def['serving_default']")[1].split("signature_def[")[0]
    assert "inputs['text'] tensor_info:\n        dtype: DT_STRING" in default
    assert "inputs['text_pair']" in default and "outputs['probabilities']" in default
    assert "signature_def['serve_token_ids']" in result.stdout


def test_warmup_requests_parse_and_run(classifier_export):
    from tensorflow_serving.apis import prediction_log_pb2

    path = os.path.join(classifier_export, export.WARMUP_FILE)
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in tf.data.TFRecordDataset(path)]
    assert len(logs) == 1
    request = logs[0].predict_log.request
    assert (request.model_spec.name, request.model_spec.signature_name) == ("mrpc", "serving_default")
    signature = export.load_saved_model(classifier_export).signatures["serving_default"]
    specs = signature.structured_input_signature[1]
    assert set(request.inputs) == set(specs)
    inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
    assert all(a.dtype == object and a.shape == (3,) and specs[k].dtype == tf.string for k, a in inputs.items())
    outputs = signature(**{k: tf.constant(v) for k, v in inputs.items()})
    assert outputs["probabilities"].shape == (3, 2)


def test_bad_exports_one_line_nothing_written(classifier_dir, classifier_export, tmp_path):
    def run(*args):
        return run_driver("export_saved_model.py", *args)

    export_dir = os.path.dirname(os.path.dirname(classifier_export))
    before = sorted(os.listdir(os.path.join(export_dir, "mrpc")))
    no_vocab = tmp_path / "no_vocab"
    no_vocab.mkdir()
    for name in ("bert_config.json", "bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001", "task.json"):
        (no_vocab / name).write_bytes(open(os.path.join(classifier_dir, name), "rb").read())
    cases = [
        ([f"--model_dir={tmp_path}", f"--export_dir={export_dir}", "--model_name=x"], str(tmp_path)),
        ([f"--model_dir={classifier_dir}", f"--export_dir={export_dir}", "--model_name=mrpc", "--version=1"],
         "already exists"),
        ([f"--model_dir={no_vocab}", f"--export_dir={export_dir}", "--model_name=x"], "no vocab.txt"),
        ([f"--model_dir={classifier_dir}", f"--export_dir={export_dir}", "--model_name=x",
          "--max_seq_length=4096"], "--max_seq_length=4096"),
    ]
    for args, message in cases:
        result = run(*args)
        lines = own_stderr_lines(result.stderr)
        assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
        assert lines[0].startswith("export_saved_model.py: error: ") and message in lines[0], lines
    assert sorted(os.listdir(export_dir)) == ["mrpc"]
    assert sorted(os.listdir(os.path.join(export_dir, "mrpc"))) == before

    again = run(f"--model_dir={classifier_dir}", f"--export_dir={export_dir}", "--model_name=mrpc",
                "--version=1", "--overwrite")
    assert again.returncode == 0, again.stderr[-2000:]
    assert sorted(os.listdir(os.path.join(export_dir, "mrpc"))) == ["1"]
