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
