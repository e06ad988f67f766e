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
