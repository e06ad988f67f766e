#!/usr/bin/env bash
# scripts/install.sh leaves running servers alone (issue 42, item 8): a backend
# that has the library loaded goes on working after an install, because the
# installed library is a new file (the backend keeps the old one mapped, where
# a write in place kills it with SIGBUS); the library's name never referred to
# a missing or partly written file while the install ran (a backend loading it
# then would map half a file); no process of the cluster died (its server log,
# scripts/check_server_log.sh, when the cluster stops).
#   scripts/install_test.sh      needs the extension installed once (scripts/install.sh)
# AEDB_INSTALL_TEST_PORT (54334), AEDB_TEST_DIR as in the other scripts.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

WORK=${AEDB_TEST_DIR:-/var/tmp/aedb_queue_test}/install
PORT=${AEDB_INSTALL_TEST_PORT:-54334}
LIB=$("$PG_CONFIG" --pkglibdir)/aedb_queue.so
fail() { printf '\ninstall test FAILED: %s\n' "$*" >&2; exit 1; }
[ -f "$LIB" ] || fail "$LIB is missing: run bash scripts/install.sh first"

postgres_dir "$(dirname "$WORK")"
AEDB_CLUSTER_DIR=$WORK AEDB_PORT=$PORT bash scripts/cluster.sh start >/dev/null
stop_at_exit 'AEDB_CLUSTER_DIR=$WORK bash scripts/cluster.sh stop >/dev/null'
sql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -X -q -At -v ON_ERROR_STOP=1 "$@"; }
PGOPTIONS='-c client_min_messages=warning' sql -d postgres \
    -c "DROP DATABASE IF EXISTS install_test" -c "CREATE DATABASE install_test"
sql -d install_test -c "CREATE EXTENSION aedb_queue"

# One session kept open for the whole test: psql reading a FIFO, answering
# into a file (line-buffered, so that each answer shows as it comes).
rm -f "$WORK/backend.in" "$WORK/backend.out" "$WORK/watch.stop"
mkfifo "$WORK/backend.in"
stdbuf -oL "$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -X -q -At -d install_test \
    <"$WORK/backend.in" >"$WORK/backend.out" 2>&1 &
exec {to_backend}>"$WORK/backend.in"
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

pid=$(ask "SELECT pg_backend_pid();")
first=$(ask "SELECT task_id FROM aedb_queue.queue_enqueue('install_test', '{\"n\": 1}');")
old=$(stat -c '%i %s' "$LIB")
[ "$(mapped_inode "$pid")" = "${old% *}" ] || fail "backend $pid has not mapped $LIB (inode ${old% *})"
echo "backend $pid has $LIB (inode ${old% *}) loaded; installing"

# Every state the library's name is in while the install runs.
watch_name() {
    local last= now
    while [ ! -e "$WORK/watch.stop" ]; do
        now=$(stat -c '%i %s' "$LIB" 2>/dev/null || echo missing)
        [ "$now" = "$last" ] || { echo "$now"; last=$now; }
    done
}
watch_name >"$WORK/watch.seen" &
watcher=$!
bash scripts/install.sh >"$WORK/install.out" 2>&1 || { cat "$WORK/install.out"; fail "scripts/install.sh failed"; }
touch "$WORK/watch.stop"
wait "$watcher"

new=$(stat -c '%i %s' "$LIB")
[ "${new% *}" != "${old% *}" ] || fail "the install wrote $LIB in place (inode ${old% *} kept)"
unexpected=$(grep -v -x -F -e "$old" -e "$new" "$WORK/watch.seen" || true)
[ -z "$unexpected" ] || fail "while the install ran, $LIB was (inode size): $(echo $unexpected) (before: $old, after: $new)"

[ "$(ask "SELECT pg_backend_pid();")" = "$pid" ] || fail "the session lost its backend: $(cat "$WORK/backend.out")"
second=$(ask "SELECT task_id FROM aedb_queue.queue_enqueue('install_test', '{\"n\": 2}');")
[ "$second" = $((first + 1)) ] || fail "backend $pid after the install: $second (expected task $((first + 1))); session: $(cat "$WORK/backend.out")"
[ "$(mapped_inode "$pid")" = "${old% *}" ] || fail "backend $pid no longer maps the library it loaded"
[ "$(sql -d install_test -c "SELECT count(*) FROM aedb_queue.queue_list('install_test', NULL, 10)")" = 2 ] ||
    fail "a new session does not load the new library"
echo "install test passed: backend $pid kept inode ${old% *} and worked on; $LIB is now inode ${new% *}; the name was never missing or partial"
