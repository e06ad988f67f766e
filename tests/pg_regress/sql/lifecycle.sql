-- A task's life: enqueue, claim, heartbeat, complete with follow-ups.
SELECT task_id AS ada FROM aedb_queue.queue_enqueue('mail', '{"to": "ada"}') \gset
SELECT task_id AS bob FROM aedb_queue.queue_enqueue('mail', '{"to": "bob"}', priority => 5) \gset
SELECT task_id AS cy FROM aedb_queue.queue_enqueue('mail', '{"to": "cy"}', delay => '1 hour') \gset

-- Highest priority first; the delayed task is not due yet.
SELECT payload, attempts, fencing_token, priority, progress, lease_deadline > now() AS leased
FROM aedb_queue.queue_claim('mail', 'worker-a', lease => '1 minute', max => 10);

SELECT payload, state, attempts, owner_id, fencing_token
FROM aedb_queue.queue_list('mail') ORDER BY task_id;

-- Heartbeat extends the lease and checkpoints progress.
SELECT aedb_queue.queue_heartbeat('mail', :bob, 1, extend => '5 minutes', progress => '{"sent": 1}');
SELECT progress, lease_deadline > now() + interval '4 minutes' AS extended
FROM aedb_queue.queue_get('mail', :bob);

-- Complete with follow-ups: the next steps are enqueued in the same transaction.
SELECT aedb_queue.queue_complete('mail', :bob, 1, result => '{"ok": true}',
       follow_ups => '[{"queue": "audit", "payload": {"sent_to": "bob"}},
                       {"queue": "audit", "payload": {"late": true}, "delay": "10 minutes", "priority": 3}]');
SELECT state, priority, payload FROM aedb_queue.queue_list('audit') ORDER BY task_id;

-- The task is gone; presenting its token again is fenced out.
SELECT count(*) FROM aedb_queue.queue_get('mail', :bob);
SELECT aedb_queue.queue_complete('mail', :bob, 1);

-- Batch enqueue returns one id per payload, in payload order.
SELECT count(*), min(id) < max(id) AS ascending
FROM aedb_queue.queue_enqueue_batch('bulk', ARRAY['{"n": 1}', '{"n": 2}', NULL]::jsonb[], priority => 1) AS id;
SELECT state, priority, payload FROM aedb_queue.queue_list('bulk') ORDER BY task_id;
