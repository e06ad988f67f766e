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
-- the background-worker reaper. No schema change has landed yet.
