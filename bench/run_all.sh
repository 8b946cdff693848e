#!/usr/bin/env bash
# Runs the CPU benchmarks one after another into bench/results/, then rebuilds the README table.
#   bash bench/run_all.sh [extra flags for every script, e.g. --quick]
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
# On 2 cores pretrain_throughput takes about 14 minutes and demo_time_to_quality, the whole
# pretraining demo, 5 (bfloat16) to 6 (float32).
for name in pretrain_throughput profile_step onednn_cpu input_pipeline serving_latency finetune_padding activation_memory \
    demo_time_to_quality; do
  echo "== bench/$name.py"
  python "bench/$name.py" --output_json="bench/results/$name.json" "$@"
done
python bench/results_table.py
