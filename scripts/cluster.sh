#!/usr/bin/env bash
# Starts (or reuses) the local demo cluster: run as root, serves as postgres on 127.0.0.1.
#   scripts/cluster.sh start | stop | status
set -euo pipefail
source "$(dirname "$0")/common.sh"

DEMO_DIR=/var/tmp/aedb_queue_cluster
DIR=${AEDB_CLUSTER_DIR:-$DEMO_DIR}
PORT=${AEDB_PORT:-54329}

# pg_cron's scheduler serves one database per cluster: the demo cluster runs
# it for aedb_demo (scripts/demo.sql). The other clusters started through this
# script (regress, bench, upgrade test) have no use for it.
cron_opts=
if [ "$DIR" = "$DEMO_DIR" ]; then
    cron_opts="-c shared_preload_libraries=pg_cron -c cron.database_name=aedb_demo"
fi

case "${1:-start}" in
start)
    postgres_dir "$DIR"
    if [ ! -f "$DIR/data/PG_VERSION" ]; then
        as_postgres "$PG_BIN/initdb" -D "$DIR/data" -U postgres --auth=trust >/dev/null
    fi
    # Restart a running cluster whose pg_cron preload is not the one wanted here.
    if as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
        if grep -q pg_cron "$DIR/data/postmaster.opts"; then has_cron=yes; else has_cron=; fi
        if [ "$has_cron" != "${cron_opts:+yes}" ]; then
            as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null
        fi
    fi
    if ! as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
        as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start \
            -o "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$DIR $cron_opts" >/dev/null
    fi
    echo "cluster up: psql -h 127.0.0.1 -p $PORT -U postgres"
    ;;
stop)
    as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -m fast stop ;;
status)
    as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" status ;;
*)
    echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
