#!/usr/bin/env bash
# The shared-memory counters' cost in instructions: the hot calls under
# callgrind (bench/icount/icount.py, single-user backends) with aedb_queue
# preloaded and aedb_queue.track_counters on, then off, written as one table
# to bench/results/dashboard/counters-instructions.md. Instruction counts
# resolve the <= 2 % target where jobs/s on a shared 2-core machine cannot.
#   bench/icount/counters.sh [--n 40]
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
cd "$ROOT"
n=40
if [ "${1:-}" = "--n" ]; then n=$2; shift 2; fi
work=${AEDB_ICOUNT_DIR:-/dev/shm/aedb_icount}-counters
out=${AEDB_ICOUNT_OUT:-bench/results/dashboard}
only='^aedb_queue:(enqueue|enqueue with idempotency key|batch enqueue of 100|claim \(max 1\)|complete|complete batch of 100|complete_and_claim \(max 1\))$'
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src core || echo "+dirty")
started=$(date -u +%FT%TZ)
for setting in on off; do
    python3 bench/icount/icount.py --pg-bin "$PG_BIN" --work "$work/$setting" --n "$n" --modes prepared \
        --ordinary-only --only "$only" --pg-setting shared_preload_libraries=aedb_queue \
        --pg-setting "aedb_queue.track_counters=$setting" --out "$work/$setting" --commit "$commit"
done
mkdir -p "$out"
python3 - "$work" "$out/counters-instructions.md" "$commit" "$started" "$n" <<'PY'
import json, sys
work, dest, commit, started, n = sys.argv[1:]
runs = {s: json.load(open(f"{work}/{s}/instructions.json")) for s in ("on", "off")}
ir = {s: {r["call"]: r["ir_per_call"] for r in runs[s]["results"]} for s in runs}
meta = runs["on"]["meta"]
lines = [
    "# Counters' cost in instructions per call (callgrind)\n",
    f"Command: `bash bench/icount/counters.sh --n {n}`; commit `{commit}` (aedb_queue {meta['aedb_queue_version']}), "
    f"{meta['postgres'].split(' on ')[0]}, {meta['valgrind']}, started {started}.\n",
    "Each call is its own transaction in a single-user backend as an ordinary role, prepared "
    "(method: bench/results/instructions.md), with `shared_preload_libraries = aedb_queue` and "
    "`aedb_queue.track_counters` on, then off. The difference is what counting costs: one pending "
    "count per task in the backend and one flush into shared memory at commit.\n",
    "| call | Ir/call counters on | Ir/call counters off | on/off | target |",
    "|---|---:|---:|---:|---|",
]
worst = 0.0
for call in ir["on"]:
    on, off = ir["on"][call], ir["off"][call]
    ratio = on / off
    worst = max(worst, ratio)
    lines.append(f"| {call} | {on:,} | {off:,} | {ratio:.4f} | {'met' if ratio <= 1.02 else 'missed'} (≤ 1.02) |")
lines.append(f"\nWorst ratio {worst:.4f}: the counters cost **{(worst - 1) * 100:.1f} %** of the most affected call "
             f"against the issue's ≤ 2 %: **{'met' if worst <= 1.02 else 'missed'}**.")
open(dest, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
