-- The permission matrix: every entry point called by every kind of caller,
-- each cell 'ok' or the SQLSTATE the call raised (42501: permission denied).
--
-- Callers (columns):
--   producer     perm_producer, member of aedb_queue_producer
--   worker       perm_worker, member of aedb_queue_worker
--   admin        perm_admin, member of aedb_queue_admin, not confined
--   c_admin      perm_cadmin, member of aedb_queue_admin, granted admin on 'perm_a.*'
--   c_worker     perm_cworker, member of aedb_queue_worker, granted worker on 'perm_a.*'
--   no_role      perm_nobody, a login role in none of the aedb_queue roles
--   cw>producer  SET SESSION AUTHORIZATION perm_cworker; SET ROLE aedb_queue_producer
--   cw>worker    SET SESSION AUTHORIZATION perm_cworker; SET ROLE aedb_queue_worker
--   cw>admin     SET SESSION AUTHORIZATION perm_cworker; SET ROLE aedb_queue_admin
-- The last three must stay confined to perm_cworker's grants: a call is
-- checked against the current role, the SET ROLE role and the login role.
-- So that perm_cworker may SET ROLE to all three group roles without
-- holding their privileges itself, it reaches aedb_queue_admin through
-- perm_gate, a NOINHERIT role: membership (what SET ROLE needs) follows the
-- chain, privileges stop at perm_gate.
--
-- The first matrix calls queue perm_b.jobs, outside the confined roles'
-- grants; the second calls perm_a.jobs, inside them. Rows that act on no
-- queue (queue_reap() of every queue, confine, unconfine, the pg_cron
-- reaper) are in both. Cells:
--   ok        the call succeeded and did what it was asked (a settle applied,
--             a cancel found its task, a grant changed something, ...)
--   false     the call succeeded but did not do it (a setup mistake)
--   no rows   a view was readable but showed no row of the queue
--   42501     refused by the caller's roles: no EXECUTE on the function, no
--             SELECT on the view, no USAGE on schema aedb_queue (no_role),
--             or follow-ups from a role without EXECUTE on queue_enqueue
--   42501 conf  refused by per-queue confinement: no grant of the session's
--             roles covers the queue for that action, or a cluster-wide
--             operation from a confined session (where both checks refuse a
--             call, the cell shows the one that came first)
--   55000     schedule_reaper/unschedule_reaper got past the permission
--             checks and found no pg_cron in this cluster
-- Each call runs in its own subtransaction (pg_temp.try), so a refused call
-- changes nothing; the calls that succeed are made not to disturb the
-- later cells (fresh tasks per cell, pause then resume, grant then revoke,
-- confine then unconfine, purge of a state with no tasks).

-- Roles are cluster-wide: made if absent (a run that stopped half-way may
-- have left them), dropped at the end.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM (VALUES
        ('perm_gate', NULL),
        ('perm_producer', 'aedb_queue_producer'),
        ('perm_worker', 'aedb_queue_worker'),
        ('perm_admin', 'aedb_queue_admin'),
        ('perm_cadmin', 'aedb_queue_admin'),
        ('perm_cworker', 'aedb_queue_worker'),
        ('perm_cworker', 'perm_gate'),
        ('perm_cproducer', 'aedb_queue_producer'),
        ('perm_cproducer', 'perm_gate'),
        ('perm_nobody', NULL),
        ('perm_gate2', 'perm_cworker'),
        ('perm_member', 'aedb_queue_admin'),
        ('perm_member', 'perm_gate2'),
        ('perm_tenant_a', NULL),
        ('perm_tenant_b', NULL),
        ('perm_spare', NULL)) AS v(role, member_of)
    LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r.role) THEN
            EXECUTE format('CREATE ROLE %I LOGIN', r.role);
        END IF;
        IF r.member_of IS NOT NULL AND NOT pg_has_role(r.role, r.member_of, 'MEMBER') THEN
            EXECUTE format('GRANT %I TO %I', r.member_of, r.role);
        END IF;
    END LOOP;
    ALTER ROLE perm_gate NOLOGIN NOINHERIT;
    ALTER ROLE perm_gate2 NOLOGIN NOINHERIT;
    IF NOT pg_has_role('perm_gate', 'aedb_queue_admin', 'MEMBER') THEN
        GRANT aedb_queue_admin TO perm_gate;
    END IF;
END
$$;

-- The confined roles. perm_tenant_a and perm_tenant_b are what the
-- queue_grant/queue_revoke cells change: confined roles whose grants lie
-- inside perm_a.* and perm_b.* respectively. perm_spare (no grant) is what
-- the queue_confine/queue_unconfine cells confine and set free again.
SELECT aedb_queue.queue_grant('perm_a.*', 'perm_cadmin', 'admin') AS c_admin,
       aedb_queue.queue_grant('perm_a.*', 'perm_cworker', 'worker') AS c_worker,
       aedb_queue.queue_grant('perm_a.*', 'perm_cproducer', 'producer') AS c_producer,
       aedb_queue.queue_grant('perm_a.t', 'perm_tenant_a', 'worker') AS tenant_a,
       aedb_queue.queue_grant('perm_b.t', 'perm_tenant_b', 'worker') AS tenant_b;

-- One call, caught: 'ok' or its SQLSTATE, and for 42501 which check
-- refused it (see the cells above). A call whose first column comes back
-- false did not do what the cell meant.
CREATE FUNCTION pg_temp.try(call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    EXECUTE call INTO v;
    RETURN CASE WHEN v IN ('false', 'no rows') THEN v ELSE 'ok' END;
EXCEPTION WHEN others THEN
    RETURN CASE
        WHEN SQLSTATE <> '42501' THEN SQLSTATE
        -- PostgreSQL's own privilege checks (function, view, schema), and
        -- follow-ups from a role that may not call queue_enqueue
        WHEN SQLERRM LIKE 'permission denied for %'
          OR SQLERRM LIKE '%may not call queue\_enqueue%' THEN '42501'
        -- the extension's per-queue grants and confinement
        WHEN SQLERRM LIKE '%no aedb\_queue grant of this role covers it%'
          OR SQLERRM LIKE '%roles are confined to some queues%' THEN '42501 conf'
        ELSE '42501 ' || SQLERRM
    END;
END
$$;

CREATE TABLE pg_temp.caller (ord int, name text);
INSERT INTO pg_temp.caller VALUES
    (1, 'producer'),
    (2, 'worker'),
    (3, 'admin'),
    (4, 'c_admin'),
    (5, 'c_worker'),
    (6, 'no_role'),
    (7, 'cw>producer'),
    (8, 'cw>worker'),
    (9, 'cw>admin');

-- Every cell's call, with its own tasks: the superuser enqueues them and
-- claims those a settle call needs (lease 1 hour, so none expires during
-- the test). The tasks for claim, cancel and get wait at priority -1, so
-- that each fixture claim takes the task just enqueued.
CREATE TABLE pg_temp.call (caller text, scope text, seq int, entry text, sql text);
DO $$
DECLARE
    c record;
    sc text;
    q text;
    k text;
    enq bigint;
    id jsonb;
    tok jsonb;
BEGIN
    FOR c IN SELECT * FROM pg_temp.caller ORDER BY ord LOOP
        FOREACH sc IN ARRAY ARRAY['b', 'a'] LOOP
            q := format('perm_%s.jobs', sc);
            id := '{}';
            tok := '{}';
            FOREACH k IN ARRAY ARRAY['complete', 'fu_a', 'fu_b', 'batch', 'fail', 'heartbeat', 'dead', 'cac', 'fac',
                                     'step', 'sleep', 'await', 'retry_step', 'await_tasks'] LOOP
                SELECT e.task_id INTO enq FROM aedb_queue.queue_enqueue(q, jsonb_build_object('cell', k)) e;
                SELECT id || jsonb_build_object(k, l.task_id), tok || jsonb_build_object(k, l.fencing_token)
                  INTO id, tok
                  FROM aedb_queue.queue_claim(q, 'perm-fixture', lease => '1 hour') l;
                IF (id->>k)::bigint IS DISTINCT FROM enq THEN
                    RAISE 'fixture claim took task % instead of %', id->>k, enq;
                END IF;
            END LOOP;
            PERFORM aedb_queue.queue_fail(q, (id->>'dead')::bigint, (tok->>'dead')::bigint, 'fixture',
                                          dead_letter => true);
            -- queue_retry_from_step: a dead workflow with one step recorded.
            PERFORM aedb_queue.queue_step_record(q, (id->>'retry_step')::bigint, (tok->>'retry_step')::bigint, 's');
            PERFORM aedb_queue.queue_fail(q, (id->>'retry_step')::bigint, (tok->>'retry_step')::bigint, 'fixture',
                                          dead_letter => true);
            FOREACH k IN ARRAY ARRAY['claim', 'get', 'cancel'] LOOP
                SELECT id || jsonb_build_object(k, e.task_id) INTO id
                  FROM aedb_queue.queue_enqueue(q, jsonb_build_object('cell', k), priority => -1) e;
            END LOOP;

            INSERT INTO pg_temp.call
            SELECT c.name, sc, v.seq, v.entry, v.sql FROM (VALUES
              (1, 'queue_enqueue',
                  format('SELECT task_id FROM aedb_queue.queue_enqueue(%L, ''{}'')', q)),
              (2, 'queue_enqueue_batch',
                  format('SELECT aedb_queue.queue_enqueue_batch(%L, ARRAY[''{}''::jsonb, ''{}''])', q)),
              (3, 'queue_claim',
                  format('SELECT count(*) = 1 FROM aedb_queue.queue_claim(%L, ''perm'', lease => ''1 hour'')', q)),
              (4, 'queue_complete',
                  format('SELECT aedb_queue.queue_complete(%L, %s, %s) = ''applied''',
                         q, id->'complete', tok->'complete')),
              (5, 'queue_complete, follow-up to perm_a.next',
                  format('SELECT aedb_queue.queue_complete(%L, %s, %s, follow_ups => ''[{"queue": "perm_a.next"}]'') = ''applied''',
                         q, id->'fu_a', tok->'fu_a')),
              (6, 'queue_complete, follow-up to perm_b.next',
                  format('SELECT aedb_queue.queue_complete(%L, %s, %s, follow_ups => ''[{"queue": "perm_b.next"}]'') = ''applied''',
                         q, id->'fu_b', tok->'fu_b')),
              (7, 'queue_complete_batch',
                  format('SELECT bool_and(outcome = ''applied'') FROM aedb_queue.queue_complete_batch(%L, ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])',
                         q, id->'batch', tok->'batch')),
              (8, 'queue_fail',
                  format('SELECT aedb_queue.queue_fail(%L, %s, %s, ''boom'') = ''applied''',
                         q, id->'fail', tok->'fail')),
              (9, 'queue_heartbeat',
                  format('SELECT aedb_queue.queue_heartbeat(%L, %s, %s, extend => ''1 hour'') = ''applied''',
                         q, id->'heartbeat', tok->'heartbeat')),
              (10, 'queue_complete_and_claim',
                  format('SELECT bool_and(settled = ''applied'') FROM aedb_queue.queue_complete_and_claim(%L, ''perm'', %s, %s, lease => ''1 hour'')',
                         q, id->'cac', tok->'cac')),
              (11, 'queue_fail_and_claim',
                  format('SELECT bool_and(settled = ''applied'') FROM aedb_queue.queue_fail_and_claim(%L, ''perm'', %s, %s, ''boom'', lease => ''1 hour'')',
                         q, id->'fac', tok->'fac')),
              (12, 'queue_get',
                  format('SELECT count(*) = 1 FROM aedb_queue.queue_get(%L, %s)', q, id->'get')),
              (13, 'queue_list',
                  format('SELECT count(*) = 1 FROM aedb_queue.queue_list(%L, "limit" => 1)', q)),
              (14, 'queue_cancel',
                  format('SELECT aedb_queue.queue_cancel(%L, %s)', q, id->'cancel')),
              (15, 'queue_reap(queue)',
                  format('SELECT promoted FROM aedb_queue.queue_reap(%L)', q)),
              (16, 'queue_configure',
                  format('SELECT queue FROM aedb_queue.queue_configure(%L, max_attempts => 5)', q)),
              (17, 'queue_pause',
                  format('SELECT aedb_queue.queue_pause(%L)', q)),
              (18, 'queue_resume',
                  format('SELECT aedb_queue.queue_resume(%L)', q)),
              (19, 'queue_retry_dead',
                  format('SELECT aedb_queue.queue_retry_dead(%L, task_id => %s) = 1', q, id->'dead')),
              (20, 'queue_purge',
                  format('SELECT aedb_queue.queue_purge(%L, ''completed'')', q)),
              (21, format('queue_grant perm_%s.x*', sc),
                  format('SELECT aedb_queue.queue_grant(''perm_%s.x*'', ''perm_tenant_%s'', ''worker'')', sc, sc)),
              (22, format('queue_revoke perm_%s.x*', sc),
                  format('SELECT aedb_queue.queue_revoke(''perm_%s.x*'', ''perm_tenant_%s'', ''worker'')', sc, sc)),
              (23, 'queue_reap() of all queues',
                  'SELECT promoted FROM aedb_queue.queue_reap()'),
              (24, 'queue_confine',
                  'SELECT aedb_queue.queue_confine(''perm_spare'')'),
              (25, 'queue_unconfine',
                  'SELECT aedb_queue.queue_unconfine(''perm_spare'')'),
              (26, 'schedule_reaper',
                  'SELECT aedb_queue.schedule_reaper()'),
              (27, 'unschedule_reaper',
                  'SELECT aedb_queue.unschedule_reaper()'),
              (28, 'SELECT FROM aedb_queue.tasks',
                  format('SELECT CASE WHEN count(*) > 0 THEN ''rows'' ELSE ''no rows'' END FROM aedb_queue.tasks WHERE queue = %L', q)),
              (29, 'SELECT FROM aedb_queue.queue_stats',
                  format('SELECT CASE WHEN count(*) > 0 THEN ''rows'' ELSE ''no rows'' END FROM aedb_queue.queue_stats WHERE queue = %L', q)),
              -- the batch settle's internal fence check: the tables' owner only
              (30, 'aedb_queue_internal.fence_holds',
                  format('SELECT aedb_queue_internal.fence_holds(%s, %s)', id->'heartbeat', tok->'heartbeat')),
              -- schedules: each caller its own, named after the session user
              (31, 'queue_schedule_upsert',
                  format('SELECT (aedb_queue.queue_schedule_upsert(%L, ''s_'' || session_user, ''0 0 1 1 *'')).name IS NOT NULL', q)),
              (32, 'queue_schedule_pause',
                  format('SELECT aedb_queue.queue_schedule_pause(%L, ''s_'' || session_user)', q)),
              (33, 'queue_schedule_resume',
                  format('SELECT aedb_queue.queue_schedule_resume(%L, ''s_'' || session_user)', q)),
              (34, 'queue_schedule_list',
                  format('SELECT count(*) = 1 FROM aedb_queue.queue_schedule_list(%L) WHERE name = ''listed''', q)),
              (35, 'queue_schedule_delete',
                  format('SELECT aedb_queue.queue_schedule_delete(%L, ''s_'' || session_user)', q)),
              (36, 'queue_cron_preview',
                  'SELECT count(*) = 2 FROM aedb_queue.queue_cron_preview(''0 0 1 1 *'', count => 2)'),
              (37, 'queue_parents',
                  format('SELECT count(*) = 0 FROM aedb_queue.queue_parents(%L, %s)', q, id->'get')),
              -- concurrency keys: a key's own limit is the queue admin's
              (38, 'queue_configure_key',
                  format('SELECT aedb_queue.queue_configure_key(%L, ''k_'' || session_user, 3)', q)),
              (39, 'SELECT FROM aedb_queue.concurrency_keys',
                  format('SELECT CASE WHEN count(*) > 0 THEN ''rows'' ELSE ''no rows'' END FROM aedb_queue.concurrency_keys WHERE queue = %L', q)),
              (40, 'SELECT FROM aedb_queue.ordering_keys',
                  format('SELECT CASE WHEN count(*) > 0 THEN ''rows'' ELSE ''no rows'' END FROM aedb_queue.ordering_keys WHERE queue = %L', q)),
              -- fair share: a key's weight is the queue admin's
              (41, 'queue_configure_fairness',
                  format('SELECT aedb_queue.queue_configure_fairness(%L, ''f_'' || session_user, 2)', q)),
              (42, 'SELECT FROM aedb_queue.fairness_keys',
                  format('SELECT CASE WHEN count(*) > 0 THEN ''rows'' ELSE ''no rows'' END FROM aedb_queue.fairness_keys WHERE queue = %L', q)),
              -- what dashboards read: only queues the caller may read
              (43, 'queue_overview',
                  format('SELECT CASE WHEN count(*) > 0 THEN ''rows'' ELSE ''no rows'' END FROM aedb_queue.queue_overview() WHERE queue = %L', q)),
              (44, 'queue_counters',
                  format('SELECT CASE WHEN count(*) > 0 THEN ''rows'' ELSE ''no rows'' END FROM aedb_queue.queue_counters() WHERE queue = %L', q)),
              (45, 'queue_access',
                  format('SELECT CASE WHEN count(*) > 0 THEN ''rows'' ELSE ''no rows'' END FROM aedb_queue.queue_access() WHERE queue = %L', q)),
              (46, 'queue_find',
                  format('SELECT CASE WHEN count(*) > 0 THEN ''rows'' ELSE ''no rows'' END FROM aedb_queue.queue_find(task_id => %s)', id->'get')),
              (47, 'queue_errors',
                  format('SELECT count(*) = 0 FROM aedb_queue.queue_errors(%L, %s)', q, id->'get')),
              (48, 'queue_children',
                  format('SELECT count(*) = 0 FROM aedb_queue.queue_children(%L, %s)', q, id->'get')),
              -- durable workflows: steps, sleeps and event waits are work; emits are enqueues
              (49, 'queue_step_record',
                  format('SELECT aedb_queue.queue_step_record(%L, %s, %s, ''s_'' || session_user) = ''applied''',
                         q, id->'step', tok->'step')),
              (50, 'queue_steps',
                  format('SELECT count(*) = 0 FROM aedb_queue.queue_steps(%L, %s)', q, id->'get')),
              (51, 'queue_sleep',
                  format('SELECT outcome = ''applied'' FROM aedb_queue.queue_sleep(%L, %s, %s, ''s_'' || session_user, duration => ''1 hour'')',
                         q, id->'sleep', tok->'sleep')),
              (52, 'queue_await_event',
                  format('SELECT outcome = ''applied'' FROM aedb_queue.queue_await_event(%L, %s, %s, ''e_'' || session_user, ''k'', ''1 hour'')',
                         q, id->'await', tok->'await')),
              (53, 'queue_emit',
                  format('SELECT aedb_queue.queue_emit(%L, ''e_'' || session_user)', q)),
              (54, 'queue_retry_from_step',
                  format('SELECT aedb_queue.queue_retry_from_step(%L, %s, ''s'')', q, id->'retry_step')),
              (55, 'queue_waits',
                  format('SELECT count(*) = 0 FROM aedb_queue.queue_waits(%L, %s)', q, id->'get')),
              (56, 'queue_await_tasks',
                  format('SELECT outcome = ''applied'' FROM aedb_queue.queue_await_tasks(%L, %s, %s, ''t_'' || session_user, ARRAY[%s]::bigint[], park => false)',
                         q, id->'await_tasks', tok->'await_tasks', id->'get')),
              (57, 'queue_events_purge',
                  format('SELECT aedb_queue.queue_events_purge(%L, emitted_before => ''-infinity'') = 0', q)),
              -- the filtered, paged list: queue_list's rights
              (58, 'queue_tasks',
                  format('SELECT count(*) = 1 FROM aedb_queue.queue_tasks(%L, state => ''ready'', payload_has_key => ''cell'', "limit" => 1)', q))
            ) AS v(seq, entry, sql);
        END LOOP;
    END LOOP;
END
$$;
GRANT SELECT ON pg_temp.call TO PUBLIC;
CREATE TABLE pg_temp.cell (caller text, scope text, seq int, entry text, result text);
GRANT INSERT ON pg_temp.cell TO PUBLIC;

-- Runs one caller's calls in order, as whoever calls it (not SECURITY
-- DEFINER), and says who that was.
CREATE FUNCTION pg_temp.run(who text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT * FROM pg_temp.call WHERE caller = who ORDER BY scope DESC, seq LOOP
        INSERT INTO pg_temp.cell VALUES (who, c.scope, c.seq, c.entry, pg_temp.try(c.sql));
    END LOOP;
    RETURN format('session_user %s, current_user %s', session_user, current_user);
END
$$;

-- For the concurrency_keys, ordering_keys and fairness_keys views: keyed
-- tasks in each queue (and a fairness key's row).
SELECT count(*) FROM (SELECT aedb_queue.queue_configure_fairness(q, 'viewed', 1)
                      FROM unnest(ARRAY['perm_a.jobs', 'perm_b.jobs']) q) f;
SELECT count(*) FROM (SELECT aedb_queue.queue_enqueue(q, '{}', concurrency_key => 'viewed'),
                             aedb_queue.queue_enqueue(q, '{}', ordering_key => 'viewed')
                      FROM unnest(ARRAY['perm_a.jobs', 'perm_b.jobs']) q) e;

-- For the hostile-tenant checks below: a task with an idempotency key in perm_b.jobs.
SELECT task_id AS keyed FROM aedb_queue.queue_enqueue('perm_b.jobs', '{"keyed": true}', idempotency_key => 'perm-key') \gset

-- For queue_schedule_list: a schedule in each queue, made by the superuser.
SELECT (aedb_queue.queue_schedule_upsert(q, 'listed', '0 0 1 1 *')).queue
FROM unnest(ARRAY['perm_a.jobs', 'perm_b.jobs']) q;

-- The callers, one after the other.
SET SESSION AUTHORIZATION perm_producer;
SELECT pg_temp.run('producer');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION perm_worker;
SELECT pg_temp.run('worker');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION perm_admin;
SELECT pg_temp.run('admin');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION perm_cadmin;
SELECT pg_temp.run('c_admin');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION perm_cworker;
SELECT pg_temp.run('c_worker');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION perm_nobody;
SELECT pg_temp.run('no_role');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION perm_cworker;
SET ROLE aedb_queue_producer;
SELECT pg_temp.run('cw>producer');
SET ROLE aedb_queue_worker;
SELECT pg_temp.run('cw>worker');
SET ROLE aedb_queue_admin;
SELECT pg_temp.run('cw>admin');
RESET ROLE;
RESET SESSION AUTHORIZATION;

-- Queue perm_b.jobs: outside every confined role's grants.
SELECT c.entry, c.caller, c.result, r.ord
FROM pg_temp.cell c JOIN pg_temp.caller r ON r.name = c.caller
WHERE c.scope = 'b' ORDER BY c.seq, r.ord
\crosstabview entry caller result ord

-- Queue perm_a.jobs: inside the grants of c_admin (admin) and of
-- perm_cworker (worker), for whom the cw> columns act.
SELECT c.entry, c.caller, c.result, r.ord
FROM pg_temp.cell c JOIN pg_temp.caller r ON r.name = c.caller
WHERE c.scope = 'a' ORDER BY c.seq, r.ord
\crosstabview entry caller result ord

-- What the matrix left behind: the calls that succeeded undid each other
-- (grants back as set up, perm_spare unconfined, no queue paused), and of
-- the follow-ups only those of admin (both queues) and c_admin (perm_a.next,
-- from perm_a.jobs) were enqueued.
SELECT role, pattern, privilege FROM aedb_queue.queue_grant
WHERE role::text LIKE 'perm\_%' ORDER BY role::text, pattern;
SELECT role FROM aedb_queue.confined_role WHERE role::text LIKE 'perm\_%' ORDER BY role::text;
SELECT name, paused FROM aedb_queue.queue WHERE name LIKE 'perm\_%' ORDER BY name;
SELECT queue, count(*) FROM aedb_queue.task WHERE queue LIKE 'perm\__.next' GROUP BY queue ORDER BY queue;
SELECT queue, name FROM aedb_queue.schedule WHERE queue LIKE 'perm\_%' ORDER BY queue, name;

-- Hostile tenants, with the errors they get.
\set VERBOSITY default
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'

-- A confined admin (admin on perm_a.*) sees and changes only its own
-- tenant's schedules: another tenant's cannot be listed, made, replaced,
-- paused or deleted, and listing every queue shows its own alone.
SET SESSION AUTHORIZATION perm_cadmin;
SELECT queue, name FROM aedb_queue.queue_schedule_list() ORDER BY queue;
SELECT queue, name FROM aedb_queue.queue_schedule_list('perm_b.jobs');
:sqlstate
SELECT aedb_queue.queue_schedule_upsert('perm_b.jobs', 'listed', '* * * * * *');
:sqlstate
SELECT aedb_queue.queue_schedule_pause('perm_b.jobs', 'listed');
:sqlstate
SELECT aedb_queue.queue_schedule_delete('perm_b.jobs', 'listed');
:sqlstate
SELECT fired FROM aedb_queue.queue_reap('perm_b.jobs');
:sqlstate
RESET SESSION AUTHORIZATION;
SELECT queue, name, cron, paused FROM aedb_queue.queue_schedule_list() WHERE queue LIKE 'perm\_%' ORDER BY queue;

-- What a dashboard connected as a confined admin (admin on perm_a.*) can
-- learn: its own queues' figures, counters and access only; no overflow
-- row (it would sum other tenants' queues); another tenant's task neither
-- by id nor by idempotency key, in every queue or named.
SET SESSION AUTHORIZATION perm_cadmin;
SELECT queue, produce, work, administer FROM aedb_queue.queue_access() ORDER BY queue;
SELECT queue FROM aedb_queue.queue_overview() ORDER BY queue;
SELECT count(*) FILTER (WHERE queue IS NULL) AS overflow_rows,
       count(*) FILTER (WHERE queue NOT LIKE 'perm\_a.%') AS foreign_rows
FROM aedb_queue.queue_counters();
SELECT count(*) AS found FROM aedb_queue.queue_find(task_id => :keyed);
SELECT count(*) AS found FROM aedb_queue.queue_find(idempotency_key => 'perm-key');
SELECT count(*) AS found FROM aedb_queue.queue_find(idempotency_key => 'perm-key', queue => 'perm_b.jobs');
RESET SESSION AUTHORIZATION;
-- An unconfined worker may work but neither enqueue (no EXECUTE on
-- queue_enqueue) nor administer; it sees the overflow row if there is one.
SET SESSION AUTHORIZATION perm_worker;
SELECT queue, produce, work, administer FROM aedb_queue.queue_access()
WHERE queue LIKE 'perm\_%' ORDER BY queue;
SELECT count(*) AS found FROM aedb_queue.queue_find(idempotency_key => 'perm-key');
RESET SESSION AUTHORIZATION;

-- A confined admin (admin on perm_a.*) cannot hand perm_a queues to a role
-- it does not administer: an unconfined role (that would confine it), or a
-- confined role with grants outside perm_a.*.
SET SESSION AUTHORIZATION perm_cadmin;
SELECT aedb_queue.queue_grant('perm_a.x', 'perm_worker', 'worker');
:sqlstate
SELECT aedb_queue.queue_grant('perm_a.x', 'perm_tenant_b', 'worker');
:sqlstate
-- Grants to the group roles or to a superuser are refused (22023) for everyone.
SELECT aedb_queue.queue_grant('perm_a.x', 'aedb_queue_worker', 'worker');
:sqlstate
SELECT aedb_queue.queue_grant('perm_a.x', 'postgres', 'worker');
:sqlstate
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION perm_admin;
SELECT aedb_queue.queue_grant('perm_a.x', 'aedb_queue_worker', 'worker');
:sqlstate
RESET SESSION AUTHORIZATION;

-- A confined admin that revokes its own last grant is not set free: it
-- is confined to nothing, and cannot grant itself anything back.
SET SESSION AUTHORIZATION perm_cadmin;
SELECT aedb_queue.queue_revoke('perm_a.*', 'perm_cadmin', 'admin');
SELECT task_id = :keyed AS keyed FROM aedb_queue.queue_get('perm_b.jobs', :keyed);
:sqlstate
SELECT count(*) FROM aedb_queue.queue_list('perm_a.jobs');
:sqlstate
SELECT count(*) AS tasks_visible FROM aedb_queue.tasks;
SELECT aedb_queue.queue_grant('perm_a.*', 'perm_cadmin', 'admin');
:sqlstate
RESET SESSION AUTHORIZATION;

-- A confined producer (producer on perm_a.*) that can SET ROLE to the group
-- roles (through perm_gate) enqueues into perm_b.jobs with the idempotency
-- key of a task already there. Whatever the role it switches to, it gets
-- 42501, not that task's id (deduplicated), and nothing is enqueued.
SET SESSION AUTHORIZATION perm_cproducer;
SELECT deduplicated FROM aedb_queue.queue_enqueue('perm_a.jobs', '{}', idempotency_key => 'perm-key');
SELECT task_id = :keyed AS leaked FROM aedb_queue.queue_enqueue('perm_b.jobs', '{}', idempotency_key => 'perm-key');
:sqlstate
SET ROLE aedb_queue_worker;
SELECT task_id = :keyed AS leaked FROM aedb_queue.queue_enqueue('perm_b.jobs', '{}', idempotency_key => 'perm-key');
:sqlstate
SET ROLE aedb_queue_producer;
SELECT task_id = :keyed AS leaked FROM aedb_queue.queue_enqueue('perm_b.jobs', '{}', idempotency_key => 'perm-key');
:sqlstate
SET ROLE aedb_queue_admin;
SELECT task_id = :keyed AS leaked FROM aedb_queue.queue_enqueue('perm_b.jobs', '{}', idempotency_key => 'perm-key');
:sqlstate
RESET ROLE;
RESET SESSION AUTHORIZATION;
SELECT count(*) AS keyed_tasks, bool_and(task_id = :keyed) AS the_first
FROM aedb_queue.task WHERE queue = 'perm_b.jobs' AND idempotency_key = 'perm-key';

-- Confinement reaches every member of a confined role, through any chain,
-- NOINHERIT links included: perm_member holds aedb_queue_admin's privileges
-- itself, but is a member of perm_cworker (through perm_gate2, NOINHERIT),
-- so it may only do what perm_cworker's grant allows.
SET SESSION AUTHORIZATION perm_member;
SELECT count(*) AS claimed FROM aedb_queue.queue_claim('perm_a.jobs', 'm', lease => '1 hour');
SELECT count(*) AS claimed FROM aedb_queue.queue_claim('perm_b.jobs', 'm', lease => '1 hour');
:sqlstate
SELECT aedb_queue.queue_pause('perm_a.jobs');
:sqlstate
SELECT * FROM aedb_queue.queue_reap();
:sqlstate
-- Nor can it shorten how long finished workflows stay readable for the
-- operator's reap: the setting is a superuser's (only ALTER SYSTEM,
-- postgresql.conf or ALTER DATABASE/ROLE by a superuser set it).
SET aedb_queue.keep_workflows = 0;
:sqlstate
SHOW aedb_queue.keep_workflows;
RESET SESSION AUTHORIZATION;
\set VERBOSITY terse

-- Clean up: unconfine (which drops the grants too), then drop the roles.
SELECT count(*) FILTER (WHERE aedb_queue.queue_unconfine(role::text)) AS unconfined
FROM aedb_queue.confined_role WHERE role::text LIKE 'perm\_%';
DROP ROLE perm_producer, perm_worker, perm_admin, perm_cadmin, perm_cworker, perm_cproducer,
          perm_nobody, perm_tenant_a, perm_tenant_b, perm_spare, perm_member, perm_gate2, perm_gate;
