#!/usr/bin/env bash
# The workflow benchmark (aedb_queue, DBOS, Absurd), about 4 minutes:
#   bash bench/workflows/run.sh [harness arguments, e.g. --n 2000 --nb 200 --workers 4]
# Starts its own PostgreSQL 15 cluster (AEDB_WF_PORT, default 54400; data in
# AEDB_WF_DIR, default /var/tmp/aedb_bench_wf_pg) with aedb_queue preloaded
# (reaper off, as bench/run.sh), uses the aedb_queue installed there (it does
# not build or install it), installs the peers from PyPI (requirements.txt)
# into a virtualenv (AEDB_WF_VENV, default /var/tmp/aedb_bench_wf_venv), runs
# wf.py harness, writes bench/results/workflows.json, and leaves the cluster
# running (stop: pg_ctl -D $AEDB_WF_DIR/data stop, as postgres).
set -euo pipefail
cd "$(dirname "$0")/../.."
port=${AEDB_WF_PORT:-54400}
dir=${AEDB_WF_DIR:-/var/tmp/aedb_bench_wf_pg}
venv=${AEDB_WF_VENV:-/var/tmp/aedb_bench_wf_venv}
bin=${AEDB_PG_BIN:-/usr/lib/postgresql/15/bin}
if ! cmp -s bench/workflows/requirements.txt "$venv/requirements.txt"; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r bench/workflows/requirements.txt
    cp bench/workflows/requirements.txt "$venv/requirements.txt"
fi
if [ ! -d "$dir/data" ]; then
    mkdir -p "$dir" && chown postgres:postgres "$dir"
    runuser -u postgres -- "$bin/initdb" -D "$dir/data" -U postgres -E UTF8 --locale=C.UTF-8 -A trust >/dev/null
fi
# (Re)start, so the preloaded library is the one installed now.
runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -m fast stop >/dev/null 2>&1 || true
runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start \
    -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir -c shared_preload_libraries=aedb_queue -c aedb_queue.reaper_interval=0" >/dev/null
echo "load before: $(cat /proc/loadavg)"
"$venv/bin/python" bench/workflows/wf.py harness --port "$port" "$@"
echo "load after: $(cat /proc/loadavg)"
