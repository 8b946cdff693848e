import json

import pytest

from bert_tf.configs import PRESETS, BertConfig, get_preset


def test_json_round_trip(tmp_path):
    config = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=128, hidden_act="relu", do_lower_case=False)
    path = tmp_path / "bert_config.json"
    config.to_json_file(path)
    assert BertConfig.from_json_file(path) == config
    assert set(json.loads(path.read_text())) == set(config.to_dict())


def test_reads_original_and_hf_configs(tmp_path):
    original = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
                "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
                "max_position_embeddings": 512, "num_attention_heads": 12, "num_hidden_layers": 12,
                "type_vocab_size": 2, "vocab_size": 30522}
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(original))
    assert BertConfig.from_json_file(path) == get_preset("base_uncased")
    path.write_text(json.dumps({**original, "model_type": "bert", "architectures": ["BertModel"]}))
    assert BertConfig.from_json_file(path).hidden_size == 768


@pytest.mark.parametrize("changes, field", [
    ({"hidden_size": 100, "num_attention_heads": 12}, "hidden_size"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"vocab_size": -3}, "vocab_size"),
    ({"hidden_act": "swish"}, "hidden_act"),
    ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
    ({"layer_norm_eps": 0.0}, "layer_norm_eps"),
])
def test_validation_names_the_field(changes, field):
    with pytest.raises(ValueError, match=f"BertConfig.{field}"):
        BertConfig(**changes)


def test_bad_files_name_the_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="nope.json"):
        BertConfig.from_json_file(missing)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="broken.json"):
        BertConfig.from_json_file(broken)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"vocab_size": 10}))
    with pytest.raises(ValueError, match="partial.json: missing BERT config key"):
        BertConfig.from_json_file(partial)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**get_preset("tiny_uncased").to_dict(), "num_attention_heads": 3}))
    with pytest.raises(ValueError, match="bad.json: BertConfig.hidden_size"):
        BertConfig.from_json_file(bad)


def test_presets_match_published_sizes():
    sizes = {"tiny": (2, 128), "mini": (4, 256), "small": (4, 512), "medium": (8, 512),
             "base": (12, 768), "large": (24, 1024)}
    for size, (layers, hidden) in sizes.items():
        for vocab, vocab_size in (("uncased", 30522), ("chinese", 21128)):
            c = PRESETS[f"{size}_{vocab}"]
            assert (c.num_hidden_layers, c.hidden_size, c.vocab_size) == (layers, hidden, vocab_size)
            assert c.num_attention_heads == hidden // 64 and c.intermediate_size == 4 * hidden
            # Both of Google's vocabularies are uncased, chinese_L-12_H-768_A-12 included.
            assert c.do_lower_case is True
    assert get_preset("large_uncased").num_attention_heads == 16
    with pytest.raises(ValueError, match="unknown preset"):
        get_preset("huge")
