#!/usr/bin/env bash
# (Re)creates the browser tests' database on the preloaded cluster and seeds
# it (seed.sql), writing the seeded ids as JSON to OUT. run.sh runs it once,
# mutants.mjs before each mutant. The roles are the cluster's: made once.
#   bash seed.sh PORT DB OUT
set -euo pipefail
port=$1 db=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
psql -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
    -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
psql -X -q -h 127.0.0.1 -p "$port" -U postgres -d "$db" -v ON_ERROR_STOP=1 -At -f "$here/seed.sql" >"$out"
