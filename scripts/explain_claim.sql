-- Shows that a claim's cost does not grow with clutter: the plan of the claim
-- statement (as in src/store.rs) with 100,000 future tasks, 100,000 dead
-- tasks and 100,000 in-flight tasks in the same queue, plus 100,000 ready
-- tasks in another queue, next to 10 ready tasks.
--   psql -h 127.0.0.1 -p 54329 -U postgres -X -f scripts/explain_claim.sql
\set QUIET on
DROP DATABASE IF EXISTS aedb_explain;
CREATE DATABASE aedb_explain;
\c aedb_explain
CREATE EXTENSION aedb_queue;
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('busy', array_fill('{"f": 1}'::jsonb, ARRAY[100000]), delay => '1 day');
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('busy', array_fill('{"d": 1}'::jsonb, ARRAY[100000]));
UPDATE aedb_queue.task SET state = 'dead', attempts = max_attempts WHERE queue = 'busy' AND state = 'ready';
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('busy', array_fill('{"i": 1}'::jsonb, ARRAY[100000]));
DO $$ BEGIN
    FOR i IN 1..10 LOOP
        PERFORM aedb_queue.queue_claim('busy', 'holder', lease => '1 hour', max => 10000);
    END LOOP;
END $$;
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('other', array_fill('{"o": 1}'::jsonb, ARRAY[100000]));
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('busy', array_fill('{"r": 1}'::jsonb, ARRAY[10]));
VACUUM ANALYZE aedb_queue.task;
\set QUIET off
SELECT queue, state, count(*) FROM aedb_queue.task GROUP BY 1, 2 ORDER BY 1, 2;

\echo 'The claim statement (picks 1 of the 10 ready tasks), rolled back:'
BEGIN;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF)
UPDATE aedb_queue.task
SET state = 'in_flight', attempts = attempts + 1, fencing_token = fencing_token + 1,
    owner_id = 'w', lease_deadline = statement_timestamp() + interval '30 seconds',
    updated_at = statement_timestamp()
WHERE task_id = ANY(ARRAY(
    SELECT task_id FROM aedb_queue.task
    WHERE queue = 'busy' AND state = 'ready'
    ORDER BY priority DESC, -task_id DESC
    LIMIT 1
    FOR UPDATE SKIP LOCKED))
RETURNING task_id;
ROLLBACK;

\echo 'The inline promotion and reclaim steps (nothing due, nothing expired):'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF)
SELECT task_id FROM aedb_queue.task
WHERE queue = 'busy' AND state = 'scheduled' AND not_before <= statement_timestamp()
ORDER BY not_before LIMIT 100 FOR UPDATE SKIP LOCKED;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF)
SELECT task_id FROM aedb_queue.task
WHERE queue = 'busy' AND state = 'in_flight' AND lease_deadline < statement_timestamp()
ORDER BY lease_deadline LIMIT 100 FOR UPDATE SKIP LOCKED;
