#!/usr/bin/env bash
# Installs bert_tf with its test extras and runs the whole suite (CPU only).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[test]"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}" CUDA_VISIBLE_DEVICES=""
# A worker per core, each TensorFlow op on one thread: with a thread pool per core in every
# worker, the workers' pools fought over the cores (on 2 cores the tests' summed durations
# were 1,328 s against 1,191 s with one thread).
export TF_NUM_INTRAOP_THREADS="${TF_NUM_INTRAOP_THREADS:-1}"
# A test file's tests stay on one worker, so its module fixtures run once; the files go out
# slowest first (tests/conftest.py), not reordered by their number of tests, which left a
# one-test file of a minute running alone at the end.
python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder tests "$@"
