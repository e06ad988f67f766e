-- A backend keeps the oids of our types and enum labels (an outcome per
-- settled task, a state per new task). Dropping and creating the extension
-- again in the same session gives them new oids: the next calls must see
-- the new ones (with stale ones they would fail or return wrong labels).
CREATE DATABASE aedb_reinstall;
\c aedb_reinstall
CREATE EXTENSION aedb_queue;
SELECT task_id AS t1 FROM aedb_queue.queue_enqueue('re', '{"n": 1}') \gset
SELECT fencing_token AS k1 FROM aedb_queue.queue_claim('re', 'w') \gset
SELECT aedb_queue.queue_complete('re', :t1, :k1);
SELECT aedb_queue.queue_complete('re', :t1, :k1);

DROP EXTENSION aedb_queue;
-- DROP EXTENSION leaves the empty schema aedb_queue (PostgreSQL never
-- counts the control file's schema as a member); CREATE adopts it.
CREATE EXTENSION aedb_queue;
SELECT task_id AS t2 FROM aedb_queue.queue_enqueue('re', '{"n": 2}') \gset
SELECT task_id AS t3 FROM aedb_queue.queue_enqueue('re', '{"n": 3}', delay => '1 hour') \gset
SELECT state FROM aedb_queue.queue_get('re', :t3);
SELECT fencing_token AS k2, payload FROM aedb_queue.queue_claim('re', 'w') \gset
SELECT :'payload';
SELECT * FROM aedb_queue.queue_complete_batch('re', ARRAY[:t2, :t2], ARRAY[:k2, :k2]);
SELECT aedb_queue.queue_complete('re', :t2, :k2);
\c aedb_queue_regress
DROP DATABASE aedb_reinstall;
