"""Parity on a real pretrained BERT (MiniLM-L6-H384) with Hugging Face transformers and keras-hub."""

import os

import numpy as np
import pytest
import torch
import transformers

from bert_tf import checkpoints
from bert_tf.configs import BertConfig
from bert_tf.modeling.encoder import BertEncoder

SENTENCES = [
    "The cat sat on the mat.",
    "BERT is pretrained with masked language modelling and next sentence prediction.",
    "Hi!",
    "Attention is quadratic in the sequence length, so pretraining spends most steps at 128 tokens.",
    "Où est la bibliothèque ?",
    "Numbers like 3.14159 and 2,718 split into pieces.",
    "A very, very, very long sentence with many commas, clauses, and words that keeps going on "
    "for quite a while before it finally stops somewhere around here.",
    "東京 is a city.",
    "ok",
]


@pytest.fixture(scope="module")
def batch(minilm_dir):
    tokenizer = transformers.BertTokenizerFast(os.path.join(minilm_dir, "vocab.txt"))
    encoded = tokenizer(SENTENCES[:5], SENTENCES[4:], padding=True, return_tensors="np")
    lengths = encoded["attention_mask"].sum(1)
    assert len(set(lengths)) >= 4 and lengths.max() > 2 * lengths.min()
    return {"input_word_ids": encoded["input_ids"].astype(np.int32),
            "input_mask": encoded["attention_mask"].astype(np.int32),
            "input_type_ids": encoded["token_type_ids"].astype(np.int32)}


def _max_diff(ours, reference, mask):
    keep = mask.astype(bool)  # padding rows carry no meaning in either model
    return np.abs(np.asarray(ours)[keep] - np.asarray(reference)[keep]).max()


@pytest.mark.slow
def test_matches_hugging_face_bert_model(minilm_dir, batch):
    encoder = checkpoints.load_encoder(minilm_dir)
    assert encoder.config.hidden_act == "gelu" and encoder.config.num_hidden_layers == 6
    reference = transformers.BertModel.from_pretrained(minilm_dir).eval()
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor(batch["input_word_ids"], dtype=torch.long),
                             attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                             token_type_ids=torch.tensor(batch["input_type_ids"], dtype=torch.long),
                             output_hidden_states=True)
    out = encoder(batch)
    assert _max_diff(out["sequence_output"], expected.last_hidden_state, batch["input_mask"]) <= 1e-5
    assert np.abs(out["pooled_output"].numpy() - expected.pooler_output.numpy()).max() <= 1e-5
    for ours, theirs in zip(out["encoder_outputs"], expected.hidden_states[1:]):
        assert _max_diff(ours, theirs, batch["input_mask"]) <= 1e-5


@pytest.mark.slow
def test_matches_keras_hub_backbone(minilm_dir, batch):
    # keras-hub's BertBackbone hard-codes tanh-approximated GELU, so both sides
    # run the MiniLM weights with hidden_act="gelu_tanh".
    config = BertConfig.from_json_file(os.path.join(minilm_dir, "config.json"))
    encoder = BertEncoder(config.replace(hidden_act="gelu_tanh"))
    checkpoints.load_weights(encoder, minilm_dir)
    backbone = checkpoints.to_keras_hub(encoder)
    expected = backbone({"token_ids": batch["input_word_ids"], "padding_mask": batch["input_mask"],
                         "segment_ids": batch["input_type_ids"]})
    out = encoder(batch)
    assert _max_diff(out["sequence_output"], expected["sequence_output"], batch["input_mask"]) <= 1e-5
    assert np.abs(out["pooled_output"].numpy() - expected["pooled_output"].numpy()).max() <= 1e-5
    # The activation matters: the exact-GELU encoder differs from keras-hub by far more.
    exact = checkpoints.load_encoder(minilm_dir)(batch)
    assert _max_diff(exact["sequence_output"], expected["sequence_output"], batch["input_mask"]) > 1e-4
    with pytest.raises(ValueError, match="tanh-approximated GELU"):
        checkpoints.to_keras_hub(checkpoints.load_encoder(minilm_dir))
