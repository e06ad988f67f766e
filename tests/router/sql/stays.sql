-- A worker loop on queue_complete_and_claim stays on the held task's shard
-- while it has work, for at most aedb_queue_router.max_stay claims in a row
-- (default 100); the next call claims on another shard first and completes
-- the held task alone, so a shard that never runs dry cannot keep the
-- other shards' tasks waiting.
SET aedb_queue_router.max_stay = 2;
SET aedb_queue_router.last_claim = 3; -- the session's turn starts at shard 1
SELECT min(k) FILTER (WHERE aedb_queue_shard.shard_for_key(k) = 1) AS key1,
       min(k) FILTER (WHERE aedb_queue_shard.shard_for_key(k) = 2) AS key2
FROM (SELECT 'key-' || g AS k FROM generate_series(1, 100) g) keys \gset
SELECT count(*) AS on_shard_1 FROM generate_series(1, 6) n,
    aedb_queue.queue_enqueue('stay', jsonb_build_object('n', n), shard_key => :'key1');
SELECT count(*) AS on_shard_2 FROM generate_series(1, 2) n,
    aedb_queue.queue_enqueue('stay', jsonb_build_object('m', n), shard_key => :'key2');
SELECT task_id AS t, fencing_token AS tok, task_id >> 48 AS shard FROM aedb_queue.queue_claim('stay', 'w') \gset
\echo claimed on shard :shard

-- Each step completes the held task and prints the shard of the next.
SELECT settled, task_id AS t, fencing_token AS tok, task_id >> 48 AS shard
FROM aedb_queue.queue_complete_and_claim('stay', 'w', :t, :tok) \gset
\echo :settled, next on shard :shard
SELECT settled, task_id AS t, fencing_token AS tok, task_id >> 48 AS shard
FROM aedb_queue.queue_complete_and_claim('stay', 'w', :t, :tok) \gset
\echo :settled, next on shard :shard
-- Two claims in a row on shard 1: this one looks at shard 2 first.
SELECT settled, task_id AS t, fencing_token AS tok, task_id >> 48 AS shard
FROM aedb_queue.queue_complete_and_claim('stay', 'w', :t, :tok) \gset
\echo :settled, next on shard :shard
SELECT settled, task_id AS t, fencing_token AS tok, task_id >> 48 AS shard
FROM aedb_queue.queue_complete_and_claim('stay', 'w', :t, :tok) \gset
\echo :settled, next on shard :shard
-- Shard 2 has run dry: back to shard 1.
SELECT settled, task_id AS t, fencing_token AS tok, task_id >> 48 AS shard
FROM aedb_queue.queue_complete_and_claim('stay', 'w', :t, :tok) \gset
\echo :settled, next on shard :shard

-- When the completion that follows a claim on another shard fails (here
-- strict with a stale token), the tasks claimed there are handed back:
-- ready, their attempt not counted (the token shows the claim). Nothing
-- else changed.
SELECT count(*) AS on_shard_2 FROM aedb_queue.queue_enqueue('stay', '{"m": 3}', shard_key => :'key2');
SET aedb_queue_router.stayed = 2;
\set VERBOSITY sqlstate
SELECT * FROM aedb_queue.queue_complete_and_claim('stay', 'w', :t, :tok - 1, strict => true);
\set VERBOSITY default
SELECT task_id >> 48 AS shard, state, attempts, fencing_token, payload FROM aedb_queue.queue_list('stay') ORDER BY task_id;
SELECT state, attempts FROM aedb_queue.queue_get('stay', :t);

-- queue_fail_and_claim stays the same way. Its failures here are retried
-- in an hour, so no failed task comes back: at max_stay 2 the turns are
-- 1, 1, then shard 2 first (the held task failed alone), then back to 1.
SET aedb_queue_router.stayed = 0;
SET aedb_queue_router.last_claim = 3;
SELECT count(*) AS on_shard_1 FROM generate_series(1, 5) n,
    aedb_queue.queue_enqueue('stayfail', jsonb_build_object('n', n), shard_key => :'key1');
SELECT count(*) AS on_shard_2 FROM aedb_queue.queue_enqueue('stayfail', '{"m": 1}', shard_key => :'key2');
SELECT task_id AS t, fencing_token AS tok, task_id >> 48 AS shard FROM aedb_queue.queue_claim('stayfail', 'w') \gset
\echo claimed on shard :shard
SELECT settled, task_id AS t, fencing_token AS tok, task_id >> 48 AS shard
FROM aedb_queue.queue_fail_and_claim('stayfail', 'w', :t, :tok, 'boom', retry_in => '1 hour') \gset
\echo :settled, next on shard :shard
SELECT settled, task_id AS t, fencing_token AS tok, task_id >> 48 AS shard
FROM aedb_queue.queue_fail_and_claim('stayfail', 'w', :t, :tok, 'boom', retry_in => '1 hour') \gset
\echo :settled, next on shard :shard
SELECT settled, task_id AS t, fencing_token AS tok, task_id >> 48 AS shard
FROM aedb_queue.queue_fail_and_claim('stayfail', 'w', :t, :tok, 'boom', retry_in => '1 hour') \gset
\echo :settled, next on shard :shard
SELECT settled, task_id AS t, fencing_token AS tok, task_id >> 48 AS shard
FROM aedb_queue.queue_fail_and_claim('stayfail', 'w', :t, :tok, 'boom', retry_in => '1 hour') \gset
\echo :settled, next on shard :shard
SELECT task_id >> 48 AS shard, state, attempts, last_error FROM aedb_queue.queue_list('stayfail') ORDER BY task_id;

-- A stale token with strict after a claim on another shard: 40002, the
-- task claimed there handed back (ready, attempts 0), the held task as it
-- was (in flight, its error history unchanged).
SELECT count(*) AS on_shard_2 FROM aedb_queue.queue_enqueue('stayfail', '{"m": 2}', shard_key => :'key2');
SET aedb_queue_router.stayed = 2;
\set VERBOSITY sqlstate
SELECT * FROM aedb_queue.queue_fail_and_claim('stayfail', 'w', :t, :tok - 1, 'boom', strict => true);
\set VERBOSITY default
SELECT task_id >> 48 AS shard, state, attempts, fencing_token, payload FROM aedb_queue.queue_list('stayfail')
WHERE state <> 'scheduled' ORDER BY task_id;
SELECT state, attempts, last_error FROM aedb_queue.queue_get('stayfail', :t);
-- Without strict the stale failure is reported and the claim stands.
SET aedb_queue_router.stayed = 2;
SELECT settled, task_id >> 48 AS shard, payload
FROM aedb_queue.queue_fail_and_claim('stayfail', 'w', :t, :tok - 1, 'boom');

-- A tenant gets nothing out of the look at the other shards: the claim
-- there runs as the tenant, and the shard refuses a queue the tenant has
-- no grant on before anything is settled (tenant_a holds grants on a_*
-- only, tests/router/sql/permissions.sql). The held task is unchanged.
\c - tenant_a
SET aedb_queue_router.max_stay = 2;
SET aedb_queue_router.stayed = 2;
\set VERBOSITY terse
SELECT * FROM aedb_queue.queue_fail_and_claim('stayfail', 'a-worker', :t, :tok, 'boom');
SELECT * FROM aedb_queue.queue_complete_and_claim('stayfail', 'a-worker', :t, :tok);
\set VERBOSITY default
\c - postgres
SELECT state, attempts, last_error FROM aedb_queue.queue_get('stayfail', :t);
SELECT task_id >> 48 AS shard, state, attempts FROM aedb_queue.queue_list('stayfail', 'ready') ORDER BY task_id;

-- A bad setting is refused by name.
SET aedb_queue_router.max_stay = 'often';
\set VERBOSITY terse
SELECT * FROM aedb_queue.queue_complete_and_claim('stay', 'w', :t, :tok);
\set VERBOSITY default
RESET aedb_queue_router.max_stay;
