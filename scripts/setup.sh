#!/usr/bin/env bash
# Installs what building and testing aedb_queue needs on Debian 12, skipping
# whatever is already there: PostgreSQL 15 with server headers and pg_cron,
# clang for bindgen, sudo (cargo pgrx --runas uses it), python3-venv (the
# Python package's tests run in a virtualenv), chromium, nodejs and npm (the
# dashboard's browser tests, clients/cli/browser: playwright-core from npm
# drives Debian's headless chromium), pgbouncer (the connection-pooler tests,
# itests/tests/pgbouncer.rs), PL/Proxy (the router over several shards,
# router/ and docs/scale-out.md), cargo-pgrx 0.18.1, python3-pip, unzip and
# patchelf (scripts/pg_major.sh fetches, unpacks and relinks the other majors),
# dpkg-dev (dpkg-shlibdeps: the .deb's dependencies, scripts/package.sh),
# openssl (the dashboard's HTTPS test makes a self-signed certificate).
#   scripts/setup.sh [--pg NN]...
# --pg NN also installs PostgreSQL major NN (16, 17, 18) and registers it
# with pgrx (scripts/pg_major.sh).
set -euo pipefail
source "$(dirname "$0")/common.sh"

majors=()
while (($#)); do
    case "$1" in
    --pg) majors+=("${2:?--pg needs a major}"); shift 2 ;;
    *) echo "setup.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

packages=(postgresql-15 postgresql-server-dev-15 postgresql-15-cron libclang-dev clang sudo pkg-config python3-venv
          chromium nodejs npm pgbouncer postgresql-15-plproxy python3-pip unzip patchelf dpkg-dev openssl)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' && continue
    # A Node.js from another source (NodeSource's nodejs bundles npm, and
    # conflicts with Debian's npm) serves as well: keep it.
    case "$p" in nodejs) command -v node >/dev/null && continue ;; npm) command -v npm >/dev/null && continue ;; esac
    missing+=("$p")
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

# Debian's pgbouncer package runs its own pooler on port 6432 from
# /etc/pgbouncer; the tests start theirs (own ini, a free port), so the
# packaged one is stopped and kept from starting at boot.
if [ -f /run/postgresql/pgbouncer.pid ]; then
    service pgbouncer stop >/dev/null 2>&1 || true
fi
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl disable --now pgbouncer >/dev/null 2>&1 || true
fi

# The fixed ports of our clusters (demo 54329, regress 54331, upgrade test
# 54332, bench 54340, package test 54362, browser tests 54346-54347, shards and router 54350-54353,
# the router's regress 54370-54373, its bench 54380-54383) lie in Linux's ephemeral
# port range, so a client socket (thousands in a test run) can hold one just
# when a cluster starts. Reserve them; best effort, as a container may not
# allow it.
reserved=/proc/sys/net/ipv4/ip_local_reserved_ports
if [ -w "$reserved" ] && ! grep -q '54329-54389' "$reserved"; then
    current=$(cat "$reserved")
    echo "${current:+$current,}54329-54389" >"$reserved" 2>/dev/null || true
fi

if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
    log "cargo: installing cargo-pgrx $PGRX_VERSION (takes a few minutes)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi

if ! grep -qs "pg$PG_MAJOR" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
    log "pgrx: registering the system PostgreSQL $PG_MAJOR"
    cargo pgrx init --pg$PG_MAJOR "$PG_CONFIG"
fi

for major in "${majors[@]}"; do
    bash "$(dirname "$0")/pg_major.sh" "$major" >/dev/null
done
