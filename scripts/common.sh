# Shared settings for the project's scripts (sourced, not run).
PG_MAJOR=15
# AEDB_PG_BIN: another (relocated) copy of PostgreSQL 15 to run the clusters from.
PG_BIN=${AEDB_PG_BIN:-/usr/lib/postgresql/$PG_MAJOR/bin}
PG_CONFIG=${AEDB_PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}
PGRX_VERSION=0.18.1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { printf '\n== %s\n' "$*"; }

# Runs a command as the postgres OS user (Postgres refuses to run as root).
# Without RUST_BACKTRACE: a server that inherits it puts a Rust backtrace in
# the DETAIL of errors raised inside the extension (docs/chaos.md).
as_postgres() { runuser -u postgres -- env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE "$@"; }

# Runs CMD (a string, evaluated then) when the script exits, and fails the
# script when CMD fails: a test cluster's stop fails when its server log shows
# a process that died (scripts/cluster.sh, scripts/check_server_log.sh).
stop_at_exit() { trap "rc=\$?; $1 || rc=1; exit \$rc" EXIT; }

# A directory the postgres user owns, created if missing.
postgres_dir() { mkdir -p "$1" && chown postgres:postgres "$1"; }
