#!/usr/bin/env bash
# pg_upgrade from PostgreSQL 15 to a later major with aedb_queue in use
# (docs/postgres-majors.md):
#   scripts/pg_upgrade_test.sh [NEW_MAJOR]      default 18
# Needs the current build installed into Debian's 15 and into NEW_MAJOR
# (AEDB_PG_MAJOR=NN bash scripts/install.sh; scripts/test_major.sh does it).
#
# The old cluster runs the relocatable 15.19 (scripts/pg_major.sh 15), not
# Debian's 15.20: 15.20 (November 2026) stores an attribute option,
# pg_attver, on every column of every table, which 18.6, the newest 18 these
# machines can install, refuses when pg_upgrade restores the schema
# ('unrecognized parameter "pg_attver"'), for any database, with or without
# aedb_queue. pg_upgrade wants the new major at a minor release at least as
# recent as the old one's. The 15.19 server loads the library built against
# Debian's 15 headers: minor releases keep the server's ABI.
#
# 1. A 15 cluster: tenants, grants and tasks in every state, with tokens moved
#    on by claims (tests/pg_upgrade/fill.sql), then everything the extension
#    keeps read as text (tests/pg_upgrade/state.sql).
# 2. pg_upgrade --check, then pg_upgrade, to a new cluster of NEW_MAJOR.
# 3. The same text read on the new cluster must be identical; then the
#    tenants log in and work on with the tokens they hold, still confined
#    (tests/pg_upgrade/use.sql). Both server logs are checked for deaths.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

NEW=${1:-18}
OLD=15
WORK=/var/tmp/aedb_queue_test-pg_upgrade
OLD_PORT=${AEDB_PG_UPGRADE_PORT:-54336}
NEW_PORT=$((OLD_PORT + 1))
OLD_BIN=$PG_ROOT/$OLD/bin
NEW_BIN=$(pg_prefix "$NEW")/bin
VERSION=$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)

fail() { printf '\npg_upgrade test FAILED (%s -> %s): %s\n' "$OLD" "$NEW" "$*" >&2; exit 1; }

# The relocatable 15 gets the build installed into Debian's.
bash scripts/pg_major.sh $OLD >/dev/null
debian_ext=$("$(pg_prefix $OLD)/bin/pg_config" --sharedir)/extension
install_beside 755 "$("$(pg_prefix $OLD)/bin/pg_config" --pkglibdir)/aedb_queue.so" "$("$OLD_BIN/pg_config" --pkglibdir)"
for f in "$debian_ext"/aedb_queue*; do
    install_beside 644 "$f" "$("$OLD_BIN/pg_config" --sharedir)/extension"
done

for bin in "$OLD_BIN" "$NEW_BIN"; do
    control=$("$bin/pg_config" --sharedir)/extension/aedb_queue.control
    grep -qs "^default_version = '$VERSION'" "$control" ||
        fail "$control is missing or not version $VERSION: install the current build into that major"
done

# Both clusters' servers, as pg_upgrade leaves them: stopped. Each log is
# checked when its server stops.
rm -rf "$WORK"
postgres_dir "$WORK"
start() { # BIN DATA PORT
    as_postgres "$1/pg_ctl" -D "$2" -l "$2.log" -w start \
        -o "-p $3 -c listen_addresses=127.0.0.1 -c unix_socket_directories=$WORK" >/dev/null
}
stop() { # BIN DATA
    as_postgres "$1/pg_ctl" -D "$2" -m fast -w stop >/dev/null
    bash scripts/check_server_log.sh "$2.log"
}
running=()
stop_running() {
    local status=0 d
    for d in "${running[@]}"; do stop "${d%%:*}" "${d#*:}" || status=1; done
    running=()
    return $status
}
stop_at_exit stop_running

# The same options for both: pg_upgrade wants the same encoding, locale and
# checksum setting (18's initdb turns checksums on by default).
init() { as_postgres "$1/initdb" -D "$2" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 --data-checksums >/dev/null; }

echo "1. PostgreSQL $OLD: tasks in every state, tenants and grants"
init "$OLD_BIN" "$WORK/old"
start "$OLD_BIN" "$WORK/old" "$OLD_PORT"
running=("$OLD_BIN:$WORK/old")
psql_at() { # PORT ARGS...: as postgres in database app
    local port=$1; shift
    "$OLD_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d app -X -q -v ON_ERROR_STOP=1 "$@"
}
"$OLD_BIN/psql" -h 127.0.0.1 -p "$OLD_PORT" -U postgres -d postgres -X -q -c "CREATE DATABASE app"
psql_at "$OLD_PORT" -o /dev/null -f tests/pg_upgrade/fill.sql || fail "filling the $OLD cluster (tests/pg_upgrade/fill.sql)"
psql_at "$OLD_PORT" -At -f tests/pg_upgrade/state.sql >"$WORK/before.state"
echo "   $(grep -c . "$WORK/before.state") lines of state: $(grep -c '^aedb_queue.task ' "$WORK/before.state") tasks, $(grep -c '^member ' "$WORK/before.state") memberships"
stop_running

echo "2. pg_upgrade $OLD -> $NEW"
init "$NEW_BIN" "$WORK/new"
upgrade() {
    (cd "$WORK" && as_postgres "$NEW_BIN/pg_upgrade" -U postgres -b "$OLD_BIN" -B "$NEW_BIN" \
        -d "$WORK/old" -D "$WORK/new" -p "$OLD_PORT" -P "$NEW_PORT" -s "$WORK" "$@") >"$WORK/pg_upgrade.out" 2>&1 ||
        { cat "$WORK/pg_upgrade.out"; fail "pg_upgrade $* failed"; }
}
upgrade --check
upgrade
echo "   $(grep -c '^Checking\|^Performing\|ok$' "$WORK/pg_upgrade.out") steps ok"

echo "3. PostgreSQL $NEW: the same state, and the tenants work on"
start "$NEW_BIN" "$WORK/new" "$NEW_PORT"
running=("$NEW_BIN:$WORK/new")
psql_at "$NEW_PORT" -At -f tests/pg_upgrade/state.sql >"$WORK/after.state"
diff -u --label "PostgreSQL $OLD before pg_upgrade" --label "PostgreSQL $NEW after it" \
    "$WORK/before.state" "$WORK/after.state" || fail "the state differs after pg_upgrade (diff above)"
echo "   identical"
psql_at "$NEW_PORT" -o /dev/null -v version="$VERSION" -f tests/pg_upgrade/use.sql ||
    fail "working on after pg_upgrade (tests/pg_upgrade/use.sql)"
echo "   in-flight tasks settled with the tokens from $OLD, stale tokens fenced, tenants still confined"
stop_running
echo "pg_upgrade $OLD -> $NEW passed"
