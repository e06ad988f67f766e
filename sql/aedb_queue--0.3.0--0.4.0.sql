-- aedb_queue upgrade 0.3.0 -> 0.4.0, run once by
--   ALTER EXTENSION aedb_queue UPDATE;   (or UPDATE TO '0.4.0')
-- inside that statement's transaction, with search_path set to aedb_queue.
--
-- Rules (docs/upgrades.md): as in aedb_queue--0.1.0--0.2.0.sql. Plain DDL
-- against exactly the 0.3.0 schema; the result must equal a fresh CREATE
-- EXTENSION at 0.4.0 (scripts/upgrade_test.sh compares pg_dump of both);
-- a section per change, below the last one.

\echo Use "ALTER EXTENSION aedb_queue UPDATE TO '0.4.0'" to load this file. \quit

-- == 1. Settle and claim in one call (issue 10) ==============================
-- A worker completes or fails the task it holds and claims its next ones in
-- one statement and one commit. New functions only; nothing else changes.
CREATE FUNCTION "queue_complete_and_claim"(
	"queue" TEXT, /* Option < & str > */
	"owner_id" TEXT, /* Option < & str > */
	"held_task_id" bigint, /* Option < i64 > */
	"held_fencing_token" bigint, /* Option < i64 > */
	"result" jsonb DEFAULT NULL, /* Option < RawJsonb > */
	"follow_ups" jsonb DEFAULT NULL, /* Option < RawJsonb > */
	"strict" bool DEFAULT false, /* Option < bool > */
	"lease" interval DEFAULT NULL, /* Option < Interval > */
	"max" INT DEFAULT 1 /* Option < i32 > */
) RETURNS TABLE (
	"settled" aedb_queue.outcome,  /* Outcome */
	"task_id" bigint,  /* Option < i64 > */
	"payload" jsonb,  /* Option < RawJsonb > */
	"attempts" INT,  /* Option < i32 > */
	"fencing_token" bigint,  /* Option < i64 > */
	"lease_deadline" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"priority" bigint,  /* Option < i64 > */
	"enqueued_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"progress" jsonb  /* Option < RawJsonb > */
)
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_complete_and_claim_wrapper';

CREATE FUNCTION "queue_fail_and_claim"(
	"queue" TEXT, /* Option < & str > */
	"owner_id" TEXT, /* Option < & str > */
	"held_task_id" bigint, /* Option < i64 > */
	"held_fencing_token" bigint, /* Option < i64 > */
	"error" TEXT, /* Option < & str > */
	"retry_in" interval DEFAULT NULL, /* Option < Interval > */
	"dead_letter" bool DEFAULT false, /* Option < bool > */
	"strict" bool DEFAULT false, /* Option < bool > */
	"lease" interval DEFAULT NULL, /* Option < Interval > */
	"max" INT DEFAULT 1 /* Option < i32 > */
) RETURNS TABLE (
	"settled" aedb_queue.outcome,  /* Outcome */
	"task_id" bigint,  /* Option < i64 > */
	"payload" jsonb,  /* Option < RawJsonb > */
	"attempts" INT,  /* Option < i32 > */
	"fencing_token" bigint,  /* Option < i64 > */
	"lease_deadline" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"priority" bigint,  /* Option < i64 > */
	"enqueued_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"progress" jsonb  /* Option < RawJsonb > */
)
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_fail_and_claim_wrapper';

REVOKE ALL ON FUNCTION
    aedb_queue.queue_complete_and_claim(text, text, bigint, bigint, jsonb, jsonb, boolean, interval, integer),
    aedb_queue.queue_fail_and_claim(text, text, bigint, bigint, text, interval, boolean, boolean, interval, integer)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    aedb_queue.queue_complete_and_claim(text, text, bigint, bigint, jsonb, jsonb, boolean, interval, integer),
    aedb_queue.queue_fail_and_claim(text, text, bigint, bigint, text, interval, boolean, boolean, interval, integer)
TO aedb_queue_worker, aedb_queue_admin;

-- == 2. The task table without CHECK constraints (issue 10) ===================
-- PostgreSQL re-reads a CHECK constraint from its stored text and compiles it
-- in every INSERT and UPDATE: the three on aedb_queue.task cost about a fifth
-- of an enqueue's and of a claim's instructions. Only the extension writes
-- the table; its statements keep the invariants, and the tests check them.
ALTER TABLE aedb_queue.task
    DROP CONSTRAINT task_max_attempts_check,
    DROP CONSTRAINT task_check,
    DROP CONSTRAINT task_check1;

-- == 3. queue_enqueue returns one composite row, not a set (issue 10) ========
-- A set-returning function makes the caller's plan rebuild its row type from
-- pg_proc on every call and call it twice; a row of a named composite type
-- comes from the type cache. Same columns: SELECT * / task_id FROM
-- queue_enqueue(...) read the same. Until this update, 0.3.0's declaration
-- keeps calling its own symbol (queue_enqueue_wrapper), which the library keeps.
CREATE TYPE aedb_queue.enqueued AS (task_id bigint, deduplicated boolean);
DROP FUNCTION aedb_queue.queue_enqueue(text, jsonb, interval, bigint, integer, interval, interval, text);
CREATE FUNCTION "queue_enqueue"(
	"queue" TEXT, /* Option < & str > */
	"payload" jsonb DEFAULT NULL, /* Option < RawJsonb > */
	"delay" interval DEFAULT '0', /* Option < Interval > */
	"priority" bigint DEFAULT 0, /* Option < i64 > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"backoff_base" interval DEFAULT NULL, /* Option < Interval > */
	"backoff_max" interval DEFAULT NULL, /* Option < Interval > */
	"idempotency_key" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS aedb_queue.enqueued /* Enqueued */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_enqueue_row_wrapper';

REVOKE ALL ON FUNCTION aedb_queue.queue_enqueue(text, jsonb, interval, bigint, integer, interval, interval, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION aedb_queue.queue_enqueue(text, jsonb, interval, bigint, integer, interval, interval, text) TO aedb_queue_producer, aedb_queue_admin;

-- == 4. The batch settle's fence checked by a function (issue 10) ============
-- queue_complete_batch's statement checked each task against the caller's
-- (id, token) pairs with a hashed IN over unnest(), about 4,000 instructions
-- per pair. This function checks the pairs the library holds for the
-- statement running now; outside that statement it is false. Only the
-- tables' owner, whose rights the statement runs with, may execute it.
CREATE FUNCTION aedb_queue_internal."fence_holds"(
	"task_id" bigint, /* i64 */
	"fencing_token" bigint /* i64 */
) RETURNS bool /* bool */
STRICT PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'fence_holds_wrapper';

REVOKE ALL ON FUNCTION aedb_queue_internal.fence_holds(bigint, bigint) FROM PUBLIC;

-- == 5. The task table rebuilt: unchanging columns first, pages half full ====
-- An UPDATE whose new row version fits on the old one's page logs only what
-- follows the prefix the two versions share. With the columns an enqueue
-- sets for good first, the ones claims, settles and heartbeats change last,
-- and fillfactor 50, a claim's WAL record leaves out the payload and
-- everything before it (schema.sql). Column order needs a new table: copy
-- the rows (this holds an exclusive lock on the table for the copy), move
-- the sequence, rebuild the indexes and the views over the new table.
DROP VIEW aedb_queue.tasks;
DROP VIEW aedb_queue.queue_stats;
ALTER TABLE aedb_queue.task RENAME TO task_0_3_0;
ALTER INDEX aedb_queue.task_pkey RENAME TO task_0_3_0_pkey;
-- From PostgreSQL 18 NOT NULL constraints are named (task_queue_not_null):
-- the old table's give theirs up, so that the new table's are named as a
-- fresh install names them. Before 18 there is nothing to rename.
DO $$
DECLARE
    c record;
BEGIN
    IF pg_catalog.current_setting('server_version_num')::int >= 180000 THEN
        FOR c IN EXECUTE 'SELECT conname FROM pg_catalog.pg_constraint
                          WHERE conrelid = ''aedb_queue.task_0_3_0''::regclass AND contype = ''n''' LOOP
            EXECUTE pg_catalog.format('ALTER TABLE aedb_queue.task_0_3_0 RENAME CONSTRAINT %I TO %I',
                                      c.conname, 'task_0_3_0' || pg_catalog.substr(c.conname, 5));
        END LOOP;
    END IF;
END
$$;
DROP INDEX aedb_queue.task_ready_idx, aedb_queue.task_scheduled_idx,
           aedb_queue.task_in_flight_idx, aedb_queue.task_dead_idx;
CREATE TABLE aedb_queue.task (
    task_id         bigint PRIMARY KEY DEFAULT nextval('aedb_queue.task_id_seq'),
    queue           text NOT NULL,
    priority        bigint NOT NULL DEFAULT 0,
    max_attempts    integer NOT NULL,
    backoff_base    interval NOT NULL,
    backoff_max     interval NOT NULL,
    created_at      timestamptz NOT NULL,
    idempotency_key text,
    payload         jsonb,
    not_before      timestamptz NOT NULL,
    state           aedb_queue.task_state NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    fencing_token   bigint NOT NULL DEFAULT 0,
    lease_deadline  timestamptz,
    updated_at      timestamptz NOT NULL,
    owner_id        text,
    progress        jsonb,
    last_error      text
) WITH (fillfactor = 50);
INSERT INTO aedb_queue.task (
    task_id, queue, priority, max_attempts, backoff_base, backoff_max, created_at,
    idempotency_key, payload, not_before, state, attempts, fencing_token,
    lease_deadline, updated_at, owner_id, progress, last_error)
SELECT task_id, queue, priority, max_attempts, backoff_base, backoff_max, created_at,
       idempotency_key, payload, not_before, state, attempts, fencing_token,
       lease_deadline, updated_at, owner_id, progress, last_error
FROM aedb_queue.task_0_3_0;
-- Before the old table goes: a sequence owned by it would go with it.
ALTER SEQUENCE aedb_queue.task_id_seq OWNED BY aedb_queue.task.task_id;
-- Out of the extension first: that also takes it off the tables pg_dump
-- dumps the rows of (a plain DROP would leave its oid there).
ALTER EXTENSION aedb_queue DROP TABLE aedb_queue.task_0_3_0;
DROP TABLE aedb_queue.task_0_3_0;
REVOKE ALL ON aedb_queue.task FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.task', '');

CREATE INDEX task_ready_idx     ON aedb_queue.task (queue, priority DESC, (-task_id) DESC) WHERE state = 'ready';
CREATE INDEX task_scheduled_idx ON aedb_queue.task (queue, not_before)            WHERE state = 'scheduled';
CREATE INDEX task_in_flight_idx ON aedb_queue.task (queue, lease_deadline)        WHERE state = 'in_flight' AND lease_deadline IS NOT NULL;
CREATE INDEX task_dead_idx      ON aedb_queue.task (queue, task_id)               WHERE state = 'dead';

-- The views, as sql/inspect.sql defines them, over the new table.
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
WHERE aedb_queue_internal.can_read(t.queue);

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
WHERE aedb_queue_internal.can_read(q.name);
GRANT SELECT ON aedb_queue.tasks, aedb_queue.queue_stats TO aedb_queue_admin;
