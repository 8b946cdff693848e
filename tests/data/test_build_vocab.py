"""Vocab learning: the library (bert_tf.data.vocab_builder) and the build_vocab tool."""

import subprocess
import unicodedata

import pytest
import tensorflow as tf

from bert_tf.data import corpora, vocab_builder
from bert_tf.data.tokenization import SPECIAL_TOKENS, BertTokenizer
from tests import driver_runs


def _is_cjk(token: str) -> bool:
    return len(token) == 1 and "\u4e00" <= token <= "\u9fff"


def _unk_rate(vocab_file, lines, lower_case) -> float:
    tokenizer = BertTokenizer(vocab_file, lower_case=lower_case)
    ids = tokenizer(tf.constant(lines)).flat_values.numpy()
    return float((ids == tokenizer.unk_id).mean())


def test_chinese_vocab_has_characters_and_continuations(tmp_path):
    lines = corpora.read_product_reviews().texts[:5000]
    vocab = vocab_builder.learn_vocab(lines, vocab_size=3000, lower_case=True, num_unused=2)
    assert vocab[:7] == list(SPECIAL_TOKENS) + ["[unused0]", "[unused1]"]
    assert len(set(vocab)) == len(vocab) <= 3000
    characters = [token for token in vocab if _is_cjk(token)]
    # The default alphabet is a third of the free slots: (3000 - 7) // 3 = 997.
    assert 900 <= len(characters) <= 997
    assert all("##" + character in vocab for character in characters)
    path = tmp_path / "vocab.txt"
    vocab_builder.write_vocab(vocab, path)
    assert _unk_rate(path, lines, lower_case=True) < 0.07


def test_english_vocab_is_lower_cased_and_covers_its_corpus(tmp_path):
    lines = corpora.read_tweets().texts[:1000]
    vocab = vocab_builder.learn_vocab(lines, vocab_size=800, lower_case=True)
    learned = vocab[len(SPECIAL_TOKENS):]
    assert 600 < len(vocab) <= 800
    assert {"the", "car", "##s", "a", "##a"} <= set(learned)
    assert not [t for t in learned if t != t.lower() or any(unicodedata.category(c) == "Mn" for c in t)]
    path = tmp_path / "vocab.txt"
    vocab_builder.write_vocab(vocab, path)
    assert _unk_rate(path, lines, lower_case=True) < 0.005


def test_cased_vocab_keeps_case():
    lines = ["Apple apple APPLE Über über"] * 20
    vocab = vocab_builder.learn_vocab(lines, vocab_size=100, lower_case=False)
    assert {"Apple", "apple", "APPLE", "Über", "über"} <= set(vocab)
    assert "Über" not in vocab_builder.learn_vocab(lines, vocab_size=100, lower_case=True)


def test_read_lines_errors_name_the_file(tmp_path):
    (tmp_path / "ok.txt").write_text("one\n\n two \n", encoding="utf-8")
    assert vocab_builder.read_lines([str(tmp_path / "ok.txt")]) == ["one", "two"]
    (tmp_path / "blank.txt").write_text("\n \n", encoding="utf-8")
    (tmp_path / "bad.txt").write_bytes(b"fine\ncaf\xe9\n")
    cases = [([tmp_path / "missing.txt"], FileNotFoundError, f"input file {tmp_path / 'missing.txt'} does not exist"),
             ([tmp_path / "bad.txt"], ValueError, f"input file {tmp_path / 'bad.txt'} is not UTF-8 (line 2)"),
             ([tmp_path / "blank.txt"], ValueError, f"input files hold no text: {tmp_path / 'blank.txt'}")]
    for files, error, message in cases:
        with pytest.raises(error) as raised:
            vocab_builder.read_lines([str(f) for f in files])
        assert str(raised.value) == message
    with pytest.raises(ValueError, match="vocab_size 7 leaves no room beyond 6 reserved tokens"):
        vocab_builder.learn_vocab(["a"], vocab_size=7, lower_case=True, num_unused=1)


def test_write_vocab_leaves_nothing_on_failure(tmp_path):
    with pytest.raises(TypeError):
        vocab_builder.write_vocab(["[PAD]", None], tmp_path / "vocab.txt")
    assert list(tmp_path.iterdir()) == []


def _run_tool(*args: str) -> subprocess.CompletedProcess:
    return driver_runs.run(["-m", "bert_tf.tools.build_vocab", *args], timeout=300)


def test_tool_writes_a_vocab(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("自然语言处理很有趣。\n\nNatural language processing is fun.\n" * 30, encoding="utf-8")
    output = tmp_path / "vocab.txt"
    result = _run_tool(f"--input_files={tmp_path}/*.txt", "--vocab_size=100", "--lower_case=true",
                       f"--output={output}", "--num_unused=3")
    assert result.returncode == 0, result.stderr
    vocab = output.read_text(encoding="utf-8").split("\n")
    assert vocab[-1] == "" and len(vocab) - 1 <= 100
    assert vocab[:8] == list(SPECIAL_TOKENS) + ["[unused0]", "[unused1]", "[unused2]"]
    assert {"自", "##自", "natural", "fun"} <= set(vocab)
    assert result.stdout.strip() == f"wrote {len(vocab) - 1} tokens to {output}"


@pytest.mark.parametrize("name, content, error", [
    ("nothing", None, "--input_files={dir}/nothing*.txt matches no file"),
    ("empty", b"\n  \n", "input files hold no text: {dir}/empty.txt"),
    ("latin1", b"ok\ncaf\xe9\n", "input file {dir}/latin1.txt is not UTF-8 (line 2)"),
])
def test_tool_bad_input_is_one_line_exit_2(tmp_path, name, content, error):
    if content is not None:
        (tmp_path / f"{name}.txt").write_bytes(content)
    result = _run_tool(f"--input_files={tmp_path}/{name}*.txt", "--vocab_size=100",
                       f"--output={tmp_path}/vocab.txt")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    # TensorFlow's C++ start-up log may come first; ours is the one line of the tool.
    lines = result.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("build_vocab")] == lines[-1:], result.stderr
    assert lines[-1] == f"build_vocab: error: {error.format(dir=tmp_path)}"
    assert not (tmp_path / "vocab.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ([] if content is None else [f"{name}.txt"])
