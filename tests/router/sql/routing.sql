-- Task ids say which shard holds them: shard n's ids start at n * 2^48 + 1.
SELECT shard, available, reports_shard FROM aedb_queue.queue_router_shards();

-- Tasks without a routing key are spread: a session's first goes to the
-- shard its backend's pid picks (so sessions that make one call each spread
-- too), each next one to the next shard.
SELECT n, task_id >> 48 = (pg_backend_pid() + n - 1) % 3 + 1 AS in_turn
FROM generate_series(1, 4) n, aedb_queue.queue_enqueue('spread', jsonb_build_object('n', n));

-- A key always lands on the same shard (rendezvous hashing over the shards):
-- an idempotency key, so a repeat deduplicates where the first one is...
SELECT task_id AS first FROM aedb_queue.queue_enqueue('keys', '{"order": 1}', idempotency_key => 'order-1') \gset
SELECT task_id = :first AS same_task, deduplicated
FROM aedb_queue.queue_enqueue('keys', '{"order": 1}', idempotency_key => 'order-1');
-- ... an ordering key, so its line is one shard's...
SELECT count(DISTINCT task_id >> 48) AS shards
FROM generate_series(1, 5) n, aedb_queue.queue_enqueue('keys', jsonb_build_object('n', n), ordering_key => 'account-7');
-- ... and a shard_key, which the producer chooses.
SELECT count(DISTINCT task_id >> 48) AS shards
FROM generate_series(1, 5) n, aedb_queue.queue_enqueue('keys', jsonb_build_object('n', n), shard_key => 'tenant-9');
-- Different keys spread over the shards.
SELECT count(DISTINCT task_id >> 48) AS shards
FROM generate_series(1, 30) n, aedb_queue.queue_enqueue('keys', NULL, shard_key => 'k' || n);

-- A task that waits for others goes to its parents' shard.
SELECT task_id AS parent FROM aedb_queue.queue_enqueue('flow', '{"step": 1}') \gset
SELECT task_id >> 48 = :parent::bigint >> 48 AS with_parent
FROM aedb_queue.queue_enqueue('flow', '{"step": 2}', wait_for => ARRAY[:parent]::bigint[]);
SELECT task_id AS other FROM aedb_queue.queue_enqueue('flow', '{"step": 1}') \gset
-- Parents on two shards: refused, since a task waits only for its own shard's tasks.
\set VERBOSITY terse
SELECT * FROM aedb_queue.queue_enqueue('flow', NULL, wait_for => ARRAY[:parent, :other]::bigint[]);
\set VERBOSITY default

-- Every call on a task goes to the shard its id names: each applies, which
-- it could only do there.
SELECT task_id AS t1, fencing_token AS tok1 FROM aedb_queue.queue_claim('spread', 'w') \gset
SELECT aedb_queue.queue_heartbeat('spread', :t1, :tok1, '1 minute', '{"half": true}');
SELECT state, progress FROM aedb_queue.queue_get('spread', :t1);
SELECT aedb_queue.queue_fail('spread', :t1, :tok1, 'flaky', retry_in => '0');
SELECT attempt, error FROM aedb_queue.queue_errors('spread', :t1);
SELECT task_id AS t2, fencing_token AS tok2 FROM aedb_queue.queue_claim('spread', 'w') \gset
SELECT aedb_queue.queue_release('spread', :t2, :tok2);
SELECT task_id AS t3, fencing_token AS tok3 FROM aedb_queue.queue_claim('spread', 'w') \gset
SELECT aedb_queue.queue_complete('spread', :t3, :tok3, result => '{"ok": true}');
SELECT aedb_queue.queue_cancel('spread', :t1);
SELECT count(*) AS left_of_t1 FROM aedb_queue.queue_get('spread', :t1);
SELECT count(*) AS parents FROM aedb_queue.queue_parents('flow', (SELECT max(task_id) FROM aedb_queue.queue_list('flow', 'waiting')));
SELECT count(*) AS children FROM aedb_queue.queue_children('flow', :parent);

-- An id no shard of this router holds is a task that does not exist.
SELECT aedb_queue.queue_complete('spread', 42, 1) AS unknown_id, aedb_queue.queue_cancel('spread', 42) AS cancelled;
