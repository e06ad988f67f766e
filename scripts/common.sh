# Shared settings for the project's scripts (sourced, not run).
# AEDB_PG_MAJOR: the PostgreSQL major the scripts build for, install into and
# run their clusters from: 15 (Debian's, the default), or 16, 17, 18
# (relocatable installs under $AEDB_PG_ROOT, scripts/pg_major.sh).
PG_MAJOR=${AEDB_PG_MAJOR:-15}
PG_ROOT=${AEDB_PG_ROOT:-/opt/aedb-pg}
pg_prefix() { # MAJOR: where that major's bin/, lib/ and share/ are
    if [ "$1" = 15 ]; then echo /usr/lib/postgresql/15; else echo "$PG_ROOT/$1"; fi
}
# AEDB_PG_BIN: another (relocated) copy of the same major to run the clusters from.
PG_BIN=${AEDB_PG_BIN:-$(pg_prefix "$PG_MAJOR")/bin}
PG_CONFIG=${AEDB_PG_CONFIG:-$(pg_prefix "$PG_MAJOR")/bin/pg_config}
# Where the test scripts keep their clusters: one tree per major, so that a
# cluster is never started by another major's binaries.
if [ "$PG_MAJOR" = 15 ]; then
    TEST_DIR=${AEDB_TEST_DIR:-/var/tmp/aedb_queue_test}
else
    TEST_DIR=${AEDB_TEST_DIR:-/var/tmp/aedb_queue_test-pg$PG_MAJOR}
fi
PGRX_VERSION=0.18.1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { printf '\n== %s\n' "$*"; }

# Runs a command as the postgres OS user (Postgres refuses to run as root).
# Without RUST_BACKTRACE: a server that inherits it puts a Rust backtrace in
# the DETAIL of errors raised inside the extension (docs/chaos.md).
as_postgres() { runuser -u postgres -- env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE "$@"; }

# Runs "$@" (a command or function) with only stdin, stdout and stderr
# open: a server it starts outlives it, and must not keep the caller's
# files, such as a lock taken with flock(1) around a run (a bench cluster
# left running held the test lock for good).
without_open_files() {
    (
        for fd in /proc/$BASHPID/fd/*; do
            fd=${fd##*/}
            if ((fd > 2)); then eval "exec $fd>&-"; fi
        done
        "$@"
    )
}

# Runs CMD (a string, evaluated then) when the script exits, and fails the
# script when CMD fails: a test cluster's stop fails when its server log shows
# a process that died (scripts/cluster.sh, scripts/check_server_log.sh).
stop_at_exit() { trap "rc=\$?; $1 || rc=1; exit \$rc" EXIT; }

# Installs file SRC as DEST (a path, or a directory to put it in) with MODE:
# written beside DEST under a temporary name, then renamed onto it. The name
# then always refers to a whole file, and the installed file is a new inode:
# a server that has the old library mapped keeps running on it, where writing
# it in place would kill it (SIGBUS) and a backend loading it meanwhile could
# map half a file (scripts/install_test.sh).
install_beside() { # MODE SRC DEST
    local mode=$1 src=$2 dest=$3 tmp
    [ -d "$dest" ] && dest=$dest/$(basename "$src")
    tmp=$(mktemp "$dest.XXXXXX")   # the same directory: the rename is atomic
    if cp "$src" "$tmp" && chmod "$mode" "$tmp" && mv -f "$tmp" "$dest"; then
        return 0
    fi
    rm -f "$tmp"
    return 1
}

# Builds the extension into STAGE, a tree rooted like the filesystem (the
# library in STAGE$(pg_config --pkglibdir), the rest in
# STAGE$(pg_config --sharedir)/extension), with every file an install needs
# (docs/upgrades.md): cargo pgrx package writes the library, the control
# file, the install script of the current version (generated from the code)
# and the upgrade scripts sql/aedb_queue--<from>--<to>.sql. It cannot
# generate the install scripts of earlier versions: they are frozen in
# sql/archive/ and added here, so that CREATE EXTENSION aedb_queue VERSION
# '<old>' works; so is the router (router/, docs/scale-out.md), SQL only.
# Shared by scripts/install.sh and scripts/package.sh (the .deb).
stage_extension() { # STAGE [cargo pgrx package arguments: --debug, ...]
    local stage=$1 extdir
    shift
    rm -rf "$stage"
    (cd "$ROOT" && cargo pgrx package --pg-config "$PG_CONFIG" --out-dir "$stage" "$@") || return 1
    extdir=$stage$("$PG_CONFIG" --sharedir)/extension
    cp "$ROOT"/sql/archive/aedb_queue--*.sql \
       "$ROOT"/router/aedb_queue_router.control "$ROOT"/router/sql/aedb_queue_router--*.sql "$extdir/"
}

# A directory the postgres user owns, created if missing.
postgres_dir() { mkdir -p "$1" && chown postgres:postgres "$1"; }

# Prints the aedb_queue.direct_writes a test cluster on PORT runs with and
# fails unless it is the one asked for: $AEDB_DIRECT_WRITES (scripts/cluster.sh
# passes it), else the default, auto. A suite run "with the switch off" must
# not pass on the direct path by mistake.
check_direct_writes() { # PORT
    local wanted=${AEDB_DIRECT_WRITES:-auto} running
    running=$("$PG_BIN/psql" -h 127.0.0.1 -p "$1" -U postgres -d postgres -X -At \
        -c 'SHOW aedb_queue.direct_writes') || running='(unknown)'
    echo "aedb_queue.direct_writes = $running (cluster on port $1)"
    if [ "$running" != "$wanted" ]; then
        echo "the cluster runs with aedb_queue.direct_writes = $running, not $wanted" >&2
        return 1
    fi
}

# Runs scripts/SUITE.sh (regress, isolation) with aedb_queue.direct_writes
# auto, then off: the same expected files both ways.
both_write_paths() { # SUITE
    bash "$ROOT/scripts/$1.sh" && AEDB_DIRECT_WRITES=off bash "$ROOT/scripts/$1.sh"
}

# The earlier versions: those with a frozen install script in sql/archive/.
earlier_versions() {
    (cd "$ROOT/sql/archive" && ls aedb_queue--*.sql | sed 's/^aedb_queue--\(.*\)\.sql$/\1/' | sort -V | tr '\n' ' ')
}

# ALTER EXTENSION UPDATE from each earlier version (scripts/upgrade_test.sh).
upgrade_from_earlier_versions() {
    local version
    for version in $(earlier_versions); do
        bash "$ROOT/scripts/upgrade_test.sh" "$version" || return 1
    done
}
