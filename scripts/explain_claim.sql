-- Shows that a claim's cost does not grow with clutter, with the plans of
-- the statements queue_claim really runs (auto_explain prints the nested
-- statements of our functions): 100,000 future tasks, 100,000 dead tasks
-- and 100,000 in-flight tasks in the same queue, plus 100,000 ready tasks
-- in another queue, next to 10 ready tasks. Needs a superuser (LOAD).
--   psql -h 127.0.0.1 -p 54329 -U postgres -X -f scripts/explain_claim.sql
\set QUIET on
DROP DATABASE IF EXISTS aedb_explain;
CREATE DATABASE aedb_explain;
\c aedb_explain
CREATE EXTENSION aedb_queue;
-- Batches hold at most 10,000 tasks.
CREATE FUNCTION pg_temp.fill(queue text, payload jsonb, n int, delay interval DEFAULT '0') RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n / 10000 LOOP
        PERFORM aedb_queue.queue_enqueue_batch(queue, array_fill(payload, ARRAY[10000]), delay => delay);
    END LOOP;
END $$;
SELECT pg_temp.fill('busy', '{"f": 1}', 100000, '1 day');
SELECT pg_temp.fill('busy', '{"d": 1}', 100000);
UPDATE aedb_queue.task SET state = 'dead', attempts = max_attempts WHERE queue = 'busy' AND state = 'ready';
SELECT pg_temp.fill('busy', '{"i": 1}', 100000);
DO $$ BEGIN
    FOR i IN 1..10 LOOP
        PERFORM aedb_queue.queue_claim('busy', 'holder', lease => '1 hour', max => 10000);
    END LOOP;
END $$;
SELECT pg_temp.fill('other', '{"o": 1}', 100000);
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('busy', array_fill('{"r": 1}'::jsonb, ARRAY[10]));
VACUUM ANALYZE aedb_queue.task;
\set QUIET off
SELECT queue, state, count(*) FROM aedb_queue.task GROUP BY 1, 2 ORDER BY 1, 2;

\echo 'A claim of one task, with the plan of every statement it runs (rolled back):'
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_timing = off;
SET auto_explain.log_level = notice;
SET client_min_messages = notice;
BEGIN;
SELECT task_id IS NOT NULL AS claimed FROM aedb_queue.queue_claim('busy', 'w');
ROLLBACK;
