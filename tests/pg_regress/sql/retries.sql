-- Failures: backoff retries, an explicit retry delay, dead letters.
SELECT task_id AS t FROM aedb_queue.queue_enqueue('jobs', '{"job": 1}', max_attempts => 3,
       backoff_base => '10 seconds', backoff_max => '15 seconds') \gset

-- First failure: retry after base = 10 s.
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('jobs', 'w') \gset
SELECT aedb_queue.queue_fail('jobs', :t, :tok, 'timeout');
SELECT state, attempts, last_error, not_before - updated_at AS retry_after FROM aedb_queue.queue_get('jobs', :t);

-- Not claimable while it waits.
SELECT count(*) FROM aedb_queue.queue_claim('jobs', 'w');

-- retry_in overrides the backoff: retry_in => '0' makes it ready at once.
-- (Test shortcut: move the timer into the past instead of sleeping. Claims
-- assume time only moves forward and resume their scans for up to
-- aedb_queue.claim_rescan_interval; 0 makes them see the edit at once.)
SET aedb_queue.claim_rescan_interval = 0;
UPDATE aedb_queue.task SET not_before = now() - interval '1 second' WHERE task_id = :t;
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('jobs', 'w') \gset
SELECT aedb_queue.queue_fail('jobs', :t, :tok, 'flaky', retry_in => '0');
SELECT state, attempts, last_error FROM aedb_queue.queue_get('jobs', :t);

-- Third attempt fails: attempts are exhausted, the task is dead and keeps its error.
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('jobs', 'w') \gset
SELECT aedb_queue.queue_fail('jobs', :t, :tok, 'still broken');
SELECT state, attempts, max_attempts, last_error FROM aedb_queue.queue_list('jobs', 'dead');

-- A non-retryable error dead-letters at once.
SELECT task_id AS u FROM aedb_queue.queue_enqueue('jobs', '{"job": 2}') \gset
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('jobs', 'w') \gset
SELECT aedb_queue.queue_fail('jobs', :u, :tok, 'bad input', dead_letter => true);
SELECT state, attempts, last_error FROM aedb_queue.queue_get('jobs', :u);

-- An expired lease goes back to ready without backoff (the worker vanished).
SELECT task_id AS v FROM aedb_queue.queue_enqueue('jobs', '{"job": 3}') \gset
SELECT fencing_token AS old_tok FROM aedb_queue.queue_claim('jobs', 'w', lease => '1 millisecond') \gset
SELECT pg_sleep(0.01);
SELECT * FROM aedb_queue.queue_reap('jobs');
SELECT state, attempts, owner_id, last_error FROM aedb_queue.queue_get('jobs', :v);
SELECT aedb_queue.queue_heartbeat('jobs', :v, :old_tok, '1 minute');

-- Cancel removes a task in any state and fences out its holder.
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('jobs', 'w') \gset
SELECT aedb_queue.queue_cancel('jobs', :v);
SELECT aedb_queue.queue_complete('jobs', :v, :tok);
SELECT aedb_queue.queue_cancel('jobs', :v);
