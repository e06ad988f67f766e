-- aedb_queue demo: a producer, a worker, a dead letter and inspection, in psql.
\pset footer off
\set QUIET on
-- Reset in place rather than dropped: pg_cron's scheduler stays connected to
-- this database, and once terminated (DROP DATABASE ... FORCE) it does not
-- come back until the server restarts.
SELECT 'CREATE DATABASE aedb_demo' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'aedb_demo') \gexec
\c aedb_demo
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_cron;
DROP EXTENSION IF EXISTS aedb_queue CASCADE;
DROP TABLE IF EXISTS orders, sent_emails;
RESET client_min_messages;
CREATE EXTENSION aedb_queue;
CREATE EXTENSION pg_cron;
CREATE TABLE orders (id serial PRIMARY KEY, email text NOT NULL);
CREATE TABLE sent_emails (order_id int PRIMARY KEY, sent_at timestamptz DEFAULT now());
\set QUIET off

\echo '--- Producer: the order and its email task commit together (outbox)'
BEGIN;
INSERT INTO orders (email) VALUES ('ada@example.com') RETURNING id AS order_id \gset
SELECT * FROM aedb_queue.queue_enqueue('emails', jsonb_build_object('order_id', :order_id, 'template', 'receipt'),
                                       idempotency_key => 'receipt-' || :order_id);
COMMIT;

\echo '--- A producer that rolls back leaves no task behind'
BEGIN;
INSERT INTO orders (email) VALUES ('ghost@example.com');
SELECT task_id FROM aedb_queue.queue_enqueue('emails', '{"template": "never sent"}');
ROLLBACK;

\echo '--- Retrying the same enqueue is deduplicated by its idempotency key'
SELECT * FROM aedb_queue.queue_enqueue('emails', jsonb_build_object('order_id', :order_id, 'template', 'receipt'),
                                       idempotency_key => 'receipt-' || :order_id);

\echo '--- More work: an urgent task, a timer due in an hour, a batch, a task that only gets one attempt'
SELECT task_id FROM aedb_queue.queue_enqueue('emails', '{"template": "password reset"}', priority => 10);
SELECT task_id FROM aedb_queue.queue_enqueue('emails', '{"template": "reminder"}', delay => '1 hour');
SELECT * FROM aedb_queue.queue_enqueue_batch('newsletter', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]);
SELECT task_id AS fragile_id FROM aedb_queue.queue_enqueue('emails', '{"template": "fragile"}', max_attempts => 1) \gset

\echo '--- Worker: claims the most urgent task first (priority, then FIFO)'
SELECT task_id, payload, attempts, fencing_token FROM aedb_queue.queue_claim('emails', 'worker-1', lease => '30 seconds');
SELECT task_id AS urgent_id, fencing_token AS urgent_token FROM aedb_queue.queue_list('emails', 'in_flight') \gset
\echo '... checkpoints its progress, then completes it and schedules a follow-up in the same transaction'
SELECT aedb_queue.queue_heartbeat('emails', :urgent_id, :urgent_token, extend => '1 minute', progress => '{"step": 2}');
SELECT aedb_queue.queue_complete('emails', :urgent_id, :urgent_token,
       follow_ups => '[{"queue": "audit", "payload": {"event": "reset sent"}, "delay": "5 minutes"}]');

\echo '--- Worker: the receipt, completed exactly once with the worker''s own write (strict)'
SELECT task_id AS receipt_id, fencing_token AS receipt_token, payload->>'order_id' AS receipt_order
  FROM aedb_queue.queue_claim('emails', 'worker-1') \gset
BEGIN;
INSERT INTO sent_emails (order_id) VALUES (:receipt_order);
SELECT aedb_queue.queue_complete('emails', :receipt_id, :receipt_token, strict => true);
COMMIT;
\echo '... a zombie presenting the same token again is fenced out'
SELECT aedb_queue.queue_complete('emails', :receipt_id, :receipt_token);

\echo '--- Worker: the fragile task fails; it has no attempts left, so it is dead-lettered'
SELECT task_id, fencing_token AS fragile_token FROM aedb_queue.queue_claim('emails', 'worker-2') \gset
SELECT aedb_queue.queue_fail('emails', :fragile_id, :fragile_token, 'SMTP 550: mailbox unavailable');

\echo '--- Worker: a newsletter task fails and is retried with backoff (1 s, 2 s, 4 s, ... up to 60 s)'
SELECT task_id AS news_id, fencing_token AS news_token FROM aedb_queue.queue_claim('newsletter', 'worker-3') \gset
SELECT aedb_queue.queue_fail('newsletter', :news_id, :news_token, 'timeout');

\echo '--- Inspection: the dashboard, one row per queue'
SELECT queue, scheduled, ready, in_flight, dead, next_due IS NOT NULL AS timer_pending, expired_leases, paused
  FROM aedb_queue.queue_stats ORDER BY queue;
\echo '--- Inspection: every task, made for reading (ages and times left vary from run to run)'
SELECT task_id, queue, state, attempts, owner, payload, last_error FROM aedb_queue.tasks ORDER BY task_id;
\echo '--- The dead letter, with its error'
SELECT task_id, state, attempts, max_attempts, last_error, payload FROM aedb_queue.queue_list('emails', 'dead');
\echo '--- The retrying newsletter task'
SELECT task_id, state, attempts, last_error, not_before - updated_at AS retry_after
  FROM aedb_queue.queue_get('newsletter', :news_id);
\echo '--- Due work is promoted and expired leases reclaimed by queue_reap'
SELECT * FROM aedb_queue.queue_reap();
\echo '... which, where aedb_queue cannot be preloaded, pg_cron runs every minute once scheduled'
SELECT aedb_queue.schedule_reaper('1 minute') AS reaper_job;
SELECT jobid, jobname, schedule, command, database, active FROM cron.job;
\echo '--- Periodic schedules: a nightly report at 02:30 Berlin time, and its next fire times'
SELECT name, cron, time_zone, upcoming[1:3] AS next_three
  FROM aedb_queue.queue_schedule_upsert('reports', 'nightly', '30 2 * * *',
         time_zone => 'Europe/Berlin', payload => '{"report": "sales"}', fire_time_key => 'fired_at');
\echo '... the daylight-saving days of 2026 in Berlin: 02:30 is missing on 29 March (fires right after the gap), twice on 25 October (fires once)'
SELECT * FROM aedb_queue.queue_cron_preview('30 2 * * *', 'Europe/Berlin', '2026-03-28 12:00+00', 2)
UNION ALL
SELECT * FROM aedb_queue.queue_cron_preview('30 2 * * *', 'Europe/Berlin', '2026-10-24 12:00+00', 2);
\echo '--- A schedule every 2 seconds, fired by the background-worker reaper (aedb_queue in shared_preload_libraries): no pg_cron, no worker polling'
SELECT name FROM aedb_queue.queue_schedule_upsert('reports', 'pulse', '*/2 * * * * *', fire_time_key => 'fired_at');
SELECT pg_sleep(4.5);
SELECT count(*) >= 2 AS pulses_fired, min(payload->>'fired_at') IS NOT NULL AS each_knows_its_fire_time
  FROM aedb_queue.queue_list('reports');
SELECT aedb_queue.queue_schedule_delete('reports', 'pulse');
SELECT backend_type, datname, application_name FROM pg_stat_activity
 WHERE backend_type LIKE 'aedb_queue%' ORDER BY backend_type, datname;
\echo '--- What the application recorded'
SELECT o.id, o.email, s.sent_at IS NOT NULL AS receipt_sent FROM orders o LEFT JOIN sent_emails s ON s.order_id = o.id;
