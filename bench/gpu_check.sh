#!/usr/bin/env bash
# The prepared GPU check (bench/gpu_check.py): BERT-Base and BERT-Large pretraining
# sequences/second at length 128 and 512 in bf16 + XLA, MFU, peak memory, and the largest
# BERT-Large batch at 512 without and with activation recomputation. Finishes inside 8
# minutes on one large NVIDIA GPU.
#
#   bash bench/gpu_check.sh [--output_json=gpu.json]
#
# Needs the README's install with TensorFlow's CUDA libraries, for example
#   pip install -e . "tensorflow[and-cuda]==2.21.0"
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 470 python bench/gpu_check.py "$@"
