#!/usr/bin/env bash
# Builds and installs aedb_queue into the system PostgreSQL with every script
# ALTER EXTENSION needs (docs/upgrades.md):
#   scripts/install.sh             debug build
#   scripts/install.sh --release   (any further arguments go to cargo pgrx package)
#
# cargo pgrx package writes the control file, the shared library and the
# install script of the current version (aedb_queue--<version>.sql, generated
# from the code), and copies the upgrade scripts sql/aedb_queue--<from>--<to>.sql,
# into a staging directory. It does not know the install scripts of earlier
# versions, which cannot be generated from this checkout: they are frozen in
# sql/archive/, and this script installs them too, so that CREATE EXTENSION
# aedb_queue VERSION '<old>' works.
#
# Every file is installed by install_beside (scripts/common.sh): written under
# a temporary name and renamed, never overwritten in place, so that clusters
# running the old library (the demo's, other tests') keep running.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

profile=(--debug)
if [ "${1:-}" = --release ]; then
    profile=()   # cargo pgrx package builds for release unless told --debug
    shift
fi
stage=${CARGO_TARGET_DIR:-$ROOT/target}/aedb_queue-install
rm -rf "$stage"
cargo pgrx package --pg-config "$PG_CONFIG" --out-dir "$stage" "${profile[@]}" "$@"

libdir=$("$PG_CONFIG" --pkglibdir)
extdir=$("$PG_CONFIG" --sharedir)/extension
install_beside 755 "$stage$libdir/aedb_queue.so" "$libdir"
for f in "$stage$extdir"/*; do
    install_beside 644 "$f" "$extdir"
done
echo "installed $(cd "$stage$extdir" && echo *) and aedb_queue.so -> $extdir, $libdir"

for f in sql/archive/aedb_queue--*.sql; do
    install_beside 644 "$f" "$extdir"
done
echo "installed frozen install scripts: $(cd sql/archive && echo aedb_queue--*.sql) -> $extdir"

# The router (router/, docs/scale-out.md): SQL only, installed beside it.
for f in router/aedb_queue_router.control router/sql/aedb_queue_router--*.sql; do
    install_beside 644 "$f" "$extdir"
done
echo "installed the router: aedb_queue_router.control $(cd router/sql && echo aedb_queue_router--*.sql) -> $extdir"
