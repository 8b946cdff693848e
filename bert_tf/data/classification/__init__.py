"""Classification and regression data: reading (CSV/TSV/JSONL), encoding, the demo datasets."""

from bert_tf.data.classification.demo import DEMO_DATASETS, DemoSplits, make_demo_splits, tfidf_baseline
from bert_tf.data.classification.features import (LABEL_IDS, REGRESSION_LABELS, EncodedExamples,
                                                  encode_examples)
from bert_tf.data.classification.reading import FILE_FORMATS, Examples, learn_labels, read_examples

__all__ = ["DEMO_DATASETS", "DemoSplits", "make_demo_splits", "tfidf_baseline", "LABEL_IDS", "REGRESSION_LABELS",
           "EncodedExamples", "encode_examples", "FILE_FORMATS", "Examples", "learn_labels", "read_examples"]
