-- The router decides nothing: each call runs on its shard as the role that
-- called, and the shard's grants and confinement decide. Grants made
-- through the router apply on every shard.
SELECT count(*) FILTER (WHERE result) AS shards FROM aedb_queue.queue_grant('a_*', 'tenant_a', 'producer');
SELECT count(*) FILTER (WHERE result) AS shards FROM aedb_queue.queue_grant('a_*', 'tenant_a', 'worker');
SELECT count(*) FILTER (WHERE result) AS shards FROM aedb_queue.queue_grant('b_*', 'tenant_b', 'producer');
SELECT count(*) FILTER (WHERE result) AS shards FROM aedb_queue.queue_grant('b_*', 'tenant_b', 'worker');
SELECT task_id AS b_task FROM aedb_queue.queue_enqueue('b_mail', '{"secret": "of b"}') \gset

-- Tenant a, logged in as itself, works its own queues through the router.
\c - tenant_a
SELECT count(*) AS enqueued FROM generate_series(1, 3) n, aedb_queue.queue_enqueue('a_mail', jsonb_build_object('n', n));
SELECT count(*) AS claimed FROM aedb_queue.queue_claim('a_mail', 'a-worker', max => 10);
SELECT queue, produce, work, administer FROM aedb_queue.queue_access() ORDER BY queue;

-- What a hostile tenant tries through the router is refused by the shards,
-- as it is on one node: another tenant's queue...
\set VERBOSITY terse
SELECT * FROM aedb_queue.queue_enqueue('b_mail', '{"spam": true}');
SELECT * FROM aedb_queue.queue_claim('b_mail', 'a-worker');
SELECT * FROM aedb_queue.queue_list('b_mail');
SELECT * FROM aedb_queue.queue_pause('b_mail');
-- ... a task of b's named under a's queue: no such task there...
SELECT aedb_queue.queue_complete('a_mail', :b_task, 1) AS completed;
-- ... the shard functions behind the router, called directly...
SET client_min_messages = warning; -- PL/Proxy's NOTICE when it drops an idle connection
SELECT * FROM aedb_queue_shard.queue_claim(1, 'b_mail', 'a-worker', NULL, 1);
RESET client_min_messages;
-- ... another role taken with SET ROLE (the shards would see only that
-- role, not the confined login behind it)...
SET ROLE app_shared;
SELECT * FROM aedb_queue.queue_claim('b_mail', 'a-worker');
RESET ROLE;
-- ... and the router's own set-up.
SELECT aedb_queue.queue_router_add_shard(4, 'host=127.0.0.1 port=5432 dbname=postgres');
INSERT INTO aedb_queue_shard.shard VALUES (4);
CREATE FUNCTION pg_temp.steal() RETURNS SETOF text AS $$ CONNECT 'host=127.0.0.1 user=postgres'; SELECT 'x'; $$ LANGUAGE plproxy;
\set VERBOSITY default

-- Nothing of b's changed: its task is still there, ready and unclaimed.
\c - postgres
SELECT payload, state, attempts FROM aedb_queue.queue_list('b_mail');
SELECT queue, paused FROM aedb_queue.queue_overview() WHERE queue LIKE '_\_mail' ORDER BY queue;

-- Revoke, confine and unconfine through the router apply on every shard
-- too: tenant a loses the right to work its queues everywhere...
SELECT shard, result FROM aedb_queue.queue_revoke('a_*', 'tenant_a', 'worker');
SELECT shard, result FROM aedb_queue.queue_confine('app_shared');
SELECT shard, result FROM aedb_queue.queue_confine('app_shared');
SELECT shard, result FROM aedb_queue.queue_unconfine('app_shared');
\c - tenant_a
\set VERBOSITY terse
SELECT * FROM aedb_queue.queue_claim('a_mail', 'a-worker');
\set VERBOSITY default
-- ... and keeps its producer grant.
SELECT count(*) AS enqueued FROM aedb_queue.queue_enqueue('a_mail', '{"after": "revoke"}');
