#!/usr/bin/env bash
# The Debian package (scripts/package.sh, docs/install.md), installed the way a
# user does, on a fresh cluster of PostgreSQL 15:
#   1. dpkg -i postgresql-15-aedb-queue_<version>-1: every file the extension
#      needs is the package's and as packaged (dpkg --verify), with the
#      copyright; CREATE EXTENSION, then a producer and a worker (login roles
#      in aedb_queue_producer and aedb_queue_worker, not superusers) enqueue,
#      claim and complete; an earlier version installs from its frozen script
#      and updates to this one.
#   2. dpkg -i the next build, <version>-2, while a worker's session holds a
#      claimed task: the library is a new file (dpkg renames it into place),
#      the session settles its task with the library it has mapped, the
#      postmaster is the same, a new session works on the new file, ALTER
#      EXTENSION UPDATE has nothing to do.
#   3. dpkg -r: every file of the package is gone.
# The cluster's server log is checked when it stops (no process died); the
# development install (scripts/install.sh), whose files the package replaced
# and removed, is put back at the end, failed or not.
#   flock /tmp/aedb-pg.lock bash scripts/package_test.sh   (scripts/test.sh, step 5)
# The packages are built from the debug build (warm after scripts/install.sh);
# AEDB_PACKAGE_TEST_PORT (54362), AEDB_TEST_DIR as in the other scripts.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

[ "$PG_MAJOR" = 15 ] || { echo "package test: Debian's PostgreSQL 15 only (the other majors here are relocatable installs)" >&2; exit 2; }
WORK=$TEST_DIR/package
CLUSTER=$WORK/cluster
PORT=${AEDB_PACKAGE_TEST_PORT:-54362}
PACKAGE=postgresql-$PG_MAJOR-aedb-queue
VERSION=$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
LIB=$("$PG_CONFIG" --pkglibdir)/aedb_queue.so
EXTDIR=$("$PG_CONFIG" --sharedir)/extension
fail() { printf '\npackage test FAILED: %s\n' "$*" >&2; exit 1; }

status() { dpkg-query -W -f='${db:Status-Status} ${Version}' "$PACKAGE" 2>/dev/null || true; }
[ -z "$(status)" ] || [ "$(status | cut -d' ' -f1)" = not-installed ] ||
    fail "$PACKAGE is installed already ($(status)): dpkg -r $PACKAGE first"

postgres_dir "$TEST_DIR"
postgres_dir "$WORK"
log "package test: building ${PACKAGE}_$VERSION-1 and -2 (debug build)"
deb1=$(bash scripts/package.sh --debug --revision 1 --out "$WORK/debs" 2>"$WORK/package.log") ||
    { cat "$WORK/package.log" >&2; fail "scripts/package.sh --revision 1"; }
deb2=$(bash scripts/package.sh --debug --revision 2 --out "$WORK/debs" 2>"$WORK/package.log") ||
    { cat "$WORK/package.log" >&2; fail "scripts/package.sh --revision 2"; }

# A fresh cluster each run.
if AEDB_CLUSTER_DIR=$CLUSTER bash scripts/cluster.sh status >/dev/null 2>&1; then
    AEDB_CLUSTER_DIR=$CLUSTER bash scripts/cluster.sh stop >/dev/null
fi
rm -rf "$CLUSTER"
cleanup() {
    local rc=0
    AEDB_CLUSTER_DIR=$CLUSTER bash scripts/cluster.sh stop >/dev/null || rc=1
    if [ "$(status | cut -d' ' -f1)" = installed ]; then dpkg -r "$PACKAGE" >"$WORK/dpkg.log" 2>&1 || rc=1; fi
    echo "package test: putting the development install back (scripts/install.sh)"
    bash scripts/install.sh >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log" >&2; rc=1; }
    return $rc
}
stop_at_exit cleanup

log "1. dpkg -i $(basename "$deb1")"
# dpkg's output (postgresql-common's triggers say a lot) goes to a log.
dpkg_logged() { dpkg "$@" >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg $*"; }; }
dpkg_logged -i "$deb1"
[ "$(status)" = "installed $VERSION-1" ] || fail "after dpkg -i: $PACKAGE is '$(status)'"
dpkg --verify "$PACKAGE" || fail "installed files differ from the package's (dpkg --verify above)"
needed=("$LIB" "$EXTDIR/aedb_queue.control" "$EXTDIR/aedb_queue--$VERSION.sql"
        "$EXTDIR/aedb_queue_router.control" "$EXTDIR"/aedb_queue_router--*.sql)
for f in sql/archive/aedb_queue--*.sql sql/aedb_queue--*--*.sql; do needed+=("$EXTDIR/$(basename "$f")"); done
for f in "${needed[@]}"; do
    owner=$(dpkg -S "$f" 2>/dev/null | cut -d: -f1) || true
    [ "$owner" = "$PACKAGE" ] || fail "$f is not a file of $PACKAGE (owner: ${owner:-none})"
done
grep -qx 'License: Apache-2.0' "/usr/share/doc/$PACKAGE/copyright" || fail "the copyright names no Apache-2.0 license"
grep -q /usr/share/common-licenses/Apache-2.0 "/usr/share/doc/$PACKAGE/copyright" && cmp -s LICENSE /usr/share/common-licenses/Apache-2.0 ||
    fail "the copyright does not refer to the text of LICENSE"
echo "   ${#needed[@]} files of the extension and the router, all the package's and as packaged; the copyright"
dpkg -L "$PACKAGE" | while read -r f; do if [ -f "$f" ]; then echo "$f"; fi; done >"$WORK/files"

AEDB_CLUSTER_DIR=$CLUSTER AEDB_PORT=$PORT bash scripts/cluster.sh start >/dev/null
postmaster=$(head -1 "$CLUSTER/data/postmaster.pid")
sql() { # ROLE DATABASE psql-arguments...
    local role=$1 db=$2; shift 2
    PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U "$role" -d "$db" -X -q -At -v ON_ERROR_STOP=1 "$@"
}
sql postgres postgres -c "CREATE DATABASE pkg" -c "CREATE DATABASE pkg_old"
sql postgres pkg -c "CREATE EXTENSION aedb_queue" \
    -c "CREATE ROLE pkg_producer LOGIN IN ROLE aedb_queue_producer" \
    -c "CREATE ROLE pkg_worker LOGIN IN ROLE aedb_queue_worker"

# One task through a producer's and a worker's sessions; prints the outcome.
worker_loop() { # QUEUE
    sql pkg_producer pkg -c "SELECT task_id FROM aedb_queue.queue_enqueue('$1', '{\"n\": 1}')" >/dev/null
    sql pkg_worker pkg <<SQL
SELECT task_id, fencing_token FROM aedb_queue.queue_claim('$1', 'pkg-worker', lease => '5 minutes') \gset
SELECT aedb_queue.queue_complete('$1', :task_id, :fencing_token, result => '{"ok": true}');
SQL
}
[ "$(worker_loop first)" = applied ] || fail "the worker loop on the installed package: completing its task did not apply"
echo "   CREATE EXTENSION aedb_queue $(sql postgres pkg -c "SELECT extversion FROM pg_extension WHERE extname = 'aedb_queue'"); a task enqueued, claimed and completed by login roles"
old=$(sql postgres pkg_old -c "CREATE EXTENSION aedb_queue VERSION '0.1.0'" -c "ALTER EXTENSION aedb_queue UPDATE" \
          -c "SELECT extversion FROM pg_extension WHERE extname = 'aedb_queue'")
[ "$old" = "$VERSION" ] || fail "CREATE EXTENSION aedb_queue VERSION '0.1.0' then UPDATE gave version '$old'"
echo "   CREATE EXTENSION aedb_queue VERSION '0.1.0' (a frozen script), ALTER EXTENSION UPDATE -> $VERSION"

log "2. dpkg -i $(basename "$deb2") under a worker's session holding a task"
inode=$(stat -c %i "$LIB")
sql pkg_producer pkg -c "SELECT task_id FROM aedb_queue.queue_enqueue('held', '{\"n\": 2}')" >/dev/null
# One session: psql's \! runs the upgrade between two statements of it.
held=$(sql pkg_worker pkg <<SQL
SELECT pg_backend_pid() AS pid \gset
SELECT task_id, fencing_token FROM aedb_queue.queue_claim('held', 'pkg-worker', lease => '5 minutes') \gset
\! dpkg -i "$deb2" >"$WORK/dpkg.log" 2>&1 || echo "dpkg -i failed"
SELECT aedb_queue.queue_complete('held', :task_id, :fencing_token) || ' by ' || CASE WHEN pg_backend_pid() = :pid THEN 'the same backend' ELSE 'another backend' END;
SQL
) || fail "the session that held a task across dpkg -i failed: $held"
[ "$held" = "applied by the same backend" ] || { cat "$WORK/dpkg.log" >&2; fail "across dpkg -i: '$held'"; }
[ "$(status)" = "installed $VERSION-2" ] || fail "after dpkg -i of the next build: $PACKAGE is '$(status)'"
dpkg --verify "$PACKAGE" || fail "installed files differ from the package's (dpkg --verify above)"
[ "$(stat -c %i "$LIB")" != "$inode" ] || fail "$LIB was written in place (same inode), not replaced"
[ "$(head -1 "$CLUSTER/data/postmaster.pid")" = "$postmaster" ] || fail "the postmaster changed across dpkg -i"
echo "   the held task completed by the same backend; $LIB is a new file; the same postmaster"
[ "$(worker_loop second)" = applied ] || fail "the worker loop on a new session after the upgrade: completing its task did not apply"
echo "   a new session (the new file) runs the worker loop"
notice=$(PGOPTIONS= "$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d pkg -X -q -At -v ON_ERROR_STOP=1 \
             -c "ALTER EXTENSION aedb_queue UPDATE" 2>&1)
[[ $notice == *"version \"$VERSION\" of extension \"aedb_queue\" is already installed"* ]] ||
    fail "ALTER EXTENSION aedb_queue UPDATE after the package upgrade said: $notice"
echo "   ALTER EXTENSION aedb_queue UPDATE: nothing to do ($VERSION)"

log "3. dpkg -r $PACKAGE"
dpkg_logged -r "$PACKAGE"
[ "$(status | cut -d' ' -f1)" != installed ] || fail "after dpkg -r: $PACKAGE is '$(status)'"
left=$(while read -r f; do [ ! -e "$f" ] || echo "$f"; done <"$WORK/files")
[ -z "$left" ] || fail "files of the package left after dpkg -r: $left"
echo "   all $(wc -l <"$WORK/files") files of the package removed"
echo "package test passed"
