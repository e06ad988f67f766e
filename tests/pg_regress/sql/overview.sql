-- What dashboards and Prometheus read, cheaply at any table size.
-- (The regress cluster preloads the library, so the counters are on.)

-- A queue in every state.
SELECT task_id AS a FROM aedb_queue.queue_enqueue('shop.mail', '{"to": "a"}', max_attempts => 1, idempotency_key => 'mail-7') \gset
SELECT task_id AS b FROM aedb_queue.queue_enqueue('shop.mail', '{"to": "b"}') \gset
SELECT count(*) AS enqueued FROM (SELECT aedb_queue.queue_enqueue('shop.mail', '{}') FROM generate_series(1, 3)) e;
SELECT task_id AS later FROM aedb_queue.queue_enqueue('shop.mail', '{}', delay => '1 hour') \gset
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('shop.mail', 'w1') \gset
SELECT aedb_queue.queue_fail('shop.mail', :a, :tok, 'mailbox full');
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('shop.mail', 'w1') \gset
SELECT aedb_queue.queue_complete('shop.mail', :b, :tok);
SELECT count(*) AS claimed FROM aedb_queue.queue_claim('shop.mail', 'w2');

-- queue_overview: the figures of queue_stats, each read from at most
-- exact_limit index entries. Below the limit every figure is exact and
-- `estimated` is empty (ages vary, so they are shown as present or not).
SELECT queue, paused, waiting, scheduled, blocked, ready, in_flight, dead, completed_kept,
       estimated, oldest_ready_age IS NOT NULL AS has_ready, next_due IS NOT NULL AS has_timer,
       expired_leases
FROM aedb_queue.queue_overview() WHERE queue = 'shop.mail';

-- With a limit of 2, the ready range (2 tasks) is cut short: the figure
-- becomes the planner's estimate, never below the limit, and is named in
-- `estimated`; figures under the limit stay exact.
SELECT ready >= 2 AS at_least_the_limit, estimated, in_flight, dead
FROM aedb_queue.queue_overview(exact_limit => 2) WHERE queue = 'shop.mail';
SELECT * FROM aedb_queue.queue_overview(exact_limit => 0);
-- queue_name: one queue alone, for a page about it.
SELECT queue, ready FROM aedb_queue.queue_overview(queue_name => 'shop.mail');

-- queue_counters: events since the server started, per queue, counted
-- when the transaction that made them commits. Numbers below are the
-- change from a snapshot.
CREATE TEMP TABLE before AS SELECT * FROM aedb_queue.queue_counters() WHERE queue = 'shop.mail';
SELECT enqueued, completed, failed, dead_lettered, reclaimed, cancelled, since <= now() AS since_start
FROM before;

-- A rolled-back transaction counts nothing; nor does a rolled-back savepoint.
BEGIN;
SELECT count(*) FROM (SELECT aedb_queue.queue_enqueue('shop.mail', '{}') FROM generate_series(1, 5)) e;
ROLLBACK;
BEGIN;
SELECT task_id AS kept FROM aedb_queue.queue_enqueue('shop.mail', '{}') \gset
SAVEPOINT s;
SELECT count(*) FROM (SELECT aedb_queue.queue_enqueue('shop.mail', '{}') FROM generate_series(1, 5)) e;
ROLLBACK TO SAVEPOINT s;
SELECT aedb_queue.queue_cancel('shop.mail', :later);
COMMIT;
SELECT c.enqueued - b.enqueued AS enqueued, c.cancelled - b.cancelled AS cancelled,
       c.completed - b.completed AS completed
FROM aedb_queue.queue_counters() c JOIN before b USING (queue);

-- queue_find: a task by id (live or kept completed), or by idempotency key
-- in every queue the session may read (or in one).
SELECT task_id AS sms FROM aedb_queue.queue_enqueue('shop.sms', '{}', idempotency_key => 'mail-7') \gset
SELECT task_id IN (:a, :sms) AS found, queue, state FROM aedb_queue.queue_find(idempotency_key => 'mail-7') ORDER BY queue;
SELECT task_id = :sms AS found_sms FROM aedb_queue.queue_find(idempotency_key => 'mail-7', queue => 'shop.sms');
SELECT task_id = :a AS found_a, state, last_error FROM aedb_queue.queue_find(task_id => :a);
SELECT count(*) AS in_another_queue FROM aedb_queue.queue_find(task_id => :a, queue => 'shop.other');
SELECT * FROM aedb_queue.queue_find();
SELECT * FROM aedb_queue.queue_find(task_id => :a, idempotency_key => 'mail-7');

-- queue_errors: every error of a live task, oldest first (the last 20).
SELECT task_id AS flaky FROM aedb_queue.queue_enqueue('shop.mail', '{"to": "c"}', priority => 9, max_attempts => 3) \gset
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('shop.mail', 'w3') \gset
SELECT aedb_queue.queue_fail('shop.mail', :flaky, :tok, 'smtp timeout', retry_in => '0');
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('shop.mail', 'w3') \gset
SELECT aedb_queue.queue_fail('shop.mail', :flaky, :tok, 'smtp 451', retry_in => '0');
SELECT attempt, failed_at IS NOT NULL AS stamped, error FROM aedb_queue.queue_errors('shop.mail', :flaky);

-- queue_children: the tasks that wait for a task (queue_parents: the other way).
SELECT task_id AS report FROM aedb_queue.queue_enqueue('shop.mail', '{"report": true}', wait_for => ARRAY[:flaky]) \gset
SELECT task_id = :report AS the_report, state FROM aedb_queue.queue_children('shop.mail', :flaky);
-- The parent cancelled: the child is dead-lettered naming it, its one error.
SELECT aedb_queue.queue_cancel('shop.mail', :flaky);
SELECT attempt, error = 'parent task ' || :flaky || ' was cancelled' AS names_the_parent
FROM aedb_queue.queue_errors('shop.mail', :report);
SELECT count(*) AS children_left FROM aedb_queue.queue_children('shop.mail', :flaky);

-- queue_access: what this session may do on each queue it can read (the
-- superuser: everything). Dashboards offer only what this allows.
SELECT * FROM aedb_queue.queue_access() WHERE queue = 'shop.mail';

-- aedb_queue.track_counters = off stops counting (superuser only).
CREATE TEMP TABLE tracked AS SELECT * FROM aedb_queue.queue_counters() WHERE queue = 'shop.mail';
SET aedb_queue.track_counters = off;
SELECT count(*) FROM aedb_queue.queue_enqueue('shop.mail', '{}');
RESET aedb_queue.track_counters;
SELECT c.enqueued - t.enqueued AS enqueued_while_off
FROM aedb_queue.queue_counters() c JOIN tracked t USING (queue);
