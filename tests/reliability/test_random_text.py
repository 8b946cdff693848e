"""Random Unicode through the tokenizer, the packer and the word splitter: no crash,
shapes and special tokens always right."""

import os

import numpy as np
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_tf.data.packing import pack_segments
from bert_tf.data.tokenization import BertTokenizer, split_words_with_offsets

# Any code point but surrogates (not encodable as UTF-8), weighted towards the
# interesting ones: controls, combining marks, CJK, punctuation, whitespace.
TEXT = st.text(st.one_of(st.characters(exclude_categories=("Cs",)),
                         st.sampled_from(list("\x00\t\n\r\u200b\u0301\ufffd中文。，!?[CLS]##   "))),
               max_size=300)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@given(texts=st.lists(TEXT, min_size=1, max_size=4), pairs=st.lists(TEXT, min_size=1, max_size=4),
       length=st.integers(3, 48), lower=st.booleans())
@SETTINGS
def test_tokenize_and_pack_never_break(minilm_dir, texts, pairs, length, lower):
    tokenizer = _tokenizer(minilm_dir, lower)
    pairs = (pairs * len(texts))[:len(texts)]
    a, b = tokenizer(tf.constant(texts)), tokenizer(tf.constant(pairs))
    ids = a.flat_values.numpy()
    assert ((ids >= 0) & (ids < tokenizer.vocab_size)).all()
    special = {tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.mask_id}
    assert not special & set(ids.tolist()), "user text must never become a special token"
    packed = {k: v.numpy() for k, v in pack_segments([a, b], max_seq_length=length, cls_id=tokenizer.cls_id,
                                                     sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id).items()}
    for row_ids, mask, types in zip(packed["input_word_ids"], packed["input_mask"], packed["input_type_ids"]):
        assert row_ids.shape == mask.shape == types.shape == (length,)
        n = int(mask.sum())
        assert mask[:n].all() and not mask[n:].any() and (row_ids[n:] == tokenizer.pad_id).all()
        assert row_ids[0] == tokenizer.cls_id and row_ids[n - 1] == tokenizer.sep_id
        assert (row_ids[:n] == tokenizer.sep_id).sum() == 2 and (row_ids[:n] == tokenizer.cls_id).sum() == 1
        assert (np.diff(types[:n]) >= 0).all() and set(types[:n]) <= {0, 1}


@given(texts=st.lists(TEXT, min_size=1, max_size=4))
@SETTINGS
def test_word_offsets_point_into_the_text(texts):
    words, begin, end = split_words_with_offsets(tf.constant(texts))
    for text, row_words, row_begin, row_end in zip(texts, words.to_list(), begin.to_list(), end.to_list()):
        raw = text.encode("utf-8")
        assert all(raw[b:e] == w for w, b, e in zip(row_words, row_begin, row_end))
        assert all(e1 <= b2 for e1, b2 in zip(row_end, row_begin[1:]))


_TOKENIZERS = {}


def _tokenizer(minilm_dir, lower):
    if lower not in _TOKENIZERS:
        _TOKENIZERS[lower] = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), lower_case=lower)
    return _TOKENIZERS[lower]
