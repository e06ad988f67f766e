-- aedb_queue upgrade 0.4.0 -> 0.5.0, run once by
--   ALTER EXTENSION aedb_queue UPDATE;   (or UPDATE TO '0.5.0')
-- inside that statement's transaction, with search_path set to aedb_queue.
--
-- Rules (docs/upgrades.md): as in aedb_queue--0.1.0--0.2.0.sql. Plain DDL
-- against exactly the 0.4.0 schema; the result must equal a fresh CREATE
-- EXTENSION at 0.5.0 (scripts/upgrade_test.sh compares pg_dump of both);
-- a section per change, below the last one.

\echo Use "ALTER EXTENSION aedb_queue UPDATE TO '0.5.0'" to load this file. \quit

-- 0.5.0 is time and order (issue 11): periodic schedules, task dependencies,
-- the background-worker reaper.

-- == 1. Periodic schedules ===================================================
-- Periodic schedules (queue_schedule_upsert): each fire time between
-- fired_up_to and now makes one task in the schedule's queue. A firer locks
-- the row, enqueues the tasks and moves fired_up_to past them in one
-- transaction, so two firers never both own a fire time (docs/schedules.md).
-- Names are per queue: a tenant cannot learn or block another's names.
CREATE TABLE aedb_queue.schedule (
    queue          text NOT NULL,
    name           text NOT NULL,
    cron           text NOT NULL,
    time_zone      text NOT NULL,
    payload        jsonb,
    priority       bigint NOT NULL,
    max_attempts   integer,
    backoff_base   interval,
    backoff_max    interval,
    -- 'skip' (only the latest missed fire time gets a task) or 'catch_up'
    -- (the latest catch_up_limit of them do).
    missed         text NOT NULL,
    catch_up_limit integer,
    -- The payload key that receives the fire time; NULL: none.
    fire_time_key  text,
    paused         boolean NOT NULL DEFAULT false,
    -- The last fire time dealt with (or when the pattern was set or the
    -- schedule resumed): only later ones are owed.
    fired_up_to    timestamptz NOT NULL,
    next_fire_at   timestamptz NOT NULL,
    -- Why the last fire made no task (the fire time is then given up).
    last_error     text,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (queue, name)
);
-- What a reap of every queue, or of one, fires next.
CREATE INDEX schedule_due_idx       ON aedb_queue.schedule (next_fire_at)        WHERE NOT paused;
CREATE INDEX schedule_queue_due_idx ON aedb_queue.schedule (queue, next_fire_at) WHERE NOT paused;

-- A schedule as queue_schedule_list and queue_schedule_upsert return it:
-- the one definition of its columns (src/store/schedule.rs builds them).
CREATE TYPE aedb_queue.schedule_row AS (
    queue          text,
    name           text,
    cron           text,
    time_zone      text,
    payload        jsonb,
    priority       bigint,
    max_attempts   integer,
    backoff_base   interval,
    backoff_max    interval,
    missed         text,
    catch_up_limit integer,
    fire_time_key  text,
    paused         boolean,
    fired_up_to    timestamptz,
    next_fire_at   timestamptz,
    -- The next five fire times from next_fire_at (queue_cron_preview).
    upcoming       timestamptz[],
    last_error     text,
    created_at     timestamptz,
    updated_at     timestamptz
);

SELECT pg_catalog.pg_extension_config_dump('aedb_queue.schedule', '');

CREATE FUNCTION "queue_cron_preview"(
	"cron" TEXT, /* Option < & str > */
	"time_zone" TEXT DEFAULT 'UTC', /* Option < & str > */
	"after" timestamp with time zone DEFAULT now(), /* Option < TimestampWithTimeZone > */
	"count" INT DEFAULT 5 /* Option < i32 > */
) RETURNS SETOF timestamp with time zone /* TimestampWithTimeZone */
STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_cron_preview_wrapper';

CREATE FUNCTION "queue_schedule_upsert"(
	"queue" TEXT, /* Option < & str > */
	"name" TEXT, /* Option < & str > */
	"cron" TEXT, /* Option < & str > */
	"time_zone" TEXT DEFAULT 'UTC', /* Option < & str > */
	"payload" jsonb DEFAULT NULL, /* Option < RawJsonb > */
	"priority" bigint DEFAULT 0, /* Option < i64 > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"backoff_base" interval DEFAULT NULL, /* Option < Interval > */
	"backoff_max" interval DEFAULT NULL, /* Option < Interval > */
	"missed" TEXT DEFAULT 'skip', /* Option < & str > */
	"catch_up_limit" INT DEFAULT NULL, /* Option < i32 > */
	"fire_time_key" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS aedb_queue.schedule_row /* RawScheduleRow */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_schedule_upsert_wrapper';

CREATE FUNCTION "queue_schedule_pause"(
	"queue" TEXT, /* Option < & str > */
	"name" TEXT /* Option < & str > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_schedule_pause_wrapper';

CREATE FUNCTION "queue_schedule_resume"(
	"queue" TEXT, /* Option < & str > */
	"name" TEXT /* Option < & str > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_schedule_resume_wrapper';

CREATE FUNCTION "queue_schedule_delete"(
	"queue" TEXT, /* Option < & str > */
	"name" TEXT /* Option < & str > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_schedule_delete_wrapper';

CREATE FUNCTION "queue_schedule_list"(
	"queue" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS SETOF aedb_queue.schedule_row /* RawScheduleRow */
STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_schedule_list_wrapper';

-- queue_reap gains a column, fired (the tasks schedules made): a new
-- return type, so the function is made anew (0.4.0's symbol stays in the
-- library for databases not yet updated).
DROP FUNCTION "queue_reap"(text, integer);
CREATE FUNCTION "queue_reap"(
	"queue" TEXT DEFAULT NULL, /* Option < & str > */
	"max" INT DEFAULT 1000 /* Option < i32 > */
) RETURNS TABLE (
	"promoted" bigint,  /* i64 */
	"reclaimed" bigint,  /* i64 */
	"dead_lettered" bigint,  /* i64 */
	"fired" bigint  /* i64 */
)

LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'reap_wrapper';

REVOKE ALL ON FUNCTION
    "queue_cron_preview", "queue_schedule_upsert", "queue_schedule_pause",
    "queue_schedule_resume", "queue_schedule_delete", "queue_schedule_list", "queue_reap"
FROM PUBLIC;
REVOKE ALL ON aedb_queue.schedule FROM PUBLIC;
-- In security.sql's order, so the ACLs read as a fresh install's.
GRANT EXECUTE ON FUNCTION "queue_cron_preview", "queue_schedule_list" TO aedb_queue_worker;
GRANT EXECUTE ON FUNCTION
    "queue_cron_preview", "queue_schedule_upsert", "queue_schedule_pause",
    "queue_schedule_resume", "queue_schedule_delete", "queue_schedule_list", "queue_reap"
TO aedb_queue_admin;

-- == 2. Task dependencies ===================================================
-- A task may wait for others (queue_enqueue's wait_for). The new state is
-- appended to the enum; nothing below may name it, as a value added in a
-- transaction cannot be used in it (the waiting index goes by waiting_on).
ALTER TYPE aedb_queue.task_state ADD VALUE 'waiting';
ALTER TABLE aedb_queue.task ADD COLUMN waiting_on integer, ADD COLUMN has_dependents boolean;
CREATE INDEX task_waiting_idx   ON aedb_queue.task (queue, task_id)               WHERE waiting_on > 0;
CREATE TABLE aedb_queue.task_dependency (
    parent_id      bigint NOT NULL,
    child_id       bigint NOT NULL,
    run_on_failure boolean NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX task_dependency_child_idx ON aedb_queue.task_dependency (child_id);
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.task_dependency', '');
REVOKE ALL ON aedb_queue.task_dependency FROM PUBLIC;

-- queue_enqueue and queue_enqueue_batch gain wait_for and on_parent_failure:
-- new signatures, so made anew (0.4.0's symbols stay in the library).
DROP FUNCTION "queue_enqueue"(text, jsonb, interval, bigint, integer, interval, interval, text);
CREATE FUNCTION "queue_enqueue"(
	"queue" TEXT, /* Option < & str > */
	"payload" jsonb DEFAULT NULL, /* Option < RawJsonb > */
	"delay" interval DEFAULT '0', /* Option < Interval > */
	"priority" bigint DEFAULT 0, /* Option < i64 > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"backoff_base" interval DEFAULT NULL, /* Option < Interval > */
	"backoff_max" interval DEFAULT NULL, /* Option < Interval > */
	"idempotency_key" TEXT DEFAULT NULL, /* Option < & str > */
	"wait_for" bigint[] DEFAULT NULL, /* :: std :: option :: Option < Array < '_, i64 > > */
	"on_parent_failure" TEXT DEFAULT 'dead_letter' /* Option < & str > */
) RETURNS aedb_queue.enqueued /* Enqueued */

LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'enqueue_wrapper';

DROP FUNCTION "queue_enqueue_batch"(text, jsonb[], interval, bigint, integer, interval, interval);
CREATE FUNCTION "queue_enqueue_batch"(
	"queue" TEXT, /* Option < & str > */
	"payloads" jsonb[], /* Option < RawJsonbArray > */
	"delay" interval DEFAULT '0', /* Option < Interval > */
	"priority" bigint DEFAULT 0, /* Option < i64 > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"backoff_base" interval DEFAULT NULL, /* Option < Interval > */
	"backoff_max" interval DEFAULT NULL, /* Option < Interval > */
	"wait_for" bigint[] DEFAULT NULL, /* :: std :: option :: Option < Array < '_, i64 > > */
	"on_parent_failure" TEXT DEFAULT 'dead_letter' /* Option < & str > */
) RETURNS SETOF bigint /* i64 */

LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'enqueue_batch_wrapper';

CREATE FUNCTION "queue_parents"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint /* Option < i64 > */
) RETURNS SETOF aedb_queue.task_row /* RawTaskRow */
STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_parents_wrapper';

REVOKE ALL ON FUNCTION "queue_enqueue", "queue_enqueue_batch", "queue_parents" FROM PUBLIC;
GRANT EXECUTE ON FUNCTION "queue_enqueue", "queue_enqueue_batch" TO aedb_queue_producer;
GRANT EXECUTE ON FUNCTION "queue_parents" TO aedb_queue_worker;
GRANT EXECUTE ON FUNCTION "queue_enqueue", "queue_enqueue_batch", "queue_parents" TO aedb_queue_admin;

-- The views show waiting tasks: tasks.waits_for, queue_stats.waiting.
DROP VIEW aedb_queue.queue_stats;
DROP VIEW aedb_queue.tasks;
CREATE VIEW aedb_queue.tasks WITH (security_barrier) AS
SELECT t.task_id,
       t.queue,
       t.state,
       -- The parents a waiting task still waits for (those not completed).
       CASE WHEN t.waiting_on > 0 THEN ARRAY(
           SELECT d.parent_id FROM aedb_queue.task_dependency d
            WHERE d.child_id = t.task_id
              AND EXISTS (SELECT 1 FROM aedb_queue.task p WHERE p.task_id = d.parent_id)
            ORDER BY d.parent_id) END AS waits_for,
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
WHERE aedb_queue_internal.can_read(t.queue);

-- One row per registered queue. Each figure reads one partial index range
-- of its queue (see docs/operations.md for the cost): counts are
-- index-only scans proportional to that state's size; next_due and the
-- head of the ready index are single index probes.
CREATE VIEW aedb_queue.queue_stats WITH (security_barrier) AS
SELECT q.name AS queue,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = q.name AND t.waiting_on > 0) AS waiting,
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
WHERE aedb_queue_internal.can_read(q.name);
REVOKE ALL ON aedb_queue.tasks, aedb_queue.queue_stats FROM PUBLIC;
GRANT SELECT ON aedb_queue.tasks, aedb_queue.queue_stats TO aedb_queue_admin;
