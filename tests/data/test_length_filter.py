"""The length filter: fixed bounds, bounds from a percentage at each end, and its errors."""

import numpy as np
import pytest

from bert_tf.data.length_filter import LengthFilter, LengthFilterCounts, length_mask


def test_fixed_bounds_keep_the_examples_inside_them():
    lengths = np.array([3, 9, 5, 12, 7, 5, 20, 4, 8])
    keep, counts = length_mask(lengths, LengthFilter(min_seq_tokens=5, max_seq_tokens=12))
    np.testing.assert_array_equal(keep, (lengths >= 5) & (lengths <= 12))
    assert counts == LengthFilterCounts(kept=6, too_short=2, too_long=1, min_seq_tokens=5, max_seq_tokens=12)
    keep, counts = length_mask(lengths, LengthFilter())
    assert keep.all() and counts == LengthFilterCounts(9, 0, 0, 0, 0)


def test_percent_drops_at_most_that_share_at_each_end_and_reports_its_bounds():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 200, size=1000)
    keep, counts = length_mask(lengths, LengthFilter(drop_percent=5))
    ranked = np.sort(lengths)
    assert (counts.min_seq_tokens, counts.max_seq_tokens) == (ranked[50], ranked[949])
    np.testing.assert_array_equal(keep, (lengths >= ranked[50]) & (lengths <= ranked[949]))
    assert counts.too_short <= 50 and counts.too_long <= 50
    # Ties at a bound are kept: the 5% rank falls among the 10s, so only the three 5s go at the short end.
    lengths = np.array([5] * 3 + [10] * 96 + [30])
    keep, counts = length_mask(lengths, LengthFilter(drop_percent=5))
    assert counts == LengthFilterCounts(kept=96, too_short=3, too_long=1, min_seq_tokens=10, max_seq_tokens=10)
    assert keep[3:99].all() and not keep[:3].any() and not keep[99]


@pytest.mark.parametrize("kwargs, message", [
    (dict(min_seq_tokens=10, max_seq_tokens=5), "exceeds"),
    (dict(max_seq_tokens=-1), ">= 0"),
    (dict(drop_percent=50), r"\[0, 50\)"),
    (dict(drop_percent=5, min_seq_tokens=3), "either --length_filter_percent"),
])
def test_bad_bounds_name_the_flag(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LengthFilter(**kwargs)
