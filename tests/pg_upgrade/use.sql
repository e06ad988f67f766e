-- pg_upgrade test, step 3 (scripts/pg_upgrade_test.sh), on the NEW major in
-- database "app", after state.sql read the same as before: the tasks the old
-- cluster made work on, with their tokens, and the tenants are still
-- confined. Each tenant logs in as itself (\c - role): the way applications
-- call. psql -v ON_ERROR_STOP=1.

-- Ids and tokens, read as the superuser before switching.
SELECT upgrade_check.id_of('in-flight') AS flight, upgrade_check.token_of('in-flight') AS flight_token,
       upgrade_check.id_of('in-flight-progress') AS progress, upgrade_check.token_of('in-flight-progress') AS progress_token,
       upgrade_check.id_of('b-flight') AS b_flight, upgrade_check.token_of('b-flight') AS b_token,
       upgrade_check.id_of('batch-1') AS parent, upgrade_check.id_of('child') AS child,
       (SELECT max(task_id) FROM aedb_queue.task) AS max_id \gset
SELECT upgrade_check.expect('tokens were moved on by the claims before the upgrade',
    ARRAY[:flight_token, :progress_token, :b_token]::bigint[], ARRAY[1, 1, 1]::bigint[]);
SELECT upgrade_check.expect('the retried task was claimed twice and waits for its backoff',
    (SELECT (attempts, fencing_token, state::text) FROM aedb_queue.task WHERE payload->>'label' = 'retried'),
    (2, 2::bigint, 'scheduled'::text));

\c - upg_tenant_a
SET upg.b_flight = :b_flight;
SET upg.b_token = :b_token;
-- The holder of an in-flight task settles it with the token it got from the
-- old cluster; a stale token is fenced out; the checkpoint is kept.
SELECT upgrade_check.expect('stale token on the new major',
    aedb_queue.queue_complete('a.flight', :flight, :flight_token - 1), 'lease_lost');
SELECT upgrade_check.expect('complete with the old token',
    aedb_queue.queue_complete('a.flight', :flight, :flight_token, strict => true), 'applied');
SELECT upgrade_check.expect('progress kept',
    (SELECT progress FROM aedb_queue.queue_get('a.flight', :progress)), '{"step": 2}'::jsonb);
SELECT upgrade_check.expect('heartbeat with the old token',
    aedb_queue.queue_heartbeat('a.flight', :progress, :progress_token, extend => '1 hour', progress => '{"step": 3}'), 'applied');
SELECT upgrade_check.expect('fail with the old token, to be claimed again',
    aedb_queue.queue_fail('a.flight', :progress, :progress_token, 'after pg_upgrade', retry_in => '0'), 'applied');
SELECT upgrade_check.expect('claimed again with the next token and its checkpoint',
    (SELECT (task_id, fencing_token, progress) FROM aedb_queue.queue_claim('a.flight', 'w-new')),
    (:progress::bigint, :progress_token::bigint + 1, '{"step": 3}'::jsonb));

-- Ready tasks come out in service order; the parent's completion readies
-- its child; the idempotency keys still dedup; new ids follow the old ones.
SELECT upgrade_check.expect('claim in service order',
    (SELECT array_agg(payload->>'label' ORDER BY n) FROM aedb_queue.queue_claim('a.jobs', 'w-new', max => 10)
         WITH ORDINALITY AS c(task_id, payload, attempts, fencing_token, lease_deadline, priority, enqueued_at, progress, n)),
    ARRAY['ready-high', 'batch-1', 'batch-2', 'ready-low']);
SELECT upgrade_check.expect('complete the parent',
    aedb_queue.queue_complete('a.jobs', :parent, 1), 'applied');
SELECT upgrade_check.expect('its child is ready',
    (SELECT state::text FROM aedb_queue.queue_get('a.jobs', :child)), 'ready');
SELECT upgrade_check.expect('a key of a scheduled task dedups',
    (SELECT deduplicated FROM aedb_queue.queue_enqueue('a.jobs', '{"label": "again"}', idempotency_key => 'k-timer')), true);
SELECT upgrade_check.expect('a key of a completed task dedups',
    (SELECT deduplicated FROM aedb_queue.queue_enqueue('a.flight', '{"label": "again"}', idempotency_key => 'k-done')), true);
SELECT upgrade_check.expect('new ids follow the old ones',
    (SELECT task_id > :max_id FROM aedb_queue.queue_enqueue('a.jobs', '{"label": "new"}')), true);

-- Still confined: tenant b's queue is out of reach, by claim, settle and
-- enqueue (42501 each).
DO $$
DECLARE
    attempt text;
BEGIN
    FOREACH attempt IN ARRAY ARRAY[
        $q$SELECT * FROM aedb_queue.queue_claim('b.jobs', 'thief')$q$,
        format($q$SELECT aedb_queue.queue_complete('b.jobs', %s, %s)$q$, current_setting('upg.b_flight'), current_setting('upg.b_token')),
        $q$SELECT aedb_queue.queue_enqueue('b.jobs', '{"label": "planted"}')$q$,
        $q$SELECT * FROM aedb_queue.queue_list('b.jobs')$q$] LOOP
        BEGIN
            EXECUTE attempt;
            RAISE EXCEPTION 'pg_upgrade test: tenant a could run: %', attempt;
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;
        END;
    END LOOP;
END
$$;

\c - upg_admin_a
SELECT upgrade_check.expect('the confined admin resumes its paused queue', aedb_queue.queue_resume('a.paused'), true);
DO $$
BEGIN
    PERFORM aedb_queue.queue_pause('b.jobs');
    RAISE EXCEPTION 'pg_upgrade test: tenant a''s admin paused b.jobs';
EXCEPTION WHEN insufficient_privilege THEN
    NULL;
END
$$;

\c - upg_tenant_b
SELECT upgrade_check.expect('tenant b settles its own task with its old token',
    aedb_queue.queue_complete('b.jobs', :b_flight, :b_token), 'applied');
SELECT upgrade_check.expect('and its ready task is still there, untouched by tenant a',
    (SELECT array_agg(payload->>'label') FROM aedb_queue.queue_claim('b.jobs', 'w-b', max => 10)), ARRAY['b-ready']);

\c - postgres
SELECT upgrade_check.expect('no task of tenant b was planted',
    (SELECT count(*) FROM aedb_queue.task WHERE payload->>'label' = 'planted'), 0::bigint);
-- Nothing to update: the new major runs the same version.
SET client_min_messages = warning;
ALTER EXTENSION aedb_queue UPDATE;
SELECT upgrade_check.expect('version', (SELECT extversion FROM pg_extension WHERE extname = 'aedb_queue'), :'version');
