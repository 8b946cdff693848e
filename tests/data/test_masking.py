"""MaskedLmMasker: counts, specials, originals, whole words, seeds."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data.masking import MaskedLmMasker

PAD, CLS, SEP, MASK, VOCAB = 0, 2, 3, 4, 1000
S, P = 64, 10


def _masker(**kwargs):
    kwargs.setdefault("max_predictions_per_seq", P)
    return MaskedLmMasker(vocab_size=VOCAB, mask_id=MASK, pad_id=PAD, unmaskable_ids=(CLS, SEP, PAD),
                          **kwargs)


def _batch(batch_size=256, seed=0):
    """Packed [CLS] A [SEP] B [SEP] rows of random lengths, padded to S."""
    rng = np.random.default_rng(seed)
    ids = np.zeros([batch_size, S], np.int32)
    for row in range(batch_size):
        n_a, n_b = rng.integers(1, 30, size=2)
        tokens = [CLS, *rng.integers(10, VOCAB, n_a), SEP, *rng.integers(10, VOCAB, n_b), SEP]
        ids[row, :len(tokens)] = tokens
    return ids


def _targets(ids, out):
    positions = out["masked_lm_positions"].numpy()
    weights = out["masked_lm_weights"].numpy()
    return [positions[r][weights[r] > 0] for r in range(len(ids))]


def test_count_per_row_is_the_recipe_and_targets_are_originals():
    ids = _batch()
    out = _masker()(tf.constant(ids), tf.constant([1, 2], tf.int64))
    masked = out["input_word_ids"].numpy()
    for r, positions in enumerate(_targets(ids, out)):
        # As the original's len(tokens): [CLS] and [SEP] count, padding does not.
        num_tokens = int(np.sum(ids[r] != PAD))
        assert len(positions) == min(P, max(1, round(num_tokens * 0.15)))
        assert list(positions) == sorted(set(positions))
        assert not np.isin(ids[r, positions], [CLS, SEP, PAD]).any()
        n = len(positions)
        np.testing.assert_array_equal(out["masked_lm_ids"].numpy()[r, :n], ids[r, positions])
        assert not out["masked_lm_ids"].numpy()[r, n:].any()
        assert not out["masked_lm_positions"].numpy()[r, n:].any()
        untouched = np.setdiff1d(np.arange(S), positions)
        np.testing.assert_array_equal(masked[r, untouched], ids[r, untouched])


def test_replacement_split_is_80_10_10():
    ids = _batch(2048)
    out = _masker(max_predictions_per_seq=20, masked_lm_prob=0.5)(tf.constant(ids),
                                                                   tf.constant([7, 7], tf.int64))
    masked = out["input_word_ids"].numpy()
    rows, cols = np.nonzero(out["masked_lm_weights"].numpy())
    positions = out["masked_lm_positions"].numpy()[rows, cols]
    replaced = masked[rows, positions]
    original = ids[rows, positions]
    total = len(rows)
    assert total > 25000
    assert abs(np.mean(replaced == MASK) - 0.8) < 0.01
    assert abs(np.mean(replaced == original) - 0.1) < 0.01
    assert abs(np.mean((replaced != MASK) & (replaced != original)) - 0.1) < 0.01


def test_same_seed_same_masks_other_seed_different():
    ids = tf.constant(_batch())
    masker = _masker()
    first = masker(ids, tf.constant([3, 4], tf.int64))
    again = masker(ids, tf.constant([3, 4], tf.int64))
    other = masker(ids, tf.constant([3, 5], tf.int64))
    for name in first:
        np.testing.assert_array_equal(first[name].numpy(), again[name].numpy())
    assert not np.array_equal(first["masked_lm_positions"].numpy(),
                              other["masked_lm_positions"].numpy())


def test_whole_words_are_masked_entirely_and_fit_the_count():
    ids = _batch(512, seed=1)
    rng = np.random.default_rng(2)
    word_starts = rng.random(ids.shape) < 0.4
    out = _masker()(tf.constant(ids), tf.constant([5, 6], tf.int64), tf.constant(word_starts))
    maskable = ~np.isin(ids, [CLS, SEP, PAD])
    total_targets = 0
    for r, positions in enumerate(_targets(ids, out)):
        starts = maskable[r] & (word_starts[r] | ~np.concatenate([[False], maskable[r, :-1]]))
        word = np.where(maskable[r], np.cumsum(starts) - 1, -1)
        chosen = set(word[positions])
        assert -1 not in chosen
        for w in chosen:
            assert set(np.nonzero(word == w)[0]) <= set(positions), f"row {r}: word {w} partly masked"
        num_to_predict = min(P, max(1, round(int((ids[r] != PAD).sum()) * 0.15)))
        assert len(positions) <= num_to_predict
        total_targets += len(positions)
    # Greedy filling leaves rows short only when no remaining word fits.
    num_to_predict = np.minimum(P, np.maximum(1, np.round((ids != PAD).sum(1) * 0.15)))
    assert total_targets > 0.95 * num_to_predict.sum()


def test_single_token_words_match_plain_masking_count():
    ids = tf.constant(_batch())
    seed = tf.constant([9, 9], tf.int64)
    plain = _masker()(ids, seed)
    words = _masker()(ids, seed, tf.ones_like(ids, tf.bool))
    np.testing.assert_array_equal(plain["masked_lm_weights"].numpy().sum(1),
                                  words["masked_lm_weights"].numpy().sum(1))


def test_masks_inside_a_dataset_map_with_parallel_calls_are_deterministic():
    ids = _batch(64)
    masker = _masker()

    def run():
        ds = tf.data.Dataset.from_tensor_slices(ids).batch(8)
        seeds = tf.data.Dataset.random(seed=11).batch(2)
        ds = tf.data.Dataset.zip(ds, seeds).map(lambda x, s: masker(x, s)["input_word_ids"],
                                                num_parallel_calls=4)
        return np.concatenate(list(ds.as_numpy_iterator()))

    np.testing.assert_array_equal(run(), run())


@pytest.mark.parametrize("kwargs, message", [
    ({"masked_lm_prob": 0.0}, "masked_lm_prob"),
    ({"max_predictions_per_seq": 0}, "max_predictions_per_seq"),
    ({"mask_token_rate": 0.95, "random_token_rate": 0.1}, "mask_token_rate"),
])
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _masker(**kwargs)


def test_more_predictions_than_positions_is_rejected():
    with pytest.raises(ValueError, match="max_predictions_per_seq=80"):
        _masker(max_predictions_per_seq=80)(tf.constant(_batch(2)), tf.constant([1, 1], tf.int64))
