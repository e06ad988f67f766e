-- Enqueue, claim and complete write the task table as INSERT, UPDATE and
-- DELETE statements would, also where an operator changed the table: a
-- publication, its replica identity, a stored generated column. This file
-- runs with aedb_queue.direct_writes auto (the direct path) and off (the
-- statements) against this one expected output (scripts/test.sh).
\set VERBOSITY default
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'

-- A task held by a worker, and one ready, before the table is published.
SELECT count(*) AS enqueued FROM aedb_queue.queue_enqueue_batch('wp.jobs',
       ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]);
SELECT task_id AS held, fencing_token AS token
FROM aedb_queue.queue_claim('wp.jobs', 'worker-a', lease => '1 hour') \gset

-- (a) Published with REPLICA IDENTITY NOTHING: an update or a delete could
-- not be applied by a subscriber, so PostgreSQL refuses them: the claim (an
-- update) and the completion (a delete) fail with its error, 55000.
SET client_min_messages = error;  -- not the wal_level warning
CREATE PUBLICATION wp_all FOR TABLE aedb_queue.task;
RESET client_min_messages;
ALTER TABLE aedb_queue.task REPLICA IDENTITY NOTHING;
SELECT count(*) FROM aedb_queue.queue_claim('wp.jobs', 'worker-b');
:sqlstate
SELECT aedb_queue.queue_complete('wp.jobs', :held, :token);
:sqlstate
-- An insert needs no identity: enqueues go on.
SELECT count(*) AS enqueued FROM aedb_queue.queue_enqueue('wp.jobs', '{"n": 3}');
-- Nothing else changed: the held task is still held, the others ready.
SELECT payload->>'n' AS n, state, owner_id FROM aedb_queue.queue_list('wp.jobs') ORDER BY task_id;

-- A row filter on a column outside the replica identity (the primary key):
-- the claim and the completion fail as an UPDATE and a DELETE do, 42P10.
ALTER TABLE aedb_queue.task REPLICA IDENTITY DEFAULT;
DROP PUBLICATION wp_all;
SET client_min_messages = error;
CREATE PUBLICATION wp_filtered FOR TABLE aedb_queue.task WHERE (queue = 'x');
RESET client_min_messages;
SELECT count(*) FROM aedb_queue.queue_claim('wp.jobs', 'worker-b');
:sqlstate
SELECT aedb_queue.queue_complete('wp.jobs', :held, :token);
:sqlstate
SELECT payload->>'n' AS n, state, owner_id FROM aedb_queue.queue_list('wp.jobs') ORDER BY task_id;
DROP PUBLICATION wp_filtered;

-- (b) A stored generated column is computed by the enqueue and recomputed
-- by the claim (a new fencing token).
ALTER TABLE aedb_queue.task ADD COLUMN doubled bigint GENERATED ALWAYS AS (fencing_token * 2) STORED;
SELECT count(*) AS enqueued FROM aedb_queue.queue_enqueue('wp.generated', '{"n": 4}');
SELECT state, fencing_token, doubled FROM aedb_queue.task WHERE queue = 'wp.generated';
SELECT fencing_token AS claimed_token FROM aedb_queue.queue_claim('wp.generated', 'worker-c');
SELECT state, fencing_token, doubled FROM aedb_queue.task WHERE queue = 'wp.generated';

-- Back to the table as it was; the dropped column stays in the row as a
-- dropped attribute, and the calls go on working.
ALTER TABLE aedb_queue.task DROP COLUMN doubled;
SELECT aedb_queue.queue_complete('wp.jobs', :held, :token);
SELECT payload->>'n' AS n FROM aedb_queue.queue_claim('wp.jobs', 'worker-b', max => 10) ORDER BY task_id;
SELECT aedb_queue.queue_cancel('wp.generated', task_id) AS cancelled
FROM aedb_queue.task WHERE queue = 'wp.generated';
DELETE FROM aedb_queue.task WHERE queue = 'wp.jobs';
SELECT count(*) AS publications FROM pg_publication WHERE pubname LIKE 'wp\_%';
SELECT relreplident FROM pg_class WHERE oid = 'aedb_queue.task'::regclass;
