#!/usr/bin/env bash
# Installs what building and testing aedb_queue needs on Debian 12, skipping
# whatever is already there: PostgreSQL 15 with server headers and pg_cron,
# clang for bindgen, sudo (cargo pgrx --runas uses it), cargo-pgrx 0.18.1.
set -euo pipefail
source "$(dirname "$0")/common.sh"

packages=(postgresql-15 postgresql-server-dev-15 postgresql-15-cron libclang-dev clang sudo pkg-config)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    log "apt: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The Debian package starts a "15 main" cluster on port 5432; it is not ours to use.
if command -v pg_lsclusters >/dev/null && pg_lsclusters -h 2>/dev/null | grep -q '^15 *main .*online'; then
    pg_ctlcluster 15 main stop || true
fi

if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
    log "cargo: installing cargo-pgrx $PGRX_VERSION (takes a few minutes)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi

if ! grep -qs "pg$PG_MAJOR" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
    log "pgrx: registering the system PostgreSQL $PG_MAJOR"
    cargo pgrx init --pg$PG_MAJOR "$PG_CONFIG"
fi
