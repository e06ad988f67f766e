#!/usr/bin/env bash
# Starts (or reuses) the local demo cluster: run as root, serves as postgres on 127.0.0.1.
#   scripts/cluster.sh start | restart | stop | status
# A test cluster (any but the demo's) has its server log checked when it stops
# (scripts/check_server_log.sh, from the size the log had when this script
# started the server): stop fails when a process of the cluster died.
set -euo pipefail
source "$(dirname "$0")/common.sh"

DEMO_DIR=/var/tmp/aedb_queue_cluster
DIR=${AEDB_CLUSTER_DIR:-$DEMO_DIR}
PORT=${AEDB_PORT:-54329}

# The demo cluster preloads aedb_queue (its background-worker reaper) and
# pg_cron (whose scheduler serves one database per cluster: aedb_demo, see
# scripts/demo.sql). The other clusters started through this script
# (regress, bench, upgrade test) preload neither: no reaper may act behind
# their tests' backs.
# AEDB_PRELOAD=aedb_queue preloads it in another cluster for its shared
# memory (queue_counters(), the dashboard's throughput) with the reaper off.
preload_opts=
if [ "$DIR" = "$DEMO_DIR" ]; then
    preload_opts="-c shared_preload_libraries=pg_cron,aedb_queue -c cron.database_name=aedb_demo"
elif [ -n "${AEDB_PRELOAD:-}" ]; then
    preload_opts="-c shared_preload_libraries=$AEDB_PRELOAD -c aedb_queue.reaper_interval=0"
fi

# AEDB_DIRECT_WRITES=off|on|auto sets aedb_queue.direct_writes (the test
# command runs the regress, isolation and model suites with it off too).
if [ -n "${AEDB_DIRECT_WRITES:-}" ]; then
    preload_opts="$preload_opts -c aedb_queue.direct_writes=$AEDB_DIRECT_WRITES"
fi
started_with() { grep -o 'shared_preload_libraries=[^" ]*\|aedb_queue.direct_writes=[^" ]*' | tr '\n' ' ' || true; }

case "${1:-start}" in
start)
    postgres_dir "$DIR"
    if [ ! -f "$DIR/data/PG_VERSION" ]; then
        as_postgres "$PG_BIN/initdb" -D "$DIR/data" -U postgres --auth=trust >/dev/null
    fi
    # Restart a running cluster whose preload is not the one wanted here.
    if as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
        running=$(started_with <"$DIR/data/postmaster.opts")
        wanted=$(echo "$preload_opts" | tr ' ' '\n' | started_with)
        if [ "$running" != "$wanted" ]; then
            as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null
        fi
    fi
    if ! as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
        stat -c %s "$DIR/server.log" >"$DIR/server.log.from" 2>/dev/null || echo 0 >"$DIR/server.log.from"
        without_open_files as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start \
            -o "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$DIR $preload_opts" >/dev/null
    fi
    echo "cluster up: psql -h 127.0.0.1 -p $PORT -U postgres"
    ;;
restart)
    # A preloaded library is loaded once, by the postmaster: a new build of
    # aedb_queue takes effect in the demo cluster only after a restart.
    if as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
        as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null
    fi
    exec bash "$0" start ;;
stop)
    status=0
    as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -m fast stop || status=$?
    if [ "$DIR" != "$DEMO_DIR" ]; then
        bash "$ROOT/scripts/check_server_log.sh" --since "$(cat "$DIR/server.log.from" 2>/dev/null || echo 0)" "$DIR/server.log" || status=1
    fi
    exit $status ;;
status)
    as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" status ;;
*)
    echo "usage: $0 start|restart|stop|status" >&2; exit 2 ;;
esac
