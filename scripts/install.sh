#!/usr/bin/env bash
# Builds and installs aedb_queue into the system PostgreSQL with every script
# ALTER EXTENSION needs (docs/upgrades.md):
#   scripts/install.sh             debug build
#   scripts/install.sh --release   (any further arguments go to cargo pgrx install)
#
# cargo pgrx install writes the control file, the shared library and the
# install script of the current version (aedb_queue--<version>.sql, generated
# from the code), and copies the upgrade scripts sql/aedb_queue--<from>--<to>.sql.
# It does not know the install scripts of earlier versions, which cannot be
# generated from this checkout: they are frozen in sql/archive/, and this
# script copies them, so that CREATE EXTENSION aedb_queue VERSION '<old>' works.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

cargo pgrx install --pg-config "$PG_CONFIG" "$@"

extdir=$("$PG_CONFIG" --sharedir)/extension
for f in sql/archive/aedb_queue--*.sql; do
    install -m 644 "$f" "$extdir/"
done
echo "installed frozen install scripts: $(cd sql/archive && echo aedb_queue--*.sql) -> $extdir"

# The router (router/, docs/scale-out.md): SQL only, installed beside it.
install -m 644 router/aedb_queue_router.control router/sql/aedb_queue_router--*.sql "$extdir/"
echo "installed the router: aedb_queue_router.control $(cd router/sql && echo aedb_queue_router--*.sql) -> $extdir"
