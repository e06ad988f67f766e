-- Periodic schedules: a cron pattern read in a time zone makes one task in
-- its queue for each fire time, fired by queue_reap() (the background
-- worker, pg_cron, or a direct call).
SET TimeZone = 'UTC';

-- What a pattern will do, daylight-saving days included. 02:30 does not
-- exist in Berlin on 29 March 2026: the job fires right after the gap, at
-- 03:00 CEST (01:00 UTC). It happens twice on 25 October: the job fires
-- once, at the first (00:30 UTC).
SELECT * FROM aedb_queue.queue_cron_preview('30 2 * * *', 'Europe/Berlin', '2026-03-28 12:00+00', 3);
SELECT * FROM aedb_queue.queue_cron_preview('30 2 * * *', 'Europe/Berlin', '2026-10-24 12:00+00', 3);
-- Six fields: seconds first.
SELECT * FROM aedb_queue.queue_cron_preview('*/20 * * * * *', after => '2026-01-01 00:00+00', count => 3);

-- Every New Year's midnight (a yearly pattern keeps this file's output
-- the same whenever it runs); each task carries its fire time under
-- "fired_at".
SELECT queue, name, cron, time_zone, payload, missed, paused,
       next_fire_at = date_trunc('year', now()) + interval '1 year' AS next_new_year,
       extract(year FROM upcoming[2]) - extract(year FROM upcoming[1]) AS years_apart
FROM aedb_queue.queue_schedule_upsert('sched.reports', 'yearly', '0 0 1 1 *',
         payload => '{"report": "sales"}', fire_time_key => 'fired_at');

-- Nothing is due yet.
SELECT fired FROM aedb_queue.queue_reap('sched.reports');

-- (Test shortcut: move the schedule back five years instead of waiting.)
CREATE FUNCTION pg_temp.five_years_ago() RETURNS void LANGUAGE sql AS $$
    UPDATE aedb_queue.schedule
    SET fired_up_to = date_trunc('year', now()) - interval '5 years' + interval '1 minute',
        next_fire_at = date_trunc('year', now()) - interval '4 years'
    WHERE queue = 'sched.reports' AND name = 'yearly'
$$;
SELECT pg_temp.five_years_ago();

-- The policy skip (the default): of the five fire times missed, only the
-- latest makes a task, and it is not owed again.
SELECT fired FROM aedb_queue.queue_reap('sched.reports');
SELECT payload->>'report' AS report,
       extract(year FROM (payload->>'fired_at')::timestamptz) - extract(year FROM now()) AS fired_in
FROM aedb_queue.queue_list('sched.reports');
SELECT fired FROM aedb_queue.queue_reap('sched.reports');

-- catch_up: the latest catch_up_limit of them each make a task, oldest first.
SELECT missed, catch_up_limit
FROM aedb_queue.queue_schedule_upsert('sched.reports', 'yearly', '0 0 1 1 *',
         payload => '{"report": "sales"}', fire_time_key => 'fired_at',
         missed => 'catch_up', catch_up_limit => 3);
SELECT pg_temp.five_years_ago();
SELECT fired FROM aedb_queue.queue_reap('sched.reports');
SELECT extract(year FROM (payload->>'fired_at')::timestamptz) - extract(year FROM now()) AS fired_in
FROM aedb_queue.queue_list('sched.reports') ORDER BY task_id;

-- Paused, nothing fires; resumed, the fire times of the pause are not owed.
SELECT aedb_queue.queue_schedule_pause('sched.reports', 'yearly');
SELECT pg_temp.five_years_ago();
SELECT fired FROM aedb_queue.queue_reap('sched.reports');
SELECT aedb_queue.queue_schedule_resume('sched.reports', 'yearly');
SELECT fired FROM aedb_queue.queue_reap('sched.reports');
SELECT paused, next_fire_at = date_trunc('year', now()) + interval '1 year' AS next_new_year
FROM aedb_queue.queue_schedule_list('sched.reports');

-- A new pattern owes nothing from before it.
SELECT fired_up_to > now() - interval '1 minute' AS from_now, cron
FROM aedb_queue.queue_schedule_upsert('sched.reports', 'yearly', '0 12 1 1 *',
         payload => '{"report": "sales"}', fire_time_key => 'fired_at');

-- A fire that cannot enqueue (the queue's payload limit fell below the
-- payload) gives that fire time up, says why in last_error, and stops no
-- other schedule.
SELECT max_payload_bytes FROM aedb_queue.queue_configure('sched.reports', max_payload_bytes => 8);
SELECT pg_temp.five_years_ago();
SELECT fired FROM aedb_queue.queue_reap('sched.reports');
SELECT last_error, next_fire_at > now() AS moved_on FROM aedb_queue.queue_schedule_list('sched.reports');
SELECT max_payload_bytes FROM aedb_queue.queue_configure('sched.reports', reset => true);

-- Bad arguments are refused, naming the argument; nothing is stored.
\set VERBOSITY sqlstate
SELECT aedb_queue.queue_schedule_upsert('sched.reports', 'bad', '61 * * * *');
SELECT aedb_queue.queue_schedule_upsert('sched.reports', 'bad', '* * * * *', time_zone => 'Mars/Olympus');
SELECT aedb_queue.queue_schedule_upsert('sched.reports', 'bad', '0 0 30 2 *');
SELECT aedb_queue.queue_schedule_upsert('sched.reports', 'bad', '* * * * *', missed => 'catch_up');
SELECT aedb_queue.queue_schedule_upsert('sched.reports', 'bad', '* * * * *', payload => '[1]', fire_time_key => 'at');
SELECT aedb_queue.queue_schedule_upsert('sched.reports', NULL, '* * * * *');
SELECT aedb_queue.queue_cron_preview('* * * * *', count => 0);
\set VERBOSITY default
SELECT aedb_queue.queue_schedule_upsert('sched.reports', 'bad', '61 * * * *');
SELECT aedb_queue.queue_schedule_upsert('sched.reports', 'bad', '* * * * *', time_zone => 'Mars/Olympus');
SELECT count(*) FROM aedb_queue.queue_schedule_list() WHERE name = 'bad';

-- Deleting a schedule keeps the tasks it made.
SELECT aedb_queue.queue_schedule_delete('sched.reports', 'yearly'), aedb_queue.queue_schedule_delete('sched.reports', 'yearly');
SELECT count(*) FROM aedb_queue.queue_list('sched.reports');
SELECT aedb_queue.queue_purge('sched.reports', 'ready');
