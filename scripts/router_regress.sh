#!/usr/bin/env bash
# The pg_regress examples through the router (docs/scale-out.md), against
# three fresh shards and a router of their own (scripts/shards.sh).
#   scripts/router_regress.sh            run, fail on any difference
#   scripts/router_regress.sh --bless    accept tests/router's current output
#
# 1. The worker surface's examples from tests/pg_regress, unchanged, with
#    unkeyed tasks placed by queue (each queue on one shard, so the order the
#    examples show holds). Their expected output is the direct call's; the
#    documented differences (docs/scale-out.md) are taken out of
#    the router's output first: the CONTEXT lines of the router's functions,
#    the "on shard N" DETAIL, and PL/Proxy's reconnect NOTICE after an error.
# 2. tests/router: what only the router does (routing, fan-out, per-shard
#    operator rows), with its own expected output.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

WORK=$TEST_DIR/router
PORT=${AEDB_ROUTER_REGRESS_PORT:-54370}
postgres_dir "$(dirname "$WORK")"
export AEDB_SHARDS_DIR=$WORK/clusters AEDB_SHARDS_PORT=$PORT
bash scripts/shards.sh start --shards 3 --fresh >/dev/null
stop_at_exit 'bash scripts/shards.sh stop >/dev/null'

# Login roles on every cluster (roles are per cluster), as applications
# have them: a producer, a worker, an admin, two tenants (confined to their
# queues by grants made through the router, tests/router) and an unconfined
# worker role that tenant a is a member of.
ROLES="DO \$\$ DECLARE r text; BEGIN
    FOREACH r IN ARRAY ARRAY['app_producer', 'app_worker', 'app_admin', 'tenant_a', 'tenant_b', 'app_shared'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN EXECUTE format('CREATE ROLE %I LOGIN', r); END IF;
    END LOOP;
END \$\$; GRANT app_shared TO tenant_a"
MEMBERS="GRANT aedb_queue_producer TO app_producer; GRANT aedb_queue_worker TO app_worker;
    GRANT aedb_queue_admin TO app_admin; GRANT aedb_queue_producer, aedb_queue_worker TO tenant_a, tenant_b, app_shared"
as_su() { PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/psql" -h 127.0.0.1 -p "$1" -U postgres -X -q -v ON_ERROR_STOP=1 -d "$2" -c "$3" >/dev/null; }
as_su "$PORT" aedb_router "$ROLES"
for i in 1 2 3; do
    as_su $((PORT + i)) aedb_queue_shard "$ROLES"
    as_su $((PORT + i)) aedb_queue_shard "$MEMBERS"
done

PG_REGRESS="$(dirname "$(dirname "$PG_CONFIG")")/lib/pgxs/src/test/regress/pg_regress"
regress() {
    "$PG_REGRESS" --bindir="$PG_BIN" --host=127.0.0.1 --port="$PORT" --user=postgres --use-existing --dbname=aedb_router "$@"
}
status=0

# The worker surface, unchanged. pg_regress fails these as run (the router adds
# lines, taken out below); 16 and later say so on stderr, hence 2>.
SHARED=(lifecycle idempotency release settle_and_claim)
rm -rf "$WORK/shared" && mkdir -p "$WORK/shared/expected"
PGOPTIONS='-c aedb_queue_router.unkeyed_enqueues=by_queue' \
    regress --inputdir=tests/pg_regress --outputdir="$WORK/shared" "${SHARED[@]}" >/dev/null 2>&1 || true
for t in "${SHARED[@]}"; do
    sed -E -e '/^CONTEXT:  PL\/pgSQL function aedb_queue(_shard)?\./d' \
           -e '/^(SQL statement|PL\/pgSQL function) .*aedb_queue(_shard)?\./d' \
           -e '/^DETAIL:  on shard [0-9]+$/d' \
           -e '/^NOTICE:  PL\/Proxy: dropping stale conn$/d' \
        "$WORK/shared/results/$t.out" >"$WORK/shared/$t.out"
    if diff -u "tests/pg_regress/expected/$t.out" "$WORK/shared/$t.out" >"$WORK/shared/$t.diff"; then
        echo "ok     $t (tests/pg_regress, through the router)"
    else
        echo "FAILED $t (tests/pg_regress, through the router)"; cat "$WORK/shared/$t.diff"; status=1
    fi
done

# What only the router does.
tests=()
for f in tests/router/sql/*.sql; do tests+=("$(basename "$f" .sql)"); done
rm -rf "$WORK/own" && mkdir -p "$WORK/own"
own=0
regress --inputdir=tests/router --outputdir="$WORK/own" "${tests[@]}" || own=$?
if [ "${1:-}" = --bless ]; then
    cp "$WORK/own/results/"*.out tests/router/expected/
    echo "expected output updated from $WORK/own/results"
    exit $status
fi
if [ $own -ne 0 ]; then
    [ -f "$WORK/own/regression.diffs" ] && cat "$WORK/own/regression.diffs"
    status=1
fi
exit $status
