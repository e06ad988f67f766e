#!/usr/bin/env bash
# The main job: install everything, build and install the extension (release),
# start a local cluster and run the demo (producer, worker, dead letter, inspection).
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

bash scripts/setup.sh
log "building and installing aedb_queue (release)"
bash scripts/install.sh --release
bash scripts/cluster.sh restart
log "demo"
psql -h 127.0.0.1 -p "${AEDB_PORT:-54329}" -U postgres -X -v ON_ERROR_STOP=1 -f scripts/demo.sql
