-- Shard numbers (docs/scale-out.md). A node given shard number n numbers its
-- tasks n * 2^48 + 1 .. (n + 1) * 2^48 - 1, so any task id names the node
-- that holds it (task_id >> 48) and a router sends each call on a task
-- there. An unsharded node is shard 0: its ids start at 1. Both functions
-- run with a fixed search_path and name their operators: a superuser calls
-- them, and an operator a role put in another schema must not run as one.

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
