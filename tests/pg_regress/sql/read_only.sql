-- A read-only transaction cannot enqueue: every enqueue path refuses it
-- with SQLSTATE 25006 (read_only_sql_transaction), as an INSERT is refused, and leaves nothing behind.
-- Run as an application's login role.
CREATE ROLE ro_app LOGIN;
GRANT aedb_queue_producer, aedb_queue_worker TO ro_app;
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
-- A worker's writes are refused the same way (by Postgres, in our statements).
SELECT task_id FROM aedb_queue.queue_claim('ro', 'w');
RESET default_transaction_read_only;
SELECT task_id AS t, fencing_token AS k FROM aedb_queue.queue_claim('ro', 'w') \gset
SET default_transaction_read_only = on;
SELECT aedb_queue.queue_complete('ro', :t, :k);
SELECT * FROM aedb_queue.queue_complete_and_claim('ro', 'w', :t, :k);
RESET default_transaction_read_only;
\set VERBOSITY default

-- Only the one enqueue outside them is there, still held by its claim.
RESET SESSION AUTHORIZATION;
SELECT payload, state, owner_id FROM aedb_queue.queue_list('ro');
SELECT count(*) AS keys FROM aedb_queue.idempotency_key WHERE queue = 'ro';
DROP ROLE ro_app;
