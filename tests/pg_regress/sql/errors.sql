-- Bad input gets a clear error naming the argument, with a specific SQLSTATE
-- (22004 for NULL, 22023 for a bad value, 54000 for an oversized payload).
\set VERBOSITY default
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
SELECT * FROM aedb_queue.queue_enqueue('', '{}');
:sqlstate
SELECT * FROM aedb_queue.queue_enqueue(NULL, '{}');
:sqlstate
SELECT * FROM aedb_queue.queue_enqueue(repeat('q', 129), '{}');
:sqlstate
SELECT * FROM aedb_queue.queue_enqueue('q', '{}', delay => '-1 second');
:sqlstate
SELECT * FROM aedb_queue.queue_enqueue('q', '{}', max_attempts => 0);
:sqlstate
SELECT * FROM aedb_queue.queue_enqueue('q', '{}', backoff_base => '1 minute', backoff_max => '1 second');
:sqlstate
SELECT * FROM aedb_queue.queue_claim('q', '');
:sqlstate
SELECT * FROM aedb_queue.queue_claim('q', 'w', lease => '0');
:sqlstate
SELECT * FROM aedb_queue.queue_claim('q', 'w', max => 0);
:sqlstate
SELECT aedb_queue.queue_heartbeat('q', 1, 1, extend => '-5 seconds');
:sqlstate
SELECT aedb_queue.queue_fail('q', 1, 1, 'e', retry_in => '-1 second');
:sqlstate
SELECT aedb_queue.queue_complete('q', 1, NULL);
:sqlstate
SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '{"queue": "x"}');
:sqlstate
SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{"payload": {}}]');
:sqlstate
SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{"queue": "x", "colour": "red"}]');
:sqlstate
SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{"queue": "x", "delay": "soon"}]');
:sqlstate
SELECT * FROM aedb_queue.queue_list('q', state => 'done');
:sqlstate
-- A batch settle names the element of an array that is NULL.
SELECT * FROM aedb_queue.queue_complete_batch('q', '{1,NULL,3}', '{1,1,1}');
:sqlstate
SELECT * FROM aedb_queue.queue_complete_batch('q', '{1}', ARRAY[NULL]::bigint[]);
:sqlstate
SELECT * FROM aedb_queue.queue_complete_batch('q', NULL, '{1}');
:sqlstate

-- Payloads over aedb_queue.max_payload_bytes (default 1 MB) are refused.
SET aedb_queue.max_payload_bytes = 64;
SELECT * FROM aedb_queue.queue_enqueue('q', jsonb_build_object('blob', repeat('x', 100)));
:sqlstate
RESET aedb_queue.max_payload_bytes;

-- strict => true turns a fenced-out completion into SQLSTATE 40002, aborting the transaction.
SELECT aedb_queue.queue_complete('q', 424242, 1, strict => true);
:sqlstate

-- None of the rejected calls left anything behind.
SELECT count(*) FROM aedb_queue.tasks WHERE queue IN ('q', 'x');
