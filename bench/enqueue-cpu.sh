#!/usr/bin/env bash
# One-row enqueue against a plain INSERT with pgbench, in the same database,
# alternating the two in short runs so both see the same machine:
#   bench/enqueue-cpu.sh [clients] [pairs] [synchronous_commit]   (8 6 off)
# synchronous_commit=off takes the WAL flush out of each commit, so the rate
# shows the CPU per call (the bench's single-enqueue cells run with it on).
# Needs the benchmark cluster (scripts/cluster.sh start) with aedb_queue
# installed; uses its own database enqueue_cpu, dropped and made afresh.
# Prints each pair's rates and ratio, then their geometric mean.
set -euo pipefail
clients=${1:-8}
pairs=${2:-6}
sync=${3:-off}
port=${AEDB_PORT:-54340}
psql=(psql -h 127.0.0.1 -p "$port" -U postgres -X -q -v ON_ERROR_STOP=1)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"${psql[@]}" -c "DROP DATABASE IF EXISTS enqueue_cpu" -c "CREATE DATABASE enqueue_cpu"
"${psql[@]}" -d enqueue_cpu <<'SQL'
CREATE EXTENSION aedb_queue;
-- The bench's baseline table (bench/src/systems.rs).
CREATE TABLE jobs (id bigserial PRIMARY KEY, queue text NOT NULL, priority int NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(), payload jsonb, state text NOT NULL DEFAULT 'ready',
    attempts int NOT NULL DEFAULT 0, locked_by text, locked_until timestamptz);
CREATE INDEX jobs_ready ON jobs (queue, priority DESC, id) WHERE state = 'ready';
SQL
payload="jsonb_build_object('t', 1, 'kind', 'bench', 'pad', repeat('x', 64))"
echo "SELECT (aedb_queue.queue_enqueue('q', $payload)).task_id;" >"$dir/aedb.sql"
echo "INSERT INTO jobs (queue, payload) VALUES ('q', $payload);" >"$dir/insert.sql"

rate() {
    PGOPTIONS="-c synchronous_commit=$sync" pgbench -h 127.0.0.1 -p "$port" -U postgres -n \
        -M prepared -c "$clients" -j 2 -T 3 -f "$dir/$1.sql" enqueue_cpu 2>&1 |
        awk '/^tps/ {print $3}'
}
echo "clients $clients, synchronous_commit $sync: queue_enqueue/s, INSERT/s, ratio"
for _ in $(seq "$pairs"); do
    echo "$(rate aedb) $(rate insert)"
done | awk '{ r = $1 / $2; printf "%8.0f %8.0f %6.3f\n", $1, $2, r; s += log(r); n++ }
            END { printf "geometric mean of the ratios: %.3f\n", exp(s / n) }'
"${psql[@]}" -c "DROP DATABASE enqueue_cpu"
