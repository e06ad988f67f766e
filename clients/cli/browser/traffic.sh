#!/usr/bin/env bash
# A burst of work for the charts, SECONDS long (run.sh runs it before taking
# screenshots): each second enqueues, claims and completes tasks in emails and
# audit (emails' backlog grows for the first half, then drains), and
# dead-letters one in reports now and then. Only tasks it made itself
# (priority 100, served first) are claimed, and never more than it made, so
# the seeded tasks the tests look for stay as they were.
#   PGPORT=54346 bash traffic.sh SECONDS
set -euo pipefail
seconds=${1:-20}
run() { psql -X -q -h 127.0.0.1 -p "${PGPORT:-54346}" -U dash_admin -d aedb_browser -v ON_ERROR_STOP=1 -At >/dev/null; }
backlog=0
for i in $(seq 1 "$seconds"); do
    if (( i <= seconds / 2 )); then
        enq=$(( 5 + i % 3 )); take=$(( 2 + i % 2 ))
    else
        enq=$(( 1 + i % 2 )); take=$(( 6 + i % 3 ))
    fi
    (( take > backlog + enq )) && take=$(( backlog + enq ))
    backlog=$(( backlog + enq - take ))
    audit=$(( 2 + (i * 7) % 5 ))
    run <<SQL
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('emails',
    (SELECT array_agg(jsonb_build_object('to', 'user-' || ($i * 10 + g) || '@example.com', 'template', 'receipt')) FROM generate_series(1, $enq) g),
    priority => 100);
SELECT array_agg(task_id) AS ids, array_agg(fencing_token) AS toks FROM aedb_queue.queue_claim('emails', 'worker-1', max => $take) \gset
SELECT count(*) FROM aedb_queue.queue_complete_batch('emails', coalesce(nullif(:'ids', ''), '{}')::bigint[], coalesce(nullif(:'toks', ''), '{}')::bigint[]);
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('audit', array_fill('{"event": "receipt sent"}'::jsonb, ARRAY[$audit]), priority => 100);
SELECT array_agg(task_id) AS ids, array_agg(fencing_token) AS toks FROM aedb_queue.queue_claim('audit', 'worker-2', max => $audit) \gset
SELECT count(*) FROM aedb_queue.queue_complete_batch('audit', :'ids'::bigint[], :'toks'::bigint[]);
SQL
    if (( i % 5 == 0 )); then
        run <<SQL
SELECT count(*) FROM aedb_queue.queue_enqueue('reports', '{"report": "weekly"}', priority => 100, max_attempts => 1);
SELECT aedb_queue.queue_fail('reports', task_id, fencing_token, 'renderer crashed: out of memory') FROM aedb_queue.queue_claim('reports', 'worker-3');
SQL
    fi
    sleep 1
done
