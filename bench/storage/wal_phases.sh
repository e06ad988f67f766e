#!/usr/bin/env bash
# WAL and index work per job, one phase at a time, in one session's order,
# each statement its own transaction: enqueue N jobs (batches of 1,000), claim
# them (claims of 100), complete them (batches of 100). One CHECKPOINT before
# the enqueue only, so full-page images are those of a short cycle.
# Prints per phase: WAL bytes/job (records and full-page images apart),
# records by type and by relation, heap tuple counters per job.
#   wal_phases.sh SYSTEM N [SETUP_SQL]     SYSTEM: aedb_queue | baseline
# PORT (default 54370). The database walstudy_SYSTEM is recreated.
set -euo pipefail
system=$1; n=$2; setup_sql=${3:-}
port=${PORT:-54370}
db=walstudy_$system
psql() { command psql -h 127.0.0.1 -p "$port" -U postgres -X -q -v ON_ERROR_STOP=1 "$@"; }
PAYLOAD="jsonb_build_object('t', (extract(epoch from clock_timestamp()) * 1e6)::bigint, 'kind', 'bench', 'pad', repeat('x', 64))"

psql -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
case $system in
aedb_queue)
    psql -d "$db" -c "CREATE EXTENSION aedb_queue" -c "CREATE EXTENSION pg_walinspect"
    table=aedb_queue.task
    enqueue="SELECT count(*) FROM aedb_queue.queue_enqueue_batch('q', ARRAY(SELECT $PAYLOAD FROM generate_series(1, SIZE)));"
    claim="INSERT INTO claimed SELECT task_id, fencing_token, BATCH FROM aedb_queue.queue_claim('q', 'w', '30 seconds', 100);"
    complete="SELECT count(*) FROM aedb_queue.queue_complete_batch('q', ARRAY(SELECT id FROM claimed WHERE b = BATCH ORDER BY id), ARRAY(SELECT token FROM claimed WHERE b = BATCH ORDER BY id));"
    ;;
baseline)
    psql -d "$db" -c "CREATE EXTENSION pg_walinspect" -f "$(dirname "$0")/baseline.sql"
    table=public.jobs
    enqueue="INSERT INTO jobs (queue, payload) SELECT 'q', $PAYLOAD FROM generate_series(1, SIZE);"
    claim="WITH c AS (SELECT id FROM jobs WHERE queue = 'q' AND state = 'ready' AND run_at <= now() ORDER BY priority DESC, id LIMIT 100 FOR UPDATE SKIP LOCKED), u AS (UPDATE jobs j SET state = 'running', attempts = j.attempts + 1, locked_by = 'w', locked_until = now() + interval '30 seconds' FROM c WHERE j.id = c.id RETURNING j.id, j.attempts::bigint AS token) INSERT INTO claimed SELECT id, token, BATCH FROM u;"
    complete="DELETE FROM jobs WHERE id = ANY(ARRAY(SELECT id FROM claimed WHERE b = BATCH));"
    ;;
*) echo "unknown system $system" >&2; exit 2 ;;
esac
if [ -n "$setup_sql" ]; then psql -d "$db" -c "$setup_sql"; fi

# One warm-up job through every phase (queue registry row, sequence, plans).
psql -d "$db" >/dev/null <<SQL
CREATE UNLOGGED TABLE claimed (id bigint, token bigint, b int);
CREATE UNLOGGED TABLE mark (phase text, lsn pg_lsn, ins bigint, upd bigint, hot bigint, del bigint);
${enqueue//SIZE/1}
${claim//BATCH/0}
${complete//BATCH/0}
VACUUM $table;
CHECKPOINT;
SQL

mark() { # label
    psql -d "$db" -c "SELECT pg_stat_force_next_flush()" >/dev/null
    sleep 0.3
    psql -d "$db" -c "INSERT INTO mark SELECT '$1', pg_current_wal_insert_lsn(), n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE relid = '$table'::regclass" >/dev/null
}

batches=$(( n / 100 ))
mark start
s=$(mktemp)
for ((i = 0; i < n / 1000; i++)); do echo "${enqueue//SIZE/1000}"; done > "$s"; psql -d "$db" -f "$s" >/dev/null; mark enqueue
# CHECKPOINT_BETWEEN=1: a checkpoint between enqueue and claim, as a backlog
# older than a checkpoint cycle has (every page's first change after it
# writes a full-page image).
if [ "${CHECKPOINT_BETWEEN:-}" = 1 ]; then psql -d "$db" -c CHECKPOINT; mark checkpoint; fi
for ((i = 1; i <= batches; i++)); do echo "${claim//BATCH/$i}"; done > "$s"; psql -d "$db" -f "$s" >/dev/null; mark claim
for ((i = 1; i <= batches; i++)); do echo "${complete//BATCH/$i}"; done > "$s"; psql -d "$db" -f "$s" >/dev/null; mark complete
rm -f "$s"
psql -d "$db" -c "CHECKPOINT" >/dev/null   # flushes, so the records up to the last mark are readable

psql -d "$db" -P pager=off <<SQL
\echo == $system, $n jobs: per job, by phase
CREATE TEMP TABLE ph AS
  SELECT phase, lag(lsn) OVER w AS from_lsn, lsn AS to_lsn,
         ins - lag(ins) OVER w AS ins, upd - lag(upd) OVER w AS upd,
         hot - lag(hot) OVER w AS hot, del - lag(del) OVER w AS del
  FROM mark WINDOW w AS (ORDER BY lsn);
DELETE FROM ph WHERE from_lsn IS NULL OR phase = 'checkpoint';
CREATE TEMP TABLE r AS
  SELECT ph.phase, w.*, (regexp_match(w.block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid AS fn
  FROM ph, LATERAL pg_get_wal_records_info(ph.from_lsn, ph.to_lsn) w;
SELECT ph.phase, round((to_lsn - from_lsn) / $n, 1) AS lsn_bytes_job,
       round(sum(record_length - fpi_length) / $n, 1) AS rec_bytes_job,
       round(sum(fpi_length) / $n, 1) AS fpi_bytes_job,
       round(count(*)::numeric / $n, 2) AS records_job,
       round(ins::numeric / $n, 2) AS ins, round(upd::numeric / $n, 2) AS upd,
       round(hot::numeric / $n, 2) AS hot_upd, round(del::numeric / $n, 2) AS del
FROM ph JOIN r USING (phase) GROUP BY ph.phase, ph.from_lsn, ph.to_lsn, ins, upd, hot, del ORDER BY ph.from_lsn;
\echo by record type and relation (relation of the first block reference)
SELECT phase, resource_manager || '/' || record_type AS record,
       coalesce(c.relname, CASE WHEN fn IS NULL THEN '-' ELSE 'filenode ' || fn END) AS rel,
       round(count(*)::numeric / $n, 3) AS per_job,
       round(sum(record_length - fpi_length) / $n, 1) AS rec_b_job,
       round(sum(fpi_length) / $n, 1) AS fpi_b_job
FROM r LEFT JOIN pg_class c ON c.relfilenode = r.fn AND c.relfilenode <> 0
GROUP BY phase, 2, 3 HAVING sum(record_length) >= $n / 10
ORDER BY min(start_lsn), sum(record_length) DESC;
\echo row width (pg_column_size of a fresh row of this payload)
SQL
