-- Handing a task back unworked: a worker that stops (SIGTERM, a deploy)
-- before it could run a task it claimed returns it with queue_release. The
-- task is ready again at once (or after a delay), the claim's attempt is
-- not counted, and its checkpointed progress is kept for the next worker.
SELECT task_id AS t FROM aedb_queue.queue_enqueue('export', '{"rows": 1000}', max_attempts => 2) \gset
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('export', 'w1') \gset
SELECT aedb_queue.queue_heartbeat('export', :t, :tok, '30 seconds', progress => '{"done": 400}');
SELECT state, attempts FROM aedb_queue.queue_get('export', :t);

SELECT aedb_queue.queue_release('export', :t, :tok);
SELECT state, attempts, owner_id, progress FROM aedb_queue.queue_get('export', :t);

-- The old token is fenced out: a second release and a complete are lease_lost.
SELECT aedb_queue.queue_release('export', :t, :tok);
SELECT aedb_queue.queue_complete('export', :t, :tok);

-- The next worker resumes from the checkpoint, under a new token.
SELECT fencing_token AS tok2, progress FROM aedb_queue.queue_claim('export', 'w2') \gset
SELECT :tok2 > :tok AS new_token, :'progress' AS resumed_from;

-- Handed back with a delay: scheduled, not claimable until then.
SELECT aedb_queue.queue_release('export', :t, :tok2, delay => '5 minutes');
SELECT state, attempts, not_before - updated_at AS ready_in FROM aedb_queue.queue_get('export', :t);
SELECT count(*) AS claimable_now FROM aedb_queue.queue_claim('export', 'w3');

-- A negative delay is refused, naming the argument.
SELECT aedb_queue.queue_release('export', :t, :tok2, delay => '-1 minute');
