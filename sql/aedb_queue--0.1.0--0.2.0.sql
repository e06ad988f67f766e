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

-- == 2. queue_list reads ready tasks in the ready index's order (4e69d04) ====
-- Same signature; the body is sql/inspect.sql's, verbatim.
CREATE OR REPLACE FUNCTION aedb_queue.queue_list(queue text, state text DEFAULT NULL, "limit" int DEFAULT 100)
RETURNS SETOF aedb_queue.tasks
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    PERFORM aedb_queue.check_list_args($1, $2, $3);
    RETURN QUERY
    (SELECT * FROM aedb_queue.tasks t
      WHERE t.queue = $1 AND t.state = 'ready' AND ($2 IS NULL OR $2 = 'ready')
      ORDER BY t.priority DESC, -t.task_id DESC LIMIT $3)
    UNION ALL
    (SELECT * FROM aedb_queue.tasks t
      WHERE t.queue = $1 AND t.state = 'in_flight' AND ($2 IS NULL OR $2 = 'in_flight')
      ORDER BY t.lease_deadline LIMIT $3)
    UNION ALL
    (SELECT * FROM aedb_queue.tasks t
      WHERE t.queue = $1 AND t.state = 'scheduled' AND ($2 IS NULL OR $2 = 'scheduled')
      ORDER BY t.not_before LIMIT $3)
    UNION ALL
    (SELECT * FROM aedb_queue.tasks t
      WHERE t.queue = $1 AND t.state = 'dead' AND ($2 IS NULL OR $2 = 'dead')
      ORDER BY t.task_id LIMIT $3)
    LIMIT $3;
END
$$;

-- == Next change: add its section here ======================================
