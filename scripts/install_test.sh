#!/usr/bin/env bash
# Installing leaves running servers alone, both ways this
# project installs: scripts/install.sh, and cargo pgrx test's `sudo cp`
# through scripts/pgrx_test/sudo (scripts/pg_test.sh). For each: a backend
# that has the library loaded goes on working after an install, because the
# installed library is a new file (the backend keeps the old one mapped, where
# a write in place kills it with SIGBUS); the library's name never referred to
# a missing or partly written file while the install ran (a backend loading it
# then would map half a file); no process of the cluster died (its server log,
# scripts/check_server_log.sh, when the cluster stops).
#   scripts/install_test.sh      (installs the extension: scripts/test.sh's install)
# AEDB_INSTALL_TEST_PORT (54334), AEDB_TEST_DIR as in the other scripts.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

WORK=$TEST_DIR/install
PORT=${AEDB_INSTALL_TEST_PORT:-54334}
LIB=$("$PG_CONFIG" --pkglibdir)/aedb_queue.so
fail() { printf '\ninstall test FAILED: %s\n' "$*" >&2; exit 1; }
# A library to have loaded before the installs under test.
[ -f "$LIB" ] || bash scripts/install.sh >/dev/null

postgres_dir "$(dirname "$WORK")"
AEDB_CLUSTER_DIR=$WORK AEDB_PORT=$PORT bash scripts/cluster.sh start >/dev/null
stop_at_exit 'AEDB_CLUSTER_DIR=$WORK bash scripts/cluster.sh stop >/dev/null'
sql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -X -q -At -v ON_ERROR_STOP=1 "$@"; }
PGOPTIONS='-c client_min_messages=warning' sql -d postgres \
    -c "DROP DATABASE IF EXISTS install_test" -c "CREATE DATABASE install_test"
sql -d install_test -c "CREATE EXTENSION aedb_queue"

# A session that is kept open: psql reading a FIFO, answering into a file
# (line-buffered, so that each answer shows as it comes); a new one (a new
# backend) for each install.
to_backend=
new_session() {
    [ -z "$to_backend" ] || exec {to_backend}>&-
    rm -f "$WORK/backend.in" "$WORK/backend.out"
    mkfifo "$WORK/backend.in"
    stdbuf -oL "$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -X -q -At -d install_test \
        <"$WORK/backend.in" >"$WORK/backend.out" 2>&1 &
    exec {to_backend}>"$WORK/backend.in"
}
ask() { # ask SQL: the session's one-line answer (the next line of its output)
    local n i
    n=$(($(wc -l <"$WORK/backend.out") + 1))
    echo "$1" >&"$to_backend"
    for i in $(seq 1 600); do
        [ "$(wc -l <"$WORK/backend.out")" -lt "$n" ] || { sed -n "${n}p" "$WORK/backend.out"; return; }
        sleep 0.1
    done
    fail "no answer to $1 within 60 s; the session said: $(cat "$WORK/backend.out")"
}
mapped_inode() { # the inode of the aedb_queue.so that backend $1 has mapped
    awk -v lib="$LIB" '$6 == lib { print $5; exit }' "/proc/$1/maps"
}

# Every state the library's name is in while an install runs (niced: the
# loop takes whatever the build before the copies leaves of a core).
watch_name() {
    local last= now
    while [ ! -e "$WORK/watch.stop" ]; do
        now=$(stat -c '%i %s' "$LIB" 2>/dev/null || echo missing)
        [ "$now" = "$last" ] || { echo "$now"; last=$now; }
    done
}

# installs WHAT CMD...: runs CMD (an install) while a new session, the same
# backend throughout, has the installed library mapped, and checks it.
n=0
installs() {
    local what=$1 pid old new unexpected got; shift
    new_session
    pid=$(ask "SELECT pg_backend_pid();")
    n=$((n + 1))
    [ "$(ask "SELECT task_id FROM aedb_queue.queue_enqueue('install_test', '{\"n\": $n}');")" -gt 0 ] ||
        fail "the session could not call the extension: $(cat "$WORK/backend.out")"
    old=$(stat -c '%i %s' "$LIB")
    [ "$(mapped_inode "$pid")" = "${old% *}" ] || fail "backend $pid has not mapped $LIB (inode ${old% *})"

    rm -f "$WORK/watch.stop"
    watch_name >"$WORK/watch.seen" &
    local watcher=$!
    renice -n 19 -p "$watcher" >/dev/null
    "$@" >"$WORK/install.out" 2>&1 || { cat "$WORK/install.out"; fail "$what failed"; }
    touch "$WORK/watch.stop"
    wait "$watcher"

    new=$(stat -c '%i %s' "$LIB")
    [ "${new% *}" != "${old% *}" ] || fail "$what wrote $LIB in place (inode ${old% *} kept)"
    unexpected=$(grep -v -x -F -e "$old" -e "$new" "$WORK/watch.seen" || true)
    [ -z "$unexpected" ] || fail "while $what ran, $LIB was (inode size): $(echo $unexpected) (before: $old, after: $new)"
    [ "$(ask "SELECT pg_backend_pid();")" = "$pid" ] || fail "the session lost its backend: $(cat "$WORK/backend.out")"
    n=$((n + 1))
    got=$(ask "SELECT count(*) FROM aedb_queue.queue_enqueue('install_test', '{\"n\": $n}');")
    [ "$got" = 1 ] || fail "backend $pid after $what: $(cat "$WORK/backend.out")"
    [ "$(mapped_inode "$pid")" = "${old% *}" ] || fail "backend $pid no longer maps the library it loaded"
    [ "$(sql -d install_test -c "SELECT count(*) FROM aedb_queue.queue_list('install_test', NULL, 100)")" = "$n" ] ||
        fail "a new session does not load the library $what installed"
    echo "$what: backend $pid kept inode ${old% *} and worked on; $LIB is now inode ${new% *}, never missing or partial meanwhile"
}

installs "scripts/install.sh" bash scripts/install.sh
# How cargo pgrx test --runas installs its build (scripts/pg_test.sh): sudo cp,
# through scripts/pgrx_test/sudo.
stage_lib=${CARGO_TARGET_DIR:-$ROOT/target}/aedb_queue-install$LIB
installs "the pg_test install (sudo cp)" env PATH="$ROOT/scripts/pgrx_test:$PATH" sudo cp "$stage_lib" "$LIB"
echo "install test passed"
