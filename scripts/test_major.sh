#!/usr/bin/env bash
# Runs the suites that scripts/test.sh runs on PostgreSQL 15 against another
# major (docs/postgres-majors.md):
#   scripts/test_major.sh NN            16 or 17: pg_test, pg_regress, upgrades,
#                                       the direct writes' differential itests,
#                                       the .deb's contents
#                                       18: those, isolation, the router, every
#                                       integration test and pg_upgrade from 15
#   scripts/test_major.sh NN --full     every one of them on any major
# The major must be installed (scripts/setup.sh --pg NN). Its clusters live
# under their own test directory (scripts/common.sh: TEST_DIR), on the same
# ports as 15's: run one major at a time.
set -euo pipefail
major=${1:?usage: scripts/test_major.sh 16|17|18 [--full]}
export AEDB_PG_MAJOR=$major
source "$(dirname "$0")/common.sh"
cd "$ROOT"

full=false
[ "${2:-}" = --full ] || [ "$major" = 18 ] && full=true

log "PostgreSQL $major: pg_test (the same #[pg_test]s as on 15, built with feature pg$major)"
bash scripts/pg_test.sh

log "PostgreSQL $major: pg_regress with aedb_queue.direct_writes auto, then off (the expected files of 15)"
bash scripts/install.sh >/dev/null
both_write_paths regress

log "PostgreSQL $major: ALTER EXTENSION UPDATE from each of $(earlier_versions)"
upgrade_from_earlier_versions

# Not installed here (no postgresql-NN package to satisfy Depends,
# docs/install.md): its files, paths and Depends are checked.
log "PostgreSQL $major: the .deb (scripts/package.sh --pg $major): the files scripts/install.sh installed, at postgresql-$major's paths"
bash scripts/package_contents_test.sh

if ! $full; then
    log "PostgreSQL $major: the direct writes against the statements (itests write_paths*: differential, DDL under load, executor hooks)"
    AEDB_PG_BIN=$PG_BIN cargo test -p aedb_queue_itests --test write_paths --test write_paths_ddl --test write_paths_hooks
    exit 0
fi

log "PostgreSQL $major: isolation specs, with aedb_queue.direct_writes auto, then off"
both_write_paths isolation

# PL/Proxy for the router, built from its Debian source tarball; pg_cron
# only where its tarball can be had (scripts/pg_companions.sh): the pg_cron
# itests say when they did not run.
log "PostgreSQL $major: PL/Proxy (and pg_cron where its source can be had), then the router's regress"
bash scripts/pg_companions.sh "$major" plproxy
bash scripts/pg_companions.sh "$major" pg_cron ||
    echo "(pg_cron for PostgreSQL $major could not be had: its itests will say they did not run)"
bash scripts/router_regress.sh

log "PostgreSQL $major: integration tests over TCP (clusters from $PG_BIN)"
AEDB_PG_BIN=$PG_BIN cargo test -p aedb_queue_itests -- --test-threads=2

if [ "$major" != 15 ]; then
    log "PostgreSQL $major: pg_upgrade from 15 with tasks in every state, tokens and grants"
    bash scripts/pg_upgrade_test.sh "$major"
fi
