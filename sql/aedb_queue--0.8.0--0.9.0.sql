-- aedb_queue upgrade 0.8.0 -> 0.9.0, run once by
--   ALTER EXTENSION aedb_queue UPDATE;   (or UPDATE TO '0.9.0')
-- inside that statement's transaction, with search_path set to aedb_queue.
--
-- Rules (docs/upgrades.md): as in aedb_queue--0.1.0--0.2.0.sql. Plain DDL
-- against exactly the 0.8.0 schema; the result must equal a fresh CREATE
-- EXTENSION at 0.9.0 (scripts/upgrade_test.sh compares pg_dump of both);
-- a section per change, below the last one.

\echo Use "ALTER EXTENSION aedb_queue UPDATE TO '0.9.0'" to load this file. \quit

-- 0.9.0 is durable workflows (docs/guide.md).

-- 1. The steps tasks record, events, and the tasks waiting for them: new
-- tables, no change to the task table.
CREATE TABLE aedb_queue.task_step (
    task_id       bigint NOT NULL,
    step          text NOT NULL,
    queue         text NOT NULL,
    result        jsonb,
    attempt       integer NOT NULL,
    fencing_token bigint NOT NULL,
    recorded_at   timestamptz NOT NULL,
    PRIMARY KEY (task_id, step)
);

-- Events by key, within a queue; the first emit of a key stands.
CREATE TABLE aedb_queue.event (
    queue      text NOT NULL,
    key        text NOT NULL,
    payload    jsonb,
    emitted_at timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);

-- Tasks parked until an event, or until their deadline: one row per
-- waiting step; the deadline is its first call's.
CREATE TABLE aedb_queue.event_wait (
    task_id  bigint NOT NULL,
    step     text NOT NULL,
    queue    text NOT NULL,
    key      text NOT NULL,
    deadline timestamptz NOT NULL,
    PRIMARY KEY (task_id, step)
);
CREATE INDEX event_wait_key_idx ON aedb_queue.event_wait (queue, key);
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.task_step', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.event', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.event_wait', '');
REVOKE ALL ON aedb_queue.task_step, aedb_queue.event, aedb_queue.event_wait FROM PUBLIC;

-- 2. The workflow functions: steps, sleeps and event waits for workers,
-- emits for producers.
CREATE  FUNCTION "queue_step_record"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint, /* Option < i64 > */
	"fencing_token" bigint, /* Option < i64 > */
	"step" TEXT, /* Option < & str > */
	"result" jsonb DEFAULT NULL, /* Option < RawJsonb > */
	"strict" bool DEFAULT false /* Option < bool > */
) RETURNS aedb_queue.outcome /* Outcome */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_step_record_wrapper';

CREATE  FUNCTION "queue_steps"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint /* Option < i64 > */
) RETURNS TABLE (
	"step" TEXT,  /* String */
	"result" jsonb,  /* Option < JsonB > */
	"attempt" INT,  /* i32 */
	"fencing_token" bigint,  /* i64 */
	"recorded_at" timestamp with time zone  /* TimestampWithTimeZone */
)
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_steps_wrapper';

CREATE  FUNCTION "queue_waits"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint /* Option < i64 > */
) RETURNS TABLE (
	"step" TEXT,  /* String */
	"key" TEXT,  /* String */
	"deadline" timestamp with time zone  /* TimestampWithTimeZone */
)
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_waits_wrapper';

CREATE  FUNCTION "queue_sleep"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint, /* Option < i64 > */
	"fencing_token" bigint, /* Option < i64 > */
	"step" TEXT, /* Option < & str > */
	"duration" interval DEFAULT NULL, /* Option < Interval > */
	"until" timestamp with time zone DEFAULT NULL, /* Option < TimestampWithTimeZone > */
	"strict" bool DEFAULT false /* Option < bool > */
) RETURNS TABLE (
	"outcome" aedb_queue.outcome,  /* Outcome */
	"waiting" bool,  /* bool */
	"wake_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_sleep_wrapper';

CREATE  FUNCTION "queue_await_event"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint, /* Option < i64 > */
	"fencing_token" bigint, /* Option < i64 > */
	"step" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"timeout" interval, /* Option < Interval > */
	"strict" bool DEFAULT false /* Option < bool > */
) RETURNS TABLE (
	"outcome" aedb_queue.outcome,  /* Outcome */
	"waiting" bool,  /* bool */
	"wake_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"payload" jsonb,  /* Option < JsonB > */
	"timed_out" bool  /* bool */
)
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_await_event_wrapper';

CREATE  FUNCTION "queue_await_tasks"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint, /* Option < i64 > */
	"fencing_token" bigint, /* Option < i64 > */
	"step" TEXT, /* Option < & str > */
	"task_ids" bigint[], /* :: std :: option :: Option < pgrx :: datum :: Array < '_, i64 > > */
	"park" bool DEFAULT true, /* Option < bool > */
	"strict" bool DEFAULT false /* Option < bool > */
) RETURNS TABLE (
	"outcome" aedb_queue.outcome,  /* Outcome */
	"waiting" bool,  /* bool */
	"results" jsonb  /* Option < JsonB > */
)
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_await_tasks_wrapper';

CREATE  FUNCTION "queue_events_purge"(
	"queue" TEXT, /* Option < & str > */
	"emitted_before" timestamp with time zone DEFAULT 'infinity' /* Option < TimestampWithTimeZone > */
) RETURNS bigint /* i64 */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_events_purge_wrapper';

CREATE  FUNCTION "queue_emit"(
	"queue" TEXT, /* Option < & str > */
	"key" TEXT, /* Option < & str > */
	"payload" jsonb DEFAULT NULL /* Option < RawJsonb > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_emit_wrapper';

CREATE  FUNCTION "queue_retry_from_step"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint, /* Option < i64 > */
	"step" TEXT /* Option < & str > */
) RETURNS TEXT[] /* Vec < String > */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_retry_from_step_wrapper';

REVOKE ALL ON FUNCTION "queue_step_record", "queue_steps", "queue_sleep", "queue_await_event", "queue_emit",
    "queue_retry_from_step", "queue_waits", "queue_await_tasks", "queue_events_purge" FROM PUBLIC;
GRANT EXECUTE ON FUNCTION "queue_step_record", "queue_steps", "queue_waits", "queue_sleep", "queue_await_event",
    "queue_await_tasks"
    TO aedb_queue_worker, aedb_queue_admin;
GRANT EXECUTE ON FUNCTION "queue_emit" TO aedb_queue_producer, aedb_queue_admin;
GRANT EXECUTE ON FUNCTION "queue_retry_from_step", "queue_events_purge" TO aedb_queue_admin;

-- 3. A filtered, keyset-paged task list (queue_tasks), with queue_list's
-- read right: workers and admins.
CREATE  FUNCTION "queue_tasks"(
	"queue" TEXT, /* Option < & str > */
	"state" TEXT DEFAULT NULL, /* Option < & str > */
	"after_task_id" bigint DEFAULT NULL, /* Option < i64 > */
	"before_task_id" bigint DEFAULT NULL, /* Option < i64 > */
	"created_after" timestamp with time zone DEFAULT NULL, /* Option < TimestampWithTimeZone > */
	"created_before" timestamp with time zone DEFAULT NULL, /* Option < TimestampWithTimeZone > */
	"updated_after" timestamp with time zone DEFAULT NULL, /* Option < TimestampWithTimeZone > */
	"updated_before" timestamp with time zone DEFAULT NULL, /* Option < TimestampWithTimeZone > */
	"payload_contains" jsonb DEFAULT NULL, /* Option < RawJsonb > */
	"payload_has_key" TEXT DEFAULT NULL, /* Option < & str > */
	"limit" INT DEFAULT 100 /* Option < i32 > */
) RETURNS SETOF aedb_queue.task_row /* RawTaskRow */
STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_tasks_wrapper';

REVOKE ALL ON FUNCTION "queue_tasks" FROM PUBLIC;
GRANT EXECUTE ON FUNCTION "queue_tasks" TO aedb_queue_worker, aedb_queue_admin;

-- 4. Workflows and DAGs outlive their completion: a task that recorded a
-- step, awaited tasks or is linked by dependencies is archived on
-- completion (the has_dependents mark) as in_workflow, and kept for
-- aedb_queue.keep_workflows. NOT NULL with a constant default: no rewrite.
ALTER TABLE aedb_queue.completed_task ADD COLUMN in_workflow boolean NOT NULL DEFAULT false;
CREATE INDEX completed_task_workflow_idx ON aedb_queue.completed_task (queue, completed_at) WHERE in_workflow;
