-- Concurrency keys: tasks sharing a key in a queue take its slots; at most
-- the key's limit of them are ready or in flight at once, the rest wait in
-- 'blocked' and get a slot, in the queue's order, when one frees.
SET aedb_queue.claim_rescan_interval = 0;
-- The tasks of a queue: payload n, state and key, in enqueue order.
CREATE FUNCTION pg_temp.keyed(q text) RETURNS TABLE (n text, state text, concurrency_key text)
LANGUAGE sql AS $$
    SELECT payload->>'n', state::text, concurrency_key FROM aedb_queue.task
    WHERE queue = q ORDER BY task_id
$$;

-- Without a limit configured, a key runs one task at a time.
SELECT task_id AS a1 FROM aedb_queue.queue_enqueue('ck', '{"n": "a1"}', concurrency_key => 'acct-a') \gset
SELECT task_id AS a2 FROM aedb_queue.queue_enqueue('ck', '{"n": "a2"}', concurrency_key => 'acct-a') \gset
SELECT task_id AS b1 FROM aedb_queue.queue_enqueue('ck', '{"n": "b1"}', concurrency_key => 'acct-b') \gset
SELECT task_id AS u1 FROM aedb_queue.queue_enqueue('ck', '{"n": "u1"}') \gset
SELECT * FROM pg_temp.keyed('ck');
SELECT queue, concurrency_key, concurrency_limit, taken, in_flight, blocked, at_limit
FROM aedb_queue.concurrency_keys WHERE queue = 'ck' ORDER BY 2;

-- A claim of many takes what holds a slot, in order; a2 stays blocked.
SELECT payload->>'n' AS n FROM aedb_queue.queue_claim('ck', 'w', max => 10) ORDER BY task_id;
SELECT * FROM pg_temp.keyed('ck');

-- Completing a1 gives its slot to a2 in the same transaction.
SELECT fencing_token AS tok FROM aedb_queue.queue_get('ck', :a1) \gset
BEGIN;
SELECT aedb_queue.queue_complete('ck', :a1, :tok);
SELECT * FROM pg_temp.keyed('ck');
COMMIT;

-- A retry after a delay frees the slot while it waits; when the retry is
-- due, the task queues for a slot again.
SELECT fencing_token AS tok FROM aedb_queue.queue_get('ck', :b1) \gset
SELECT task_id AS b2 FROM aedb_queue.queue_enqueue('ck', '{"n": "b2"}', concurrency_key => 'acct-b') \gset
SELECT aedb_queue.queue_fail('ck', :b1, :tok, 'flaky', retry_in => '1 hour');
SELECT * FROM pg_temp.keyed('ck');
-- (The hour passes.) b2 holds acct-b's slot, so b1 waits for it.
UPDATE aedb_queue.task SET not_before = now() - interval '1 second' WHERE task_id = :b1;
SELECT promoted FROM aedb_queue.queue_reap('ck');
SELECT * FROM pg_temp.keyed('ck');

-- The queue's limit, and one key's own, apply at once: raising them gives
-- slots to blocked tasks.
SELECT task_id AS a3 FROM aedb_queue.queue_enqueue('ck', '{"n": "a3"}', concurrency_key => 'acct-a') \gset
SELECT task_id AS a4 FROM aedb_queue.queue_enqueue('ck', '{"n": "a4"}', concurrency_key => 'acct-a') \gset
SELECT concurrency_limit FROM aedb_queue.queue_configure('ck', concurrency_limit => 2);
SELECT * FROM pg_temp.keyed('ck');
SELECT aedb_queue.queue_configure_key('ck', 'acct-a', 3);
SELECT * FROM pg_temp.keyed('ck');
SELECT concurrency_key, concurrency_limit, own_limit, taken, in_flight, blocked, at_limit
FROM aedb_queue.concurrency_keys WHERE queue = 'ck' ORDER BY 1;

-- Lowering a limit sends ready tasks over it back to blocked (the last in
-- order first); tasks in flight keep running.
SELECT aedb_queue.queue_configure_key('ck', 'acct-a', 1);
SELECT * FROM pg_temp.keyed('ck');

-- Cancelling a task that holds a slot frees it; cancelling a blocked one
-- changes nothing else.
SELECT aedb_queue.queue_cancel('ck', :a4);
SELECT * FROM pg_temp.keyed('ck');

-- A task's key in follow-ups and batches.
SELECT payload->>'n' AS n FROM aedb_queue.queue_claim('ck', 'w', max => 10) ORDER BY task_id;
SELECT fencing_token AS tok FROM aedb_queue.queue_get('ck', :a2) \gset
SELECT aedb_queue.queue_complete('ck', :a2, :tok,
       follow_ups => '[{"queue": "ck", "payload": {"n": "f1"}, "concurrency_key": "acct-c"},
                       {"queue": "ck", "payload": {"n": "f2"}, "concurrency_key": "acct-c"}]');
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('ck', ARRAY['{"n": "d1"}', '{"n": "d2"}', '{"n": "d3"}']::jsonb[],
       concurrency_key => 'acct-d');
SELECT * FROM pg_temp.keyed('ck');
SELECT queue, blocked, ready, in_flight, scheduled, concurrency_limit FROM aedb_queue.queue_stats WHERE queue = 'ck';
SELECT count(*) FROM aedb_queue.queue_list('ck', 'blocked');

-- Bad keys and limits are refused, naming the argument.
\set VERBOSITY sqlstate
SELECT aedb_queue.queue_enqueue('ck', '{}', concurrency_key => '');
SELECT aedb_queue.queue_enqueue('ck', '{}', concurrency_key => repeat('k', 300));
SELECT aedb_queue.queue_complete('ck', :a2, :tok, follow_ups => '[{"queue": "ck", "concurrency_key": 7}]');
SELECT concurrency_limit FROM aedb_queue.queue_configure('ck', concurrency_limit => 0);
SELECT aedb_queue.queue_configure_key('ck', 'acct-a', 0);
SELECT aedb_queue.queue_configure_key('ck', NULL, 2);
\set VERBOSITY default
SELECT aedb_queue.queue_enqueue('ck', '{}', concurrency_key => '');
SELECT aedb_queue.queue_configure_key('ck', 'acct-a', -1);

SELECT aedb_queue.queue_purge('ck', 'blocked');
SELECT aedb_queue.queue_purge('ck', 'ready');
SELECT aedb_queue.queue_purge('ck', 'scheduled');
SELECT aedb_queue.queue_purge('ck', 'in_flight', force => true);
SELECT concurrency_key, taken, blocked FROM aedb_queue.concurrency_keys WHERE queue = 'ck' ORDER BY 1;
