#!/usr/bin/env bash
# Runs the isolation specs in tests/isolation against a throwaway cluster,
# with PostgreSQL's own pg_isolation_regress (from postgresql-server-dev-15):
# several sessions per spec, each step's interleaving pinned by a permutation,
# and a step that waits for a lock shown as <waiting ...>.
#   scripts/isolation.sh            run every spec, fail on any difference
#   scripts/isolation.sh NAME...    run only these specs (tests/isolation/specs/NAME.spec)
#   scripts/isolation.sh --bless    accept the current output as expected
# AEDB_DIRECT_WRITES=off runs the same specs, against the same expected files,
# on the statement path (a cluster of its own: .../isolation-off).
# AEDB_ISOLATION_PORT (54333), AEDB_TEST_DIR and AEDB_PG_BIN (the PostgreSQL
# copy the cluster runs from) as in the other scripts.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

bless=
names=()
for arg in "$@"; do
    case "$arg" in
    --bless) bless=yes ;;
    -*) echo "usage: $0 [--bless] [spec...]" >&2; exit 2 ;;
    *) names+=("$arg") ;;
    esac
done

ISOLATION_DIR=$(dirname "$(dirname "$PG_CONFIG")")/lib/pgxs/src/test/isolation
for tool in pg_isolation_regress isolationtester; do
    if [ ! -x "$ISOLATION_DIR/$tool" ]; then
        echo "missing $ISOLATION_DIR/$tool (apt-get install postgresql-server-dev-$PG_MAJOR)" >&2
        exit 1
    fi
done

WORK=$TEST_DIR/isolation${AEDB_DIRECT_WRITES:+-$AEDB_DIRECT_WRITES}
PORT=${AEDB_ISOLATION_PORT:-54333}
postgres_dir "$(dirname "$WORK")"
# The library preloaded: queue_counters() (overview.sql) needs its shared memory.
AEDB_PRELOAD=aedb_queue AEDB_CLUSTER_DIR=$WORK AEDB_PORT=$PORT bash scripts/cluster.sh start >/dev/null
stop_at_exit 'AEDB_CLUSTER_DIR=$WORK bash scripts/cluster.sh stop >/dev/null'
check_direct_writes "$PORT"

if [ ${#names[@]} -eq 0 ]; then
    for f in tests/isolation/specs/*.spec; do
        names+=("$(basename "$f" .spec)")
    done
fi

rm -rf "$WORK/out" && mkdir -p "$WORK/out"
if [ -n "$bless" ]; then
    # pg_isolation_regress stops at a spec without an expected file.
    mkdir -p tests/isolation/expected
    for name in "${names[@]}"; do
        [ -f "tests/isolation/expected/$name.out" ] || : >"tests/isolation/expected/$name.out"
    done
fi
status=0
"$ISOLATION_DIR/pg_isolation_regress" \
    --bindir="$PG_BIN" --host=127.0.0.1 --port="$PORT" --user=postgres --dbname=aedb_queue_isolation \
    --inputdir=tests/isolation --outputdir="$WORK/out" "${names[@]}" || status=$?

if [ -n "$bless" ]; then
    for name in "${names[@]}"; do
        cp "$WORK/out/results/$name.out" tests/isolation/expected/
    done
    echo "expected output updated from $WORK/out/results"
    exit 0
fi
if [ $status -ne 0 ] && [ -f "$WORK/out/regression.diffs" ]; then
    cat "$WORK/out/regression.diffs"
fi
exit $status
