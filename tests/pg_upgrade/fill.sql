-- pg_upgrade test, step 1 (scripts/pg_upgrade_test.sh), on the OLD major in
-- database "app": the current version of the extension with tasks in every
-- state, fencing tokens moved on by claims, progress, idempotency keys,
-- dependencies, flow control, a schedule, and tenants confined by grants.
-- Every task's payload carries {"label": ...}; use.sql finds tasks by label.

CREATE EXTENSION aedb_queue;
\ir ../upgrade/helpers.sql
GRANT USAGE ON SCHEMA upgrade_check TO PUBLIC;

-- Two tenants that log in, each a worker and producer confined to its own
-- queues, and an admin confined to tenant a's.
CREATE ROLE upg_tenant_a LOGIN IN ROLE aedb_queue_worker, aedb_queue_producer;
CREATE ROLE upg_tenant_b LOGIN IN ROLE aedb_queue_worker, aedb_queue_producer;
CREATE ROLE upg_admin_a LOGIN IN ROLE aedb_queue_admin;
SELECT aedb_queue.queue_grant('a.*', 'upg_tenant_a', 'worker');
SELECT aedb_queue.queue_grant('a.*', 'upg_tenant_a', 'producer');
SELECT aedb_queue.queue_grant('b.*', 'upg_tenant_b', 'worker');
SELECT aedb_queue.queue_grant('b.*', 'upg_tenant_b', 'producer');
SELECT aedb_queue.queue_grant('a.*', 'upg_admin_a', 'admin');

SELECT aedb_queue.queue_configure('a.jobs', max_attempts => 3, backoff_base => '1 hour',
                                  keep_completed => '30 days');
SELECT aedb_queue.queue_configure('a.flight', keep_completed => '30 days');
SELECT aedb_queue.queue_configure('a.limited', concurrency_limit => 1, rate_limit => 50);

-- Tenant a's tasks, made by tenant a.
SET ROLE upg_tenant_a;
SELECT aedb_queue.queue_enqueue('a.jobs', '{"label": "ready-high"}', priority => 9, idempotency_key => 'k-high');
SELECT aedb_queue.queue_enqueue('a.jobs', '{"label": "ready-low"}', priority => -3);
SELECT aedb_queue.queue_enqueue_batch('a.jobs', ARRAY['{"label": "batch-1"}', '{"label": "batch-2"}']::jsonb[]);
SELECT aedb_queue.queue_enqueue('a.jobs', '{"label": "timer"}', delay => '2 days', idempotency_key => 'k-timer');
SELECT aedb_queue.queue_enqueue('a.jobs', '{"label": "cancelled"}');
SELECT aedb_queue.queue_enqueue('a.flight', '{"label": "in-flight"}', priority => 2);
SELECT aedb_queue.queue_enqueue('a.flight', '{"label": "in-flight-progress"}', priority => 1, idempotency_key => 'k-flight');
SELECT aedb_queue.queue_enqueue('a.flight', '{"label": "retried"}', priority => 3, max_attempts => 3, backoff_base => '1 hour');
SELECT aedb_queue.queue_enqueue('a.flight', '{"label": "dead"}', max_attempts => 1);
SELECT aedb_queue.queue_enqueue('a.flight', '{"label": "done"}', idempotency_key => 'k-done');
SELECT aedb_queue.queue_enqueue('a.limited', '{"label": "keyed-1"}', concurrency_key => 'acct-7');
SELECT aedb_queue.queue_enqueue('a.limited', '{"label": "keyed-2"}', concurrency_key => 'acct-7');
SELECT aedb_queue.queue_enqueue('a.limited', '{"label": "ordered-1"}', ordering_key => 'line-1');
SELECT aedb_queue.queue_enqueue('a.limited', '{"label": "ordered-2"}', ordering_key => 'line-1');
RESET ROLE;
SELECT upgrade_check.expect('cancel', aedb_queue.queue_cancel('a.jobs', upgrade_check.id_of('cancelled')), true);
-- A child in tenant a's queue waiting for a parent still ready.
SELECT aedb_queue.queue_enqueue('a.jobs', '{"label": "child"}', wait_for => ARRAY[upgrade_check.id_of('batch-1')]);

-- Claims by tenant a: each task's token moves on; one is retried twice, so
-- its token is 2 after its second claim.
SET ROLE upg_tenant_a;
SELECT upgrade_check.expect('claim retried', (SELECT payload->>'label' FROM aedb_queue.queue_claim('a.flight', 'w-old')), 'retried');
RESET ROLE;
SELECT upgrade_check.expect('fail retried', aedb_queue.queue_fail('a.flight', upgrade_check.id_of('retried'),
    upgrade_check.token_of('retried'), 'transient', retry_in => '0'), 'applied');
SET ROLE upg_tenant_a;
SELECT upgrade_check.expect('claim flight',
    (SELECT array_agg(payload->>'label' ORDER BY priority DESC, task_id) FROM aedb_queue.queue_claim('a.flight', 'w-old', lease => '1 day', max => 5)),
    ARRAY['retried', 'in-flight', 'in-flight-progress', 'dead', 'done']);
SELECT upgrade_check.expect('claim keyed', (SELECT count(*) FROM aedb_queue.queue_claim('a.limited', 'w-old', lease => '1 day', max => 10)), 2::bigint);
RESET ROLE;
SELECT upgrade_check.expect('heartbeat', aedb_queue.queue_heartbeat('a.flight', upgrade_check.id_of('in-flight-progress'),
    upgrade_check.token_of('in-flight-progress'), extend => '1 day', progress => '{"step": 2}'), 'applied');
SELECT upgrade_check.expect('fail retried again', aedb_queue.queue_fail('a.flight', upgrade_check.id_of('retried'),
    upgrade_check.token_of('retried'), 'transient again'), 'applied');
SELECT upgrade_check.expect('dead', aedb_queue.queue_fail('a.flight', upgrade_check.id_of('dead'),
    upgrade_check.token_of('dead'), 'permanent'), 'applied');
SELECT upgrade_check.expect('done', aedb_queue.queue_complete('a.flight', upgrade_check.id_of('done'),
    upgrade_check.token_of('done'), result => '{"ok": true}',
    follow_ups => '[{"queue": "a.jobs", "payload": {"label": "follow-up"}, "delay": "1 hour"}]'), 'applied');

-- Tenant b's tasks: one ready, one in flight.
SET ROLE upg_tenant_b;
SELECT aedb_queue.queue_enqueue('b.jobs', '{"label": "b-ready"}');
SELECT aedb_queue.queue_enqueue('b.jobs', '{"label": "b-flight"}', priority => 5);
SELECT upgrade_check.expect('claim b', (SELECT payload->>'label' FROM aedb_queue.queue_claim('b.jobs', 'w-b', lease => '1 day')), 'b-flight');
RESET ROLE;

-- A paused queue, a schedule, and a fairness weight.
SELECT aedb_queue.queue_enqueue('a.paused', '{"label": "paused"}');
SELECT aedb_queue.queue_pause('a.paused');
SELECT (aedb_queue.queue_schedule_upsert('a.sched', 'nightly', '30 2 * * *', time_zone => 'Europe/Berlin')).name;
SELECT aedb_queue.queue_configure('a.fair', fair_share => true);
SELECT aedb_queue.queue_configure_fairness('a.fair', 'gold', 3);

SELECT upgrade_check.expect('every state is filled',
    (SELECT array_agg(DISTINCT state::text ORDER BY state::text) FROM aedb_queue.task),
    ARRAY['blocked', 'dead', 'in_flight', 'ready', 'scheduled', 'waiting']);
