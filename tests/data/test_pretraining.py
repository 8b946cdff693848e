"""Pretraining data: the pair recipe, static TFRecords and dynamic masking.

The statistics run over more than 10,000 examples of a synthetic corpus
(whitespace "tokenizer", `##` pieces), written by the library as
create_pretraining_data.py writes them; an unmasked twin written with the same
seed holds the exact packed sequences the masked file was made from.
"""

import os
import random
import types

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data.pretraining import dataset as pretraining_dataset, documents as pretraining_documents
from bert_tf.data.pretraining import instances as pretraining_instances, records as pretraining_records
from bert_tf.data.masking import MaskedLmMasker
from bert_tf.data.pretraining.writer import PretrainingDataOptions, create_pretraining_data
from tests.conftest import original_feature_spec

S, P = 128, 20
TESTDATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "testdata")

ORIGINAL_SPEC = original_feature_spec(S, P)


class WhitespaceTokenizer:
    """Maps space-separated tokens of the vocab to ids; special ids not at 0..4."""

    def __init__(self, vocabulary):
        self.vocabulary = tuple(vocabulary)
        self.vocab_size = len(self.vocabulary)
        self._ids = {token: i for i, token in enumerate(self.vocabulary)}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self._ids[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"))

    def __call__(self, texts):
        rows = [[self._ids.get(w, self.unk_id) for w in t.decode().split()] for t in texts.numpy()]
        return tf.ragged.constant(rows, tf.int32, ragged_rank=1) if rows else None


WORDS = [f"w{i}" for i in range(600)] + [f"##c{i}" for i in range(200)]
TOKENIZER = WhitespaceTokenizer(["[PAD]", *WORDS[:300], "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                 *WORDS[300:]])
SPECIAL = (TOKENIZER.cls_id, TOKENIZER.sep_id, TOKENIZER.pad_id)
IS_CONTINUATION = np.array([t.startswith("##") for t in TOKENIZER.vocabulary])


def _masker(**kwargs):
    return MaskedLmMasker(vocab_size=TOKENIZER.vocab_size, mask_id=TOKENIZER.mask_id,
                          pad_id=TOKENIZER.pad_id,
                          unmaskable_ids=SPECIAL, max_predictions_per_seq=P, **kwargs)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """50 documents of 120 sentences of 4-14 tokens; a fifth of them ## pieces."""
    rng = random.Random(0)
    lines = []
    for _ in range(50):
        for _ in range(120):
            tokens = [rng.choice(WORDS[:600]) for _ in range(rng.randint(2, 7))]
            tokens = [t for w in tokens for t in ([w] + [rng.choice(WORDS[600:])] * (rng.random() < 0.6))]
            lines.append(" ".join(tokens))
        lines.append("")
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _write(corpus, path, **kwargs):
    options = dict(input_files=[corpus], output_file=str(path), vocab_file="unused",
                   max_seq_length=S, max_predictions_per_seq=P, dupe_factor=20, random_seed=12345)
    options.update(kwargs)
    return create_pretraining_data(PretrainingDataOptions(**options), TOKENIZER)


def _read(path, spec):
    ds = tf.data.TFRecordDataset(path).batch(100000)
    return {k: v.numpy() for k, v in tf.io.parse_example(next(iter(ds)), spec).items()}


@pytest.fixture(scope="module")
def written(corpus, tmp_path_factory):
    """Masked records, whole-word-masked records and their unmasked twin."""
    out = tmp_path_factory.mktemp("records")
    stats = _write(corpus, out / "masked.tfrecord")
    _write(corpus, out / "wwm.tfrecord", do_whole_word_mask=True)
    _write(corpus, out / "unmasked.tfrecord", static_masking=False)
    return types.SimpleNamespace(stats=stats, dir=out,
                                 masked=_read(str(out / "masked.tfrecord"), ORIGINAL_SPEC),
                                 wwm=_read(str(out / "wwm.tfrecord"), ORIGINAL_SPEC),
                                 unmasked=_read(str(out / "unmasked.tfrecord"),
                                                pretraining_records.unmasked_feature_spec(S)))


def _check_masking(original, masked_ids, positions, target_ids, weights, labels):
    """Asserts the acceptance statistics; returns them for the report."""
    assert len(original) >= 10000
    targets = weights > 0
    rows, cols = np.nonzero(targets)
    at = positions[rows, cols]
    maskable = ~np.isin(original, SPECIAL)
    # Only the listed positions changed; every target is the original token, never special.
    changed = masked_ids != original
    listed = np.zeros_like(changed)
    listed[rows, at] = True
    assert not (changed & ~listed).any()
    np.testing.assert_array_equal(target_ids[rows, cols], original[rows, at])
    assert maskable[rows, at].all()
    assert not positions[~targets].any() and not target_ids[~targets].any()
    # The original counts [CLS] and [SEP] in the 15%.
    fraction = targets.sum() / (original != TOKENIZER.pad_id).sum()
    replaced = masked_ids[rows, at]
    split = (np.mean(replaced == TOKENIZER.mask_id), np.mean(replaced == original[rows, at]),
             np.mean((replaced != TOKENIZER.mask_id) & (replaced != original[rows, at])))
    nsp = np.mean(labels)
    assert abs(fraction - 0.15) <= 0.005, fraction
    assert abs(split[0] - 0.8) <= 0.015 and abs(split[1] - 0.1) <= 0.015, split
    assert abs(split[2] - 0.1) <= 0.015, split
    # Half of the pairs, plus the one-sentence chunks, which always take a random B.
    assert 0.5 <= nsp <= 0.56, nsp
    return fraction, split, nsp


def _whole_words_only(word_starts, original, positions, weights, special=SPECIAL):
    """Asserts that every masked word is masked in full."""
    maskable = ~np.isin(original, special)
    after_special = np.pad(~maskable[:, :-1], [[0, 0], [1, 0]], constant_values=True)
    word = np.cumsum(maskable & (word_starts | after_special), axis=1)
    word = np.where(maskable, word, 0)
    for r in range(len(original)):
        chosen = positions[r][weights[r] > 0]
        for w in set(word[r, chosen]):
            assert set(np.nonzero(word[r] == w)[0]) <= set(chosen), f"row {r} word {w} partly masked"


def test_static_records_have_the_original_spec_and_statistics(written):
    m, u = written.masked, written.unmasked
    assert written.stats.examples == len(m["input_ids"])
    np.testing.assert_array_equal(m["input_mask"], u["input_mask"])
    np.testing.assert_array_equal(m["segment_ids"], u["segment_ids"])
    np.testing.assert_array_equal(m["next_sentence_labels"], u["next_sentence_labels"])
    fraction, split, nsp = _check_masking(u["input_ids"], m["input_ids"], m["masked_lm_positions"],
                                          m["masked_lm_ids"], m["masked_lm_weights"],
                                          m["next_sentence_labels"][:, 0])
    print(f"static: masked {fraction:.4f}, split {split}, NSP random {nsp:.4f}")


def test_packed_pairs_are_cls_a_sep_b_sep(written):
    u = written.unmasked
    for ids, types_, mask in zip(u["input_ids"][:200], u["segment_ids"][:200], u["input_mask"][:200]):
        n = int(mask.sum())
        assert mask[:n].all() and not mask[n:].any() and not ids[n:].any()
        n_a = int(np.sum(types_[:n] == 0)) - 2
        assert n_a >= 1 and n - n_a - 3 >= 1
        assert ids[0] == TOKENIZER.cls_id and ids[n_a + 1] == TOKENIZER.sep_id
        assert ids[n - 1] == TOKENIZER.sep_id
        assert not np.isin(ids[1:n_a + 1], SPECIAL).any() and not np.isin(ids[n_a + 2:n - 1], SPECIAL).any()


def test_whole_word_masking_never_masks_part_of_a_word(written):
    w, u = written.wwm, written.unmasked
    # Words from the vocab's ## pieces, independently of the records' word_starts.
    starts_from_vocab = ~IS_CONTINUATION[u["input_ids"]]
    maskable = ~np.isin(u["input_ids"], SPECIAL)
    np.testing.assert_array_equal(u["word_starts"][maskable].astype(bool), starts_from_vocab[maskable])
    _whole_words_only(starts_from_vocab, u["input_ids"], w["masked_lm_positions"], w["masked_lm_weights"])
    fraction = w["masked_lm_weights"].sum() / (~np.isin(u["input_ids"], SPECIAL)).sum()
    assert abs(fraction - 0.15) <= 0.005, fraction
    assert (w["masked_lm_positions"] != written.masked["masked_lm_positions"]).any()


def test_same_seed_same_bytes_other_seed_different(corpus, tmp_path):
    for name, seed in (("first", 12345), ("again", 12345), ("other", 54321)):
        _write(corpus, tmp_path / f"{name}.tfrecord", random_seed=seed, dupe_factor=2)
    first = (tmp_path / "first.tfrecord").read_bytes()
    assert len(first) > 100_000 and (tmp_path / "again.tfrecord").read_bytes() == first
    assert (tmp_path / "other.tfrecord").read_bytes() != first
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_dynamic_masking_from_records_statistics_and_seeds(written):
    def read(seed, **kwargs):
        ds = pretraining_dataset.pretraining_dataset(
            [str(written.dir / "unmasked.tfrecord")], batch_size=1000, max_seq_length=S,
            max_predictions_per_seq=P, is_training=False, masker=_masker(), seed=seed, **kwargs)
        return ds

    ds = read(7)
    epochs = [list(ds.as_numpy_iterator()) for _ in range(2)]
    batch = {k: np.concatenate([b[k] for b in epochs[0]]) for k in epochs[0][0]}
    assert {k: (v.dtype, v.shape[1:]) for k, v in batch.items()} == {
        "input_word_ids": (np.int32, (S,)), "input_mask": (np.int32, (S,)),
        "input_type_ids": (np.int32, (S,)), "masked_lm_positions": (np.int32, (P,)),
        "masked_lm_ids": (np.int32, (P,)), "masked_lm_weights": (np.float32, (P,)),
        "next_sentence_labels": (np.int32, ())}
    u = written.unmasked
    fraction, split, nsp = _check_masking(u["input_ids"], batch["input_word_ids"],
                                          batch["masked_lm_positions"], batch["masked_lm_ids"],
                                          batch["masked_lm_weights"], batch["next_sentence_labels"])
    print(f"dynamic: masked {fraction:.4f}, split {split}, NSP random {nsp:.4f}")
    # Masks are redone each epoch, reproducibly for a seed.
    assert not np.array_equal(epochs[0][0]["masked_lm_positions"], epochs[1][0]["masked_lm_positions"])
    again = next(read(7).as_numpy_iterator())
    np.testing.assert_array_equal(again["input_word_ids"], epochs[0][0]["input_word_ids"])
    other = next(read(8).as_numpy_iterator())
    assert not np.array_equal(other["input_word_ids"], epochs[0][0]["input_word_ids"])

    wwm = next(read(7, whole_word_mask=True).as_numpy_iterator())
    _whole_words_only(u["word_starts"][:1000].astype(bool), u["input_ids"][:1000],
                      wwm["masked_lm_positions"], wwm["masked_lm_weights"])


def test_records_written_the_original_way_load_with_model_names(tmp_path):
    """Examples laid out as google-research/bert writes them (features in its order)."""
    rng = np.random.default_rng(0)
    path = str(tmp_path / "original.tfrecord")
    rows = []
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(6):
            row = {"input_ids": rng.integers(0, 800, S), "input_mask": rng.integers(0, 2, S),
                   "segment_ids": rng.integers(0, 2, S), "masked_lm_positions": rng.integers(0, S, P),
                   "masked_lm_ids": rng.integers(0, 800, P), "masked_lm_weights": rng.random(P),
                   "next_sentence_labels": rng.integers(0, 2, 1)}
            features = {name: tf.train.Feature(float_list=tf.train.FloatList(value=v))
                        if name == "masked_lm_weights" else
                        tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                        for name, v in row.items()}
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
            rows.append(row)
    [batch] = pretraining_dataset.pretraining_dataset(
        [path], batch_size=6, max_seq_length=S, max_predictions_per_seq=P,
        is_training=False).as_numpy_iterator()
    for record_name, model_name in [("input_ids", "input_word_ids"), ("input_mask", "input_mask"),
                                    ("segment_ids", "input_type_ids"),
                                    ("masked_lm_positions", "masked_lm_positions"),
                                    ("masked_lm_ids", "masked_lm_ids")]:
        np.testing.assert_array_equal(batch[model_name], [r[record_name] for r in rows])
        assert batch[model_name].dtype == np.int32
    np.testing.assert_allclose(batch["masked_lm_weights"], [r["masked_lm_weights"] for r in rows],
                               rtol=1e-6)
    np.testing.assert_array_equal(batch["next_sentence_labels"],
                                  [r["next_sentence_labels"][0] for r in rows])


def test_training_pipeline_shapes_and_per_worker_shards(written):
    path = [str(written.dir / "masked.tfrecord")]
    ds = pretraining_dataset.pretraining_dataset(path, batch_size=64, max_seq_length=S,
                                                 max_predictions_per_seq=P, seed=1)
    assert ds.element_spec["input_word_ids"].shape == (64, S)
    assert ds.element_spec["masked_lm_weights"].shape == (64, P)
    assert ds.element_spec["next_sentence_labels"].shape == (64,)

    shards = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                             num_replicas_in_sync=2)
        shard = pretraining_dataset.pretraining_dataset(
            path, batch_size=128, max_seq_length=S, max_predictions_per_seq=P,
            is_training=False, input_context=context)
        batches = list(shard.as_numpy_iterator())
        assert batches[0]["input_word_ids"].shape == (64, S)
        shards.append(np.concatenate([b["input_word_ids"] for b in batches]))
    np.testing.assert_array_equal(np.concatenate(shards)[np.argsort(np.r_[
        np.arange(0, len(written.masked["input_ids"]), 2),
        np.arange(1, len(written.masked["input_ids"]), 2)])], written.masked["input_ids"])


def test_dynamic_masking_from_text_is_seeded_and_new_each_epoch(corpus):
    documents = pretraining_documents.tokenize_documents(pretraining_documents.read_documents([corpus])[:10], TOKENIZER)

    def make(seed):
        return pretraining_dataset.text_pretraining_dataset(
            documents, batch_size=32, max_seq_length=S, special=TOKENIZER, masker=_masker(),
            is_training=False, seed=seed)

    ds = make(3)
    first, second = list(ds.as_numpy_iterator()), list(ds.as_numpy_iterator())
    assert first[0]["input_word_ids"].shape == (32, S)
    assert not np.array_equal(first[0]["input_word_ids"], second[0]["input_word_ids"])
    again = list(make(3).as_numpy_iterator())
    for name in first[0]:
        np.testing.assert_array_equal(again[0][name], first[0][name])
    weights = np.concatenate([b["masked_lm_weights"] for b in first])
    ids = np.concatenate([b["input_word_ids"] for b in first])
    assert abs(weights.sum() / np.sum(ids != TOKENIZER.pad_id) - 0.15 * 125 / 128) < 0.01


def _unique_documents(num_documents, rng):
    """Documents whose tokens are unique ids, consecutive along each document."""
    documents, next_id = [], 0
    for _ in range(num_documents):
        document = []
        for _ in range(rng.randint(1, 40)):
            n = rng.randint(1, 30)
            document.append(pretraining_documents.Sentence(list(range(next_id, next_id + n)), [True] * n))
            next_id += n
        documents.append(document)
    return documents


def test_pairs_follow_the_recipe():
    rng = random.Random(1)
    documents = _unique_documents(40, rng)
    owner = {t: d for d, doc in enumerate(documents) for s in doc for t in s.ids}
    sentence_start = {s.ids[0] for doc in documents for s in doc}
    instances = pretraining_instances.create_instances(documents, max_seq_length=64, short_seq_prob=0.1,
                                             dupe_factor=3, rng=rng)
    for instance in instances:
        a, b = instance.tokens_a, instance.tokens_b
        assert a and b and len(a) + len(b) <= 61
        assert np.all(np.diff(a) == 1) and np.all(np.diff(b) == 1), "segments are runs of a document"
        if instance.is_random_next:
            assert owner[a[0]] != owner[b[0]]
        else:
            assert owner[a[0]] == owner[b[0]] and b[0] > a[-1], "B follows A in its document"
    # Without truncation (short sentences), A starts at a sentence start.
    assert np.mean([i.tokens_a[0] in sentence_start for i in instances]) > 0.5


def test_one_sentence_documents_give_random_pairs_unless_balanced():
    rng = random.Random(2)
    lengths = [rng.randint(2, 30) for _ in range(400)]
    documents = [[pretraining_documents.Sentence(list(range(100 * d, 100 * d + n)), [True] * n)]
                 for d, n in enumerate(lengths)]
    # The original: a one-sentence chunk always takes a random B.
    original = pretraining_instances.create_instances(documents, max_seq_length=64, short_seq_prob=0.1,
                                            dupe_factor=2, rng=rng)
    assert all(i.is_random_next for i in original)
    instances = pretraining_instances.create_instances(documents, max_seq_length=64, short_seq_prob=0.1,
                                             dupe_factor=10, rng=rng, balanced_nsp=True)
    assert abs(np.mean([i.is_random_next for i in instances]) - 0.5) < 0.02
    for instance in instances:
        if not instance.is_random_next:  # the sentence cut in two
            np.testing.assert_array_equal(instance.tokens_b[0], instance.tokens_a[-1] + 1)


def test_read_documents_and_filter(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\n\na b\nc\n\n\nd e f\n\n", encoding="utf-8")
    texts = pretraining_documents.read_documents([str(path)])
    assert texts == [["a b", "c"], ["d e f"]]
    paragraphs = tmp_path / "p.txt"
    paragraphs.write_text("今天下雨。我们在家！好吗？\n\nIt rains. We stay home.\n", encoding="utf-8")
    assert pretraining_documents.read_documents([str(paragraphs)], "paragraphs") == [
        ["今天下雨。", "我们在家！", "好吗？"], ["It rains.", "We stay home."]]
    vocab = WhitespaceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "e", "f"])
    documents = pretraining_documents.tokenize_documents(texts, vocab)
    kept, stats = pretraining_documents.filter_documents(documents, min_tokens=3, max_tokens=3)
    assert (len(kept), stats.documents, stats.dropped_short, stats.dropped_long, stats.tokens) == (2, 2, 0, 0, 6)
    kept, stats = pretraining_documents.filter_documents(documents, min_tokens=4)
    assert (len(kept), stats.dropped_short, stats.dropped_long) == (0, 2, 0)
    kept, stats = pretraining_documents.filter_documents(documents, max_tokens=2)
    assert (len(kept), stats.dropped_short, stats.dropped_long) == (0, 0, 2)
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        pretraining_documents.expand_input_patterns([str(tmp_path / "nothing-here*.txt")])


@pytest.fixture(scope="module")
def bert_tokenizer(minilm_dir):
    from bert_tf.data.tokenization import BertTokenizer

    return BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), lower_case=True)


def test_word_starts_from_pieces_jieba_and_pre_segmented_text(bert_tokenizer):
    vocab = bert_tokenizer.vocabulary
    [[english]] = pretraining_documents.tokenize_documents([["Unbelievably tokenized text"]], bert_tokenizer)
    assert english.ids == bert_tokenizer(tf.constant(["Unbelievably tokenized text"]))[0].numpy().tolist()
    assert english.word_starts == [not vocab[i].startswith("##") for i in english.ids]
    assert english.word_starts.count(True) == 3 and len(english.ids) > 3
    expected = [True, True, True, False, True, False, False]  # 我 爱 北京 天安门
    for boundaries, text in (("jieba", "我爱北京天安门"), ("whitespace", "我 爱 北京 天安门")):
        [[chinese]] = pretraining_documents.tokenize_documents([[text]], bert_tokenizer, word_boundaries=boundaries)
        assert chinese.ids == bert_tokenizer(tf.constant(["我爱北京天安门"]))[0].numpy().tolist()
        assert len(chinese.ids) == 7
        assert chinese.word_starts == expected, boundaries


@pytest.mark.parametrize("corpus_file, boundaries", [("en_corpus.txt", "wordpiece"),
                                                     ("zh_segmented.txt", "whitespace"),
                                                     ("zh_segmented.txt", "jieba")])
def test_whole_word_masking_of_real_text(bert_tokenizer, tmp_path, corpus_file, boundaries):
    options = dict(input_files=[os.path.join(TESTDATA, corpus_file)], vocab_file="unused",
                   max_seq_length=64, max_predictions_per_seq=10, dupe_factor=20,
                   do_whole_word_mask=True, word_boundaries=boundaries)
    for name, static in (("masked", True), ("unmasked", False)):
        create_pretraining_data(PretrainingDataOptions(
            output_file=str(tmp_path / name), static_masking=static, **options), bert_tokenizer)
    spec = dict(ORIGINAL_SPEC, **{k: tf.io.FixedLenFeature([64], tf.int64)
                                  for k in ("input_ids", "input_mask", "segment_ids")},
                **{k: tf.io.FixedLenFeature([10], v.dtype) for k, v in ORIGINAL_SPEC.items()
                   if k.startswith("masked_lm")})
    masked = _read(str(tmp_path / "masked"), spec)
    unmasked = _read(str(tmp_path / "unmasked"), pretraining_records.unmasked_feature_spec(64))
    special = (bert_tokenizer.cls_id, bert_tokenizer.sep_id, bert_tokenizer.pad_id)
    ids = unmasked["input_ids"]
    word_starts = unmasked["word_starts"].astype(bool)
    if boundaries == "wordpiece":
        continuation = np.array([t.startswith("##") for t in bert_tokenizer.vocabulary])
        maskable = ~np.isin(ids, special)
        np.testing.assert_array_equal(word_starts[maskable], ~continuation[ids][maskable])
        assert (~word_starts & maskable).sum() > 50, "the corpus has multi-piece words"
    else:
        assert (~word_starts & (ids > 0)).sum() > 500, "the corpus has multi-character words"
    _whole_words_only(word_starts, ids, masked["masked_lm_positions"], masked["masked_lm_weights"],
                      special=special)


def test_text_pairs_are_tokenized_packed_and_masked_in_graph(bert_tokenizer):
    texts = ["Unbelievably tokenized text", "a second sentence", "and a third one here"]
    pairs = tf.data.Dataset.from_tensor_slices((texts, texts[1:] + texts[:1], [0, 1, 0]))
    masker = MaskedLmMasker(vocab_size=bert_tokenizer.vocab_size, mask_id=bert_tokenizer.mask_id,
                            pad_id=bert_tokenizer.pad_id,
                            unmaskable_ids=(bert_tokenizer.cls_id, bert_tokenizer.sep_id,
                                            bert_tokenizer.pad_id), max_predictions_per_seq=4)
    [batch] = pretraining_dataset.text_pair_pretraining_dataset(
        pairs, tokenizer=bert_tokenizer, batch_size=3, max_seq_length=16, masker=masker,
        whole_word_mask=True, seed=5).as_numpy_iterator()
    a, b = bert_tokenizer(tf.constant(texts[:1])), bert_tokenizer(tf.constant(texts[1:2]))
    expected = [bert_tokenizer.cls_id, *a[0].numpy(), bert_tokenizer.sep_id, *b[0].numpy(),
                bert_tokenizer.sep_id]
    original = batch["input_word_ids"][0].copy()
    weights = batch["masked_lm_weights"][0] > 0
    original[batch["masked_lm_positions"][0][weights]] = batch["masked_lm_ids"][0][weights]
    np.testing.assert_array_equal(original[:len(expected)], expected)
    np.testing.assert_array_equal(batch["next_sentence_labels"], [0, 1, 0])
    assert batch["input_word_ids"].shape == (3, 16) and batch["masked_lm_ids"].shape == (3, 4)
