-- aedb_queue upgrade 0.7.0 -> 0.8.0, run once by
--   ALTER EXTENSION aedb_queue UPDATE;   (or UPDATE TO '0.8.0')
-- inside that statement's transaction, with search_path set to aedb_queue.
--
-- Rules (docs/upgrades.md): as in aedb_queue--0.1.0--0.2.0.sql. Plain DDL
-- against exactly the 0.7.0 schema; the result must equal a fresh CREATE
-- EXTENSION at 0.8.0 (scripts/upgrade_test.sh compares pg_dump of both);
-- a section per change, below the last one.

\echo Use "ALTER EXTENSION aedb_queue UPDATE TO '0.8.0'" to load this file. \quit

-- 0.8.0 is the dashboard and metrics (issue 14).

-- 1. What dashboards read: per-queue counters kept in shared memory, each
-- queue's access for the session, a task by id or idempotency key.
CREATE  FUNCTION "queue_access"() RETURNS TABLE (
	"queue" TEXT,  /* String */
	"produce" bool,  /* bool */
	"work" bool,  /* bool */
	"administer" bool  /* bool */
)
STRICT STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_access_wrapper';

CREATE  FUNCTION "queue_counters"() RETURNS TABLE (
	"queue" TEXT,  /* Option < String > */
	"enqueued" bigint,  /* i64 */
	"completed" bigint,  /* i64 */
	"failed" bigint,  /* i64 */
	"dead_lettered" bigint,  /* i64 */
	"reclaimed" bigint,  /* i64 */
	"cancelled" bigint,  /* i64 */
	"since" timestamp with time zone  /* TimestampWithTimeZone */
)
STRICT STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_counters_wrapper';

CREATE  FUNCTION "queue_write_path"() RETURNS TABLE (
	"operation" TEXT,  /* String */
	"direct" bool,  /* bool */
	"reason" TEXT  /* Option < String > */
)
STRICT
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_write_path_wrapper';

CREATE  FUNCTION "queue_find"(
	"task_id" bigint DEFAULT NULL, /* Option < i64 > */
	"idempotency_key" TEXT DEFAULT NULL, /* Option < & str > */
	"queue" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS SETOF aedb_queue.task_row /* RawTaskRow */
STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_find_wrapper';

-- 2. queue_overview: bounded counts with planner estimates past the limit.
-- queue_overview: the figures of aedb_queue.queue_stats at a bounded cost,
-- for dashboards and metrics that look often at queues of any size.
--
-- Each count reads at most exact_limit entries of one partial index range
-- of its queue. A count that reaches the limit is replaced by the
-- planner's estimate of that state's rows in the queue (never below the
-- limit) and named in `estimated`; exact_limit => 1000 bounds a call to a
-- few thousand index entries per queue. oldest_ready_age is the age of
-- the queue's next task in service order (the head of the ready index):
-- the oldest ready task in a FIFO queue without priorities. queue_name:
-- that queue alone (a page about one queue).

-- The planner's rows for one figure of one queue. The statements are
-- constants; `figure` only picks one.
CREATE FUNCTION aedb_queue_internal.estimated_tasks(figure text, queue text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
    plan json;
BEGIN
    CASE figure
    WHEN 'ready' THEN
        EXECUTE 'EXPLAIN (FORMAT JSON) SELECT FROM aedb_queue.task t WHERE t.queue = $1 AND t.state = ''ready'''
            INTO plan USING queue;
    WHEN 'scheduled' THEN
        EXECUTE 'EXPLAIN (FORMAT JSON) SELECT FROM aedb_queue.task t WHERE t.queue = $1 AND t.state = ''scheduled'''
            INTO plan USING queue;
    WHEN 'in_flight' THEN
        EXECUTE 'EXPLAIN (FORMAT JSON) SELECT FROM aedb_queue.task t WHERE t.queue = $1 AND t.state = ''in_flight'' AND t.lease_deadline IS NOT NULL'
            INTO plan USING queue;
    WHEN 'expired_leases' THEN
        EXECUTE 'EXPLAIN (FORMAT JSON) SELECT FROM aedb_queue.task t WHERE t.queue = $1 AND t.state = ''in_flight'' AND t.lease_deadline IS NOT NULL AND t.lease_deadline < now()'
            INTO plan USING queue;
    WHEN 'dead' THEN
        EXECUTE 'EXPLAIN (FORMAT JSON) SELECT FROM aedb_queue.task t WHERE t.queue = $1 AND t.state = ''dead'''
            INTO plan USING queue;
    WHEN 'waiting' THEN
        EXECUTE 'EXPLAIN (FORMAT JSON) SELECT FROM aedb_queue.task t WHERE t.queue = $1 AND t.state > ''dead'' AND t.waiting_on > 0'
            INTO plan USING queue;
    WHEN 'blocked' THEN
        EXECUTE 'EXPLAIN (FORMAT JSON) SELECT FROM aedb_queue.task t WHERE t.queue = $1 AND t.state > ''dead'' AND t.waiting_on = 0'
            INTO plan USING queue;
    WHEN 'completed_kept' THEN
        EXECUTE 'EXPLAIN (FORMAT JSON) SELECT FROM aedb_queue.completed_task c WHERE c.queue = $1'
            INTO plan USING queue;
    END CASE;
    RETURN round((plan -> 0 -> 'Plan' ->> 'Plan Rows')::float8)::bigint;
END
$body$;

CREATE FUNCTION aedb_queue.queue_overview(exact_limit integer DEFAULT 1000, queue_name text DEFAULT NULL)
RETURNS TABLE(queue text, paused boolean, waiting bigint, scheduled bigint, blocked bigint,
              ready bigint, in_flight bigint, dead bigint, completed_kept bigint,
              estimated text[], oldest_ready_age interval, next_due timestamptz,
              expired_leases bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
    r record;
    figure text;
    exact bigint;
    read bigint;
BEGIN
    IF exact_limit IS NULL OR exact_limit < 1 OR exact_limit > 1000000 THEN
        RAISE EXCEPTION 'invalid argument "exact_limit": must be between 1 and 1000000'
            USING ERRCODE = '22023';
    END IF;
    FOR r IN
        SELECT q.name, q.paused,
               h.held, h.waiting,
               (SELECT count(*) FROM (SELECT FROM aedb_queue.task t
                  WHERE t.queue = q.name AND t.state = 'scheduled' LIMIT exact_limit) s) AS scheduled,
               (SELECT count(*) FROM (SELECT FROM aedb_queue.task t
                  WHERE t.queue = q.name AND t.state = 'ready' LIMIT exact_limit) s) AS ready,
               (SELECT count(*) FROM (SELECT FROM aedb_queue.task t
                  WHERE t.queue = q.name AND t.state = 'in_flight' AND t.lease_deadline IS NOT NULL
                  LIMIT exact_limit) s) AS in_flight,
               (SELECT count(*) FROM (SELECT FROM aedb_queue.task t
                  WHERE t.queue = q.name AND t.state = 'dead' LIMIT exact_limit) s) AS dead,
               (SELECT count(*) FROM (SELECT FROM aedb_queue.completed_task c
                  WHERE c.queue = q.name LIMIT exact_limit) s) AS completed_kept,
               (SELECT count(*) FROM (SELECT FROM aedb_queue.task t
                  WHERE t.queue = q.name AND t.state = 'in_flight' AND t.lease_deadline IS NOT NULL
                    AND t.lease_deadline < now() LIMIT exact_limit) s) AS expired_leases,
               -- never negative: a task may be stamped after this
               -- transaction's now()
               (SELECT greatest(now() - t.created_at, interval '0') FROM aedb_queue.task t
                 WHERE t.queue = q.name AND t.state = 'ready'
                 ORDER BY t.priority DESC, (-coalesce(t.fair_vt, t.task_id)) DESC
                 LIMIT 1) AS oldest_ready_age,
               (SELECT min(t.not_before) FROM aedb_queue.task t
                 WHERE t.queue = q.name AND t.state = 'scheduled') AS next_due
          FROM aedb_queue.queue q
          -- Waiting and blocked tasks share one index range: the first
          -- exact_limit entries are split between them.
          CROSS JOIN LATERAL (
              SELECT count(*) AS held, count(*) FILTER (WHERE w.waiting_on > 0) AS waiting
                FROM (SELECT t.waiting_on FROM aedb_queue.task t
                       WHERE t.queue = q.name AND t.state > 'dead'
                       LIMIT exact_limit) w) h
         WHERE (queue_name IS NULL OR q.name = queue_name)
           AND aedb_queue_internal.can_read(q.name)
         ORDER BY q.name
    LOOP
        queue := r.name;
        paused := r.paused;
        estimated := '{}';
        oldest_ready_age := r.oldest_ready_age;
        next_due := r.next_due;
        FOREACH figure IN ARRAY ARRAY['waiting', 'blocked', 'scheduled', 'ready', 'in_flight',
                                      'dead', 'completed_kept', 'expired_leases'] LOOP
            exact := CASE figure
                WHEN 'waiting' THEN r.waiting
                WHEN 'blocked' THEN r.held - r.waiting
                WHEN 'scheduled' THEN r.scheduled
                WHEN 'ready' THEN r.ready
                WHEN 'in_flight' THEN r.in_flight
                WHEN 'dead' THEN r.dead
                WHEN 'completed_kept' THEN r.completed_kept
                ELSE r.expired_leases END;
            read := CASE WHEN figure IN ('waiting', 'blocked') THEN r.held ELSE exact END;
            -- The range was cut short: this figure may be larger.
            IF read >= exact_limit THEN
                exact := greatest(exact, aedb_queue_internal.estimated_tasks(figure, r.name));
                estimated := estimated || figure;
            END IF;
            CASE figure
                WHEN 'waiting' THEN waiting := exact;
                WHEN 'blocked' THEN blocked := exact;
                WHEN 'scheduled' THEN scheduled := exact;
                WHEN 'ready' THEN ready := exact;
                WHEN 'in_flight' THEN in_flight := exact;
                WHEN 'dead' THEN dead := exact;
                WHEN 'completed_kept' THEN completed_kept := exact;
                ELSE expired_leases := exact;
            END CASE;
        END LOOP;
        RETURN NEXT;
    END LOOP;
END
$body$;

-- 3. Grants, as sql/security.sql gives them on a fresh install.
REVOKE ALL ON FUNCTION aedb_queue_internal.estimated_tasks FROM PUBLIC;
REVOKE ALL ON FUNCTION "queue_overview", "queue_counters", "queue_access", "queue_find", "queue_write_path" FROM PUBLIC;
GRANT EXECUTE ON FUNCTION "queue_write_path" TO aedb_queue_admin;
GRANT EXECUTE ON FUNCTION "queue_overview", "queue_counters", "queue_access", "queue_find"
    TO aedb_queue_worker, aedb_queue_admin;

-- 4. A task's error history and its children (the dashboard's task page):
-- column task.errors at the end of the table (no rewrite: NULL until a
-- task fails), queue_errors and queue_children.
ALTER TABLE aedb_queue.task ADD COLUMN errors jsonb;

CREATE  FUNCTION "queue_children"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint /* Option < i64 > */
) RETURNS SETOF aedb_queue.task_row /* RawTaskRow */
STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_children_wrapper';

CREATE  FUNCTION "queue_errors"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint /* Option < i64 > */
) RETURNS TABLE (
	"attempt" INT,  /* Option < i32 > */
	"failed_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"error" TEXT  /* Option < String > */
)
STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_errors_wrapper';

REVOKE ALL ON FUNCTION "queue_children", "queue_errors" FROM PUBLIC;
GRANT EXECUTE ON FUNCTION "queue_children", "queue_errors" TO aedb_queue_worker, aedb_queue_admin;

-- 5. Shard numbers for the router (issue 16, docs/scale-out.md): queue_shard
-- and queue_shard_assign, as in sql/shard.sql.
-- This node's shard number, read off the task id sequence.
CREATE FUNCTION aedb_queue.queue_shard() RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT (s.seqmin OPERATOR(pg_catalog.>>) 48)::integer FROM pg_catalog.pg_sequence s
     WHERE s.seqrelid = 'aedb_queue.task_id_seq'::regclass
$$;

-- Makes this node shard `shard` (superusers only: it sets the sequence).
-- Refused while the node holds tasks numbered outside the shard's range,
-- which a router would send elsewhere; true if it changed anything.
CREATE FUNCTION aedb_queue.queue_shard_assign(shard integer) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    low bigint;
    high bigint;
BEGIN
    IF shard IS NULL THEN
        RAISE EXCEPTION 'argument "shard" must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF shard NOT BETWEEN 1 AND 32767 THEN
        RAISE EXCEPTION 'invalid argument "shard": % is not between 1 and 32767', shard
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
        RAISE EXCEPTION 'permission denied to assign a shard number: superusers only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF aedb_queue.queue_shard() = shard THEN
        RETURN false;
    END IF;
    low := shard::bigint << 48;
    high := low + (1::bigint << 48) - 1;
    -- Lock out enqueues while the check and the change happen together.
    LOCK TABLE aedb_queue.task, aedb_queue.completed_task, aedb_queue.idempotency_key IN SHARE MODE;
    IF EXISTS (SELECT FROM aedb_queue.task t WHERE t.task_id NOT BETWEEN low AND high)
       OR EXISTS (SELECT FROM aedb_queue.completed_task c WHERE c.task_id NOT BETWEEN low AND high)
       OR EXISTS (SELECT FROM aedb_queue.idempotency_key k WHERE k.task_id NOT BETWEEN low AND high) THEN
        RAISE EXCEPTION 'this node holds tasks numbered outside shard %''s range', shard
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Assign the shard number before the node takes tasks, or drain it first.';
    END IF;
    EXECUTE pg_catalog.format(
        'ALTER SEQUENCE aedb_queue.task_id_seq MINVALUE %s MAXVALUE %s START WITH %s RESTART WITH %s',
        low + 1, high, low + 1, low + 1);
    RETURN true;
END
$$;

REVOKE ALL ON FUNCTION aedb_queue.queue_shard, aedb_queue.queue_shard_assign FROM PUBLIC;
GRANT EXECUTE ON FUNCTION aedb_queue.queue_shard TO aedb_queue_producer, aedb_queue_worker, aedb_queue_admin;
GRANT EXECUTE ON FUNCTION aedb_queue.queue_shard_assign TO aedb_queue_admin;
