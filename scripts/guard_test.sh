#!/usr/bin/env bash
# The guard against backend deaths (scripts/check_server_log.sh, docs/testing.md, "The guard against backend deaths")
# fails when it should: a cluster of its own, one backend killed with SIGSEGV.
# The checker passes on the log before the kill; after it, the checker (also
# with --sigkill-expected: only SIGKILL is ever tolerated) and the cluster's
# stop (scripts/cluster.sh) fail, naming the line; --since past it passes.
# AEDB_GUARD_TEST_PORT (54335), AEDB_TEST_DIR as in the other scripts.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

WORK=$TEST_DIR/guard
PORT=${AEDB_GUARD_TEST_PORT:-54335}
LOG=$WORK/server.log
fail() { printf '\nguard test FAILED: %s\n' "$*" >&2; exit 1; }
check() { bash scripts/check_server_log.sh "$@" 2>&1; }

postgres_dir "$(dirname "$WORK")"
if [ -f "$WORK/data/postmaster.pid" ]; then
    AEDB_CLUSTER_DIR=$WORK bash scripts/cluster.sh stop >/dev/null 2>&1 || true
fi
rm -rf "$WORK"
AEDB_CLUSTER_DIR=$WORK AEDB_PORT=$PORT bash scripts/cluster.sh start >/dev/null
# Stopped below, where its failure is asserted; this is for an early exit.
trap 'AEDB_CLUSTER_DIR=$WORK bash scripts/cluster.sh stop >/dev/null 2>&1 || true' EXIT
sql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -X -q -At -v ON_ERROR_STOP=1 -d postgres "$@"; }

sql -c "SELECT 1" >/dev/null
out=$(check "$LOG") || fail "the checker failed on a clean log: $out"
clean_end=$(stat -c %s "$LOG")

sql -c "SELECT pg_sleep(120)" >/dev/null 2>&1 &
sleeper=$!
pid=
for _ in $(seq 1 300); do
    pid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(120)'")
    [ -z "$pid" ] || break
    sleep 0.1
done
[ -n "$pid" ] || fail "the sleeping backend did not show up"
kill -SEGV "$pid"
wait "$sleeper" || true
# The postmaster logs the death, then restarts the cluster.
for _ in $(seq 1 300); do
    grep -q "all server processes terminated; reinitializing" "$LOG" && sql -c "SELECT 1" >/dev/null 2>&1 && break
    sleep 0.1
done
grep -q "all server processes terminated; reinitializing" "$LOG" || fail "the cluster did not restart after the kill"

line="server process (PID $pid) was terminated by signal 11"
named() { grep -q -F "$LOG:" <<<"$1" && grep -q -F "$line" <<<"$1"; }
out=$(check "$LOG") && fail "the checker passed on a log with a backend killed by SIGSEGV"
named "$out" || fail "the checker failed without naming the line: $out"
out=$(check --sigkill-expected "$LOG") && fail "--sigkill-expected tolerated a SIGSEGV"
named "$out" || fail "with --sigkill-expected, the checker did not name the line: $out"
out=$(check --since "$(stat -c %s "$LOG")" "$LOG") || fail "--since past the death still failed: $out"
out=$(check --since "$clean_end" "$LOG") && fail "--since before the death passed"

trap - EXIT
out=$(AEDB_CLUSTER_DIR=$WORK bash scripts/cluster.sh stop 2>&1 >/dev/null) &&
    fail "scripts/cluster.sh stop passed although a backend of the cluster died"
named "$out" || fail "scripts/cluster.sh stop failed without naming the line: $out"
echo "guard test passed: a backend killed with SIGSEGV fails the checker and the cluster's stop, naming it:"
grep -F "$line" <<<"$out"
# The log of the death caused on purpose goes with its cluster: no later
# look for deaths in test logs should find it.
rm -rf "$WORK"
