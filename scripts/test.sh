#!/usr/bin/env bash
# Runs every test: pure unit tests, #[pg_test]s, pg_regress examples and the
# multi-connection integration tests against a real cluster.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

bash scripts/setup.sh
WORK=${AEDB_TEST_DIR:-/var/tmp/aedb_queue_test}
postgres_dir "$WORK"

log "1/4 pure unit tests"
cargo test -p aedb_queue_core

log "2/4 pg_test (single-session semantics, every error case)"
postgres_dir "$WORK/pg_test"
cargo pgrx test pg$PG_MAJOR --runas postgres --pgdata "$WORK/pg_test/data"

log "3/4 pg_regress (the SQL surface as examples; installs the extension into PostgreSQL $PG_MAJOR)"
cargo pgrx install --pg-config "$PG_CONFIG"
bash scripts/regress.sh

log "4/4 integration tests over TCP"
cargo test -p aedb_queue_itests -- --test-threads=2

log "all tests passed"
