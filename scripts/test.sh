#!/usr/bin/env bash
# Runs every test: pure unit tests, #[pg_test]s, pg_regress examples,
# isolation specs, the upgrade from every earlier version, the
# multi-connection integration tests against a real cluster, and the
# clients' tests (Rust runtime and CLI, Python package), and the dashboard
# in headless Chromium, all on PostgreSQL 15; then on 16, 17 and 18 the
# suites scripts/test_major.sh lists, and pg_upgrade from 15 to 18.
# AEDB_TEST_MAJORS (default "16 17 18") chooses the other majors; empty: 15 only.
# Every cluster a step starts has its server log checked when it is torn down
# (scripts/check_server_log.sh, docs/testing.md, "The guard against backend deaths"): a process of the cluster that
# died by a signal, a PANIC or a Rust panic fails the step, naming the line.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"
# One cold build in CI: incremental caches would only double the disk it takes.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

MAJORS=${AEDB_TEST_MAJORS-16 17 18}
setup_majors=()
for major in $MAJORS; do setup_majors+=(--pg "$major"); done
bash scripts/setup.sh "${setup_majors[@]}"
WORK=$TEST_DIR
postgres_dir "$WORK"

log "1/10 pure unit tests (the rules, and the bench's report: medians, ratios, tables, the chart's legend); one version across the extension and its clients; the guard on server logs fails when a backend dies (scripts/guard_test.sh)"
bash scripts/versions_test.sh
cargo test -p aedb_queue_core
cargo test -p aedb_queue_bench --bins
bash scripts/guard_test.sh

log "2/10 pg_test (single-session semantics, every error case)"
bash scripts/pg_test.sh

log "3/10 pg_regress (the SQL surface as examples; installs the extension into PostgreSQL $PG_MAJOR, leaving running servers alone: scripts/install_test.sh), with aedb_queue.direct_writes auto, then off (the same expected files)"
bash scripts/install_test.sh
both_write_paths regress
# The same examples of the worker surface through the router over three shards, and the router's own.
bash scripts/router_regress.sh

log "4/10 isolation specs (pg_isolation_regress: fixed interleavings of concurrent sessions), with aedb_queue.direct_writes auto, then off (the same expected files)"
both_write_paths isolation

log "5/10 upgrade from each of $(earlier_versions)(ALTER EXTENSION UPDATE with tasks in every state; schema = fresh install); the .deb installed, upgraded under a running worker and removed (scripts/package_test.sh); a TLS-only deployment of two tenants as docs/deployment.md makes it: the .deb, a Rust worker, the CLI and the dashboard over verify-full, each operator seeing only their tenant (scripts/deployment_test.sh)"
upgrade_from_earlier_versions
bash scripts/package_test.sh
bash scripts/deployment_test.sh

log "6/10 integration tests over TCP; the model test again with aedb_queue.direct_writes off"
cargo test -p aedb_queue_itests -- --test-threads=2
AEDB_DIRECT_WRITES=off cargo test -p aedb_queue_itests --test model

log "7/10 Rust client, worker runtime (with its OpenTelemetry spans) and operator CLI (against throw-away clusters); their crates (cargo package); the Grafana board"
bash scripts/crates_test.sh
cargo test -p aedb_queue_client -p aedb_queue_cli -- --test-threads=2
cargo test -p aedb_queue_client --features otel --test otel
cargo test -p aedb_queue_client --features otel --doc
python3 docs/grafana/check.py

log "8/10 Python package (pytest against a throw-away cluster)"
bash clients/python/test.sh

log "9/10 the dashboard in headless Chromium (Playwright; every page and action, CSRF, roles, hostile text)"
bash clients/cli/browser/run.sh

log "10/10 the other majors: ${MAJORS:-none} (scripts/test_major.sh: pg_test, pg_regress and upgrades on each; on 16 and 17 the direct writes' differential itests; on 18 also isolation, the router's regress, every integration test and pg_upgrade from 15)"
for major in $MAJORS; do
    bash scripts/test_major.sh "$major"
done

# What the build took, so a run near a full disk shows it.
du -sh "${CARGO_TARGET_DIR:-$ROOT/target}" 2>/dev/null || true
df -h "$ROOT" | tail -1
log "all tests passed"
