#!/usr/bin/env bash
# Several shard clusters and a PL/Proxy router on loopback (docs/scale-out.md).
#   scripts/shards.sh start [--shards N] [--fresh]
#                                  N shard clusters (default 3) and the router; idempotent
#                                  (--fresh: new, empty databases, for tests)
#   scripts/shards.sh stop | status
# Shard i: cluster /var/tmp/aedb_queue_shards/shard<i> on port BASE+i, database
# aedb_queue_shard with the extension, numbered i (aedb_queue.queue_shard_assign).
# Router: cluster .../router on port BASE (default 54350), database aedb_router
# with plproxy and aedb_queue_router, every shard registered.
# Needs the extension and the router installed (scripts/install.sh).
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

DIR=${AEDB_SHARDS_DIR:-/var/tmp/aedb_queue_shards}
BASE=${AEDB_SHARDS_PORT:-54350}
SHARD_DB=aedb_queue_shard
ROUTER_DB=aedb_router
action=${1:-start}; shift || true
shards=3
fresh=
while [ $# -gt 0 ]; do
    case "$1" in
    --shards) shards=$2; shift 2 ;;
    --fresh) fresh=1; shift ;;
    *) echo "usage: $0 start [--shards N] | stop | status" >&2; exit 2 ;;
    esac
done
[ -f "$DIR/shards" ] && [ "$action" != start ] && shards=$(cat "$DIR/shards")

cluster() { AEDB_CLUSTER_DIR=$DIR/$1 AEDB_PORT=$2 bash scripts/cluster.sh "$3" >/dev/null; }
sql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$1" -U postgres -X -q -v ON_ERROR_STOP=1 -d "$2" "${@:3}"; }
ensure_db() {
    [ -z "$fresh" ] || PGOPTIONS='-c client_min_messages=warning' sql "$1" postgres -c "DROP DATABASE IF EXISTS $2 WITH (FORCE)"
    [ "$(sql "$1" postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$2'")" = 1 ] ||
        sql "$1" postgres -c "CREATE DATABASE $2"
}

case "$action" in
start)
    postgres_dir "$DIR"
    echo "$shards" >"$DIR/shards"
    for i in $(seq 1 "$shards"); do
        port=$((BASE + i))
        cluster "shard$i" "$port" start
        ensure_db "$port" "$SHARD_DB"
        sql "$port" "$SHARD_DB" -c "CREATE EXTENSION IF NOT EXISTS aedb_queue" \
            -c "SELECT aedb_queue.queue_shard_assign($i)" >/dev/null
    done
    cluster router "$BASE" start
    ensure_db "$BASE" "$ROUTER_DB"
    sql "$BASE" "$ROUTER_DB" -c "CREATE EXTENSION IF NOT EXISTS aedb_queue_router CASCADE" >/dev/null
    for i in $(seq 1 "$shards"); do
        sql "$BASE" "$ROUTER_DB" -c "SELECT aedb_queue.queue_router_add_shard($i,
            'host=127.0.0.1 port=$((BASE + i)) dbname=$SHARD_DB connect_timeout=2')" >/dev/null
    done
    echo "router up: psql -h 127.0.0.1 -p $BASE -U postgres $ROUTER_DB ($shards shards on ports $((BASE + 1))-$((BASE + shards)), database $SHARD_DB)"
    ;;
stop)
    # Every cluster is stopped; the status says whether one failed to stop or died on the way.
    status=0
    cluster router "$BASE" stop || status=1
    for i in $(seq 1 "$shards"); do cluster "shard$i" $((BASE + i)) stop || status=1; done
    exit $status
    ;;
status)
    cluster router "$BASE" status && sql "$BASE" "$ROUTER_DB" -c "SELECT * FROM aedb_queue.queue_router_shards()"
    ;;
*)
    echo "usage: $0 start [--shards N] | stop | status" >&2; exit 2 ;;
esac
