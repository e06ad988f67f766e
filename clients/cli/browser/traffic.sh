#!/usr/bin/env bash
# A burst of work for the charts, SECONDS long (run.sh runs it before taking
# screenshots): each second enqueues, claims and completes a varying number of
# tasks in emails and audit, and dead-letters one in reports now and then.
# Only tasks it made itself (priority 100, served first) are claimed, so the
# seeded tasks the tests look for stay as they were.
#   PGPORT=54346 bash traffic.sh SECONDS
set -euo pipefail
seconds=${1:-20}
for i in $(seq 1 "$seconds"); do
    k=$(( 3 + (i * 7) % 11 ))
    psql -X -q -h 127.0.0.1 -p "${PGPORT:-54346}" -U dash_admin -d aedb_browser -v ON_ERROR_STOP=1 -At >/dev/null <<SQL
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('emails', array_fill('{"traffic": true}'::jsonb, ARRAY[$k]), priority => 100);
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('audit', array_fill('{"traffic": true}'::jsonb, ARRAY[$(( k / 2 + 1 ))]), priority => 100);
SELECT array_agg(task_id) AS ids, array_agg(fencing_token) AS toks FROM aedb_queue.queue_claim('emails', 'traffic', max => $(( k - 1 ))) \gset
SELECT count(*) FROM aedb_queue.queue_complete_batch('emails', :'ids'::bigint[], :'toks'::bigint[]);
SELECT array_agg(task_id) AS ids, array_agg(fencing_token) AS toks FROM aedb_queue.queue_claim('audit', 'traffic', max => $(( k / 2 + 1 ))) \gset
SELECT count(*) FROM aedb_queue.queue_complete_batch('audit', :'ids'::bigint[], :'toks'::bigint[]);
SQL
    if (( i % 5 == 0 )); then
        psql -X -q -h 127.0.0.1 -p "${PGPORT:-54346}" -U dash_admin -d aedb_browser -v ON_ERROR_STOP=1 -At >/dev/null <<SQL
SELECT count(*) FROM aedb_queue.queue_enqueue('reports', '{"traffic": true}', priority => 100, max_attempts => 1);
SELECT aedb_queue.queue_fail('reports', task_id, fencing_token, 'traffic: renderer crashed') FROM aedb_queue.queue_claim('reports', 'traffic');
SQL
    fi
    sleep 1
done
