-- The session's turn pinned to start at shard 1 (a new session starts
-- where its backend's pid picks), so the output is the same every run.
SET aedb_queue_router.last_claim = 3;
SET aedb_queue_router.last_enqueue = 3;

-- Claims through the router: shard by shard in the session's turn; the
-- first shard with work ends the call, so a task is leased only by a call
-- that hands it out.
SELECT count(*) AS enqueued FROM generate_series(1, 6) n, aedb_queue.queue_enqueue('jobs', jsonb_build_object('n', n));

-- max => 10 takes what one shard has (two tasks each here), then the next
-- call goes on from the next shard.
SELECT count(*) AS claimed, count(DISTINCT task_id >> 48) AS shards FROM aedb_queue.queue_claim('jobs', 'w1', max => 10);
SELECT count(*) AS claimed, count(DISTINCT task_id >> 48) AS shards FROM aedb_queue.queue_claim('jobs', 'w1', max => 10);
SELECT count(*) AS claimed, count(DISTINCT task_id >> 48) AS shards FROM aedb_queue.queue_claim('jobs', 'w1', max => 10);
-- Every shard empty: nothing, and no error.
SELECT count(*) AS claimed FROM aedb_queue.queue_claim('jobs', 'w1', max => 10);
SELECT state, count(*) FROM aedb_queue.queue_list('jobs') GROUP BY state;

-- A batch settle splits by shard, one call each, one row per entry.
SELECT array_agg(task_id ORDER BY task_id) AS ids, array_agg(fencing_token ORDER BY task_id) AS tokens
FROM aedb_queue.queue_list('jobs', 'in_flight') \gset
SELECT count(*) AS rows, count(DISTINCT task_id >> 48) AS shards, min(outcome::text) AS outcome
FROM aedb_queue.queue_complete_batch('jobs', :'ids', :'tokens');
-- Settled already: fenced out, on every shard.
SELECT DISTINCT outcome FROM aedb_queue.queue_complete_batch('jobs', :'ids', :'tokens');
-- strict is all or nothing, which across shards would need two-phase commit.
\set VERBOSITY terse
SELECT * FROM aedb_queue.queue_complete_batch('jobs', :'ids', :'tokens', strict => true);
\set VERBOSITY default

-- Settle and claim: on the held task's shard in one call; when that shard
-- has nothing left, the claim goes on to another shard.
SELECT task_id AS a FROM aedb_queue.queue_enqueue('loop', '{"n": 1}', shard_key => 'x') \gset
SELECT task_id AS b FROM aedb_queue.queue_enqueue('loop', '{"n": 2}', shard_key => 'x') \gset
-- (a key that the router places on another shard than 'x')
SELECT key AS z FROM generate_series(1, 50) n, LATERAL (SELECT 'z' || n AS key) k
WHERE aedb_queue_shard.shard_for_key(key) <> aedb_queue_shard.shard_for_key('x') LIMIT 1 \gset
SELECT task_id AS c FROM aedb_queue.queue_enqueue('loop', '{"n": 3}', shard_key => :'z') \gset
SELECT :a::bigint >> 48 = :b::bigint >> 48 AS a_b_together, :a::bigint >> 48 <> :c::bigint >> 48 AS c_apart;
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('loop', 'w2') WHERE task_id = :a \gset
SELECT settled, task_id = :b AS next_is_b FROM aedb_queue.queue_complete_and_claim('loop', 'w2', :a, :tok);
SELECT fencing_token AS tok FROM aedb_queue.queue_get('loop', :b) \gset
SELECT settled, task_id = :c AS next_is_c_from_another_shard
FROM aedb_queue.queue_complete_and_claim('loop', 'w2', :b, :tok);
SELECT fencing_token AS tok FROM aedb_queue.queue_get('loop', :c) \gset
-- Nothing anywhere: one row still reports the settle.
SELECT settled, task_id FROM aedb_queue.queue_fail_and_claim('loop', 'w2', :c, :tok, 'boom', dead_letter => true);

-- Fenced out with strict: the shard's 40002 comes back as it is.
\set VERBOSITY terse
SELECT * FROM aedb_queue.queue_complete_and_claim('loop', 'w2', :c, :tok, strict => true);
SELECT aedb_queue.queue_complete('loop', :c, :tok, strict => true);
\set VERBOSITY default

-- A shard's errors come back with its SQLSTATE and words.
SELECT * FROM aedb_queue.queue_claim('', 'w2');
SELECT * FROM aedb_queue.queue_claim('loop', 'w2', max => 0);
