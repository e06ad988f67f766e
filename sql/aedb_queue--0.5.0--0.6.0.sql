-- aedb_queue upgrade 0.5.0 -> 0.6.0, run once by
--   ALTER EXTENSION aedb_queue UPDATE;   (or UPDATE TO '0.6.0')
-- inside that statement's transaction, with search_path set to aedb_queue.
--
-- Rules (docs/upgrades.md): as in aedb_queue--0.1.0--0.2.0.sql. Plain DDL
-- against exactly the 0.5.0 schema; the result must equal a fresh CREATE
-- EXTENSION at 0.6.0 (scripts/upgrade_test.sh compares pg_dump of both);
-- a section per change, below the last one.

\echo Use "ALTER EXTENSION aedb_queue UPDATE TO '0.6.0'" to load this file. \quit

-- 0.6.0 is flow control (issue 12): concurrency keys, ordering keys, rate
-- limits, fair share. No schema change has landed yet.
