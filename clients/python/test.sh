#!/usr/bin/env bash
# Tests of the Python client: a virtualenv with the package and its test
# extra, then pytest against a PostgreSQL 15 cluster the tests start
# themselves. Run from anywhere, e.g. `bash clients/python/test.sh` from the
# repository root; arguments go to pytest. Needs python3 (3.11+) with venv,
# PostgreSQL 15 with the aedb_queue extension installed, and (as root) the
# postgres OS user.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${AEDB_PYTHON_VENV:-$root/target/python-venv}"
python="${PYTHON:-python3}"
pg_bin="${AEDB_PG_BIN:-/usr/lib/postgresql/15/bin}"

if [[ ! -x "$pg_bin/initdb" ]]; then
  echo "clients/python/test.sh: no PostgreSQL 15 in $pg_bin (set AEDB_PG_BIN)" >&2
  exit 1
fi
if [[ ! -f "$("$pg_bin/pg_config" --sharedir)/extension/aedb_queue.control" ]]; then
  echo "clients/python/test.sh: the aedb_queue extension is not installed (bash scripts/install.sh)" >&2
  exit 1
fi

# The virtualenv is remade when pyproject.toml (the dependencies) changes.
stamp="$venv/.aedb-pyproject.sha256"
want="$(sha256sum "$here/pyproject.toml" | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]]; then
  echo "== virtualenv $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here[test]"
  echo "$want" > "$stamp"
else
  # Same dependencies: reinstall only the package, so the tests run what pip installs.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$here"
fi

cd "$here"
exec "$venv/bin/python" -m pytest -p no:cacheprovider "$@"
