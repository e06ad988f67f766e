#!/usr/bin/env bash
# Instructions per hot call on the two write paths, in one build: bench/icount.sh
# with aedb_queue.direct_writes at its default (the direct path) and off (the
# INSERT, UPDATE and DELETE statements), side by side in
# bench/results/write-paths.md. Install a release build first:
#   bash scripts/install.sh --release && bash bench/write-paths.sh
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"
cd "$ROOT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
only='^aedb_queue:(enqueue|batch enqueue of 100|claim \(max 1\)|claim of 100|complete|complete batch of 100|complete_and_claim \(max 1\))$'
AEDB_ICOUNT_OUT=$tmp/direct bash bench/icount.sh --modes prepared --ordinary-only --only "$only"
AEDB_ICOUNT_OUT=$tmp/statements bash bench/icount.sh --modes prepared --ordinary-only --only "$only" \
    --pg-setting aedb_queue.direct_writes=off
python3 bench/icount/write_paths.py "$tmp/direct/instructions.json" "$tmp/statements/instructions.json" \
    > bench/results/write-paths.md
cat bench/results/write-paths.md
