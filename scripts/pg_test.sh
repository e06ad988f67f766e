#!/usr/bin/env bash
# The #[pg_test]s (cargo pgrx test) against pgrx's throw-away cluster, run as
# the postgres OS user, with the guard on its server log:
#   scripts/pg_test.sh [TESTNAME_FILTER]
# cargo-pgrx keeps its server's log in memory only and installs its build by
# overwriting the installed files in place; scripts/pgrx_test/sudo, first on
# the PATH here, keeps a copy of the log and installs beside and renames. The
# log is then checked (scripts/check_server_log.sh) whatever the tests' outcome.
# AEDB_TEST_DIR as in the other scripts.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

WORK=$TEST_DIR/pg_test
postgres_dir "$(dirname "$WORK")"
postgres_dir "$WORK"
export AEDB_PGTEST_LOG=$WORK/server.log
rm -f "$AEDB_PGTEST_LOG" "$AEDB_PGTEST_LOG.tee-pid"

status=0
PATH="$ROOT/scripts/pgrx_test:$PATH" cargo pgrx test "pg$PG_MAJOR" "$@" --runas postgres --pgdata "$WORK/data" || status=$?

# The copy is whole once every process of the server has closed the log.
if [ -f "$AEDB_PGTEST_LOG.tee-pid" ]; then
    tee_pid=$(cat "$AEDB_PGTEST_LOG.tee-pid")
    for _ in $(seq 1 300); do kill -0 "$tee_pid" 2>/dev/null || break; sleep 0.1; done
fi
if ! grep -q "database system is ready to accept connections" "$AEDB_PGTEST_LOG" 2>/dev/null; then
    # Failed before its server started (a build error), or the log went uncopied.
    [ "$status" -ne 0 ] && exit "$status"
    echo "pg_test: no server log in $AEDB_PGTEST_LOG (did cargo-pgrx change how it starts its server? scripts/pgrx_test/sudo)" >&2
    exit 1
fi
bash scripts/check_server_log.sh "$AEDB_PGTEST_LOG" || status=1
exit $status
