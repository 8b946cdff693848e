#!/usr/bin/env bash
# Two-phase pretraining as in the BERT paper: phase 1 at length 128, phase 2 at 512.
#   run_scripts/pretrain_two_phase.sh flags/bert_base_phase1.flags flags/bert_base_phase2.flags [--extra=flags]
# The paper's flagfiles share one output_dir and one schedule: phase 2 resumes phase 1's
# checkpoint (weights, optimizer, step) with the new records. NVIDIA's start phase 2 from
# phase 1's model directory with a schedule of its own (--init_checkpoint).
set -euo pipefail
cd "$(dirname "$0")/.."
phase1=$1 phase2=$2
shift 2
python run_pretraining.py --flagfile="$phase1" "$@"
python run_pretraining.py --flagfile="$phase2" "$@"
