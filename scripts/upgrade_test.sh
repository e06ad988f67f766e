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
# b. Database "fresh": CREATE EXTENSION at the current version; database
#    "updated": FROM_VERSION, then ALTER EXTENSION UPDATE, no data. Their
#    schemas (membership and privileges, then pg_dump --schema-only of schema
#    aedb_queue) must be identical, and so must "upgraded"'s when part a
#    passed: the upgrade script produces what the install script does.
# Both parts run whatever the other's outcome; exit 1 if either failed.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

FROM=${1:-0.1.0}
TO=$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
WORK=$TEST_DIR/upgrade
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
stop_at_exit 'AEDB_CLUSTER_DIR=$WORK bash scripts/cluster.sh stop >/dev/null'
sql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -X -q -v ON_ERROR_STOP=1 "$@"; }
for db in upgraded updated fresh confined refused; do
    PGOPTIONS='-c client_min_messages=warning' sql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
done

# Both parts run whatever the other's outcome, so one run shows every problem.
failed=()

echo "a. $FROM -> $TO with tasks in every state (database upgraded)"
part_a() {
    why="tests/upgrade/helpers.sql failed"
    sql -d upgraded -o /dev/null -f tests/upgrade/helpers.sql || return 1
    why="filling version $FROM through its SQL functions, on the new library, failed (tests/upgrade/fill.sql)"
    sql -d upgraded -o /dev/null -v from_version="$FROM" -f tests/upgrade/fill.sql || return 1
    why="ALTER EXTENSION UPDATE, or the rows after it (tests/upgrade/update.sql)"
    sql -d upgraded -o /dev/null -v from_version="$FROM" -v to_version="$TO" -f tests/upgrade/update.sql || return 1
    why="using the old tasks after the update (tests/upgrade/use.sql)"
    sql -d upgraded -o /dev/null -f tests/upgrade/use.sql || return 1
}
a_ok=false
if part_a; then
    a_ok=true
    echo "   every row kept; in-flight tasks settle with their tokens, ready tasks claim, keys dedup"
else
    failed+=("a: $why")
fi

echo "b. schema after the update = schema of a fresh install (databases updated, upgraded, fresh)"
# "updated" is updated empty, so this part does not depend on part a;
# "upgraded" (part a's, full of tasks) is compared too when part a passed.
sql -d fresh -c "CREATE EXTENSION aedb_queue"
if ! sql -d updated -c "CREATE EXTENSION aedb_queue VERSION '$FROM'" -c "ALTER EXTENSION aedb_queue UPDATE"; then
    failed+=("b: CREATE EXTENSION aedb_queue VERSION '$FROM' then ALTER EXTENSION aedb_queue UPDATE failed (error above)")
fi
# Each pg_dump section ("-- Name: ...; Type: ...") becomes one line for
# sorting, so that only content counts, not dump order; SET lines,
# comments and psql's \restrict guards go.
normalise() {
    awk '/^-- Name: / { if (block != "") print block; block = $0; next }
         /^--/ || /^$/ || /^SET / || /^SELECT pg_catalog.set_config/ { next }
         /^\\(un)?restrict / { next }   # pg_dump >= 15.14: a random key per dump
         { block = block "\001" $0 }
         END { if (block != "") print block }' | LC_ALL=C sort | tr '\001' '\n'
}
schema_of() {
    sql -d "$1" -At -f tests/upgrade/members.sql || return 1
    sql -d "$1" -f tests/upgrade/detach.sql || return 1
    "$PG_BIN/pg_dump" -h 127.0.0.1 -p "$PORT" -U postgres --schema-only --no-owner --schema=aedb_queue --schema=aedb_queue_internal "$1" | normalise
}
compared=(updated)
! $a_ok || compared+=(upgraded)
schema_of fresh >"$WORK/fresh.schema" || fail "reading the schema of database fresh failed"
for db in "${compared[@]}"; do
    schema_of "$db" >"$WORK/$db.schema" || fail "reading the schema of database $db failed"
    if diff -u --label "fresh install ($TO)" --label "$db from $FROM" "$WORK/fresh.schema" "$WORK/$db.schema"; then
        echo "   $db: identical ($(grep -c '^member ' "$WORK/fresh.schema") member objects, $(grep -c '^CREATE ' "$WORK/fresh.schema") CREATE statements)"
    else
        failed+=("b: the schema of database $db differs from a fresh install (diff above: - fresh, + $db); fix sql/aedb_queue--*--$TO.sql")
    fi
done

# c. The version with per-queue grants but no confinement rows (0.2.0): in
#    0.3.0 confinement is a row of its own. A role that held a grant stays
#    confined; a grant held by one of the extension's own roles stops the
#    update, which says why. (From 0.3.0 on there is nothing to carry over.)
if [ "$FROM" = 0.2.0 ]; then
    echo "c. $FROM's grants: their holders stay confined; a group role's grant stops the update"
    sql -d confined -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'upgrade_tenant') THEN CREATE ROLE upgrade_tenant; END IF; END \$\$"
    got=$(sql -d confined -At -c "CREATE EXTENSION aedb_queue VERSION '$FROM'" \
              -c "SELECT aedb_queue.queue_grant('t.*', 'upgrade_tenant', 'worker')" \
              -c "ALTER EXTENSION aedb_queue UPDATE" \
              -c "SELECT count(*) FROM aedb_queue.confined_role WHERE role = 'upgrade_tenant'::regrole")
    [ "$(echo "$got" | tail -1)" = 1 ] && echo "   upgrade_tenant is confined after the update" ||
        failed+=("c: the role holding a $FROM grant is not confined after the update (got: $got)")
    sql -d refused -c "CREATE EXTENSION aedb_queue VERSION '$FROM'" \
        -c "INSERT INTO aedb_queue.queue_grant VALUES ('aedb_queue_worker', 't.*', 'worker')"
    if out=$(sql -d refused -c "ALTER EXTENSION aedb_queue UPDATE" 2>&1); then
        failed+=("c: the update ran although aedb_queue_worker holds a grant")
    elif ! echo "$out" | grep -q "no longer lets the extension's own roles hold per-queue grants"; then
        failed+=("c: the update failed for another reason: $out")
    elif [ "$(sql -d refused -At -c "SELECT extversion FROM pg_extension WHERE extname = 'aedb_queue'")" != "$FROM" ]; then
        failed+=("c: the refused update changed the version")
    else
        echo "   refused while aedb_queue_worker holds a grant; still $FROM"
    fi
fi

if ((${#failed[@]})); then
    printf '\nupgrade test FAILED (%s -> %s):\n' "$FROM" "$TO" >&2
    printf '  %s\n' "${failed[@]}" >&2
    echo "  (databases kept: AEDB_CLUSTER_DIR=$WORK AEDB_PORT=$PORT bash scripts/cluster.sh start; psql -h 127.0.0.1 -p $PORT -U postgres upgraded)" >&2
    exit 1
fi
echo "upgrade $FROM -> $TO passed"
