#!/usr/bin/env bash
# The benchmark, in one command (as root on Debian 12):
#   bash bench/run.sh            full run (under 30 minutes), all systems
#   bash bench/run.sh --quick    iteration run (under 3 minutes), aedb_queue and baseline
# Extra arguments go to the harness (e.g. --systems aedb_queue,pgq --reps 1).
# Results: bench/results/latest.md and bench/results/throughput.png.
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"
cd "$ROOT"

bash scripts/setup.sh
# Benchmark-only dependencies: PgQ, fonts for the chart, the Node peers.
bench_packages=(postgresql-15-pgq3 libfontconfig1-dev fonts-dejavu-core nodejs npm)
missing=()
for p in "${bench_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || command -v "$p" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
(cd bench/peers/node && { [ -d node_modules ] || npm ci --no-audit --no-fund; })

log "building and installing aedb_queue (release)"
bash scripts/install.sh --release >/dev/null
AEDB_CLUSTER_DIR=${AEDB_BENCH_DIR:-/var/tmp/aedb_queue_bench} AEDB_PORT=${AEDB_BENCH_PORT:-54340} bash scripts/cluster.sh start
log "benchmark"
cargo run --release -q -p aedb_queue_bench -- --port "${AEDB_BENCH_PORT:-54340}" "$@"
