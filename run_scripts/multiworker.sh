#!/usr/bin/env bash
# Runs run_pretraining.py on N workers with MultiWorkerMirroredStrategy.
#   run_scripts/multiworker.sh N --flagfile=flags/X.flags [more flags]
# Workers listen on HOSTS (comma-separated host:port, N of them; default 127.0.0.1 with
# consecutive ports from PORT, default 23456). On a real cluster run the same script on
# every machine with the same HOSTS and WORKER_INDEX set to that machine's index: it then
# starts only that worker. Locally (WORKER_INDEX unset) it starts all N and waits.
set -euo pipefail
cd "$(dirname "$0")/.."
n=$1
shift
port=${PORT:-23456}
if [[ -z "${HOSTS:-}" ]]; then
  HOSTS=$(for ((i = 0; i < n; i++)); do printf '127.0.0.1:%d,' $((port + i)); done)
  HOSTS=${HOSTS%,}
fi
workers=$(printf '"%s",' ${HOSTS//,/ })
workers="[${workers%,}]"
start_worker() {
  TF_CONFIG="{\"cluster\": {\"worker\": $workers}, \"task\": {\"type\": \"worker\", \"index\": $1}}" \
    python run_pretraining.py --distribution_strategy=multi_worker_mirrored "${@:2}"
}
if [[ -n "${WORKER_INDEX:-}" ]]; then
  start_worker "$WORKER_INDEX" "$@"
  exit
fi
pids=()
for ((i = 0; i < n; i++)); do
  start_worker "$i" "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
