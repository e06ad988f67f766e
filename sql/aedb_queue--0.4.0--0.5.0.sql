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
