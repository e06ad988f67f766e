-- Reads that span the shards ask each and merge. The session's turn is
-- pinned to start at shard 1, so the output is the same whatever its pid.
SET aedb_queue_router.last_enqueue = 3;
SELECT count(*) FROM aedb_queue.queue_enqueue('report', '{"n": 1}');
SELECT count(*) FROM aedb_queue.queue_enqueue('report', '{"n": 2}', delay => '1 hour');
SELECT count(*) FROM aedb_queue.queue_enqueue('report', '{"n": 3}');
SELECT count(*) FROM aedb_queue.queue_enqueue('report', '{"n": 4}');

-- queue_list: every shard's tasks, oldest first, up to the limit.
SELECT payload, state, task_id >> 48 AS shard FROM aedb_queue.queue_list('report');
SELECT payload FROM aedb_queue.queue_list('report', 'ready', "limit" => 2);

-- queue_overview: the figures summed per queue.
SELECT queue, paused, scheduled, ready, in_flight, next_due > now() AS due_later
FROM aedb_queue.queue_overview() WHERE queue = 'report';

-- queue_find: by id on its shard, by idempotency key on every shard.
SELECT task_id AS keyed FROM aedb_queue.queue_enqueue('report', '{"n": 5}', idempotency_key => 'weekly') \gset
SELECT task_id = :keyed AS found FROM aedb_queue.queue_find(task_id => :keyed);
SELECT task_id = :keyed AS found FROM aedb_queue.queue_find(idempotency_key => 'weekly');
\set VERBOSITY terse
SELECT * FROM aedb_queue.queue_find();
\set VERBOSITY default

-- queue_access: what the caller may do on every shard.
SELECT * FROM aedb_queue.queue_access() WHERE queue = 'report';
