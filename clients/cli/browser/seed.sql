-- The browser tests' data: roles and tasks in every state, made through the
-- extension's SQL functions as the roles that would make them. Run by run.sh:
--   bash seed.sh PORT aedb_browser OUT.json   (psql as postgres -At -f seed.sql)
-- Its last statement prints one JSON object of the ids the tests look for.
-- Claims happen while the task to claim is its queue's only ready one, so
-- which task each claim takes is known.
\set ON_ERROR_STOP on
\set QUIET on

CREATE EXTENSION aedb_queue;

-- dash_admin: an unconfined admin. dash_reader: a worker, which may read every
-- queue and administer none (no action forms). dash_tenant: an admin confined
-- to tenant_a.* that may also work (and so read) emails; it sees no other queue.
-- (Roles belong to the cluster: a re-seed finds them made.)
SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'dash_admin') AS make_roles \gset
\if :make_roles
CREATE ROLE dash_admin LOGIN;
GRANT aedb_queue_admin TO dash_admin;
CREATE ROLE dash_reader LOGIN;
GRANT aedb_queue_worker TO dash_reader;
CREATE ROLE dash_tenant LOGIN;
GRANT aedb_queue_admin TO dash_tenant;
-- The dashboard with logins (85-identities): operators' roles ops_a and ops_b
-- (admins confined to tenant_a.* and tenant_b.*), and the connection role
-- dash_gateway, which may become either and holds no rights itself.
CREATE ROLE ops_a;
CREATE ROLE ops_b;
GRANT aedb_queue_admin TO ops_a, ops_b;
CREATE ROLE dash_gateway LOGIN NOINHERIT;
GRANT ops_a, ops_b TO dash_gateway;
\endif

\c - dash_admin
SELECT aedb_queue.queue_grant('tenant_a.*', 'dash_tenant', 'admin') \g /dev/null
SELECT aedb_queue.queue_grant('emails', 'dash_tenant', 'worker') \g /dev/null
SELECT aedb_queue.queue_grant('tenant_a.*', 'ops_a', 'admin') \g /dev/null
SELECT aedb_queue.queue_grant('tenant_b.*', 'ops_b', 'admin') \g /dev/null

SELECT 1 FROM aedb_queue.queue_configure('emails', keep_completed => '7 days', max_attempts => 3) \g /dev/null
SELECT 1 FROM aedb_queue.queue_configure('sync', concurrency_limit => 1) \g /dev/null
SELECT 1 FROM aedb_queue.queue_configure('audit', keep_completed => '1 day') \g /dev/null

-- emails: a completed task kept (with a result and a follow-up into audit),
-- a dead one with its error, one in flight, then ready and scheduled ones.
-- (follow-ups are enqueues: this worker is the admin, who may also produce)
SELECT task_id AS e_done FROM aedb_queue.queue_enqueue('emails', '{"to": "eve@example.com", "order_id": 0}', idempotency_key => 'receipt-0') \gset
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('emails', 'worker-3', lease => '1 hour') \gset
SELECT aedb_queue.queue_complete('emails', :e_done, :tok, result => '{"sent": true, "message_id": "m-0"}',
       follow_ups => '[{"queue": "audit", "payload": {"order_id": 0, "event": "receipt sent"}}]') \g /dev/null
SELECT task_id AS e_followup FROM aedb_queue.queue_list('audit', 'ready') ORDER BY task_id LIMIT 1 \gset

SELECT task_id AS e_dead FROM aedb_queue.queue_enqueue('emails', '{"to": "mallory@example.com", "order_id": 9}', max_attempts => 2) \gset
\c - dash_reader
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('emails', 'worker-3') \gset
SELECT aedb_queue.queue_fail('emails', :e_dead, :tok, 'SMTP timeout: 421 4.7.0 try again later', retry_in => '0') \g /dev/null
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('emails', 'worker-3') \gset
SELECT aedb_queue.queue_fail('emails', :e_dead, :tok, 'SMTP 550 5.1.1 mailbox unavailable: mallory@example.com') \g /dev/null
\c - dash_admin

SELECT task_id AS e_run FROM aedb_queue.queue_enqueue('emails', '{"to": "ada@example.com", "order_id": 7}', idempotency_key => 'receipt-7') \gset
\c - dash_reader
SELECT fencing_token AS e_run_tok FROM aedb_queue.queue_claim('emails', 'worker-7', lease => '1 hour') \gset
SELECT aedb_queue.queue_heartbeat('emails', :e_run, :e_run_tok, extend => '1 hour', progress => '{"step": 2, "of": 3}') \g /dev/null
\c - dash_admin

SELECT task_id AS e_ready FROM aedb_queue.queue_enqueue('emails', '{"to": "ada@example.com", "order_id": 1}', idempotency_key => 'receipt-1') \gset
SELECT task_id AS e_cancel FROM aedb_queue.queue_enqueue('emails', '{"to": "bob@example.com", "order_id": 2}', idempotency_key => 'cancel-me') \gset
SELECT task_id AS e_dup FROM aedb_queue.queue_enqueue('emails', '{"to": "carol@example.com", "order_id": 3}', idempotency_key => 'dup-key') \gset
SELECT task_id AS e_sched FROM aedb_queue.queue_enqueue('emails', '{"to": "dave@example.com", "order_id": 4}', delay => '1 hour') \gset
SELECT task_id AS e_sched_cancel FROM aedb_queue.queue_enqueue('emails', '{"to": "frank@example.com", "order_id": 5}', delay => '2 hours') \gset

-- reports: three dead tasks, a schedule, a task with the same idempotency key
-- as one in emails (a search for it finds several).
SELECT array_agg(t) AS r_dead FROM aedb_queue.queue_enqueue_batch('reports',
       ARRAY['{"report": 1}', '{"report": 2}', '{"report": 3}']::jsonb[], max_attempts => 1) AS t \gset
\c - dash_reader
SELECT aedb_queue.queue_fail('reports', task_id, fencing_token, 'template not found: weekly-digest-v2')
FROM aedb_queue.queue_claim('reports', 'worker-1', max => 3) \g /dev/null
\c - dash_admin
SELECT task_id AS r_dup FROM aedb_queue.queue_enqueue('reports', '{"report": "dup"}', idempotency_key => 'dup-key') \gset
SELECT 1 FROM aedb_queue.queue_schedule_upsert('reports', 'nightly', '30 2 * * *', time_zone => 'Europe/Berlin',
       payload => '{"report": "sales"}', fire_time_key => 'fired_at') \g /dev/null

-- retry_me: dead tasks to retry one by one, then all.
SELECT array_agg(t) AS rt_dead FROM aedb_queue.queue_enqueue_batch('retry_me',
       ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[], max_attempts => 1) AS t \gset
\c - dash_reader
SELECT aedb_queue.queue_fail('retry_me', task_id, fencing_token, 'boom ' || task_id)
FROM aedb_queue.queue_claim('retry_me', 'worker-1', max => 3) \g /dev/null
\c - dash_admin

-- purge_me: two dead, three ready.
SELECT 1 FROM aedb_queue.queue_enqueue_batch('purge_me', ARRAY['{"d": 1}', '{"d": 2}']::jsonb[], max_attempts => 1) \g /dev/null
\c - dash_reader
SELECT aedb_queue.queue_fail('purge_me', task_id, fencing_token, 'for the purge test')
FROM aedb_queue.queue_claim('purge_me', 'worker-1', max => 2) \g /dev/null
\c - dash_admin
SELECT 1 FROM aedb_queue.queue_enqueue_batch('purge_me', ARRAY['{"r": 1}', '{"r": 2}', '{"r": 3}']::jsonb[]) \g /dev/null

-- pause_me and csrf_target: ready tasks in queues that are not paused.
SELECT 1 FROM aedb_queue.queue_enqueue_batch('pause_me', ARRAY['{"p": 1}', '{"p": 2}']::jsonb[]) \g /dev/null
SELECT task_id AS c_task FROM aedb_queue.queue_enqueue('csrf_target', '{"c": 1}') \gset

-- sync: a concurrency key at its limit (one in flight, one blocked);
-- ledger: an ordering key's line of two.
SELECT task_id AS s_run FROM aedb_queue.queue_enqueue('sync', '{"account": 7, "n": 1}', concurrency_key => 'account-7') \gset
SELECT task_id AS s_blocked FROM aedb_queue.queue_enqueue('sync', '{"account": 7, "n": 2}', concurrency_key => 'account-7') \gset
SELECT 1 FROM aedb_queue.queue_enqueue('ledger', '{"op": "deposit"}', ordering_key => 'account-7') \g /dev/null
SELECT 1 FROM aedb_queue.queue_enqueue('ledger', '{"op": "withdraw"}', ordering_key => 'account-7') \g /dev/null
\c - dash_reader
SELECT 1 FROM aedb_queue.queue_claim('sync', 'worker-2', lease => '1 hour') \g /dev/null
\c - dash_admin

-- pipeline: extract -> transform -> load (a dependency chain).
SELECT task_id AS p_parent FROM aedb_queue.queue_enqueue('pipeline', '{"step": "extract", "day": "2026-12-01"}') \gset
SELECT task_id AS p_child FROM aedb_queue.queue_enqueue('pipeline', '{"step": "transform"}', wait_for => ARRAY[:p_parent]::bigint[]) \gset
SELECT task_id AS p_grandchild FROM aedb_queue.queue_enqueue('pipeline', '{"step": "load"}', wait_for => ARRAY[:p_child]::bigint[]) \gset

-- hostile: markup in a payload, an error, an owner, an idempotency key and a
-- queue name. Rendered as text, none of it may run (window.__xss stays unset).
SELECT task_id AS h_ready FROM aedb_queue.queue_enqueue('hostile',
       '{"html": "<script>window.__xss=1</script>", "img": "<img src=x onerror=\"window.__xss=2\">"}',
       idempotency_key => '"><script>window.__xss=6</script>') \gset
SELECT task_id AS h_dead FROM aedb_queue.queue_enqueue('hostile', '{"n": "dead"}', max_attempts => 1, priority => 10) \gset
\c - dash_reader
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('hostile', 'worker-1') \gset
SELECT aedb_queue.queue_fail('hostile', :h_dead, :tok, '<script>window.__xss=3</script><img src=x onerror="window.__xss=4"> & done') \g /dev/null
\c - dash_admin
SELECT task_id AS h_run FROM aedb_queue.queue_enqueue('hostile', '{"n": "running"}', priority => 10) \gset
\c - dash_reader
SELECT 1 FROM aedb_queue.queue_claim('hostile', '<img src=x onerror=window.__xss=5>', lease => '1 hour') \g /dev/null
\c - dash_admin
SELECT task_id AS h_name FROM aedb_queue.queue_enqueue('<img src=x onerror=window.__xss=7>', '{"n": 1}') \gset

-- workflows: durable workflows (steps recorded by the worker under its
-- token): one parked on a sleep, one on an event, one to run again from a
-- step, one in flight, one with markup in a step's name and result.
SELECT task_id AS w_sleep FROM aedb_queue.queue_enqueue('workflows', '{"order": 42}') \gset
\c - dash_reader
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('workflows', 'worker-w') \gset
SELECT aedb_queue.queue_step_record('workflows', :w_sleep, :tok, 'charge', '{"receipt": "r-42"}') \g /dev/null
SELECT 1 FROM aedb_queue.queue_sleep('workflows', :w_sleep, :tok, 'cool-off', duration => '1 day') \g /dev/null
\c - dash_admin
SELECT task_id AS w_event FROM aedb_queue.queue_enqueue('workflows', '{"order": 43}') \gset
\c - dash_reader
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('workflows', 'worker-w') \gset
SELECT aedb_queue.queue_step_record('workflows', :w_event, :tok, 'charge', '{"receipt": "r-43"}') \g /dev/null
SELECT 1 FROM aedb_queue.queue_await_event('workflows', :w_event, :tok, 'packed', 'order-43/packed', timeout => '2 days') \g /dev/null
\c - dash_admin
SELECT task_id AS w_retry FROM aedb_queue.queue_enqueue('workflows', '{"order": 44}') \gset
\c - dash_reader
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('workflows', 'worker-w') \gset
SELECT aedb_queue.queue_step_record('workflows', :w_retry, :tok, 'charge', '{"done": "charge"}') \g /dev/null
SELECT aedb_queue.queue_step_record('workflows', :w_retry, :tok, 'reserve', '{"done": "reserve"}') \g /dev/null
SELECT aedb_queue.queue_step_record('workflows', :w_retry, :tok, 'label', '{"done": "label"}') \g /dev/null
SELECT 1 FROM aedb_queue.queue_sleep('workflows', :w_retry, :tok, 'cool-off', duration => '1 day') \g /dev/null
\c - dash_admin
SELECT task_id AS w_hostile FROM aedb_queue.queue_enqueue('workflows', '{"order": 45}') \gset
\c - dash_reader
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('workflows', 'worker-w') \gset
SELECT aedb_queue.queue_step_record('workflows', :w_hostile, :tok, '<script>window.__xss=9</script>',
       '{"html": "<img src=x onerror=window.__xss=10>"}') \g /dev/null
SELECT 1 FROM aedb_queue.queue_sleep('workflows', :w_hostile, :tok, 'nap', duration => '1 day') \g /dev/null
\c - dash_admin
SELECT task_id AS w_run FROM aedb_queue.queue_enqueue('workflows', '{"order": 46}') \gset
\c - dash_reader
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('workflows', 'worker-w', lease => '1 hour') \gset
SELECT aedb_queue.queue_step_record('workflows', :w_run, :tok, 'charge', '{"receipt": "r-46"}') \g /dev/null
\c - dash_admin
-- w_done: a finished workflow in a queue that keeps no completed task: kept
-- with its steps for aedb_queue.keep_workflows.
SELECT task_id AS w_done FROM aedb_queue.queue_enqueue('workflows', '{"order": 47}') \gset
\c - dash_reader
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('workflows', 'worker-w') \gset
SELECT aedb_queue.queue_step_record('workflows', :w_done, :tok, 'charge', '{"receipt": "r-47"}') \g /dev/null
SELECT aedb_queue.queue_step_record('workflows', :w_done, :tok, 'ship', '{"parcel": "p-47"}') \g /dev/null
SELECT aedb_queue.queue_complete('workflows', :w_done, :tok, result => '{"shipped": true}') \g /dev/null
\c - dash_admin

-- tenants: the confined role administers tenant_a.* and never sees tenant_b.*.
SELECT task_id AS ta_ready FROM aedb_queue.queue_enqueue('tenant_a.jobs', '{"tenant": "a"}') \gset
SELECT task_id AS ta_dead FROM aedb_queue.queue_enqueue('tenant_a.jobs', '{"tenant": "a", "n": "dead"}', max_attempts => 1, priority => 10) \gset
\c - dash_reader
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('tenant_a.jobs', 'worker-a') \gset
SELECT aedb_queue.queue_fail('tenant_a.jobs', :ta_dead, :tok, 'tenant a failure') \g /dev/null
\c - dash_admin
SELECT task_id AS tb_ready FROM aedb_queue.queue_enqueue('tenant_b.jobs', '{"tenant": "b"}') \gset

-- bulk: past queue_overview's exact limit (1000), so its ready figure is an estimate.
SELECT count(*) AS bulk_n FROM aedb_queue.queue_enqueue_batch('bulk',
       (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, 1500) i)) \gset

-- dag: a DAG across two queues that keep completed tasks (one with markup
-- in its name): a -> b, a -> c, a -> f, (b, c) -> d, d -> e. a and b
-- completed (kept), f dead, c ready, d and e waiting.
SELECT 1 FROM aedb_queue.queue_configure('dag', keep_completed => '1 day') \g /dev/null
SELECT 1 FROM aedb_queue.queue_configure('dag<img src=x onerror=window.__xss=11>', keep_completed => '1 day') \g /dev/null
SELECT task_id AS d_a FROM aedb_queue.queue_enqueue('dag', '{"step": "a"}') \gset
SELECT task_id AS d_b FROM aedb_queue.queue_enqueue('dag', '{"step": "b"}', wait_for => ARRAY[:d_a]::bigint[]) \gset
SELECT task_id AS d_c FROM aedb_queue.queue_enqueue('dag', '{"step": "c"}', wait_for => ARRAY[:d_a]::bigint[]) \gset
SELECT task_id AS d_f FROM aedb_queue.queue_enqueue('dag', '{"step": "f"}', wait_for => ARRAY[:d_a]::bigint[], max_attempts => 1, priority => 10) \gset
SELECT task_id AS d_d FROM aedb_queue.queue_enqueue('dag', '{"step": "d"}', wait_for => ARRAY[:d_b, :d_c]::bigint[]) \gset
SELECT task_id AS d_e FROM aedb_queue.queue_enqueue('dag<img src=x onerror=window.__xss=11>', '{"step": "e"}', wait_for => ARRAY[:d_d]::bigint[]) \gset
\c - dash_reader
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('dag', 'worker-d') \gset
SELECT aedb_queue.queue_complete('dag', :d_a, :tok, result => '{"a": 1}') \g /dev/null
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('dag', 'worker-d') \gset
SELECT aedb_queue.queue_fail('dag', :d_f, :tok, 'f failed') \g /dev/null
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('dag', 'worker-d') \gset
SELECT aedb_queue.queue_complete('dag', :d_b, :tok, result => '{"b": 2}') \g /dev/null
\c - dash_admin
-- dag_gone: g -> h in a queue that keeps no completed task; both done, and
-- kept as a finished DAG (aedb_queue.keep_workflows); a plain task beside
-- them, done, is gone.
SELECT task_id AS g_g FROM aedb_queue.queue_enqueue('dag_gone', '{"step": "g"}') \gset
SELECT task_id AS g_h FROM aedb_queue.queue_enqueue('dag_gone', '{"step": "h"}', wait_for => ARRAY[:g_g]::bigint[]) \gset
SELECT task_id AS g_plain FROM aedb_queue.queue_enqueue('dag_gone', '{"step": "plain"}') \gset
\c - dash_reader
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('dag_gone', 'worker-g') \gset
SELECT aedb_queue.queue_complete('dag_gone', :g_g, :tok) \g /dev/null
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('dag_gone', 'worker-g') \gset
SELECT aedb_queue.queue_complete('dag_gone', :g_h, :tok) \g /dev/null
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('dag_gone', 'worker-g') \gset
SELECT aedb_queue.queue_complete('dag_gone', :g_plain, :tok) \g /dev/null
\c - dash_admin

-- listing: the queue page's filtered, paged list and its bulk actions: six
-- dead tasks (customer dead-co), then 120 ready ones, a third for acme.
SELECT array_agg(t) AS l_dead FROM aedb_queue.queue_enqueue_batch('listing',
       (SELECT array_agg(jsonb_build_object('customer', 'dead-co', 'n', i)) FROM generate_series(1, 6) i),
       max_attempts => 1, priority => 10) AS t \gset
\c - dash_reader
SELECT aedb_queue.queue_fail('listing', task_id, fencing_token, 'listing failure')
FROM aedb_queue.queue_claim('listing', 'worker-l', max => 6) \g /dev/null
\c - dash_admin
SELECT array_agg(t) AS l_ready FROM aedb_queue.queue_enqueue_batch('listing',
       (SELECT array_agg(jsonb_build_object('customer', (ARRAY['acme', 'globex', 'initech'])[1 + i % 3], 'n', i))
        FROM generate_series(1, 120) i)) AS t \gset

\c - postgres
ANALYZE aedb_queue.task;

\unset QUIET
SELECT json_build_object(
    'e_done', :e_done, 'e_followup', :e_followup, 'e_dead', :e_dead, 'e_run', :e_run,
    'e_ready', :e_ready, 'e_cancel', :e_cancel, 'e_dup', :e_dup, 'e_sched', :e_sched,
    'e_sched_cancel', :e_sched_cancel, 'r_dead', :'r_dead'::bigint[], 'r_dup', :r_dup,
    'rt_dead', :'rt_dead'::bigint[], 'c_task', :c_task, 's_run', :s_run, 's_blocked', :s_blocked,
    'p_parent', :p_parent, 'p_child', :p_child, 'p_grandchild', :p_grandchild,
    'h_ready', :h_ready, 'h_dead', :h_dead, 'h_run', :h_run, 'h_name', :h_name,
    'ta_ready', :ta_ready, 'ta_dead', :ta_dead, 'tb_ready', :tb_ready, 'bulk_n', :bulk_n,
    'w_sleep', :w_sleep, 'w_event', :w_event, 'w_retry', :w_retry, 'w_hostile', :w_hostile, 'w_run', :w_run, 'w_done', :w_done,
    'd_a', :d_a, 'd_b', :d_b, 'd_c', :d_c, 'd_d', :d_d, 'd_e', :d_e, 'd_f', :d_f, 'g_g', :g_g, 'g_h', :g_h, 'g_plain', :g_plain,
    'l_dead', :'l_dead'::bigint[], 'l_ready', :'l_ready'::bigint[]);
