-- Upgrade test, step 3 (scripts/upgrade_test.sh, database "upgraded"), in a
-- new session after ALTER EXTENSION UPDATE: the tasks made by the old
-- version still work. Ids and tokens are compared with the snapshot taken
-- before the update (upgrade_check.task_before).

CREATE FUNCTION pg_temp.before(label text) RETURNS upgrade_check.task_before
LANGUAGE sql AS $$ SELECT * FROM upgrade_check.task_before WHERE payload->>'label' = label $$;

-- Inspection of what the old version stored.
SELECT upgrade_check.expect('queue_list ready, in service order',
    (SELECT array_agg(payload->>'label') FROM aedb_queue.queue_list('main', 'ready')),
    ARRAY['ready-high', 'batch-1', 'batch-2', 'ready-first', 'ready-second', 'ready-low']);
SELECT upgrade_check.expect('queue_list scheduled',
    (SELECT array_agg(payload->>'label') FROM aedb_queue.queue_list('main', 'scheduled')), ARRAY['timer']);
SELECT upgrade_check.expect('queue_list dead, oldest first',
    (SELECT array_agg(payload->>'label' || ': ' || last_error) FROM aedb_queue.queue_list('dlq', 'dead')),
    ARRAY['dead: permanent error', 'dead-lettered: poison message']);
SELECT upgrade_check.expect('queue_get in flight',
    (SELECT (state::text, attempts, fencing_token, owner_id, progress)
     FROM aedb_queue.queue_get('lease', (pg_temp.before('in-flight-progress')).task_id)),
    ('in_flight'::text, 1, 1::bigint, 'worker-before'::text, '{"step": 1}'::jsonb));

-- The in-flight tasks: their holder settles them with the tokens it got
-- from the old version; a stale token is fenced out.
SELECT upgrade_check.expect('heartbeat with the old token',
    aedb_queue.queue_heartbeat('lease', (pg_temp.before('in-flight-progress')).task_id,
                               (pg_temp.before('in-flight-progress')).fencing_token,
                               extend => '1 hour', progress => '{"step": 4}'),
    'applied');
SELECT upgrade_check.expect('complete with the old token',
    aedb_queue.queue_complete('lease', (pg_temp.before('in-flight-progress')).task_id,
                              (pg_temp.before('in-flight-progress')).fencing_token, strict => true),
    'applied');
SELECT upgrade_check.expect('complete again',
    aedb_queue.queue_complete('lease', (pg_temp.before('in-flight-progress')).task_id,
                              (pg_temp.before('in-flight-progress')).fencing_token),
    'lease_lost');
SELECT upgrade_check.expect('stale token',
    aedb_queue.queue_fail('lease', (pg_temp.before('in-flight')).task_id,
                          (pg_temp.before('in-flight')).fencing_token - 1, 'zombie'),
    'lease_lost');
SELECT upgrade_check.expect('fail with the old token',
    aedb_queue.queue_fail('lease', (pg_temp.before('in-flight')).task_id,
                          (pg_temp.before('in-flight')).fencing_token, 'after the update', retry_in => '0'),
    'applied');
SELECT upgrade_check.expect('reclaim after the fail',
    (SELECT (payload->>'label', attempts, fencing_token)
     FROM aedb_queue.queue_claim('lease', 'worker-after', lease => '1 hour')),
    ('in-flight'::text, 2, (pg_temp.before('in-flight')).fencing_token + 1));

-- The ready tasks are claimed in service order, each attempt and token one up.
CREATE TEMP TABLE claimed AS
SELECT * FROM aedb_queue.queue_claim('main', 'worker-after', lease => '1 hour', max => 100) WITH ORDINALITY AS c(
    task_id, payload, attempts, fencing_token, lease_deadline, priority, enqueued_at, progress, n);
SELECT upgrade_check.expect('claim the ready tasks, in service order',
    (SELECT array_agg(payload->>'label' ORDER BY n) FROM claimed),
    ARRAY['ready-high', 'batch-1', 'batch-2', 'ready-first', 'ready-second', 'ready-low']);
SELECT upgrade_check.expect('claimed tasks: same ids, attempts and tokens one up',
    (SELECT count(*) FROM claimed c JOIN upgrade_check.task_before b USING (task_id)
     WHERE c.attempts = b.attempts + 1 AND c.fencing_token = b.fencing_token + 1
       AND c.priority = b.priority AND c.payload = b.payload AND c.enqueued_at = b.created_at),
    6::bigint);
SELECT upgrade_check.expect('settle one of them',
    (SELECT aedb_queue.queue_complete('main', task_id, fencing_token) FROM claimed WHERE payload->>'label' = 'ready-high'),
    'applied');

SELECT upgrade_check.expect('settle another and claim in one call (nothing left to claim)',
    (SELECT (r.settled::text, r.task_id)
     FROM claimed c, aedb_queue.queue_complete_and_claim('main', 'worker-after', c.task_id, c.fencing_token) r
     WHERE c.payload->>'label' = 'batch-1'),
    ('applied'::text, NULL::bigint));

-- A task that failed with a checkpoint is claimed with it.
SELECT upgrade_check.expect('claim returns the checkpoint',
    (SELECT (task_id, attempts, progress) FROM aedb_queue.queue_claim('resume', 'worker-after')),
    ((pg_temp.before('resume')).task_id, 2, '{"step": 3}'::jsonb));

-- Idempotency keys recorded by the old version still dedup: for live tasks,
-- for a completed task, for a follow-up; a new key makes a new task.
SELECT upgrade_check.expect('dedup a ready task',
    (SELECT (task_id, deduplicated) FROM aedb_queue.queue_enqueue('main', '{"label": "again"}', idempotency_key => 'k-ready-first')),
    ((pg_temp.before('ready-first')).task_id, true));
SELECT upgrade_check.expect('dedup a timer',
    (SELECT (task_id, deduplicated) FROM aedb_queue.queue_enqueue('main', '{"label": "again"}', idempotency_key => 'k-timer')),
    ((pg_temp.before('timer')).task_id, true));
SELECT upgrade_check.expect('dedup a dead task',
    (SELECT (task_id, deduplicated) FROM aedb_queue.queue_enqueue('dlq', '{"label": "again"}', idempotency_key => 'k-dead')),
    ((pg_temp.before('dead')).task_id, true));
SELECT upgrade_check.expect('dedup a completed task',
    (SELECT (task_id, deduplicated) FROM aedb_queue.queue_enqueue('done', '{"label": "again"}', idempotency_key => 'k-done')),
    ((SELECT task_id FROM upgrade_check.key_before WHERE queue = 'done' AND key = 'k-done'), true));
SELECT upgrade_check.expect('dedup a follow-up',
    (SELECT (task_id, deduplicated) FROM aedb_queue.queue_enqueue('followup', '{"label": "again"}', idempotency_key => 'k-follow-up')),
    ((pg_temp.before('follow-up')).task_id, true));
SELECT upgrade_check.expect('a new key makes a new task after the old ones',
    (SELECT (task_id > (SELECT max(task_id) FROM upgrade_check.task_before), deduplicated)
     FROM aedb_queue.queue_enqueue('main', '{"label": "new"}', idempotency_key => 'k-new')),
    (true, false));

-- Timers and backoffs keep their due times; the reaper has nothing to do yet.
SELECT upgrade_check.expect('reap',
    (SELECT (promoted, reclaimed, dead_lettered) FROM aedb_queue.queue_reap()), (0::bigint, 0::bigint, 0::bigint));
SELECT upgrade_check.expect('scheduled tasks keep their due times',
    (SELECT count(*) FROM aedb_queue.task t JOIN upgrade_check.task_before b USING (task_id)
     WHERE b.state = 'scheduled' AND t.state = 'scheduled' AND t.not_before = b.not_before),
    (SELECT count(*) FROM upgrade_check.task_before WHERE state = 'scheduled'));

-- New in 0.5.0, on the updated schema: a schedule fires once per fire time
-- (a yearly one, moved back two years instead of waiting), and queue_reap
-- says so.
SELECT upgrade_check.expect('a schedule on the updated schema',
    (SELECT (s.name, s.missed) FROM aedb_queue.queue_schedule_upsert('upgraded.sched', 'yearly', '0 0 1 1 *',
         missed => 'catch_up', catch_up_limit => 5, fire_time_key => 'at') s),
    ('yearly'::text, 'catch_up'::text));
UPDATE aedb_queue.schedule
SET fired_up_to = date_trunc('year', now(), 'UTC') - interval '2 years' + interval '1 second',
    next_fire_at = date_trunc('year', now(), 'UTC') - interval '1 year'
WHERE queue = 'upgraded.sched';
SELECT upgrade_check.expect('its missed fire times fire once each',
    (SELECT fired FROM aedb_queue.queue_reap('upgraded.sched')), 2::bigint);
SELECT upgrade_check.expect('and not again',
    (SELECT fired FROM aedb_queue.queue_reap('upgraded.sched')), 0::bigint);
