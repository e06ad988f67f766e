#!/usr/bin/env bash
# Instructions per hot call (valgrind --tool=callgrind on a single-user
# backend), aedb_queue next to the hand-written baseline queue:
#   bench/icount.sh              measure, write bench/results/instructions.{md,json}
#   bench/icount.sh --keep       also keep the callgrind files in $AEDB_ICOUNT_DIR
#   bench/icount.sh --n 50       N (calls per run are N and 2N; batches N/10)
# Runs the PostgreSQL of AEDB_PG_BIN (default the system one) with whatever
# aedb_queue is installed there; data directories under AEDB_ICOUNT_DIR
# (default /dev/shm/aedb_icount, tmpfs). Needs no port: backends run in single-user
# mode as the postgres OS user. Method and caveats: bench/results/instructions.md.
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"
cd "$ROOT"
command -v valgrind >/dev/null || { echo "valgrind is required" >&2; exit 1; }
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src core || echo "+dirty")
out=${AEDB_ICOUNT_OUT:-bench/results}
exec python3 bench/icount/icount.py --pg-bin "$PG_BIN" --work "${AEDB_ICOUNT_DIR:-/dev/shm/aedb_icount}" \
    --out "$out" --commit "$commit" --command "bench/icount.sh${*:+ $*}" "$@"
