-- aedb_queue upgrade 0.1.0 -> 0.2.0, run once by
--   ALTER EXTENSION aedb_queue UPDATE;   (or UPDATE TO '0.2.0')
-- inside that statement's transaction, with search_path set to aedb_queue.
--
-- Rules (docs/upgrades.md):
-- - Plain DDL, no IF EXISTS / IF NOT EXISTS: the script runs exactly once,
--   against exactly the 0.1.0 schema; an error aborts the whole update.
-- - The result must equal a fresh CREATE EXTENSION at 0.2.0, object for
--   object: scripts/upgrade_test.sh compares pg_dump of both and fails on any
--   difference. Copy function bodies from sql/*.sql verbatim (whitespace
--   included: pg_dump prints them as stored), name indexes and constraints
--   as the fresh install does, add columns at the end of tables (and in the
--   same place in sql/schema.sql).
-- - Add a section per change, below the last one, saying which commit (or
--   change) it follows; do not rewrite a section another change owns.
-- - cargo pgrx install copies this file into the extension directory as is,
--   except that it substitutes pgrx's version tokens: do not write them here.

\echo Use "ALTER EXTENSION aedb_queue UPDATE TO '0.2.0'" to load this file. \quit

-- == 1. Ready index in service order with descending keys (4e69d04) =========
-- Claims resume after a position with one row comparison,
-- (priority, -task_id) < (p, -t), which needs both keys descending.
-- CREATE INDEX here takes a SHARE lock on aedb_queue.task for the build (it
-- cannot be CONCURRENTLY inside ALTER EXTENSION): enqueues, claims and
-- settlements wait for it.
DROP INDEX aedb_queue.task_ready_idx;
CREATE INDEX task_ready_idx ON aedb_queue.task (queue, priority DESC, (-task_id) DESC) WHERE state = 'ready';

-- == 2. Operations and security (issue 4) ====================================
-- queue_get and queue_list move to Rust (full rows, kept completed tasks,
-- per-queue grants); their 0.1.0 SQL versions return the old tasks view's
-- row type, so they go first, then the view.
DROP FUNCTION aedb_queue.queue_get(text, bigint);
DROP FUNCTION aedb_queue.queue_list(text, text, integer);
DROP VIEW aedb_queue.tasks;

-- Per-queue settings, at the end of the registry (as in sql/schema.sql).
ALTER TABLE aedb_queue.queue
    ADD COLUMN max_attempts          integer CHECK (max_attempts >= 1),
    ADD COLUMN backoff_base          interval,
    ADD COLUMN backoff_max           interval,
    ADD COLUMN default_lease         interval,
    ADD COLUMN max_payload_bytes     integer CHECK (max_payload_bytes >= 1),
    ADD COLUMN keep_completed        interval,
    ADD COLUMN keep_idempotency_keys interval,
    ADD COLUMN notify                boolean NOT NULL DEFAULT false,
    ADD COLUMN paused                boolean NOT NULL DEFAULT false;

-- Completed tasks of queues that keep them (queue_configure keep_completed),
-- readable through queue_get until queue_reap deletes them.
CREATE TABLE aedb_queue.completed_task (
    task_id         bigint PRIMARY KEY,
    queue           text NOT NULL,
    priority        bigint NOT NULL,
    attempts        integer NOT NULL,
    max_attempts    integer NOT NULL,
    fencing_token   bigint NOT NULL,
    owner_id        text,
    payload         jsonb,
    progress        jsonb,
    result          jsonb,
    idempotency_key text,
    created_at      timestamptz NOT NULL,
    completed_at    timestamptz NOT NULL
);
CREATE INDEX completed_task_age_idx ON aedb_queue.completed_task (queue, completed_at);

-- Per-queue grants (queue_grant): a role holding any is confined to them.
CREATE TABLE aedb_queue.queue_grant (
    role      regrole NOT NULL,
    pattern   text NOT NULL,
    privilege text NOT NULL CHECK (privilege IN ('producer', 'worker', 'admin')),
    PRIMARY KEY (role, pattern, privilege)
);

-- pg_dump skips the contents of extension tables unless told otherwise.
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.queue', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.task', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.task_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.idempotency_key', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.completed_task', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.queue_grant', '');

-- New Rust entry points (as pgrx generates them).
CREATE  FUNCTION "can_read"(
	"queue" TEXT /* Option < & str > */
) RETURNS bool /* bool */
STABLE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'can_read_wrapper';

CREATE  FUNCTION "queue_configure"(
	"queue" TEXT, /* Option < & str > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"backoff_base" interval DEFAULT NULL, /* Option < Interval > */
	"backoff_max" interval DEFAULT NULL, /* Option < Interval > */
	"default_lease" interval DEFAULT NULL, /* Option < Interval > */
	"max_payload_bytes" INT DEFAULT NULL, /* Option < i32 > */
	"keep_completed" interval DEFAULT NULL, /* Option < Interval > */
	"keep_idempotency_keys" interval DEFAULT NULL, /* Option < Interval > */
	"notify" bool DEFAULT NULL, /* Option < bool > */
	"reset" bool DEFAULT false /* Option < bool > */
) RETURNS TABLE (
	"queue" TEXT,  /* String */
	"max_attempts" INT,  /* Option < i32 > */
	"backoff_base" interval,  /* Option < Interval > */
	"backoff_max" interval,  /* Option < Interval > */
	"default_lease" interval,  /* Option < Interval > */
	"max_payload_bytes" INT,  /* Option < i32 > */
	"keep_completed" interval,  /* Option < Interval > */
	"keep_idempotency_keys" interval,  /* Option < Interval > */
	"notify" bool,  /* bool */
	"paused" bool  /* bool */
)
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_configure_wrapper';

CREATE  FUNCTION "queue_get"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint /* Option < i64 > */
) RETURNS TABLE (
	"task_id" bigint,  /* i64 */
	"queue" TEXT,  /* String */
	"state" TEXT,  /* String */
	"not_before" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"priority" bigint,  /* i64 */
	"attempts" INT,  /* i32 */
	"max_attempts" INT,  /* i32 */
	"owner_id" TEXT,  /* Option < String > */
	"fencing_token" bigint,  /* i64 */
	"lease_deadline" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"payload" jsonb,  /* Option < RawJsonb > */
	"progress" jsonb,  /* Option < RawJsonb > */
	"last_error" TEXT,  /* Option < String > */
	"idempotency_key" TEXT,  /* Option < String > */
	"backoff_base" interval,  /* Option < Interval > */
	"backoff_max" interval,  /* Option < Interval > */
	"created_at" timestamp with time zone,  /* TimestampWithTimeZone */
	"updated_at" timestamp with time zone,  /* TimestampWithTimeZone */
	"result" jsonb,  /* Option < RawJsonb > */
	"completed_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_get_wrapper';

CREATE  FUNCTION "queue_grant"(
	"queue_pattern" TEXT, /* Option < & str > */
	"role" TEXT, /* Option < & str > */
	"privilege" TEXT /* Option < & str > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_grant_wrapper';

CREATE  FUNCTION "queue_list"(
	"queue" TEXT, /* Option < & str > */
	"state" TEXT DEFAULT NULL, /* Option < & str > */
	"limit" INT DEFAULT 100 /* Option < i32 > */
) RETURNS TABLE (
	"task_id" bigint,  /* i64 */
	"queue" TEXT,  /* String */
	"state" TEXT,  /* String */
	"not_before" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"priority" bigint,  /* i64 */
	"attempts" INT,  /* i32 */
	"max_attempts" INT,  /* i32 */
	"owner_id" TEXT,  /* Option < String > */
	"fencing_token" bigint,  /* i64 */
	"lease_deadline" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"payload" jsonb,  /* Option < RawJsonb > */
	"progress" jsonb,  /* Option < RawJsonb > */
	"last_error" TEXT,  /* Option < String > */
	"idempotency_key" TEXT,  /* Option < String > */
	"backoff_base" interval,  /* Option < Interval > */
	"backoff_max" interval,  /* Option < Interval > */
	"created_at" timestamp with time zone,  /* TimestampWithTimeZone */
	"updated_at" timestamp with time zone,  /* TimestampWithTimeZone */
	"result" jsonb,  /* Option < RawJsonb > */
	"completed_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_list_wrapper';

CREATE  FUNCTION "queue_pause"(
	"queue" TEXT /* Option < & str > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_pause_wrapper';

CREATE  FUNCTION "queue_purge"(
	"queue" TEXT, /* Option < & str > */
	"state" TEXT, /* Option < & str > */
	"force" bool DEFAULT false /* Option < bool > */
) RETURNS bigint /* i64 */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_purge_wrapper';

CREATE  FUNCTION "queue_resume"(
	"queue" TEXT /* Option < & str > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_resume_wrapper';

CREATE  FUNCTION "queue_retry_dead"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint DEFAULT NULL, /* Option < i64 > */
	"max" INT DEFAULT NULL /* Option < i32 > */
) RETURNS bigint /* i64 */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_retry_dead_wrapper';

CREATE  FUNCTION "queue_revoke"(
	"queue_pattern" TEXT, /* Option < & str > */
	"role" TEXT, /* Option < & str > */
	"privilege" TEXT /* Option < & str > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_revoke_wrapper';

-- A NULL lease now means the queue's default lease.
CREATE OR REPLACE FUNCTION "queue_claim"(
	"queue" TEXT, /* Option < & str > */
	"owner_id" TEXT, /* Option < & str > */
	"lease" interval DEFAULT NULL, /* Option < Interval > */
	"max" INT DEFAULT 1 /* Option < i32 > */
) RETURNS TABLE (
	"task_id" bigint,  /* i64 */
	"payload" jsonb,  /* Option < RawJsonb > */
	"attempts" INT,  /* i32 */
	"fencing_token" bigint,  /* i64 */
	"lease_deadline" timestamp with time zone,  /* TimestampWithTimeZone */
	"priority" bigint,  /* i64 */
	"enqueued_at" timestamp with time zone,  /* TimestampWithTimeZone */
	"progress" jsonb  /* Option < RawJsonb > */
)
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_claim_wrapper';

-- sql/inspect.sql, verbatim.
-- Views for psql. Both show only the queues the current role may read
-- (aedb_queue.can_read applies the per-queue grants); security_barrier keeps
-- a caller's own functions in a WHERE clause from seeing the other rows.

-- One row per task, made for reading: ages and time left as intervals,
-- payloads and errors cut short. queue_get / queue_list give full rows.
CREATE VIEW aedb_queue.tasks WITH (security_barrier) AS
SELECT t.task_id,
       t.queue,
       t.state,
       t.priority,
       t.attempts || '/' || t.max_attempts AS attempts,
       date_trunc('second', now() - t.created_at) AS age,
       CASE WHEN t.state = 'scheduled' THEN date_trunc('second', t.not_before - now()) END AS due_in,
       CASE WHEN t.state = 'in_flight' THEN date_trunc('second', t.lease_deadline - now()) END AS lease_left,
       t.owner_id AS owner,
       CASE WHEN length(t.payload::text) > 40 THEN left(t.payload::text, 39) || '…'
            ELSE t.payload::text END AS payload,
       CASE WHEN length(t.last_error) > 40 THEN left(t.last_error, 39) || '…'
            ELSE t.last_error END AS last_error
FROM aedb_queue.task t
WHERE aedb_queue.can_read(t.queue);

-- One row per registered queue. Each figure reads one partial index range
-- of its queue (see docs/operations.md for the cost): counts are
-- index-only scans proportional to that state's size; next_due and the
-- head of the ready index are single index probes.
CREATE VIEW aedb_queue.queue_stats WITH (security_barrier) AS
SELECT q.name AS queue,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = q.name AND t.state = 'scheduled') AS scheduled,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = q.name AND t.state = 'ready') AS ready,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = q.name AND t.state = 'in_flight' AND t.lease_deadline IS NOT NULL) AS in_flight,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = q.name AND t.state = 'dead') AS dead,
       (SELECT count(*) FROM aedb_queue.completed_task c
         WHERE c.queue = q.name) AS completed_kept,
       date_trunc('second', now() - (
           SELECT o.created_at FROM aedb_queue.task o
            WHERE o.task_id = (SELECT min(t.task_id) FROM aedb_queue.task t
                                WHERE t.queue = q.name AND t.state = 'ready'))) AS oldest_ready_age,
       (SELECT min(t.not_before) FROM aedb_queue.task t
         WHERE t.queue = q.name AND t.state = 'scheduled') AS next_due,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = q.name AND t.state = 'in_flight' AND t.lease_deadline IS NOT NULL
           AND t.lease_deadline < now()) AS expired_leases,
       q.paused
FROM aedb_queue.queue q
WHERE aedb_queue.can_read(q.name);

-- sql/cron.sql, verbatim.
-- Reaping on a schedule with pg_cron: one job, named 'aedb_queue_reaper',
-- runs queue_reap() in this database, so expired leases and due timers are
-- handled even when no worker is polling (docs/pg_cron.md).
--
-- pg_cron is optional and may be missing when this extension is created.
-- These are plpgsql functions because their bodies are resolved only when
-- they run; they check for pg_cron first and name its objects with their
-- schema (cron.*). The job name and its command are constants: nothing a
-- caller passes is ever spliced into SQL.

-- The cron expression for `every`. pg_cron 1.4 (Debian 12's
-- postgresql-15-cron) takes 5-field cron expressions only, so it runs a job
-- at most once a minute and cannot express an arbitrary interval: accept
-- exactly the intervals that map onto a step of one cron field. Intervals
-- are compared as PostgreSQL compares them (60 minutes = 1 hour, 24 hours =
-- 1 day). STABLE, not IMMUTABLE: the error text depends on IntervalStyle.
CREATE FUNCTION aedb_queue.reaper_cron_schedule(every interval)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = aedb_queue, pg_catalog, pg_temp
AS $$
DECLARE
    secs numeric := extract(epoch FROM $1);
BEGIN
    IF secs % 60 = 0 AND secs / 60 BETWEEN 1 AND 59 THEN
        RETURN format('*/%s * * * *', (secs / 60)::int);
    ELSIF secs % 3600 = 0 AND secs / 3600 BETWEEN 1 AND 23 THEN
        RETURN format('0 */%s * * *', (secs / 3600)::int);
    ELSIF secs = 86400 THEN
        RETURN '0 0 * * *';
    END IF;
    -- NULL lands here too (every comparison above is NULL).
    RAISE EXCEPTION USING
        ERRCODE = 'invalid_parameter_value',
        MESSAGE = format('invalid argument "every": must be 1 to 59 whole minutes, 1 to 23 whole hours, or 1 day; got %s',
                         coalesce($1::text, 'NULL')),
        HINT = 'pg_cron 1.4 schedules with cron expressions, so a job runs at most once a minute.';
END
$$;

-- Raises 55000, saying what is missing, unless pg_cron can run a job here:
-- its library is preloaded (only then does cron.database_name exist and the
-- scheduler run), it serves this database, and its extension is created in
-- it (pg_cron keeps its jobs in that one database).
CREATE FUNCTION aedb_queue.check_pg_cron()
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = aedb_queue, pg_catalog, pg_temp
AS $$
DECLARE
    cron_db text := current_setting('cron.database_name', true);
BEGIN
    IF cron_db IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('pg_cron is not installed in database "%s": install pg_cron and add it to shared_preload_libraries',
                             current_database()),
            HINT = format('On Debian: apt-get install postgresql-15-cron; in postgresql.conf: '
                          'shared_preload_libraries = ''pg_cron'' and cron.database_name = ''%s''; '
                          'restart PostgreSQL; then CREATE EXTENSION pg_cron in this database.',
                          current_database());
    ELSIF cron_db <> current_database() THEN
        RAISE EXCEPTION USING
            ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('pg_cron serves database "%s" (cron.database_name), not "%s"',
                             cron_db, current_database()),
            HINT = format('Set cron.database_name = ''%s'' in postgresql.conf, restart PostgreSQL, '
                          'then CREATE EXTENSION pg_cron in this database.', current_database());
    ELSIF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('pg_cron is not installed in database "%s": run CREATE EXTENSION pg_cron',
                             current_database());
    END IF;
END
$$;

-- Creates the reaper job, or updates its schedule if it exists (cron.schedule
-- with a job name upserts since pg_cron 1.3). Returns the job id.
-- SECURITY DEFINER: the job belongs to, and runs as, the extension's owner,
-- whoever schedules it, so there is only ever one.
CREATE FUNCTION aedb_queue.schedule_reaper(every interval DEFAULT '1 minute')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = aedb_queue, pg_catalog, pg_temp
AS $$
DECLARE
    -- Validated before the pg_cron check: a bad argument is reported as such
    -- whether or not pg_cron is there.
    cron_expr text := aedb_queue.reaper_cron_schedule($1);
BEGIN
    PERFORM aedb_queue.check_pg_cron();
    RETURN cron.schedule('aedb_queue_reaper'::text, cron_expr, 'SELECT aedb_queue.queue_reap()'::text);
END
$$;

-- Removes the reaper job; false if there was none.
CREATE FUNCTION aedb_queue.unschedule_reaper()
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = aedb_queue, pg_catalog, pg_temp
AS $$
DECLARE
    job bigint;
BEGIN
    PERFORM aedb_queue.check_pg_cron();
    -- cron.unschedule raises when the job does not exist, so look it up
    -- first. FOR UPDATE: of two concurrent calls, the second waits for the
    -- first and then finds no job, instead of failing.
    SELECT jobid INTO job FROM cron.job
     WHERE jobname = 'aedb_queue_reaper' AND username = current_user
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    RETURN cron.unschedule(job);
END
$$;

-- The job runs as the extension's owner (a superuser), so changing it is an
-- administrator's call: only the owner, and roles it grants EXECUTE to.
REVOKE ALL ON FUNCTION aedb_queue.schedule_reaper(interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION aedb_queue.unschedule_reaper() FROM PUBLIC;

-- sql/security.sql, verbatim: roles and privileges, once every function exists.
-- Roles and privileges. Runs last, once every function exists.
--
-- Applications get rights only through three roles: grant them to login
-- roles (GRANT aedb_queue_worker TO app_worker). Roles are cluster-wide and
-- outlive DROP EXTENSION; they are created only if absent.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['aedb_queue_producer', 'aedb_queue_worker', 'aedb_queue_admin'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA aedb_queue FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA aedb_queue FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA aedb_queue FROM PUBLIC;
GRANT USAGE ON SCHEMA aedb_queue TO aedb_queue_producer, aedb_queue_worker, aedb_queue_admin;

GRANT EXECUTE ON FUNCTION
    aedb_queue.queue_enqueue, aedb_queue.queue_enqueue_batch
TO aedb_queue_producer;

GRANT EXECUTE ON FUNCTION
    aedb_queue.queue_claim, aedb_queue.queue_complete, aedb_queue.queue_complete_batch,
    aedb_queue.queue_fail, aedb_queue.queue_heartbeat, aedb_queue.queue_get,
    aedb_queue.queue_list, aedb_queue.can_read
TO aedb_queue_worker;

-- Admins can do everything, including what the other two roles can.
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA aedb_queue TO aedb_queue_admin;
GRANT SELECT ON aedb_queue.tasks, aedb_queue.queue_stats TO aedb_queue_admin;
GRANT aedb_queue_producer, aedb_queue_worker TO aedb_queue_admin;

-- == Next change: add its section here ======================================
