#!/usr/bin/env bash
# Timing targets the tests do not assert (a loaded machine misses a
# tight bound with nothing wrong): the reaper's lateness, DROP DATABASE's time,
# the retention catch-up, the rate limit's use, the failover recovery (the
# SQL loop's and the Rust worker runtime's) and the chaos recovery times. The integration tests that exercise them measure them
# and report (itests/src/chaos/recovery.rs `report`); this runs those tests and
# writes the figures, each beside its target, to bench/results/timing.md.
#   bash bench/timing.sh            (as root; runs scripts/install.sh first)
# AEDB_BENCH_NO_INSTALL=1: use the extension as installed.
# Run it on a quiet machine: the figures are what the targets are about.
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"
cd "$ROOT"

[ "${AEDB_BENCH_NO_INSTALL:-}" = 1 ] || bash scripts/install.sh
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for t in aedb_queue_itests:reaper_worker aedb_queue_itests:rate_limits \
    aedb_queue_itests:failover aedb_queue_itests:chaos aedb_queue_itests:chaos_timeouts \
    aedb_queue_client:failover; do
    log "cargo test -p ${t%%:*} --test ${t#*:}"
    AEDB_CHAOS_REPORT="$raw" cargo test -p "${t%%:*}" --test "${t#*:}" -- --test-threads=1
done
{
    echo "# Timing: the targets the tests report instead of asserting"
    echo
    echo "Written by \`bash bench/timing.sh\` ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, code $(git rev-parse --short HEAD))."
    echo "Each row names its target; the tests themselves only check that the behaviour happens"
    echo "within a generous bound (30-60 s). Rows of 'timing' are the timed targets, the others"
    echo "the chaos tests' recovery times (docs/chaos.md)."
    tail -n +2 "$raw"
} >bench/results/timing.md
log "bench/results/timing.md"
cat bench/results/timing.md
