-- Upgrade test, step 2 (scripts/upgrade_test.sh, database "upgraded",
-- psql -v from_version=... -v to_version=...): snapshot every row, run
-- ALTER EXTENSION aedb_queue UPDATE, and check that the version moved and
-- that no row changed. This backend uses the queue before and after the
-- update, as a long-lived worker connection would: the statements it
-- prepared against the old schema must keep working after the DDL.

-- A worker session: its enqueue, claim and complete statements get
-- prepared here, against the old schema.
SELECT aedb_queue.queue_enqueue('warm', '{"label": "warm-1"}');
SELECT aedb_queue.queue_enqueue('warm', '{"label": "warm-2"}');
SELECT aedb_queue.queue_enqueue('warm', '{"label": "warm-3"}');
SELECT upgrade_check.expect('warm claim before the update',
    (SELECT array_agg(payload->>'label') FROM aedb_queue.queue_claim('warm', 'worker-warm')), ARRAY['warm-1']);
SELECT upgrade_check.expect('warm complete before the update',
    aedb_queue.queue_complete('warm', upgrade_check.id_of('warm-1'), upgrade_check.token_of('warm-1')), 'applied');

-- The snapshot: the old version's columns, by name, so that columns a later
-- version adds do not count as changes (renaming or dropping one does).
\set task_columns 'task_id, queue, state::text AS state, not_before, priority, attempts, max_attempts, backoff_base, backoff_max, fencing_token, owner_id, lease_deadline, payload, progress, last_error, idempotency_key, created_at, updated_at'
\set key_columns 'queue, key, task_id, created_at'
\set queue_columns 'name, created_at'
CREATE TABLE upgrade_check.task_before AS SELECT :task_columns FROM aedb_queue.task;
CREATE TABLE upgrade_check.key_before AS SELECT :key_columns FROM aedb_queue.idempotency_key;
CREATE TABLE upgrade_check.queue_before AS SELECT :queue_columns FROM aedb_queue.queue;
CREATE TABLE upgrade_check.seq_before AS SELECT last_value, is_called FROM aedb_queue.task_id_seq;
SELECT upgrade_check.expect('tasks in the snapshot', (SELECT count(*) FROM upgrade_check.task_before), 16::bigint);

\echo ALTER EXTENSION aedb_queue UPDATE
ALTER EXTENSION aedb_queue UPDATE;

SELECT upgrade_check.expect('extversion after ALTER EXTENSION UPDATE',
    (SELECT extversion FROM pg_extension WHERE extname = 'aedb_queue'), :'to_version');

CREATE TABLE upgrade_check.task_after AS SELECT :task_columns FROM aedb_queue.task;
CREATE TABLE upgrade_check.key_after AS SELECT :key_columns FROM aedb_queue.idempotency_key;
CREATE TABLE upgrade_check.queue_after AS SELECT :queue_columns FROM aedb_queue.queue;
CREATE TABLE upgrade_check.seq_after AS SELECT last_value, is_called FROM aedb_queue.task_id_seq;
SELECT upgrade_check.same_rows('tasks', 'upgrade_check.task_before', 'upgrade_check.task_after');
SELECT upgrade_check.same_rows('idempotency keys', 'upgrade_check.key_before', 'upgrade_check.key_after');
SELECT upgrade_check.same_rows('queues', 'upgrade_check.queue_before', 'upgrade_check.queue_after');
SELECT upgrade_check.same_rows('the task id sequence', 'upgrade_check.seq_before', 'upgrade_check.seq_after');

-- The same worker session after the update.
SELECT upgrade_check.expect('warm claim after the update, same session',
    (SELECT array_agg(payload->>'label') FROM aedb_queue.queue_claim('warm', 'worker-warm')), ARRAY['warm-2']);
SELECT upgrade_check.expect('warm complete after the update, same session',
    aedb_queue.queue_complete('warm', upgrade_check.id_of('warm-2'), upgrade_check.token_of('warm-2')), 'applied');
SELECT upgrade_check.expect('warm enqueue after the update, same session',
    (SELECT deduplicated FROM aedb_queue.queue_enqueue('warm', '{"label": "warm-4"}')), false);
