#!/usr/bin/env bash
# Ir per call of aedb_queue calls under schema variants of aedb_queue.task
# (bench/icount/variants/*.sql, run after CREATE EXTENSION) and settings:
#   bench/icount/variants.sh [--n 20] [NAME ...]
# NAME: a file of variants/ without .sql, or setting:name=value. Logs go to
# $AEDB_ICOUNT_DIR-var/NAME.log (one line a workload, as icount.py prints).
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
cd "$ROOT"
n=20
if [ "${1:-}" = "--n" ]; then n=$2; shift 2; fi
base=${AEDB_ICOUNT_DIR:-/dev/shm/aedb_icount}-var
mkdir -p "$base"
for name in "$@"; do
    extra=()
    only='^aedb_queue:(enqueue|claim \(max 1\)|complete_and_claim \(max 1\))$'
    case $name in
        setting:*) extra=(--pg-setting "${name#setting:}"); only='^aedb_queue:(claim|complete_and_claim) \(max 1\)$' ;;
        idx_noexpr) extra=(--setup-sql "bench/icount/variants/$name.sql"); only='^aedb_queue:enqueue$' ;;
        *) extra=(--setup-sql "bench/icount/variants/$name.sql") ;;
    esac
    slug=$(echo "$name" | tr -c 'a-zA-Z0-9_\n' '_')
    python3 bench/icount/icount.py --pg-bin "$PG_BIN" --work "$base/$slug" --n "$n" --modes prepared \
        --ordinary-only --only "$only" "${extra[@]}" > "$base/$slug.log"
    sed "s/^/$name: /" "$base/$slug.log"
    rm -rf "${base:?}/$slug"
done
