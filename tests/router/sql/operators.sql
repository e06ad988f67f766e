-- Operator calls apply on every shard and answer one row per shard.
SELECT count(*) FROM generate_series(1, 3) n, aedb_queue.queue_enqueue('ops', jsonb_build_object('n', n));
SELECT * FROM aedb_queue.queue_pause('ops');
SELECT * FROM aedb_queue.queue_pause('ops');
SELECT count(*) AS claimed_while_paused FROM aedb_queue.queue_claim('ops', 'w', max => 10);
SELECT * FROM aedb_queue.queue_resume('ops');
SELECT shard, max_attempts, default_lease, paused, error_code
FROM aedb_queue.queue_configure('ops', max_attempts => 1, default_lease => '2 minutes');

-- Dead letters and purges, per shard (dead_letter => true: the tasks were
-- enqueued before max_attempts changed and keep the attempts they had, so
-- a plain failure would schedule a retry that a slow run sees come due).
SELECT count(*) AS failed FROM aedb_queue.queue_claim('ops', 'w', max => 10) c,
    LATERAL aedb_queue.queue_fail('ops', c.task_id, c.fencing_token, 'no', dead_letter => true);
SELECT count(*) AS failed FROM aedb_queue.queue_claim('ops', 'w', max => 10) c,
    LATERAL aedb_queue.queue_fail('ops', c.task_id, c.fencing_token, 'no', dead_letter => true);
SELECT count(*) AS failed FROM aedb_queue.queue_claim('ops', 'w', max => 10) c,
    LATERAL aedb_queue.queue_fail('ops', c.task_id, c.fencing_token, 'no', dead_letter => true);
SELECT sum(dead) AS dead FROM aedb_queue.queue_overview() WHERE queue = 'ops';
SELECT sum(result) AS retried, count(*) FILTER (WHERE error IS NULL) AS shards_answered
FROM aedb_queue.queue_retry_dead('ops');
SELECT sum(result) AS purged FROM aedb_queue.queue_purge('ops', 'ready');
SELECT shard, promoted, reclaimed, dead_lettered, fired, error_code FROM aedb_queue.queue_reap('ops');
SELECT * FROM aedb_queue.queue_configure_key('ops', 'k', 2);
SELECT * FROM aedb_queue.queue_configure_fairness('ops', 'f', 3);

-- A call every shard refuses for the same reason is an error, as it is
-- on one node.
\set VERBOSITY terse
SELECT * FROM aedb_queue.queue_pause('');
SELECT * FROM aedb_queue.queue_purge('ops', 'nonsense');
\set VERBOSITY default

-- Registering shards is for superusers; a bad registration changes nothing.
\set VERBOSITY terse
SELECT aedb_queue.queue_router_add_shard(1, 'host=127.0.0.1 port=1 dbname=nowhere');
SELECT aedb_queue.queue_router_add_shard(9, 'host=127.0.0.1 port=1 dbname=nowhere connect_timeout=2');
SELECT aedb_queue.queue_router_add_shard(0, 'host=127.0.0.1');
SELECT aedb_queue.queue_router_add_shard(NULL, 'host=127.0.0.1');
\set VERBOSITY default
SELECT count(*) AS shards FROM aedb_queue_shard.shard;
SELECT count(*) AS servers FROM pg_foreign_server WHERE srvname LIKE 'aedb_shard_%';
