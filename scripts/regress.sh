#!/usr/bin/env bash
# Runs the pg_regress examples in tests/pg_regress against a throwaway cluster.
#
# The files follow `cargo pgrx regress`'s layout (sql/, expected/, setup.sql
# first), but cargo-pgrx 0.18.1 ignores --runas when it starts its server, and
# these machines run as root, which Postgres refuses. So we start the cluster
# as postgres ourselves and drive PostgreSQL's own pg_regress.
#   scripts/regress.sh           run, fail on any difference
#   scripts/regress.sh --bless   accept the current output as expected
# AEDB_DIRECT_WRITES=off runs the same examples, against the same expected
# files, on the statement path (a cluster of its own: .../regress-off).
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

WORK=$TEST_DIR/regress${AEDB_DIRECT_WRITES:+-$AEDB_DIRECT_WRITES}
PORT=${AEDB_REGRESS_PORT:-54331}
postgres_dir "$(dirname "$WORK")"
# The library preloaded: queue_counters() (overview.sql) needs its shared memory.
AEDB_PRELOAD=aedb_queue AEDB_CLUSTER_DIR=$WORK AEDB_PORT=$PORT bash scripts/cluster.sh start >/dev/null
stop_at_exit 'AEDB_CLUSTER_DIR=$WORK bash scripts/cluster.sh stop >/dev/null'
check_direct_writes "$PORT"

tests=(setup)
for f in tests/pg_regress/sql/*.sql; do
    name=$(basename "$f" .sql)
    [ "$name" = setup ] || tests+=("$name")
done

rm -rf "$WORK/out" && mkdir -p "$WORK/out"
status=0
"$(dirname "$(dirname "$PG_CONFIG")")/lib/pgxs/src/test/regress/pg_regress" \
    --bindir="$PG_BIN" --host=127.0.0.1 --port="$PORT" --user=postgres --dbname=aedb_queue_regress \
    --inputdir=tests/pg_regress --outputdir="$WORK/out" "${tests[@]}" || status=$?

if [ "${1:-}" = --bless ]; then
    cp "$WORK/out/results/"*.out tests/pg_regress/expected/
    echo "expected output updated from $WORK/out/results"
    exit 0
fi
if [ $status -ne 0 ] && [ -f "$WORK/out/regression.diffs" ]; then
    cat "$WORK/out/regression.diffs"
fi
exit $status
