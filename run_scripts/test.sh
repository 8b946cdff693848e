#!/usr/bin/env bash
# Installs bert_tf with its test extras and runs the whole suite (CPU only).
set -euo pipefail
cd "$(dirname "$0")/.."
# seqeval (NER F1) ships only as an sdist whose build pulls a setuptools_scm that fails
# without network-installed plugins; build it against an older setuptools_scm instead.
python -m pip install -q "setuptools_scm<9" wheel
python -m pip install -q --no-build-isolation seqeval
python -m pip install -q -e ".[test]"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}" CUDA_VISIBLE_DEVICES=""
python -m pytest -q tests "$@"
