#!/usr/bin/env bash
# The Rust crates are ready for crates.io (no publish here): `cargo package`
# of the client (aedb_queue_client) and the CLI (aedb_queue_cli) builds each
# from its packaged files alone, and each .crate holds the README and the
# LICENSE, the extension's version, none of the workspace's path-only
# dependencies (the itests harness, a dev-dependency without a version,
# which cargo leaves out), and for the CLI not its browser tests.
#   scripts/crates_test.sh    (scripts/test.sh, step 7; needs crates.io's index)
# --allow-dirty: this checks what the files make, committed or not.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

version=$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
target=${CARGO_TARGET_DIR:-$ROOT/target}
fail() { echo "crates test FAILED: $*" >&2; exit 1; }

cargo package --quiet --allow-dirty -p aedb_queue_client -p aedb_queue_cli
for crate in aedb_queue_client aedb_queue_cli; do
    file=$target/package/$crate-$version.crate
    [ -f "$file" ] || fail "no $file: is $crate's version $version (scripts/versions_test.sh)?"
    files=$(tar -tzf "$file" | sed "s|^$crate-$version/||")
    for want in Cargo.toml README.md LICENSE src/lib.rs src/main.rs; do
        case $want in src/lib.rs) [ $crate = aedb_queue_client ] || continue ;;
                      src/main.rs) [ $crate = aedb_queue_cli ] || continue ;; esac
        grep -qx "$want" <<<"$files" || fail "$crate-$version.crate has no $want"
    done
    ! grep -q '^browser/' <<<"$files" || fail "$crate-$version.crate holds the browser tests"
    tar -xzOf "$file" "$crate-$version/LICENSE" | cmp -s - LICENSE || fail "$crate's LICENSE is not the repository's"
    ! tar -xzOf "$file" "$crate-$version/Cargo.toml" | grep -q aedb_queue_itests ||
        fail "$crate's packaged Cargo.toml names the unpublished aedb_queue_itests"
    echo "$crate-$version.crate: $(wc -l <<<"$files") files, README.md and LICENSE, builds from its own files"
done
