#!/usr/bin/env bash
# Tests of the Python client: a virtualenv with the package's test extra and
# the packaging tools; the wheel and sdist built and checked (twine check,
# mypy --strict over typecheck/usage.py against the installed wheel: its
# py.typed and hints; mypy --strict over the package's own sources), then
# pytest, on the wheel, against a PostgreSQL 15 cluster the tests start
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

# Packaging tools, in the venv only (not an extra of the package): the build
# backend (the wheel is built without isolation, so no download per run),
# the builder, the registry's metadata check and the type checker.
tools=(build "hatchling>=1.27" twine mypy)
pip() { "$venv/bin/python" -m pip --disable-pip-version-check "$@"; }

# The virtualenv is remade when pyproject.toml (the dependencies) or the tools change.
stamp="$venv/.aedb-pyproject.sha256"
want="$( (cat "$here/pyproject.toml"; echo "${tools[*]}") | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]]; then
  echo "== virtualenv $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  pip install --quiet --upgrade pip
  pip install --quiet "$here[test]" "${tools[@]}"
  echo "$want" > "$stamp"
fi

echo "== wheel and sdist: twine check, py.typed and mypy --strict"
dist="$venv/dist"
rm -rf "$dist"
# The sdist, then the wheel built from it: what a registry would get.
if ! out="$("$venv/bin/python" -m build --no-isolation --outdir "$dist" "$here" 2>&1)"; then
  echo "$out" >&2
  exit 1
fi
"$venv/bin/twine" check --strict "$dist"/*
wheel=("$dist"/*.whl)
# The tests run what the wheel installs.
pip install --quiet --no-deps --force-reinstall "${wheel[@]}"
# From typecheck/, so that mypy reads the installed wheel, not the sources
# beside it; without py.typed it refuses the import.
(cd "$here/typecheck" && "$venv/bin/mypy" --strict --no-incremental --cache-dir=/dev/null usage.py)
# The package's own sources, strictly typed too (what the wheel's hints rest on).
(cd "$here" && "$venv/bin/mypy" --strict --no-incremental --cache-dir=/dev/null aedb_queue)

cd "$here"
exec "$venv/bin/python" -m pytest -p no:cacheprovider "$@"
