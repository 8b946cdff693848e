#!/usr/bin/env bash
# Installs bert_tf with its test extras and runs the whole suite (CPU only).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[test]"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}" CUDA_VISIBLE_DEVICES=""
# A worker per core; a test file's tests stay on one worker, so its module fixtures run once.
python -m pytest -q -n auto --dist loadfile tests "$@"
