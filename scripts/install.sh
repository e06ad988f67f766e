#!/usr/bin/env bash
# Builds and installs aedb_queue into the system PostgreSQL with every script
# ALTER EXTENSION needs (docs/upgrades.md):
#   scripts/install.sh             debug build
#   scripts/install.sh --release   (any further arguments go to cargo pgrx package)
#
# The files are those of stage_extension (scripts/common.sh): the library,
# the control file and install script cargo pgrx package makes, the upgrade
# scripts, the frozen install scripts of earlier versions (sql/archive/),
# and the router. scripts/package.sh packages the same files as a .deb
# (docs/install.md).
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
stage_extension "$stage" "${profile[@]}" "$@"

libdir=$("$PG_CONFIG" --pkglibdir)
extdir=$("$PG_CONFIG" --sharedir)/extension
install_beside 755 "$stage$libdir/aedb_queue.so" "$libdir"
for f in "$stage$extdir"/*; do
    install_beside 644 "$f" "$extdir"
done
echo "installed aedb_queue.so -> $libdir"
echo "installed $(cd "$stage$extdir" && echo *) -> $extdir"
