-- Ordering keys: tasks sharing a key in a queue run one at a time, in the
-- order they were enqueued. Only the key's head may be ready, in flight or
-- scheduled for a retry; the rest wait in line ('blocked').
SET aedb_queue.claim_rescan_interval = 0;
CREATE FUNCTION pg_temp.line(q text) RETURNS TABLE (n text, state text, ordering_key text)
LANGUAGE sql AS $$
    SELECT payload->>'n', state::text, ordering_key FROM aedb_queue.task
    WHERE queue = q ORDER BY task_id
$$;
-- Completes the task of `q` that a claim hands out; returns its n.
CREATE FUNCTION pg_temp.run_next(q text) RETURNS text LANGUAGE sql AS $$
    SELECT c.payload->>'n' || ' ' || aedb_queue.queue_complete(q, c.task_id, c.fencing_token)
    FROM aedb_queue.queue_claim(q, 'w') c
$$;

-- Three changes to account 7, one to account 8; a higher priority does not
-- jump the line of its key.
SELECT count(*) FROM (
    SELECT aedb_queue.queue_enqueue('ok', '{"n": "a7-1"}', ordering_key => 'acct-7')
    UNION ALL SELECT aedb_queue.queue_enqueue('ok', '{"n": "a7-2"}', ordering_key => 'acct-7', priority => 9)
    UNION ALL SELECT aedb_queue.queue_enqueue('ok', '{"n": "b8-1"}', ordering_key => 'acct-8')
    UNION ALL SELECT aedb_queue.queue_enqueue('ok', '{"n": "a7-3"}', ordering_key => 'acct-7')) e;
SELECT * FROM pg_temp.line('ok');
SELECT ordering_key, head_state, in_line, stopped_by_dead FROM aedb_queue.ordering_keys WHERE queue = 'ok' ORDER BY 1;
-- A claim of many gets each key's head only.
SELECT payload->>'n' AS n FROM aedb_queue.queue_claim('ok', 'w', max => 10) ORDER BY task_id;

-- The head's failure keeps the line waiting while it retries.
SELECT task_id AS h, fencing_token AS tok FROM aedb_queue.queue_list('ok', 'in_flight') WHERE payload->>'n' = 'a7-1' \gset
SELECT aedb_queue.queue_fail('ok', :h, :tok, 'flaky', retry_in => '1 hour');
SELECT * FROM pg_temp.line('ok');
-- (The hour passes.) The retry runs, then the line moves on, in order.
UPDATE aedb_queue.task SET not_before = now() - interval '1 second' WHERE task_id = :h;
SELECT promoted FROM aedb_queue.queue_reap('ok');
SELECT pg_temp.run_next('ok');
SELECT pg_temp.run_next('ok');
SELECT * FROM pg_temp.line('ok');

-- A dead head stops its line ('block', the default) until it is re-driven,
-- cancelled or purged; with 'release' the line moves on.
SELECT count(*) FROM (
    SELECT aedb_queue.queue_enqueue('od', jsonb_build_object('n', 'd' || i), ordering_key => 'k', max_attempts => 1)
    FROM generate_series(1, 3) i) e;
SELECT task_id AS h, fencing_token AS tok FROM aedb_queue.queue_claim('od', 'w') \gset
SELECT aedb_queue.queue_fail('od', :h, :tok, 'broken');
SELECT * FROM pg_temp.line('od');
SELECT ordering_key, head_state, in_line, stopped_by_dead FROM aedb_queue.ordering_keys WHERE queue = 'od';
SELECT aedb_queue.queue_retry_dead('od', :h);
SELECT * FROM pg_temp.line('od');
SELECT task_id AS h, fencing_token AS tok FROM aedb_queue.queue_claim('od', 'w') \gset
SELECT aedb_queue.queue_fail('od', :h, :tok, 'broken again');
SELECT ordering_on_dead FROM aedb_queue.queue_configure('od', ordering_on_dead => 'release');
SELECT * FROM pg_temp.line('od');
-- Re-driven now, the dead task joins the line again (first by id).
SELECT aedb_queue.queue_retry_dead('od', :h);
SELECT * FROM pg_temp.line('od');

-- Delays, batches and follow-ups keep the order too.
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('ob', ARRAY['{"n": "b1"}', '{"n": "b2"}']::jsonb[],
       ordering_key => 'k', delay => '1 hour');
SELECT aedb_queue.queue_enqueue('ob', '{"n": "b3"}', ordering_key => 'k') IS NOT NULL;
SELECT * FROM pg_temp.line('ob');

-- Bad keys are refused, naming the argument; a task has one key or the other.
\set VERBOSITY sqlstate
SELECT aedb_queue.queue_enqueue('ok', '{}', ordering_key => '');
SELECT aedb_queue.queue_enqueue('ok', '{}', ordering_key => 'a', concurrency_key => 'b');
SELECT aedb_queue.queue_configure('ok', ordering_on_dead => 'skip');
\set VERBOSITY default
SELECT aedb_queue.queue_enqueue('ok', '{}', ordering_key => 'a', concurrency_key => 'b');
SELECT aedb_queue.queue_configure('ok', ordering_on_dead => 'skip');
