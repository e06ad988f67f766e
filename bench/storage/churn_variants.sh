#!/usr/bin/env bash
# Churn (claim 100, 8 workers, 10,000 backlog) of aedb_queue under several
# storage settings of aedb_queue.task, one harness run each.
#   churn_variants.sh JOBS ROUNDS OUTROOT NAME='SETTINGS' [NAME='SETTINGS' ...]
# SETTINGS: the --task-storage value; "-" for none; a value starting with
# "idx:" adds --task-index-storage (e.g. 'fillfactor=80;idx:fillfactor=100').
# PORT (default 54370).
set -euo pipefail
jobs=$1 rounds=$2 root=$3; shift 3
port=${PORT:-54370}
cd "$(dirname "$0")/../.."
for v in "$@"; do
    name=${v%%=*} settings=${v#*=}
    args=()
    table=${settings%%;idx:*}
    [ "$table" != "-" ] && [ -n "$table" ] && args+=(--task-storage "$table")
    case $settings in *";idx:"*) args+=(--task-index-storage "${settings#*;idx:}") ;; esac
    echo "== $name: ${args[*]:-(defaults)}"
    cargo run --release -q -p aedb_queue_bench -- --port "$port" --systems aedb_queue \
        --only churn --churn-rounds "$rounds" --churn-jobs "$jobs" --out "$root/$name" "${args[@]}" \
        | grep "churn aedb"
    grep -A3 "^| system | after" "$root/$name/latest.md" | tail -1
done
