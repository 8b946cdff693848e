"""SQuAD: reading, windowed features, decoding back to the original text, official metrics."""

import importlib
import itertools
import json
import os
import sys
import tempfile
import types
import unicodedata

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from bert_tf.data.squad import alignment, metrics as squad_metrics, reading
from bert_tf.data.squad import predictions as squad_predictions
from bert_tf.data.squad import features as squad_features
from bert_tf.data.tokenization import BertTokenizer, normalize_text
from tests import squad_reference

TESTDATA = os.path.join(os.path.dirname(__file__), os.pardir, "testdata")
V1 = os.path.join(TESTDATA, "squad_v1.1.json")
V2 = os.path.join(TESTDATA, "squad_v2.0.json")
# Small enough that the fixture contexts need two windows.
SHAPE = dict(max_seq_length=48, doc_stride=16, max_query_length=12)


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), lower_case=True)


@pytest.fixture(scope="module")
def original():
    """google-research/bert's run_squad.py (PyPI bert-tensorflow), imported for its data functions.

    Its modeling.py imports tensorflow.contrib, gone from TF 2: an empty stand-in
    serves the import alone (no model is built here). Its flags share names with
    other modules' (vocab_file, max_seq_length, ...), so either side may redefine them.
    """
    sys.modules.setdefault("tensorflow.contrib", types.SimpleNamespace(layers=None))
    for name in list(flags.FLAGS):
        flags.FLAGS[name].allow_override = True
    module = importlib.import_module("bert.run_squad")
    for name in list(flags.FLAGS):
        flags.FLAGS[name].allow_override = True
    flags.FLAGS.mark_as_parsed()
    return module


def _original_features(original, minilm_dir, path, v2, is_training, **shape):
    """The original's examples and features of a SQuAD file, with its FullTokenizer (uncased)."""
    flags.FLAGS.version_2_with_negative = v2
    if is_training:  # the original trains on exactly one answer a question; we take the first
        dataset = _load(path)
        for paragraph in (p for article in dataset["data"] for p in article["paragraphs"]):
            for qa in paragraph["qas"]:
                qa["answers"] = qa["answers"][:1]
        path = os.path.join(tempfile.mkdtemp(), "first_answers.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(dataset, f)
    examples = original.read_squad_examples(str(path), is_training=is_training)
    tokenizer = original.tokenization.FullTokenizer(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=True)
    features = []
    original.convert_examples_to_features(examples, tokenizer, is_training=is_training,
                                          output_fn=features.append, **shape)
    return examples, features


def _assert_features_equal(arrays, features, expected, is_training):
    """Our windows equal the original's: ids, mask, segments, max-context flags, answer positions."""
    assert len(features) == len(expected)
    for row, (ours, theirs) in enumerate(zip(features, expected)):
        np.testing.assert_array_equal(arrays["input_word_ids"][row], theirs.input_ids)
        np.testing.assert_array_equal(arrays["input_mask"][row], theirs.input_mask)
        np.testing.assert_array_equal(arrays["input_type_ids"][row], theirs.segment_ids)
        assert [theirs.token_is_max_context[ours.doc_offset + i] for i in range(ours.doc_length)] == \
            list(ours.is_max_context)
        assert sorted(theirs.token_is_max_context) == list(range(ours.doc_offset, ours.doc_offset + ours.doc_length))
        if is_training:
            assert (arrays["start_positions"][row], arrays["end_positions"][row]) == (
                theirs.start_position, theirs.end_position)


def _original_decoding(original, tmp_path, examples, features, start, end, *, v2, threshold=0.0,
                       n_best_size=20, max_answer_length=30):
    """The original's write_predictions on our logits: (predictions, nbest, null odds or None)."""
    flags.FLAGS.version_2_with_negative = v2
    flags.FLAGS.null_score_diff_threshold = threshold
    flags.FLAGS.verbose_logging = False
    results = [original.RawResult(unique_id=f.unique_id, start_logits=list(map(float, s)),
                                  end_logits=list(map(float, e))) for f, s, e in zip(features, start, end)]
    out = tmp_path / "original_predictions"
    out.mkdir(exist_ok=True)
    paths = [str(out / name) for name in ("predictions.json", "nbest.json", "null_odds.json")]
    original.write_predictions(examples, features, results, n_best_size, max_answer_length, True, *paths)
    return _load(paths[0]), _load(paths[1]), _load(paths[2]) if v2 else None


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _write_json(tmp_path, dataset, name="squad.json"):
    path = tmp_path / name
    path.write_text(json.dumps(dataset, ensure_ascii=False), encoding="utf-8")
    return str(path)


def _one_paragraph(context, questions):
    """A v1.1 file with one paragraph; questions are (id, question, answer text)."""
    qas = [{"id": qid, "question": question,
            "answers": [{"text": answer, "answer_start": context.index(answer)}]}
           for qid, question, answer in questions]
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}


def _point_logits(arrays, features, low=-10.0, high=5.0):
    """Logits that peak at every training feature's start/end position."""
    shape = arrays["input_word_ids"].shape
    start, end = np.full(shape, low), np.full(shape, low)
    rows = np.arange(len(features))
    start[rows, arrays["start_positions"]] = high
    end[rows, arrays["end_positions"]] = high
    return start, end


# Reading.

def test_reads_v1_words_spans_and_all_gold_answers():
    examples, skipped = reading.read_squad_examples(V1, is_training=True)
    assert skipped == 0
    assert [e.qas_id for e in examples] == [f"v1q{i}" for i in range(1, 9)]
    by_id = {e.qas_id: e for e in examples}
    context = by_id["v1q1"].context
    assert context is by_id["v1q5"].context  # one paragraph, one shared context
    assert context.words == context.text.split()
    for start, end, word in zip(context.word_starts, context.word_ends, context.words):
        assert context.text[start:end] == word
    # The training answer "1985" lies inside the word "1985)".
    when = by_id["v1q2"]
    assert when.answers == ("1985", "in 1985", "(in 1985)")
    assert context.words[when.start_word:when.end_word + 1] == ["1985)"]
    assert context.words[by_id["v1q3"].start_word:by_id["v1q3"].end_word + 1] == ["José", "Ñúñez,"]
    assert reading.gold_answers(examples)["v1q4"] == ["Rösti", "“Rösti”"]


def test_reads_v2_impossible_questions_without_span():
    examples, _ = reading.read_squad_examples(V2, is_training=True, version_2_with_negative=True)
    impossible = {e.qas_id for e in examples if e.is_impossible}
    assert impossible == {"v2q2", "v2q4"}
    for e in examples:
        assert (e.start_word == -1) == e.is_impossible
        assert (e.answers == ()) == e.is_impossible
    with pytest.raises(ValueError, match=r"squad_v2\.0\.json: question id 'v2q2': is_impossible"):
        reading.read_squad_examples(V2, is_training=True)


def test_evaluation_reading_keeps_answers_without_span():
    examples, _ = reading.read_squad_examples(V1, is_training=False)
    assert all(e.start_word == -1 and e.answer_text == "" for e in examples)
    assert sum(len(e.answers) for e in examples) == 13


def _break_question(dataset, qid, change):
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if qa["id"] == qid:
                    change(qa)
    return dataset


@pytest.mark.parametrize("qid,change,message", [
    ("v1q3", lambda qa: qa.pop("question"), "lacks the field 'question'"),
    ("v1q5", lambda qa: qa["answers"][0].update(answer_start=qa["answers"][0]["answer_start"] + 1),
     "answer 'Zürich' is not at answer_start 32"),
    ("v1q6", lambda qa: qa["answers"][0].update(answer_start="99"), "field 'answer_start' is str, not int"),
    ("v1q7", lambda qa: qa.update(answers=[]), "has no answer"),
    ("v1q8", lambda qa: qa.update(id="v1q1"), "repeats an earlier question id"),
])
def test_malformed_question_is_named_or_skipped_and_counted(tmp_path, qid, change, message):
    path = _write_json(tmp_path, _break_question(_load(V1), qid, change))
    shown = "v1q1" if qid == "v1q8" else qid
    with pytest.raises(ValueError) as error:
        reading.read_squad_examples(path, is_training=True)
    assert str(error.value).startswith(f"{path}: question id {shown!r}: ")
    assert message in str(error.value)
    examples, skipped = reading.read_squad_examples(path, is_training=True, skip_bad_rows=True)
    assert skipped == 1
    assert len(examples) == 7
    assert len({e.qas_id for e in examples}) == 7


def test_missing_id_and_missing_context_are_located(tmp_path):
    dataset = _break_question(_load(V1), "v1q2", lambda qa: qa.pop("id"))
    path = _write_json(tmp_path, dataset)
    with pytest.raises(ValueError, match=r"article 0 paragraph 0 question 1: lacks a string field 'id'"):
        reading.read_squad_examples(path, is_training=False)
    dataset = _load(V1)
    del dataset["data"][1]["paragraphs"][0]["context"]
    path = _write_json(tmp_path, dataset, "no_context.json")
    with pytest.raises(ValueError, match=r"no_context\.json: article 1 paragraph 0: paragraph lacks the field"):
        reading.read_squad_examples(path, is_training=False)
    examples, skipped = reading.read_squad_examples(path, is_training=False, skip_bad_rows=True)
    assert (len(examples), skipped) == (5, 3)  # the paragraph's three questions are lost


def test_lone_surrogate_escape_is_malformed(tmp_path):
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(_load(V1)).replace("When was", "When\\ud800 was", 1), encoding="utf-8")
    with pytest.raises(ValueError, match=r"question id 'v1q2': question field 'question' is not valid Unicode"):
        reading.read_squad_examples(path, is_training=False)


def test_non_utf8_and_broken_json_name_the_file(tmp_path):
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(json.dumps(_load(V1), ensure_ascii=False).encode("latin-1", "replace"))
    with pytest.raises(ValueError, match=r"latin1\.json is not UTF-8 \(bad byte at offset \d+\)"):
        reading.read_squad_examples(latin1, is_training=False)
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n{"title": "x",\n "paragraphs": [}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.json: not valid JSON \(line 3, column 17"):
        reading.read_squad_examples(broken, is_training=False)
    with pytest.raises(FileNotFoundError, match="missing.json"):
        reading.read_squad_examples(tmp_path / "missing.json", is_training=False)


# Features.

@pytest.mark.parametrize("path,v2", [(V1, False), (V2, True)])
def test_training_features_round_trip_to_the_answer(tokenizer, path, v2):
    examples, _ = reading.read_squad_examples(path, is_training=True, version_2_with_negative=v2)
    arrays, features = squad_features.convert_examples_to_features(examples, tokenizer, is_training=True, **SHAPE)
    n = len(features)
    assert {k: v.shape for k, v in arrays.items()} == {
        "input_word_ids": (n, 48), "input_mask": (n, 48), "input_type_ids": (n, 48),
        "start_positions": (n,), "end_positions": (n,)}
    assert all(v.dtype == np.int32 for v in arrays.values())
    assert n > len(examples)  # some contexts need two windows
    found = set()
    for row, feature in enumerate(features):
        start, end = arrays["start_positions"][row], arrays["end_positions"][row]
        if feature.example.is_impossible:
            assert start == end == 0
        if start == 0:
            assert end == 0
            continue
        assert feature.doc_offset <= start <= end < feature.doc_offset + feature.doc_length
        span = tokenizer.detokenize(arrays["input_word_ids"][row:row + 1, start:end + 1])
        answer = tokenizer.detokenize(tokenizer([feature.example.answer_text]))
        assert span.numpy()[0] == answer.numpy()[0]
        found.add(feature.example.qas_id)
    assert found == {e.qas_id for e in examples if not e.is_impossible}


def test_windows_pack_cls_query_sep_context_sep(tokenizer):
    examples, _ = reading.read_squad_examples(V1, is_training=False)
    arrays, features = squad_features.convert_examples_to_features(examples, tokenizer, is_training=False, **SHAPE)
    assert set(arrays) == {"input_word_ids", "input_mask", "input_type_ids"}
    for row, feature in enumerate(features):
        ids, mask, types = (arrays[k][row] for k in ("input_word_ids", "input_mask", "input_type_ids"))
        length = feature.doc_offset + feature.doc_length + 1
        query = tokenizer([feature.example.question]).numpy()[0][:SHAPE["max_query_length"]]
        np.testing.assert_array_equal(ids[:feature.doc_offset],
                                      [tokenizer.cls_id, *query, tokenizer.sep_id])
        assert ids[length - 1] == tokenizer.sep_id
        np.testing.assert_array_equal(ids[length:], tokenizer.pad_id)
        np.testing.assert_array_equal(mask, np.arange(48) < length)
        np.testing.assert_array_equal(types, (np.arange(48) >= feature.doc_offset) & (np.arange(48) < length))
    # Word-by-word batched tokenization equals tokenizing the whole context.
    context = examples[0].context.text
    doc = features[0].doc
    np.testing.assert_array_equal(doc.ids, tokenizer([context]).numpy()[0])


def test_long_context_is_split_with_stride_and_max_context(tokenizer, tmp_path, original, minilm_dir):
    with open(os.path.join(TESTDATA, "en_corpus.txt"), encoding="utf-8") as f:
        context = " ".join(f.read().split())
    path = _write_json(tmp_path, _one_paragraph(context, [("long", "Who returned from the market?",
                                                           "the farmer")]))
    examples, _ = reading.read_squad_examples(path, is_training=True)
    shape = dict(max_seq_length=64, doc_stride=20, max_query_length=8)
    arrays, features = squad_features.convert_examples_to_features(examples, tokenizer, is_training=True, **shape)
    _assert_features_equal(arrays, features, _original_features(original, minilm_dir, path, False, True,
                                                                 **shape)[1], is_training=True)
    pieces = len(features[0].doc.ids)
    room = 64 - (features[0].doc_offset - 2) - 3
    assert pieces > 3 * room
    windows = [(f.doc_start, f.doc_length) for f in features]
    # Windows start every doc_stride pieces; the last one reaches the end.
    assert [start for start, _ in windows] == list(range(0, 20 * len(windows), 20))
    assert all(length == min(room, pieces - start) for start, length in windows)
    assert windows[-1][0] + windows[-1][1] == pieces and windows[-2][0] + windows[-2][1] < pieces
    owner = np.full(pieces, -1)
    for w, feature in enumerate(features):
        scored = feature.doc_start + np.flatnonzero(feature.is_max_context)
        assert (owner[scored] == -1).all()
        owner[scored] = w
    assert (owner >= 0).all()  # every piece is scored in exactly one window
    # The answer sits in the first windows only; later ones point at [CLS].
    in_window = arrays["start_positions"] > 0
    assert 1 <= in_window.sum() < len(features)
    # Decoding the pointed span from every window gives the answer once.
    start, end = _point_logits(arrays, features)
    assert squad_predictions.decode_predictions(features, start, end).predictions == {"long": "the farmer"}


def test_features_equal_the_originals(tokenizer, original, minilm_dir, tmp_path):
    with open(os.path.join(TESTDATA, "en_corpus.txt"), encoding="utf-8") as f:
        long_context = " ".join(f.read().split())
    long_path = _write_json(tmp_path, _one_paragraph(long_context, [
            ("l1", "What did the farmer carry?", "vegetables, bread and a surprisingly heavy watermelon"),
            ("l2", "Who kept sleeping?", "the dog")]))
    for path, v2 in ((V1, False), (V2, True), (long_path, False)):
        for is_training in (True, False):
            examples, _ = reading.read_squad_examples(path, is_training=is_training, version_2_with_negative=v2)
            for shape in (SHAPE, dict(max_seq_length=40, doc_stride=7, max_query_length=5)):
                arrays, features = squad_features.convert_examples_to_features(
                    examples, tokenizer, is_training=is_training, **shape)
                theirs, expected = _original_features(original, minilm_dir, path, v2, is_training, **shape)
                assert [e.qas_id for e in examples] == [e.qas_id for e in theirs]
                _assert_features_equal(arrays, features, expected, is_training)


def _original_windows(num_pieces, room, doc_stride):
    """run_squad.py's doc spans and its _check_is_max_context, restated: (start, length, max-context flags)."""
    spans, start = [], 0
    while start < num_pieces:
        length = min(num_pieces - start, room)
        spans.append((start, length))
        if start + length == num_pieces:
            break
        start += min(length, doc_stride)
    flags = []
    for index, (start, length) in enumerate(spans):
        flags.append([])
        for piece in range(start, start + length):
            best, best_index = None, None
            for other, (s, n) in enumerate(spans):
                if s <= piece < s + n:
                    score = min(piece - s, s + n - 1 - piece) + 0.01 * n
                    if best is None or score > best:
                        best, best_index = score, other
            flags[-1].append(best_index == index)
    return spans, flags


def test_window_layout_equals_the_original_length_bonus_included():
    # Rooms over 100 pieces with a stride over 100: the original's 0.01 *
    # window length can outweigh a whole piece of context for a short last window.
    cases = [(n, room, stride) for n in (1, 5, 17, 40, 117, 118, 230, 300, 341) for room, stride in
             ((10, 3), (10, 10), (10, 25), (117, 110), (120, 128), (250, 128), (7, 1))]
    seq = 260
    for n, room, stride in cases:
        layout = squad_features.window_layout([n], [seq - room - 3], max_seq_length=seq, doc_stride=stride)
        spans, flags = _original_windows(n, room, stride)
        assert list(zip(layout.doc_start.numpy(), layout.doc_length.numpy())) == spans, (n, room, stride)
        offset = seq - room - 1  # after [CLS], the query and [SEP]
        got = [list(row[offset:offset + length]) for row, (_, length) in zip(layout.is_max_context.numpy(), spans)]
        assert got == flags, (n, room, stride)
        assert not layout.is_max_context.numpy()[:, :offset].any()
    # Several questions at once: the same windows, question by question.
    batch = squad_features.window_layout([300, 0, 40], [10, 20, 5], max_seq_length=64, doc_stride=16)
    assert np.bincount(batch.question.numpy()).tolist() == [
        len(_original_windows(300, 51, 16)[0]), 1, len(_original_windows(40, 56, 16)[0])]
    assert batch.doc_length.numpy()[np.flatnonzero(batch.question.numpy() == 1)].tolist() == [0]


def test_too_short_max_seq_length_is_an_error(tokenizer):
    examples, _ = reading.read_squad_examples(V1, is_training=False)
    with pytest.raises(ValueError, match="max_seq_length=15 leaves no room"):
        squad_features.convert_examples_to_features(examples, tokenizer, max_seq_length=15, doc_stride=4,
                                           max_query_length=12, is_training=False)


# Decoding.

@pytest.mark.parametrize("path,v2", [(V1, False), (V2, True)])
def test_decoding_pointed_spans_gives_the_exact_original_substring(tokenizer, path, v2):
    examples, _ = reading.read_squad_examples(path, is_training=True, version_2_with_negative=v2)
    arrays, features = squad_features.convert_examples_to_features(examples, tokenizer, is_training=True, **SHAPE)
    start, end = _point_logits(arrays, features)
    if v2:
        # [CLS] wins for impossible questions, loses elsewhere.
        impossible = np.array([f.example.is_impossible for f in features])
        start[:, 0] = end[:, 0] = np.where(impossible, 9.0, -9.0)
    result = squad_predictions.decode_predictions(features, start, end, version_2_with_negative=v2)
    # Case, accents and unicode punctuation as in the context; "1985" without "(in".
    assert result.predictions == {e.qas_id: e.answer_text for e in examples}
    if not v2:
        assert result.predictions["v1q2"] == "1985" and result.predictions["v1q4"] == "Rösti"
        assert result.null_odds is None
    else:
        assert result.predictions["v2q3"] == "The Grossmünster church"
        # null - best span: 9 + 9 - (-10 - 10) without answer, -9 - 9 - (5 + 5) with one.
        assert result.null_odds == {e.qas_id: 38.0 if e.is_impossible else -28.0 for e in examples}
    for qid, nbest in result.nbest.items():
        probabilities = [c.probability for c in nbest]
        assert sum(probabilities) == pytest.approx(1.0)
        assert probabilities == sorted(probabilities, reverse=True)
        assert len({c.text for c in nbest}) == len(nbest) <= 20
        assert nbest[0].text == result.predictions[qid]


@pytest.mark.parametrize("path,v2", [(V1, False), (V2, True)])
def test_decoding_equals_the_originals(tokenizer, original, minilm_dir, tmp_path, path, v2):
    examples, _ = reading.read_squad_examples(path, is_training=False, version_2_with_negative=v2)
    arrays, features = squad_features.convert_examples_to_features(examples, tokenizer, is_training=False, **SHAPE)
    theirs, expected = _original_features(original, minilm_dir, path, v2, False, **SHAPE)
    _assert_features_equal(arrays, features, expected, is_training=False)
    training = squad_features.convert_examples_to_features(
        reading.read_squad_examples(path, is_training=True, version_2_with_negative=v2)[0], tokenizer,
        is_training=True, **SHAPE)[0]
    rng = np.random.default_rng(0)
    noise = lambda: rng.normal(scale=0.1, size=arrays["input_word_ids"].shape)  # noqa: E731  (no ties)
    pointed = [logits + noise() for logits in _point_logits(training, features)]
    pointed[0][:, 0] = pointed[1][:, 0] = 4.0  # a null score between the spans' and the rest
    # Padding never ranks among the best positions here, while the original
    # ranks it by its logits: the model sees it masked and dynamic padding
    # leaves zeros where a batch was trimmed. Both sides decode logits with
    # padding below everything else (test_padding_logits_do_not_matter).
    padding = arrays["input_mask"] == 0
    logit_sets = [[np.where(padding, -100.0, x) for x in logits] for logits in (pointed, (3 * noise(), 3 * noise()))]
    for (start, end), threshold, n_best in itertools.product(logit_sets, (-2.0, 0.0, 1.5) if v2 else (0.0,),
                                                             (20, 7)):
        ours = squad_predictions.decode_predictions(features, start, end, n_best_size=n_best,
                                                    version_2_with_negative=v2,
                                                    null_score_diff_threshold=threshold)
        predictions, nbest, null_odds = _original_decoding(
            original, tmp_path, theirs, expected, start, end, v2=v2, threshold=threshold, n_best_size=n_best)
        # Without any valid span the original answers the nonce text "empty"; we answer "".
        nonce = {qid for qid, candidates in nbest.items() if [c["text"] for c in candidates] == ["empty"]}
        assert all(ours.predictions[qid] == "" for qid in nonce)
        predictions.update({qid: "" for qid in nonce})
        nbest.update({qid: [c._asdict() for c in ours.nbest[qid]] for qid in nonce})
        assert ours.predictions == predictions
        if v2:
            assert ours.null_odds == pytest.approx(null_odds)
        assert set(ours.nbest) == set(nbest)
        for qid, candidates in nbest.items():
            assert [c.text for c in ours.nbest[qid]] == [c["text"] for c in candidates], qid
            for key in ("probability", "start_logit", "end_logit"):
                assert [getattr(c, key) for c in ours.nbest[qid]] == pytest.approx([c[key] for c in candidates])


def test_padding_logits_do_not_matter(tokenizer):
    examples, _ = reading.read_squad_examples(V2, is_training=False, version_2_with_negative=True)
    arrays, features = squad_features.convert_examples_to_features(examples, tokenizer, is_training=False, **SHAPE)
    padding = arrays["input_mask"] == 0
    assert padding.any()
    start, end = np.random.default_rng(1).normal(size=(2,) + padding.shape)
    decoded = [squad_predictions.decode_predictions(
        features, np.where(padding, fill, start), np.where(padding, fill, end), version_2_with_negative=True,
        n_best_size=5) for fill in (-100.0, 0.0, 100.0)]
    assert decoded[0].nbest != {}
    assert decoded[0] == decoded[1] == decoded[2]


def _piece_texts(tokenizer, ids):
    return tuple(tokenizer.vocabulary[i] for i in ids)


def test_decoding_keeps_combining_marks_and_places_unknown_pieces(tokenizer, tmp_path, monkeypatch):
    context = ("Le (Cafe\u0301) des Artistes ouvre a\u0300 (MIDI\u2603X) pile, pre\u0300s du "
               "Pont\u00adNeuf. \u2603(\u2603).")
    path = _write_json(tmp_path, _one_paragraph(context, [
        ("mark", "Quel café?", "Cafe\u0301"),
        ("unknown", "Quand?", "MIDI\u2603X"),
        ("deleted", "Où?", "Pont\u00adNeuf"),
        ("two_unknown", "Quoi?", "(\u2603)"),
    ]))
    examples, _ = reading.read_squad_examples(path, is_training=True)
    shape = dict(max_seq_length=64, doc_stride=16, max_query_length=8)
    arrays, features = squad_features.convert_examples_to_features(examples, tokenizer, is_training=True, **shape)
    assert all(f.doc_length == len(f.doc.ids) for f in features)  # one window each
    doc = features[0].doc
    words = examples[0].context.words
    # The snowman has no piece in the vocab.
    assert _piece_texts(tokenizer, doc.ids[doc.word_to_piece[6]:doc.word_to_piece[7]]) == ("(", "[UNK]", ")")
    assert _piece_texts(tokenizer, doc.ids[doc.word_to_piece[-2]:]) == ("[UNK]", "(", "[UNK]", ")", ".")
    start, end = _point_logits(arrays, features)
    predictions = squad_predictions.decode_predictions(features, start, end).predictions
    # The decomposed accent stays with its letter, the parenthesis does not.
    assert predictions["mark"] == "Cafe\u0301"
    # An [UNK] piece stands for one whole tokenizer word.
    assert predictions["unknown"] == "MIDI\u2603X"
    # The deleted soft hyphen is kept inside, the final full stop left out.
    assert predictions["deleted"] == "Pont\u00adNeuf"
    assert predictions["two_unknown"] == "(\u2603)" and words[-1] == "\u2603(\u2603)."
    # A span ending inside a word leaves the rest of the word out.
    pile = _piece_texts(tokenizer, doc.ids).index("pile")
    assert context[doc.begin[pile]:doc.end[pile]] == "pile"
    assert context[doc.begin[pile]:doc.end[pile + 1]] == "pile,"
    # A word whose characters, normalised one by one, do not add up to the
    # word normalised whole cannot be mapped: each piece spans the whole word,
    # as the original takes whole words when its alignment fails.
    per_char = alignment.normalize_text
    monkeypatch.setattr(alignment, "normalize_text",
                        lambda text, lower: tf.strings.regex_replace(per_char(text, lower), "^i$", ""))
    doc = squad_features.convert_examples_to_features(examples, tokenizer, is_training=True, **shape)[1][0].doc
    assert context[doc.begin[pile]:doc.end[pile]] == context[doc.begin[pile + 1]:doc.end[pile + 1]] == "pile,"
    assert context[doc.begin[0]:doc.end[0]] == "Le"


def test_decoding_chinese_without_spaces_gives_exact_spans(tokenizer, tmp_path):
    # One whitespace word for the whole paragraph, with [UNK] characters
    # (the English vocab lacks 泽 and 见): the original would answer with
    # the whole paragraph.
    context = "江泽民同志在北京人民大会堂会见了来访的美国总统克林顿。1998年1月，新华社报道了这次会见。"
    path = _write_json(tmp_path, _one_paragraph(context, [
        ("z1", "谁会见了克林顿？", "江泽民"), ("z2", "在哪里会见？", "北京人民大会堂"),
        ("z3", "什么时候报道？", "1998年1月")]))
    examples, _ = reading.read_squad_examples(path, is_training=True)
    assert len(examples[0].context.words) == 1
    arrays, features = squad_features.convert_examples_to_features(
        examples, tokenizer, max_seq_length=32, doc_stride=8, max_query_length=8, is_training=True)
    assert len(features) > 3 * len(examples) and tokenizer.unk_id in features[0].doc.ids
    start, end = _point_logits(arrays, features)
    predictions = squad_predictions.decode_predictions(features, start, end).predictions
    assert predictions == {"z1": "江泽民", "z2": "北京人民大会堂", "z3": "1998年1月"}


ALIGNMENT_CASES = [
    "Héllo Wörld ÀÉÎÕÜ naïve café e\u0301 A\u030a İstanbul ıi ΟΔΟΣ Σ σ ς ΐ Straße ẞ ﬁnance ǅ",
    "ＡＢＣ１２３！？ ½ Ⅻ ① ㎏ ™ 中文English混合abc中。 日本語のテキスト 한국어 \u1100\u1161",
    "😀👍🏽 👨\u200d👩\u200d👧 ❤️ مرحبا नमस्ते สวัสดีครับ Привет,мир! a\x00b\u200bc\ufeffd\u00adg",
    "a\u00a0b\u3000c\u2002e line\u2028sep U.S.A. don't 3.14 $5 a+b=c <tag> ^_^ `q` |p| ~t ##abc [UNK]",
    "x" * 101 + " " + "я" * 60 + " (MIDI\u2603X) \u2603(\u2603). " + "Ü" * 201 + "!",
]


def test_context_words_split_alike_in_python_and_in_graph():
    text = " a\u202fb\u00a0c\td\n e\u2028f\r\n\u3000g  "
    context = reading.SquadContext.from_text(text)
    words, starts = alignment.split_context_words(tf.constant([text]))
    assert [w.decode() for w in words[0].numpy()] == context.words == ["a", "b\u00a0c", "d", "e\u2028f", "\u3000g"]
    assert starts[0].numpy().tolist() == context.word_starts.tolist()


def test_pieces_align_with_characters_wherever_unicode_agrees(minilm_dir):
    # Random assigned characters: Python's Unicode tables and TensorFlow's
    # ICU disagree only on characters one of them does not know yet.
    rng = np.random.default_rng(0)
    known = np.array([c for c in map(chr, range(0x20, 0x30000))
                      if unicodedata.category(c) not in ("Cn", "Cs")])
    texts = ALIGNMENT_CASES + [" ".join("".join(rng.choice(known, rng.integers(1, 7))) for _ in range(8))
                               for _ in range(300)]
    words = [w for text in texts for w in reading.SquadContext.from_text(text).words]
    assert len(words) > 2000
    for lower_case in (True, False):
        cased = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), lower_case=lower_case)
        ids, begin, end = (x.to_list() for x in alignment.word_pieces(cased, tf.constant(words)))
        assert ids == cased(tf.constant(words)).to_list()
        for word, word_ids, starts, ends in zip(words, ids, begin, end):
            spans = [word[b:e] for b, e in zip(starts, ends)]
            normalized = [n.decode().replace(" ", "") for n in
                          normalize_text(tf.constant(spans or [""]), lower_case).numpy()][:len(spans)]
            # Each piece spans the characters that normalise to it (a Hangul
            # syllable decomposes into several pieces); [UNK] a whole tokenizer word.
            for piece, span, text in zip(_piece_texts(cased, word_ids), spans, normalized):
                assert text, (word, spans)
                if piece != "[UNK]":
                    assert piece.removeprefix("##").replace("ς", "σ") in text.replace("ς", "σ"), (word, spans)
            assert all(b1 <= b2 and e1 <= e2 for b1, b2, e1, e2 in zip(starts, starts[1:], ends, ends[1:]))
        # A word over max_input_chars_per_word is one [UNK] spanning it.
        ids, begin, end = alignment.word_pieces(cased, tf.constant(["Ü" * 201 + "!"]))
        assert _piece_texts(cased, ids[0].numpy()) == ("[UNK]", "!")
        assert list(zip(begin[0].numpy(), end[0].numpy())) == [(0, 201), (201, 202)]


def test_v2_null_threshold_and_null_odds(tokenizer):
    examples, _ = reading.read_squad_examples(V2, is_training=True, version_2_with_negative=True)
    arrays, features = squad_features.convert_examples_to_features(examples, tokenizer, is_training=True, **SHAPE)
    rows = [row for row, f in enumerate(features) if f.example.qas_id == "v2q3"]
    assert len(rows) == 2  # the null score is the lowest of the two windows
    shape = (2, SHAPE["max_seq_length"])
    start, end = np.full(shape, -20.0), np.full(shape, -20.0)
    first, last = arrays["start_positions"][rows[0]], arrays["end_positions"][rows[0]]
    assert first > 0
    start[0, first], end[0, last] = 3.0, 2.0  # span score 5
    start[0, 0], end[0, 0] = 4.0, 4.0  # null 8
    start[1, 0], end[1, 0] = 3.5, 3.0  # null 6.5, the minimum
    window_features = [features[row] for row in rows]

    def decode(threshold):
        return squad_predictions.decode_predictions(window_features, start, end, version_2_with_negative=True,
                                        null_score_diff_threshold=threshold)
    span_kept, null_chosen = decode(1.6), decode(1.4)
    assert span_kept.null_odds == null_chosen.null_odds == {"v2q3": pytest.approx(1.5)}
    assert span_kept.predictions == {"v2q3": "The Grossmünster church"}
    assert null_chosen.predictions == {"v2q3": ""}
    texts = [c.text for c in null_chosen.nbest["v2q3"]]
    assert texts[0] == "" and texts[1] == "The Grossmünster church"  # null 6.5 above the span's 5
    null_entry = null_chosen.nbest["v2q3"][0]
    assert (null_entry.start_logit, null_entry.end_logit) == (3.5, 3.0)
    # Without a valid span, the null answer is the only candidate.
    start[0, first] = end[0, last] = -20.0
    only_null = squad_predictions.decode_predictions(window_features, start, end, version_2_with_negative=True,
                                         n_best_size=1, max_answer_length=1)
    assert only_null.predictions == {"v2q3": ""}
    assert only_null.null_odds == {"v2q3": float("inf")}
    assert [c.text for c in only_null.nbest["v2q3"]] == [""]


def test_writes_prediction_files_atomically(tmp_path, tokenizer):
    examples, _ = reading.read_squad_examples(V2, is_training=False, version_2_with_negative=True)
    arrays, features = squad_features.convert_examples_to_features(examples, tokenizer, is_training=False, **SHAPE)
    logits = np.random.default_rng(0).normal(size=(2,) + arrays["input_word_ids"].shape)
    result = squad_predictions.decode_predictions(features, *logits, version_2_with_negative=True, n_best_size=5)
    paths = squad_predictions.write_predictions(tmp_path / "out", result)
    assert sorted(os.listdir(tmp_path / "out")) == ["nbest_predictions.json", "null_odds.json",
                                                   "predictions.json"]
    assert [os.path.basename(p) for p in paths] == ["predictions.json", "nbest_predictions.json",
                                                    "null_odds.json"]
    assert _load(tmp_path / "out" / "predictions.json") == result.predictions
    assert _load(tmp_path / "out" / "null_odds.json") == result.null_odds
    nbest = _load(tmp_path / "out" / "nbest_predictions.json")
    assert nbest == {qid: [c._asdict() for c in entries] for qid, entries in result.nbest.items()}
    assert set(nbest["v2q1"][0]) == {"text", "probability", "start_logit", "end_logit"}
    assert len(result.predictions) == 5 and all(len(v) <= 6 for v in nbest.values())
    # Non-ASCII answers are written as escapes, readable in any locale.
    assert any(not c["text"].isascii() for v in nbest.values() for c in v)
    assert all((tmp_path / "out" / name).read_bytes().isascii() for name in os.listdir(tmp_path / "out"))


# Metrics, against an independent restatement of the official scripts (tests/squad_reference.py).

# (prediction, gold answers): empty answers, unicode punctuation that
# string.punctuation lacks, several golds, articles only, repeats.
CASES = [
    ("Café Müller", ["Café Müller"]),
    ("the Café Müller", ["Café Müller", "Müller"]),
    ("“Rösti”", ["Rösti"]),
    ("Rösti", ["“Rösti”", "Rösti"]),
    ("", ["Paris"]),
    ("Paris", [""]),
    ("", [""]),
    ("the", ["a"]),
    ("an", ["Paris"]),
    ("a  Paris,", ["paris"]),
    ("10th and 11th centuries", ["in the 10th and 11th centuries", "11th century"]),
    ("–", ["-"]),
    ("1985 – 1990", ["1985-1990", "1985 1990"]),
    ("“the” city", ["city"]),
    ("Paris Paris", ["Paris"]),
    ("Denmark, Iceland, Norway", ["Denmark, Iceland and Norway"]),
    ("theory of the art", ["theatre and art"]),
    ("«l'été» ¿qué?", ["l’été qué"]),
    ("x_the y", ["x_the"]),
]


@pytest.mark.parametrize("prediction,golds", CASES)
def test_answer_scores_agree_with_independent_reference(prediction, golds):
    assert squad_metrics.normalize_answer(prediction) == squad_reference.normalize(prediction)
    v1_em = max(squad_metrics.exact_match_v1(prediction, g) for g in golds)
    v1_f1 = max(squad_metrics.f1_v1(prediction, g) for g in golds)
    ref_em = max(float(squad_reference.normalize(prediction) == squad_reference.normalize(g)) for g in golds)
    ref_f1 = max(squad_reference.token_f1(squad_reference.normalize(prediction).split(), squad_reference.normalize(g).split()) for g in golds)
    assert (v1_em, v1_f1) == (ref_em, pytest.approx(ref_f1))
    v2 = squad_metrics.squad_v2_metrics({"q": golds}, {"q": prediction})
    em, f1 = squad_reference.v2_scores(prediction, golds)
    assert (v2["exact"], v2["f1"]) == (100 * em, pytest.approx(100 * f1))


def test_answer_scores_by_hand():
    # Worked out from the definitions, so a shared mistake cannot pass.
    assert squad_metrics.normalize_answer("  The “Rösti”, a dish!  ") == "“rösti” dish"
    assert squad_metrics.normalize_answer("“the” city") == "“ ” city"
    partial = squad_metrics.f1_v1("10th and 11th centuries", "in the 10th and 11th centuries")
    assert partial == pytest.approx(8 / 9)
    assert squad_metrics.f1_v1("“the” city", "city") == pytest.approx(0.5)
    assert squad_metrics.f1_v1("Paris Paris", "Paris") == pytest.approx(2 / 3)
    # Articles only: both normalise to "", equal but without tokens.
    assert (squad_metrics.exact_match_v1("the", "a"), squad_metrics.f1_v1("the", "a")) == (1.0, 0.0)
    assert (squad_metrics.exact_match_v2("the", "a"), squad_metrics.f1_v2("the", "a")) == (1.0, 1.0)
    assert squad_metrics.exact_match_v1("–", "-") == 0.0  # the en dash is not ASCII punctuation


def test_dataset_metrics_agree_with_reference_v1():
    gold = {f"q{i}": golds for i, (_, golds) in enumerate(CASES)}
    predictions = {f"q{i}": prediction for i, (prediction, _) in enumerate(CASES) if i != 3}
    ours = squad_metrics.squad_v1_metrics(gold, predictions)
    assert ours == pytest.approx(squad_reference.v1_metrics(gold, predictions))
    # Exact matches counted by hand (q3 has no prediction and scores 0).
    exact = {"q0", "q1", "q6", "q7", "q9"}
    assert ours["exact_match"] == pytest.approx(100 * len(exact) / len(CASES))
    with pytest.raises(ValueError, match="no gold questions"):
        squad_metrics.squad_v1_metrics({}, predictions)


def test_dataset_metrics_agree_with_reference_v2():
    gold = {"has1": ["Limmat"], "has2": ["The Grossmünster church", "Grossmünster"],
            "has3": ["the CITY"], "has4": ["around 1100"], "no1": [], "no2": [], "no3": []}
    predictions = {"has1": "Limmat", "has2": "church", "has3": "", "has4": "1100",
                   "no1": "", "no2": "twin towers", "no3": ""}
    na_probs = {"has1": -3.0, "has2": 0.5, "has3": 2.0, "has4": 1.2, "no1": 4.0, "no2": -1.0, "no3": 0.7}
    ours = squad_metrics.squad_v2_metrics(gold, predictions)
    assert ours == pytest.approx(squad_reference.v2_metrics(gold, predictions))
    assert (ours["HasAns_total"], ours["NoAns_total"], ours["total"]) == (4, 3, 7)
    assert ours["HasAns_exact"] == pytest.approx(25.0) and ours["NoAns_exact"] == pytest.approx(200 / 3)
    for thresh in (1.0, 0.6, -2.0):
        with_probs = squad_metrics.squad_v2_metrics(gold, predictions, na_probs, na_prob_thresh=thresh)
        assert with_probs == pytest.approx(squad_reference.v2_metrics(gold, predictions, na_probs, thresh))
    assert set(with_probs) >= {"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"}
    with pytest.raises(ValueError, match="1 of 7 questions have no prediction"):
        squad_metrics.squad_v2_metrics(gold, {k: v for k, v in predictions.items() if k != "no2"})
