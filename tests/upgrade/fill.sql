-- Upgrade test, step 1 (scripts/upgrade_test.sh, database "upgraded",
-- psql -v from_version=...): install the old version from its frozen script
-- and fill queues with tasks in every state through that version's own SQL
-- functions. Those old SQL definitions call into the NEW shared library,
-- which is what happens to a real user between installing the new package
-- and running ALTER EXTENSION aedb_queue UPDATE.
--
-- Only the old version's SQL surface may be used here. Every task's payload
-- carries {"label": ...}; later steps find tasks by label.

CREATE EXTENSION aedb_queue VERSION :'from_version';
SELECT upgrade_check.expect('installed version',
    (SELECT extversion FROM pg_extension WHERE extname = 'aedb_queue'), :'from_version');

-- 'main': ready tasks at three priorities, FIFO within a priority, with and
-- without idempotency keys; a batch; a timer; a cancelled task.
SELECT aedb_queue.queue_enqueue('main', '{"label": "ready-low"}', priority => -5);
SELECT aedb_queue.queue_enqueue('main', '{"label": "ready-first", "body": [1, 2, 3]}', idempotency_key => 'k-ready-first');
SELECT aedb_queue.queue_enqueue('main', '{"label": "ready-second"}', max_attempts => 7,
                                backoff_base => '2 seconds', backoff_max => '10 minutes');
SELECT aedb_queue.queue_enqueue('main', '{"label": "ready-high"}', priority => 10, idempotency_key => 'k-ready-high');
SELECT aedb_queue.queue_enqueue_batch('main', ARRAY['{"label": "batch-1"}', '{"label": "batch-2"}']::jsonb[], priority => 1);
SELECT aedb_queue.queue_enqueue('main', '{"label": "timer"}', delay => '1 day', priority => 7, idempotency_key => 'k-timer');
SELECT aedb_queue.queue_enqueue('main', '{"label": "cancelled"}', idempotency_key => 'k-cancelled');
SELECT upgrade_check.expect('cancel', aedb_queue.queue_cancel('main', upgrade_check.id_of('cancelled')), true);
SELECT upgrade_check.expect('dedup before the update',
    (SELECT deduplicated FROM aedb_queue.queue_enqueue('main', '{"label": "never"}', idempotency_key => 'k-ready-first')), true);

-- 'lease': two tasks in flight for an hour; one has checkpointed progress.
SELECT aedb_queue.queue_enqueue('lease', '{"label": "in-flight-progress"}', priority => 1, idempotency_key => 'k-in-flight');
SELECT aedb_queue.queue_enqueue('lease', '{"label": "in-flight"}');
SELECT upgrade_check.expect('claim lease',
    (SELECT count(*) FROM aedb_queue.queue_claim('lease', 'worker-before', lease => '1 hour', max => 2)), 2::bigint);
SELECT upgrade_check.expect('heartbeat in-flight-progress',
    aedb_queue.queue_heartbeat('lease', upgrade_check.id_of('in-flight-progress'),
                               upgrade_check.token_of('in-flight-progress'),
                               extend => '2 hours', progress => '{"step": 1}'),
    'applied');

-- 'dlq': dead letters, by running out of attempts and by dead_letter.
SELECT aedb_queue.queue_enqueue('dlq', '{"label": "dead"}', max_attempts => 1, idempotency_key => 'k-dead');
SELECT aedb_queue.queue_enqueue('dlq', '{"label": "dead-lettered"}');
SELECT upgrade_check.expect('claim dlq',
    (SELECT count(*) FROM aedb_queue.queue_claim('dlq', 'worker-before', max => 2)), 2::bigint);
SELECT upgrade_check.expect('fail dead',
    aedb_queue.queue_fail('dlq', upgrade_check.id_of('dead'), upgrade_check.token_of('dead'), 'permanent error'),
    'applied');
SELECT upgrade_check.expect('dead-letter',
    aedb_queue.queue_fail('dlq', upgrade_check.id_of('dead-lettered'), upgrade_check.token_of('dead-lettered'),
                          'poison message', dead_letter => true),
    'applied');

-- 'retry': scheduled again by a failure with backoff, progress kept.
SELECT aedb_queue.queue_enqueue('retry', '{"label": "backoff"}', max_attempts => 3,
                                backoff_base => '1 hour', backoff_max => '4 hours');
SELECT upgrade_check.expect('claim retry',
    (SELECT count(*) FROM aedb_queue.queue_claim('retry', 'worker-before')), 1::bigint);
SELECT upgrade_check.expect('heartbeat backoff',
    aedb_queue.queue_heartbeat('retry', upgrade_check.id_of('backoff'), upgrade_check.token_of('backoff'),
                               extend => '1 minute', progress => '{"step": 2}'),
    'applied');
SELECT upgrade_check.expect('fail backoff',
    aedb_queue.queue_fail('retry', upgrade_check.id_of('backoff'), upgrade_check.token_of('backoff'), 'transient error'),
    'applied');

-- 'resume': ready again at once after a failure, with its checkpoint.
SELECT aedb_queue.queue_enqueue('resume', '{"label": "resume"}');
SELECT upgrade_check.expect('claim resume',
    (SELECT count(*) FROM aedb_queue.queue_claim('resume', 'worker-before')), 1::bigint);
SELECT upgrade_check.expect('heartbeat resume',
    aedb_queue.queue_heartbeat('resume', upgrade_check.id_of('resume'), upgrade_check.token_of('resume'),
                               extend => '1 minute', progress => '{"step": 3}'),
    'applied');
SELECT upgrade_check.expect('fail resume',
    aedb_queue.queue_fail('resume', upgrade_check.id_of('resume'), upgrade_check.token_of('resume'),
                          'worker restarted', retry_in => '0'),
    'applied');

-- 'done': completed (its key outlives it), enqueuing a timer follow-up.
SELECT aedb_queue.queue_enqueue('done', '{"label": "done"}', idempotency_key => 'k-done');
SELECT upgrade_check.expect('claim done',
    (SELECT count(*) FROM aedb_queue.queue_claim('done', 'worker-before')), 1::bigint);
SELECT upgrade_check.expect('complete done',
    aedb_queue.queue_complete('done', upgrade_check.id_of('done'), upgrade_check.token_of('done'),
                              result => '{"ok": true}',
                              follow_ups => '[{"queue": "followup", "payload": {"label": "follow-up"},
                                               "delay": "1 hour", "priority": 2, "idempotency_key": "k-follow-up"}]'),
    'applied');

-- 'batched': a batch settle on the old schema (the new library falls back to
-- the statement older schemas can run), one pair first under a stale token.
SELECT aedb_queue.queue_enqueue('batched', '{"label": "batch-done"}');
SELECT aedb_queue.queue_enqueue('batched', '{"label": "batch-stale"}');
SELECT upgrade_check.expect('claim batched',
    (SELECT count(*) FROM aedb_queue.queue_claim('batched', 'worker-before', max => 2)), 2::bigint);
SELECT upgrade_check.expect('batch settle, one token stale',
    (SELECT array_agg(outcome::text ORDER BY task_id) FROM aedb_queue.queue_complete_batch('batched',
        ARRAY[upgrade_check.id_of('batch-done'), upgrade_check.id_of('batch-stale')],
        ARRAY[upgrade_check.token_of('batch-done'), upgrade_check.token_of('batch-stale') + 1])),
    ARRAY['applied', 'lease_lost']);
SELECT upgrade_check.expect('batch settle under the current token',
    (SELECT array_agg(outcome::text) FROM aedb_queue.queue_complete_batch('batched',
        ARRAY[upgrade_check.id_of('batch-stale')], ARRAY[upgrade_check.token_of('batch-stale')])),
    ARRAY['applied']);
SELECT upgrade_check.expect('batched queue empty',
    (SELECT count(*) FROM aedb_queue.task WHERE queue = 'batched'), 0::bigint);

SELECT upgrade_check.expect('every state is filled',
    (SELECT array_agg(DISTINCT state::text ORDER BY state::text) FROM aedb_queue.task),
    ARRAY['dead', 'in_flight', 'ready', 'scheduled']);

-- The old version's queue_reap (three columns) calls the new library's
-- symbol for it; nothing is due yet.
SELECT upgrade_check.expect('the old queue_reap on the new library',
    (SELECT (promoted, reclaimed, dead_lettered) FROM aedb_queue.queue_reap('nothing.due')),
    (0::bigint, 0::bigint, 0::bigint));
