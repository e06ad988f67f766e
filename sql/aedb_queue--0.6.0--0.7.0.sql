-- aedb_queue upgrade 0.6.0 -> 0.7.0, run once by
--   ALTER EXTENSION aedb_queue UPDATE;   (or UPDATE TO '0.7.0')
-- inside that statement's transaction, with search_path set to aedb_queue.
--
-- Rules (docs/upgrades.md): as in aedb_queue--0.1.0--0.2.0.sql. Plain DDL
-- against exactly the 0.6.0 schema; the result must equal a fresh CREATE
-- EXTENSION at 0.7.0 (scripts/upgrade_test.sh compares pg_dump of both);
-- a section per change, below the last one.

\echo Use "ALTER EXTENSION aedb_queue UPDATE TO '0.7.0'" to load this file. \quit

-- 0.7.0 is worker runtimes (issue 13).

-- 1. queue_release: a worker hands a leased task back without spending an
-- attempt (graceful shutdown). Workers and admins may call it.
CREATE FUNCTION "queue_release"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint, /* Option < i64 > */
	"fencing_token" bigint, /* Option < i64 > */
	"delay" interval DEFAULT '0', /* Option < pgrx::datum::interval::Interval > */
	"strict" bool DEFAULT false /* Option < bool > */
) RETURNS aedb_queue.outcome /* aedb_queue::outcome::Outcome */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_release_wrapper';

REVOKE ALL ON FUNCTION "queue_release" FROM PUBLIC;
GRANT EXECUTE ON FUNCTION "queue_release" TO aedb_queue_worker, aedb_queue_admin;
