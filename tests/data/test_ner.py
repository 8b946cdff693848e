"""NER data: CoNLL reading and its errors, word-piece features, word tags from logits, entity scores,
the dictionary baseline, People's Daily demo."""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf
from seqeval.metrics import classification_report, f1_score

from bert_tf.data import tag_schemes
from bert_tf.data.ner import conll, people_daily, prediction
from bert_tf.data.ner.conll import TaggedSentence
from bert_tf.data.ner.dictionary import dictionary_tags
from bert_tf.data.ner.features import convert_to_features, first_pieces
from bert_tf.data.ner.scoring import entity_scores
from bert_tf.data.tokenization import BertTokenizer

TESTDATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "testdata")
CONLL_TAGS = ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]


def _fixture(name):
    return os.path.join(TESTDATA, name)


def test_read_conll2003_layout():
    data = conll.read_conll(_fixture("ner_train.txt"))
    assert [s.line for s in data.sentences] == [3, 13, 16, 21] and data.skipped == []
    assert data.sentences[0].words[:3] == ("EU", "rejects", "German")
    assert data.sentences[0].tags[:3] == ("B-ORG", "O", "B-MISC")
    assert data.sentences[1] == TaggedSentence(("Peter", "Blackburn"), ("B-PER", "I-PER"), 13)
    assert conll.learn_tags(data.sentences) == CONLL_TAGS
    # A dev file checked against the training tags; its last sentence has no blank line after it.
    dev = conll.read_conll(_fixture("ner_dev.txt"), tags=CONLL_TAGS)
    assert [len(s.words) for s in dev.sentences] == [14, 4]


def test_read_bioes_and_iob1():
    bioes = conll.read_conll(_fixture("ner_bioes.txt"), scheme="BIOES")
    assert bioes.sentences[1] == TaggedSentence(("他", "去", "沪", "了"), ("O", "O", "S-LOC", "O"), 10)
    assert conll.learn_tags(bioes.sentences, "BIOES") == [
        "O", "B-LOC", "B-PER", "E-LOC", "E-PER", "I-LOC", "I-PER", "S-LOC", "S-PER"]
    with pytest.raises(ValueError, match=r"ner_bioes.txt:2: tag 'E-PER' is neither O nor B-, I-"):
        conll.read_conll(_fixture("ner_bioes.txt"), scheme="BIO")

    iob1 = conll.read_conll(_fixture("ner_iob1.txt"), scheme="IOB1")
    assert iob1.sentences[1].tags == ("O", "I-LOC", "B-LOC", "O", "I-LOC")
    assert conll.learn_tags(iob1.sentences, "IOB1") == ["O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER"]
    with pytest.raises(ValueError, match=r"ner_iob1.txt:1: tag I-ORG at the start of a sentence is not valid in BIO$"):
        conll.read_conll(_fixture("ner_iob1.txt"), scheme="BIO")
    # Entities as conlleval reads IOB1: Paris and Berlin are two places.
    assert tag_schemes.entities([iob1.sentences[1].tags]) == [[("LOC", 1, 1), ("LOC", 2, 2), ("LOC", 4, 4)]]


GOOD = b"A O\nB O\n\n"
BAD_ROWS = [
    # (sentence holding the bad row, scheme, tag set, line of the error in the file, message)
    (b"Peter\nSmith I-PER\n", "BIO", None, 4, "one column 'Peter'; expected a token and a tag"),
    (b"Peter B-PER\nSmith I-PRE\n", "BIO", ["O", "B-PER", "I-PER"], 5,
     "tag 'I-PRE' is not in the tag set (B-PER I-PER O)"),
    (b"in O\nParis I-LOC\n", "BIO", None, 5, "tag I-LOC after O is not valid in BIO"),
    (b"Peter B-PER\nParis I-LOC\n", "BIO", None, 5, "tag I-LOC after B-PER is not valid in BIO"),
    (b"Paris I-LOC\n", "BIO", None, 4, "tag I-LOC at the start of a sentence is not valid in BIO"),
    (b"in O\nParis B-LOC\n", "IOB1", None, 5, "tag B-LOC after O is not valid in IOB1"),
    (b"New B-LOC\nYork I-LOC\n", "BIOES", None, 5, "tag I-LOC at the end of a sentence is not valid in BIOES"),
    (b"Paris LOC\n", "BIO", None, 4, "tag 'LOC' is neither O nor B-, I- followed by a type (BIO)"),
    (b"Caf\xe9 O\nParis B-LOC\n", "BIO", None, 4, "not UTF-8 (byte 0xe9 at column 4)"),
]


@pytest.mark.parametrize("sentence, scheme, tags, line, message", BAD_ROWS)
def test_bad_rows_name_file_and_line(tmp_path, sentence, scheme, tags, line, message):
    path = tmp_path / "train.txt"
    path.write_bytes(GOOD + sentence + b"\n" + GOOD)
    with pytest.raises(ValueError) as error:
        conll.read_conll(path, scheme=scheme, tags=tags)
    assert str(error.value) == f"{path}:{line}: {message}"
    data = conll.read_conll(path, scheme=scheme, tags=tags, skip_bad_rows=True)
    assert data.skipped == [f"{path}:{line}: {message}"]
    assert [s.line for s in data.sentences] == [1, 5 + sentence.count(b"\n")]


def test_byte_order_mark_crlf_tabs_and_blanks(tmp_path):
    path = tmp_path / "windows.txt"
    path.write_bytes("\ufeff-DOCSTART- O\r\n\r\nParis\tB-LOC \r\n  \r\n\tis  O\r\n".encode())
    assert conll.read_conll(path).sentences == [TaggedSentence(("Paris",), ("B-LOC",), 3),
                                               TaggedSentence(("is",), ("O",), 5)]


def test_no_sentence_is_an_error(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"-DOCSTART- O\n\n\n")
    with pytest.raises(ValueError, match=r"empty.txt: no sentence$"):
        conll.read_conll(path)
    path.write_bytes(b"Paris\n")
    with pytest.raises(ValueError, match=r"empty.txt: no sentence \(1 skipped\)$"):
        conll.read_conll(path, skip_bad_rows=True)
    with pytest.raises(ValueError, match="unknown tagging scheme 'IOBES'"):
        conll.read_conll(_fixture("ner_train.txt"), scheme="IOBES")


def _word_tags(ids, features):
    """`prediction.word_tags` with a decoder that returns `ids`; checks the mask it is given."""
    def decode(logits, mask):
        np.testing.assert_array_equal(mask, features["word_ids"] >= 0)
        return tf.constant(ids, tf.int32)

    logits = tf.zeros(features["word_ids"].shape + (len(CONLL_TAGS),))
    tags = prediction.word_tags(logits, first_pieces(features), CONLL_TAGS, decode)
    return [[tag.decode() for tag in row] for row in tags.to_list()]


@pytest.fixture(scope="module")
def small_tokenizer(tmp_path_factory):
    # Ids: 0-4 special tokens, then eu=5 ... ##burn=17.
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "eu", "rejects", "german", "call", "to",
             "boy", "##cott", "british", "lamb", ".", "peter", "black", "##burn"]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return BertTokenizer(path)


def test_features_label_first_pieces(small_tokenizer):
    sentences = conll.read_conll(_fixture("ner_train.txt")).sentences[:2]
    features = convert_to_features(sentences, small_tokenizer, CONLL_TAGS, max_seq_length=14)
    assert {k: (v.shape, v.dtype) for k, v in features.items()} == {
        **{k: ((2, 14), np.int32) for k in ("input_word_ids", "input_mask", "input_type_ids",
                                            "label_ids", "word_ids")},
        "num_words": ((2,), np.int32), "num_tokens": ((2,), np.int32)}
    np.testing.assert_array_equal(features["input_word_ids"], [
        [2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 3, 0, 0],
        [2, 15, 16, 17, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(features["input_mask"].sum(1), [12, 5])
    assert not features["input_type_ids"].any()
    # B-ORG=3, B-MISC=2, B-PER=4, I-PER=8; "boycott" is labelled on "boy" only.
    np.testing.assert_array_equal(features["label_ids"], [
        [-1, 3, 0, 2, 0, 0, 0, -1, 2, 0, 0, -1, -1, -1],
        [-1, 4, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1]])
    np.testing.assert_array_equal(features["word_ids"], [
        [-1, 0, 1, 2, 3, 4, 5, -1, 6, 7, 8, -1, -1, -1],
        [-1, 0, 1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1]])
    np.testing.assert_array_equal(features["num_words"], [9, 2])
    np.testing.assert_array_equal(features["num_tokens"], [12, 5])  # what a length filter reads
    predicted = np.where(features["label_ids"] >= 0, features["label_ids"], 7)
    assert _word_tags(predicted, features) == [list(s.tags) for s in sentences]


def test_truncation_and_words_without_pieces(small_tokenizer):
    sentences = [conll.read_conll(_fixture("ner_train.txt")).sentences[0],
                 TaggedSentence(("Peter", "\u200b", "lamb"), ("B-PER", "O", "O"))]
    features = convert_to_features(sentences, small_tokenizer, CONLL_TAGS, max_seq_length=8)
    # Six pieces fit: "boycott" keeps its first piece; British, lamb and "." are cut off.
    np.testing.assert_array_equal(features["input_word_ids"], [[2, 5, 6, 7, 8, 9, 10, 3],
                                                               [2, 15, 13, 3, 0, 0, 0, 0]])
    np.testing.assert_array_equal(features["word_ids"], [[-1, 0, 1, 2, 3, 4, 5, -1],
                                                         [-1, 0, 2, -1, -1, -1, -1, -1]])
    np.testing.assert_array_equal(features["label_ids"][1], [-1, 4, 0, -1, -1, -1, -1, -1])
    np.testing.assert_array_equal(features["num_tokens"], [12, 4])  # before truncation
    # Every position predicted I-ORG: words without a position come back as O.
    tags = _word_tags(np.full([2, 8], 7), features)
    assert tags == [["I-ORG"] * 6 + ["O"] * 3, ["I-ORG", "O", "I-ORG"]]
    with pytest.raises(ValueError, match="sentence at line 3: tag 'B-ORG' is not in the tag list"):
        convert_to_features(sentences, small_tokenizer, ["O"], max_seq_length=8)


def test_features_match_tokenizing_the_sentence(minilm_dir):
    # One batched call over all words gives each sentence the pieces of its own text.
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))
    sentences = (conll.read_conll(_fixture("ner_train.txt")).sentences
                 + conll.read_conll(_fixture("ner_dev.txt")).sentences
                 + conll.read_conll(_fixture("ner_bioes.txt"), scheme="BIOES").sentences)
    tags = sorted({tag for s in sentences for tag in s.tags})
    features = convert_to_features(sentences, tokenizer, tags, max_seq_length=24)
    for sentence, ids, mask in zip(sentences, features["input_word_ids"], features["input_mask"]):
        pieces = tokenizer(" ".join(sentence.words)).numpy().tolist()
        assert ids[mask == 1].tolist() == [tokenizer.cls_id, *pieces, tokenizer.sep_id]


def test_entity_scores():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "I-ORG", "O", "B-PER"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG", "O", "O", "B-PER"]]
    scores = entity_scores(gold, predicted)
    # 4 gold entities, 4 predicted, 2 right (both PER): the wrong type and the short ORG miss.
    assert scores["precision"] == scores["recall"] == scores["f1"] == pytest.approx(0.5)
    assert scores["support"] == 4
    assert scores["per_type"] == {
        "LOC": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},
        "ORG": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},
        "PER": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2}}
    assert scores["f1"] == f1_score(gold, predicted)
    # BIOES, and an invalid predicted BIO sequence read the conlleval way.
    bioes = entity_scores([["B-PER", "E-PER", "S-LOC"]], [["B-PER", "E-PER", "O"]])
    assert (bioes["precision"], bioes["recall"]) == (1.0, 0.5)
    lenient = entity_scores([["O", "B-PER", "I-PER"]], [["O", "I-PER", "I-PER"]])
    assert lenient["f1"] == 1.0
    assert entity_scores([["O"]], [["O"]]) == {
        "precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0, "per_type": {}}
    with pytest.raises(ValueError, match="sentence 1: 5 gold tags but 4 predicted"):
        entity_scores(gold, [predicted[0], predicted[1][:4]])


# Every prefix of BIO, IOB1 and BIOES over two types: random sequences are mostly invalid in every scheme.
ANY_TAGS = ["O"] + [f"{prefix}-{kind}" for prefix in "BIES" for kind in ("LOC", "PER")]


def random_tags(rng, count):
    return [[ANY_TAGS[i] for i in rng.integers(0, len(ANY_TAGS), n)] for n in rng.integers(1, 13, count)]


def test_entity_scores_agree_with_seqeval_on_random_tags():
    rng = np.random.default_rng(0)
    for _ in range(20):
        gold = random_tags(rng, 50)
        predicted = [[ANY_TAGS[rng.integers(len(ANY_TAGS))] if rng.random() < 0.3 else tag for tag in g]
                     for g in gold]
        report = classification_report(gold, predicted, output_dict=True, zero_division=0)
        scores = entity_scores(gold, predicted)
        assert 0.2 < scores["f1"] < 0.95
        # Exactly seqeval's floats, per type and micro-averaged.
        assert {**scores.pop("per_type"), "micro avg": scores} == {
            name: {"precision": row["precision"], "recall": row["recall"], "f1": row["f1-score"],
                   "support": row["support"]}
            for name, row in report.items() if name not in ("macro avg", "weighted avg")}


def test_dictionary_tags():
    train = [TaggedSentence(("New", "York", "is", "big"), ("B-LOC", "I-LOC", "O", "O")),
             TaggedSentence(("York", "said"), ("B-PER", "O")),
             TaggedSentence(("York", "went"), ("B-PER", "O")),
             TaggedSentence(("to", "York"), ("O", "B-LOC"))]
    # Longest match first (New York), else the most frequent type (York: PER 2, LOC 1).
    assert dictionary_tags(train, [("in", "New", "York", "York"), ("New",)]) == [
        ["O", "B-LOC", "I-LOC", "B-PER"], ["O"]]
    assert dictionary_tags(train, [("New", "York", "York")], scheme="BIOES") == [
        ["B-LOC", "E-LOC", "S-PER"]]
    # IOB1: I- starts an entity, B- only one right after an entity of its type.
    assert dictionary_tags(train, [("New", "York", "York", "York", "New")], scheme="IOB1") == [
        ["I-LOC", "I-LOC", "I-PER", "B-PER", "O"]]


def test_write_conll_round_trip(tmp_path):
    # A full-width space is a token like any other.
    sentences = [TaggedSentence(("张", "\u3000", "三"), ("B-PER", "O", "B-PER"), 1),
                 TaggedSentence(("好",), ("O",), 5)]
    conll.write_conll(tmp_path / "out.txt", sentences)
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "张 B-PER\n\u3000 O\n三 B-PER\n\n好 O\n"
    assert conll.read_conll(tmp_path / "out.txt").sentences == sentences
    with pytest.raises(ValueError, match="word 'a b' is empty or holds a space, tab or line break"):
        conll.write_conll(tmp_path / "bad.txt", [TaggedSentence(("a b",), ("O",))])
    assert os.listdir(tmp_path) == ["out.txt"]


def test_people_daily_character_tags():
    paragraph = [("中共中央", "nt"), ("总书记", "n"), ("江", "nr"), ("泽民", "nr"), ("在", "p"),
                 ("北京", "ns"), ("海淀区", "ns"), ("。", "w"), ("好", "a"), ("！", "w")]
    sentences = people_daily.tagged_sentences(paragraph)
    assert ["".join(s.words) for s in sentences] == ["中共中央总书记江泽民在北京海淀区。", "好！"]
    assert tag_schemes.entities([sentences[0].tags]) == [[
        ("ORG", 0, 3), ("PER", 7, 9), ("LOC", 11, 12), ("LOC", 13, 15)]]
    assert sentences[1].tags == ("O", "O")


def test_split_train_dev_test():
    sentences = [TaggedSentence((str(i % 70),), ("O",)) for i in range(100)]
    splits = people_daily.split_train_dev_test(sentences)
    train_texts = {s.words for s in splits["train"]}
    assert len(splits["train"]) == 80
    assert not train_texts & {s.words for s in splits["dev"] + splits["test"]}
    assert not {s.words for s in splits["dev"]} & {s.words for s in splits["test"]}
    # Of the 10 + 10 held out, those whose text is in train (or dev, for test) are gone.
    assert (len(splits["dev"]), len(splits["test"])) == (6, 6)
    assert people_daily.split_train_dev_test(sentences) == splits


def test_people_daily_ner_files(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path))
    paths = people_daily.people_daily_ner()
    assert paths == {name: tmp_path / "corpora" / "people_daily_ner" / f"{name}.txt"
                     for name in ("train", "dev", "test")}
    data = {name: conll.read_conll(path).sentences for name, path in paths.items()}
    counts = {name: (len(s), collections.Counter(e[0] for x in tag_schemes.entities([x.tags for x in s]) for e in x))
              for name, s in data.items()}
    assert counts == {
        "train": (35626, {"LOC": 22544, "PER": 15410, "ORG": 2811}),
        "dev": (4364, {"LOC": 2627, "PER": 1875, "ORG": 323}),
        "test": (4358, {"LOC": 2695, "PER": 2288, "ORG": 382})}
    assert all(len(word) == 1 for s in data["test"] for word in s.words)
    texts = {name: {"".join(x.words) for x in s} for name, s in data.items()}
    assert not texts["train"] & (texts["dev"] | texts["test"]) and not texts["dev"] & texts["test"]
    # Cached: a second call writes nothing.
    mtimes = [p.stat().st_mtime_ns for p in paths.values()]
    assert people_daily.people_daily_ner() == paths and [p.stat().st_mtime_ns for p in paths.values()] == mtimes
    # The baseline figure reported in the README.
    baseline = dictionary_tags(data["train"], [s.words for s in data["test"]])
    scores = entity_scores([s.tags for s in data["test"]], baseline)
    assert scores["f1"] == pytest.approx(0.5836, abs=1e-4)
