#!/usr/bin/env bash
# One version (docs/install.md, "Versions"): the extension's (Cargo.toml's
# [package] version, which is default_version in aedb_queue.control and the
# .deb's upstream version), the Rust client's, the CLI's (its --version) and
# the Python package's (__version__, which is also the wheel's version:
# pyproject.toml reads it from there) must be the same; and the license the
# packages ship is the repository's LICENSE.
#   scripts/versions_test.sh    (scripts/test.sh, step 1; no cluster)
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

# The version = "..." of the [package] or [project] table of a TOML manifest.
manifest_version() { sed -n '/^\[\(package\|project\)\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$1"; }

want=$(manifest_version Cargo.toml)
[ -n "$want" ] || { echo "versions: no [package] version in Cargo.toml" >&2; exit 1; }
declare -A found=(
    [clients/rust/Cargo.toml]=$(manifest_version clients/rust/Cargo.toml)
    [clients/cli/Cargo.toml]=$(manifest_version clients/cli/Cargo.toml)
    [clients/python/aedb_queue/__init__.py]=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' clients/python/aedb_queue/__init__.py)
)
# The CLI is built on the client of its own version (pinned: published together).
found["clients/cli/Cargo.toml's aedb_queue_client"]=$(sed -n 's/^aedb_queue_client = .*version = "=\([^"]*\)".*/\1/p' clients/cli/Cargo.toml)
# A static version in pyproject.toml would bypass __version__.
if static=$(manifest_version clients/python/pyproject.toml) && [ -n "$static" ]; then
    found[clients/python/pyproject.toml]=$static
fi
grep -q '^dynamic = \["version"\]' clients/python/pyproject.toml ||
    found[clients/python/pyproject.toml]="(not read from __version__: dynamic = [\"version\"] is missing)"

failed=0
for file in "${!found[@]}"; do
    if [ "${found[$file]}" != "$want" ]; then
        echo "versions: $file says ${found[$file]:-nothing}, the extension (Cargo.toml) $want" >&2
        failed=1
    fi
done
# The packages ship LICENSE: links for the crates (cargo copies their
# target), a copy for Python (its sdist would keep a link as a link).
for copy in clients/rust/LICENSE clients/cli/LICENSE clients/python/LICENSE; do
    cmp -s LICENSE "$copy" || { echo "versions: $copy is not the repository's LICENSE" >&2; failed=1; }
done
[ "$failed" = 0 ] || exit 1
echo "one version: $want (extension, Rust client, CLI, Python package); LICENSE shipped by each"
