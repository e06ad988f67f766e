-- A read-only transaction cannot enqueue: every enqueue path refuses it
-- with SQLSTATE 25006 (read_only_sql_transaction), as an INSERT is refused, and leaves nothing behind.
-- Run as an application's login role.
CREATE ROLE ro_app LOGIN;
GRANT aedb_queue_producer TO ro_app;
SET SESSION AUTHORIZATION ro_app;
\set VERBOSITY terse

-- A queue's first enqueue registers it (a statement) ...
BEGIN READ ONLY;
SELECT aedb_queue.queue_enqueue('ro', '{"n": 1}');
ROLLBACK;

-- ... later ones write their row without one: refused all the same.
SELECT (aedb_queue.queue_enqueue('ro', '{"n": 0}')).task_id IS NOT NULL AS enqueued;
BEGIN READ ONLY;
SELECT aedb_queue.queue_enqueue('ro', '{"n": 1}');
ROLLBACK;
BEGIN READ ONLY;
SELECT aedb_queue.queue_enqueue('ro', '{"n": 1}', delay => '1 hour');
ROLLBACK;
BEGIN READ ONLY;
SELECT aedb_queue.queue_enqueue('ro', '{"n": 1}', idempotency_key => 'k');
ROLLBACK;
BEGIN READ ONLY;
SELECT aedb_queue.queue_enqueue_batch('ro', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]);
ROLLBACK;
SET default_transaction_read_only = on;
SELECT aedb_queue.queue_enqueue('ro', '{"n": 1}');
RESET default_transaction_read_only;
\set VERBOSITY default

-- Only the one enqueue outside them is there.
RESET SESSION AUTHORIZATION;
SELECT payload, state FROM aedb_queue.queue_list('ro');
SELECT count(*) AS keys FROM aedb_queue.idempotency_key WHERE queue = 'ro';
DROP ROLE ro_app;
