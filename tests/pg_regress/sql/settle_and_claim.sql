-- The worker loop in one call per job: settle the task you hold and claim
-- the next, in one statement and one commit.
SELECT task_id AS t1 FROM aedb_queue.queue_enqueue('loop', '{"n": 1}') \gset
SELECT task_id AS t2 FROM aedb_queue.queue_enqueue('loop', '{"n": 2}') \gset
SELECT task_id AS t3 FROM aedb_queue.queue_enqueue('loop', '{"n": 3}', priority => 9) \gset

-- The first call of a worker is a plain claim (priority 9 first).
SELECT task_id = :t3 AS first, fencing_token AS tok3 FROM aedb_queue.queue_claim('loop', 'w1') \gset
SELECT :'first';

-- Complete it and take the next one: 'settled' says how the held task fared.
SELECT settled, task_id = :t1 AS next_is_t1, payload, attempts
FROM aedb_queue.queue_complete_and_claim('loop', 'w1', :t3, :tok3);
SELECT count(*) AS t3_left FROM aedb_queue.queue_get('loop', :t3);

-- A stale token settles nothing but the caller still gets work.
SELECT settled, task_id = :t2 AS next_is_t2
FROM aedb_queue.queue_complete_and_claim('loop', 'w1', :t1, 999);
SELECT state, owner_id FROM aedb_queue.queue_get('loop', :t1);

-- With strict => true a stale token aborts the whole statement, claim
-- included (SQLSTATE 40002); this statement is its own transaction, so the
-- next one sees nothing settled and nothing claimed.
SELECT aedb_queue.queue_enqueue('loop', '{"n": 4}') IS NOT NULL AS enqueued;
\set VERBOSITY sqlstate
SELECT * FROM aedb_queue.queue_complete_and_claim('loop', 'w1', :t1, 999, strict => true);
\set VERBOSITY default
SELECT state, count(*) FROM aedb_queue.queue_list('loop') GROUP BY state ORDER BY state;

-- Failing the held task schedules its retry and claims the next.
SELECT fencing_token AS tok1 FROM aedb_queue.queue_get('loop', :t1) \gset
SELECT settled, payload FROM aedb_queue.queue_fail_and_claim('loop', 'w1', :t1, :tok1, 'SMTP timeout');
SELECT state, last_error FROM aedb_queue.queue_get('loop', :t1);

-- Nothing left to claim: one row still reports the settle.
SELECT fencing_token AS tok2 FROM aedb_queue.queue_get('loop', :t2) \gset
SELECT settled, task_id FROM aedb_queue.queue_complete_and_claim('loop', 'w1', :t2, :tok2, max => 5);
