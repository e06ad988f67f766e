#!/usr/bin/env bash
# Upgrade test (docs/upgrades.md): ALTER EXTENSION aedb_queue UPDATE from an
# earlier version to the current one, against a throwaway cluster.
#   scripts/upgrade_test.sh [FROM_VERSION]      default 0.1.0
# Needs the current build installed with the frozen scripts (scripts/install.sh).
#
# a. Database "upgraded": CREATE EXTENSION at FROM_VERSION (its frozen script,
#    running on the NEW shared library, as between a package upgrade and
#    ALTER EXTENSION UPDATE), tasks in every state made with that version's
#    functions, a snapshot of every row, ALTER EXTENSION UPDATE, then: the
#    version moved, no row changed, and the tasks still work (tests/upgrade/).
# b. Database "fresh": CREATE EXTENSION at the current version. The schema of
#    both (membership, then pg_dump --schema-only of schema aedb_queue) must be
#    identical, so the upgrade script matches the install script.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

FROM=${1:-0.1.0}
TO=$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
WORK=${AEDB_TEST_DIR:-/var/tmp/aedb_queue_test}/upgrade
PORT=${AEDB_UPGRADE_PORT:-54332}
EXTDIR=$("$PG_CONFIG" --sharedir)/extension

fail() { printf '\nupgrade test FAILED (%s -> %s): %s\n' "$FROM" "$TO" "$*" >&2; exit 1; }

# The installed files must be this checkout's.
[ -f "sql/archive/aedb_queue--$FROM.sql" ] || fail "no frozen install script sql/archive/aedb_queue--$FROM.sql"
cmp -s "sql/archive/aedb_queue--$FROM.sql" "$EXTDIR/aedb_queue--$FROM.sql" ||
    fail "$EXTDIR/aedb_queue--$FROM.sql is missing or differs from sql/archive/: run bash scripts/install.sh"
[ -f "$EXTDIR/aedb_queue--$TO.sql" ] || fail "$EXTDIR/aedb_queue--$TO.sql is missing: run bash scripts/install.sh"
grep -q "^default_version = '$TO'" "$EXTDIR/aedb_queue.control" ||
    fail "the installed aedb_queue.control is not version $TO: run bash scripts/install.sh"
for f in sql/aedb_queue--*--*.sql; do
    cmp -s "$f" "$EXTDIR/$(basename "$f")" || fail "$EXTDIR/$(basename "$f") is missing or differs from $f: run bash scripts/install.sh"
done

postgres_dir "$(dirname "$WORK")"
AEDB_CLUSTER_DIR=$WORK AEDB_PORT=$PORT bash scripts/cluster.sh start >/dev/null
trap 'AEDB_CLUSTER_DIR=$WORK bash scripts/cluster.sh stop >/dev/null' EXIT
sql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -X -q -v ON_ERROR_STOP=1 "$@"; }
for db in upgraded fresh; do
    sql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
done

echo "a. $FROM -> $TO with tasks in every state (database upgraded)"
sql -d upgraded -o /dev/null -f tests/upgrade/helpers.sql
sql -d upgraded -o /dev/null -v from_version="$FROM" -f tests/upgrade/fill.sql ||
    fail "filling version $FROM (tests/upgrade/fill.sql) failed"
sql -d upgraded -o /dev/null -v from_version="$FROM" -v to_version="$TO" -f tests/upgrade/update.sql ||
    fail "ALTER EXTENSION UPDATE, or the rows after it (tests/upgrade/update.sql)"
sql -d upgraded -o /dev/null -f tests/upgrade/use.sql ||
    fail "using the tasks after the update (tests/upgrade/use.sql)"
echo "   every row kept; in-flight tasks settle with their tokens, ready tasks claim, keys dedup"

echo "b. schema after the update = schema of a fresh install (database fresh)"
sql -d fresh -c "CREATE EXTENSION aedb_queue"
# Each pg_dump section ("-- Name: ...; Type: ...") becomes one line for
# sorting, so that only content counts, not dump order; SET lines and
# comments go.
normalise() {
    awk '/^-- Name: / { if (block != "") print block; block = $0; next }
         /^--/ || /^$/ || /^SET / || /^SELECT pg_catalog.set_config/ { next }
         { block = block "\001" $0 }
         END { if (block != "") print block }' | LC_ALL=C sort | tr '\001' '\n'
}
for db in upgraded fresh; do
    {
        sql -d "$db" -At -f tests/upgrade/members.sql
        sql -d "$db" -f tests/upgrade/detach.sql
        "$PG_BIN/pg_dump" -h 127.0.0.1 -p "$PORT" -U postgres --schema-only --no-owner --schema=aedb_queue "$db" | normalise
    } >"$WORK/$db.schema"
done
if ! diff -u --label "fresh install ($TO)" --label "updated from $FROM" "$WORK/fresh.schema" "$WORK/upgraded.schema"; then
    fail "the updated schema differs from a fresh install (diff above: - fresh, + updated); fix sql/aedb_queue--*--$TO.sql"
fi
echo "   identical: $(grep -c '^member ' "$WORK/fresh.schema") member objects, $(grep -c '^CREATE ' "$WORK/fresh.schema") CREATE statements"
echo "upgrade $FROM -> $TO passed"
