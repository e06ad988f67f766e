#!/usr/bin/env bash
# WAL of a whole churn run (claim 100, 8 workers, 10,000 backlog; every
# record of the cluster in the run's LSN range, vacuum and checkpoints
# included), by record type and relation, per job.
#   wal_churn.sh SYSTEM JOBS ROUNDS [harness options...]
# PORT (default 54371): a cluster nothing else writes to.
set -euo pipefail
system=$1 jobs=$2 rounds=$3; shift 3
port=${PORT:-54371}
cd "$(dirname "$0")/../.."
psql() { command psql -h 127.0.0.1 -p "$port" -U postgres -X -q -v ON_ERROR_STOP=1 "$@"; }
psql -d postgres -c "CREATE EXTENSION IF NOT EXISTS pg_walinspect"
start=$(psql -d postgres -At -c "SELECT pg_current_wal_insert_lsn()")
out=/var/tmp/storage-runs/walchurn-$system-$$
cargo run --release -q -p aedb_queue_bench -- --port "$port" --systems "$system" --only churn \
    --churn-rounds "$rounds" --churn-jobs "$jobs" --out "$out" "$@" | grep "churn $system"
end=$(psql -d postgres -At -c "SELECT pg_current_wal_insert_lsn()")
psql -d postgres -c "CHECKPOINT" >/dev/null
db=bench_${system}
total=$(( jobs * rounds + 10000 ))
psql -d "$db" -c "CREATE EXTENSION IF NOT EXISTS pg_walinspect"
psql -d "$db" -P pager=off <<SQL
\echo == $system: WAL of $total jobs ($start .. $end), per job
CREATE TEMP TABLE r AS SELECT w.*, (regexp_match(w.block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid AS fn
  FROM pg_get_wal_records_info('$start', '$end') w;
SELECT round(('$end'::pg_lsn - '$start'::pg_lsn) / $total, 1) AS lsn_bytes_job,
       round(sum(record_length - fpi_length) / $total, 1) AS rec_bytes_job,
       round(sum(fpi_length) / $total, 1) AS fpi_bytes_job,
       round(count(*)::numeric / $total, 2) AS records_job FROM r;
SELECT resource_manager || '/' || record_type AS record,
       coalesce(c.relname, CASE WHEN fn IS NULL THEN '-' ELSE 'filenode ' || fn END) AS rel,
       round(count(*)::numeric / $total, 3) AS per_job,
       round(sum(record_length - fpi_length) / $total, 1) AS rec_b_job,
       round(sum(fpi_length) / $total, 1) AS fpi_b_job
FROM r LEFT JOIN pg_class c ON c.relfilenode = r.fn AND c.relfilenode <> 0
GROUP BY 1, 2 HAVING sum(record_length) >= $total / 2
ORDER BY sum(record_length) DESC;
SQL
