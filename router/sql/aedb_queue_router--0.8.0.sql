-- aedb_queue_router 0.8.0: the queue API over several aedb_queue shards, on PL/Proxy.
-- Installed in a router database: CREATE EXTENSION plproxy; CREATE EXTENSION aedb_queue_router;
-- The model and its rules: docs/scale-out.md.
--
-- Layout: schema aedb_queue holds the API under the extension's names and
-- arguments; schema aedb_queue_shard holds the shard registry, the routing
-- rules and one PL/Proxy function per remote call (shard number first).
-- Every call runs on its shard as the caller (PL/Proxy connects as
-- current_user), so each shard's own grants and confinement decide; the
-- router holds no rights and no queue data.

\echo Use "CREATE EXTENSION aedb_queue_router" to load this file. \quit

CREATE SCHEMA aedb_queue_shard;

-- The shard's types, defined as on the shards (sql/schema.sql); results
-- travel as text (disable_binary), so only names and order must agree.
CREATE TYPE aedb_queue.outcome AS ENUM ('applied', 'lease_lost');
CREATE TYPE aedb_queue.enqueued AS (task_id bigint, deduplicated boolean);
CREATE TYPE aedb_queue.task_row AS (
    task_id         bigint,
    queue           text,
    state           text,
    not_before      timestamptz,
    priority        bigint,
    attempts        integer,
    max_attempts    integer,
    owner_id        text,
    fencing_token   bigint,
    lease_deadline  timestamptz,
    payload         jsonb,
    progress        jsonb,
    last_error      text,
    idempotency_key text,
    backoff_base    interval,
    backoff_max     interval,
    created_at      timestamptz,
    updated_at      timestamptz,
    result          jsonb,
    completed_at    timestamptz
);

-- ---------------------------------------------------------------------------
-- 1. The shard registry. Shard n's task ids are n * 2^48 + 1 .. (n + 1) * 2^48 - 1
-- (aedb_queue.queue_shard_assign on the shard), so an id names its shard.

CREATE TABLE aedb_queue_shard.shard (
    shard    integer PRIMARY KEY CHECK (shard BETWEEN 1 AND 32767),
    -- The connection string lives in the shard's server definition only
    -- (it may name a password; this table is readable by every caller).
    added_at timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('aedb_queue_shard.shard', '');

-- The PL/Proxy cluster (a SQL/MED server) of a shard; every remote call
-- names its shard through this. PL/Proxy connects to the shard as the
-- current role alone, while a direct call checks the login role too (a
-- confined login stays confined after SET ROLE): so the router takes calls
-- only from a session running as the role it logged in with.
CREATE FUNCTION aedb_queue_shard.server_of(shard integer) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF session_user <> current_user
       AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user) THEN
        RAISE EXCEPTION 'permission denied: the router calls shards as role "%", but this session logged in as "%"',
            current_user, session_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Connect to the router as the role that should do the work (SET ROLE is not carried to the shards).';
    END IF;
    RETURN 'aedb_shard_' || shard;
END
$$;

-- The routing helpers below are PL/pgSQL rather than SQL functions: a SQL
-- function with a FROM or a subquery is not inlined into a PL/pgSQL
-- expression and is planned again in every transaction, which through the
-- router is every call (0.32 ms for shard_of as SQL against 0.10 ms as
-- PL/pgSQL, whose plans the session keeps; pgbench -M prepared, one client,
-- SELECT 1 at 0.07 ms).
CREATE FUNCTION aedb_queue_shard.shards() RETURNS SETOF integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT s.shard FROM aedb_queue_shard.shard s ORDER BY s.shard;
END
$$;

-- The shard that holds a task: its id's top bits. An id no registered
-- shard holds (and NULL) goes to the first shard, which answers as a direct
-- call does for a task that does not exist, after the same argument checks.
CREATE FUNCTION aedb_queue_shard.shard_of(task_id bigint) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
DECLARE
    found_shard integer;
BEGIN
    SELECT s.shard INTO found_shard FROM aedb_queue_shard.shard s WHERE s.shard = task_id >> 48;
    IF found_shard IS NULL THEN
        SELECT min(s.shard) INTO found_shard FROM aedb_queue_shard.shard s;
    END IF;
    RETURN found_shard;
END
$$;

-- The shard a routing key belongs to: rendezvous hashing (the highest
-- hash of key and shard wins), so adding a shard moves about 1/N of keys.
CREATE FUNCTION aedb_queue_shard.shard_for_key(key text) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT s.shard FROM aedb_queue_shard.shard s
            ORDER BY pg_catalog.hashtext(key || '/' || s.shard) DESC, s.shard LIMIT 1);
END
$$;

-- The shards in this session's turn order for `kind` (claim, enqueue):
-- starting after the last shard that served, so a session spreads its
-- calls over the shards. A new session starts at the shard its backend's
-- pid picks, so sessions that make one call each (short-lived producers)
-- spread too, and workers started together do not all drain one shard
-- first.
CREATE FUNCTION aedb_queue_shard.rotation(kind text) RETURNS SETOF integer
LANGUAGE plpgsql STABLE AS $$
DECLARE
    shards integer[] := ARRAY(SELECT s.shard FROM aedb_queue_shard.shard s ORDER BY s.shard);
    n integer := cardinality(shards);
    last integer := nullif(pg_catalog.current_setting('aedb_queue_router.last_' || kind, true), '')::integer;
    first integer := 1;  -- the index in shards to start from
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF last IS NULL THEN
        first := pg_catalog.pg_backend_pid() % n + 1;
    ELSE
        FOR i IN 1 .. n LOOP
            IF shards[i] > last THEN
                first := i;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    FOR k IN 0 .. n - 1 LOOP
        RETURN NEXT shards[(first - 1 + k) % n + 1];
    END LOOP;
END
$$;

-- How a task with no routing key is placed: 'spread' (the default: the next
-- shard in this session's turn, so one queue's load spreads over every
-- shard) or 'by_queue' (the shard its queue's name hashes to, so each queue
-- keeps one order on one shard and only different queues spread). Set
-- aedb_queue_router.unkeyed_enqueues per database, role or session.
CREATE FUNCTION aedb_queue_shard.by_queue() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    mode text := coalesce(nullif(pg_catalog.current_setting('aedb_queue_router.unkeyed_enqueues', true), ''), 'spread');
BEGIN
    IF mode NOT IN ('spread', 'by_queue') THEN
        RAISE EXCEPTION 'invalid value for setting "aedb_queue_router.unkeyed_enqueues": "%"', mode
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use ''spread'' or ''by_queue''.';
    END IF;
    RETURN mode = 'by_queue';
END
$$;

-- The shards a claim tries, in order: its queue's own shard first when
-- unkeyed tasks go by queue, then this session's turn.
CREATE FUNCTION aedb_queue_shard.claim_order(queue text) RETURNS SETOF integer
LANGUAGE plpgsql STABLE AS $$
DECLARE
    own integer;
    s integer;
BEGIN
    IF aedb_queue_shard.by_queue() THEN
        own := aedb_queue_shard.shard_for_key(queue);
        IF own IS NOT NULL THEN
            RETURN NEXT own;
        END IF;
    END IF;
    FOR s IN SELECT aedb_queue_shard.rotation('claim') LOOP
        IF s IS DISTINCT FROM own THEN
            RETURN NEXT s;
        END IF;
    END LOOP;
END
$$;

CREATE FUNCTION aedb_queue_shard.served(kind text, shard integer) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_catalog.set_config('aedb_queue_router.last_' || kind, shard::text, false)
$$;

-- Whether an error is PL/Proxy's own (no connection, a timeout) rather than
-- one the shard raised: then the shard is unavailable, not the call wrong.
CREATE FUNCTION aedb_queue_shard.is_unavailable(code text, message text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT code = 'XX000' AND message LIKE 'PL/Proxy function %' AND message NOT LIKE '%REMOTE ERROR:%'
$$;

-- Whether nothing reached the shard (the connection itself failed), so an
-- unkeyed enqueue may go to another shard without making a duplicate.
CREATE FUNCTION aedb_queue_shard.never_sent(code text, message text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT aedb_queue_shard.is_unavailable(code, message)
       AND (message LIKE '%PQconnectPoll%' OR message LIKE '%PQconnectStart%' OR message LIKE '%connect timeout%')
$$;

-- Re-raises an error from shard `shard` as the caller should see it: the
-- shard's own SQLSTATE, message, detail and hint (PL/Proxy's prefix cut),
-- or 08006 when the shard could not be reached.
CREATE FUNCTION aedb_queue_shard.reraise(shard integer, code text, message text, detail text, hint text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF aedb_queue_shard.is_unavailable(code, message) THEN
        RAISE EXCEPTION 'shard % is unavailable', shard
            USING ERRCODE = 'connection_failure',
                  DETAIL = message,
                  HINT = 'Its tasks are unavailable until it is back; claims through the router go on from the other shards.';
    END IF;
    message := coalesce(substring(message FROM 'REMOTE ERROR: (.*)$'), message);
    detail := concat_ws(E'\n', nullif(regexp_replace(detail, '^Remote detail: ', ''), ''), 'on shard ' || shard);
    hint := regexp_replace(hint, '^Remote hint: ', '');
    IF coalesce(hint, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail;
    END IF;
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail, HINT = hint;
END
$$;

-- ---------------------------------------------------------------------------
-- 2. One PL/Proxy function per remote call: shard number first, then the
-- call's own arguments, run as `SELECT ... FROM aedb_queue.<call>(...)` on
-- that shard in a transaction of its own.

CREATE FUNCTION aedb_queue_shard.queue_shard(shard integer) RETURNS integer AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_shard();
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_enqueue(shard integer, queue text, payload jsonb, delay interval,
    priority bigint, max_attempts integer, backoff_base interval, backoff_max interval, idempotency_key text,
    wait_for bigint[], on_parent_failure text, concurrency_key text, ordering_key text, fairness_key text)
RETURNS SETOF aedb_queue.enqueued AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT (e).task_id, (e).deduplicated FROM aedb_queue.queue_enqueue($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) e;
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_enqueue_batch(shard integer, queue text, payloads jsonb[], delay interval,
    priority bigint, max_attempts integer, backoff_base interval, backoff_max interval, wait_for bigint[],
    on_parent_failure text, concurrency_key text, ordering_key text, fairness_key text)
RETURNS SETOF bigint AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_enqueue_batch($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_claim(shard integer, queue text, owner_id text, lease interval, max integer)
RETURNS TABLE(task_id bigint, payload jsonb, attempts integer, fencing_token bigint, lease_deadline timestamptz,
              priority bigint, enqueued_at timestamptz, progress jsonb) AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_claim($2, $3, $4, $5);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_complete(shard integer, queue text, task_id bigint, fencing_token bigint,
    result jsonb, follow_ups jsonb, strict boolean)
RETURNS aedb_queue.outcome AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_complete($2, $3, $4, $5, $6, $7);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_complete_batch(shard integer, queue text, task_ids bigint[],
    fencing_tokens bigint[], strict boolean)
RETURNS TABLE(task_id bigint, outcome aedb_queue.outcome) AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_complete_batch($2, $3, $4, $5);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_fail(shard integer, queue text, task_id bigint, fencing_token bigint,
    error text, retry_in interval, dead_letter boolean)
RETURNS aedb_queue.outcome AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_fail($2, $3, $4, $5, $6, $7);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_complete_and_claim(shard integer, queue text, owner_id text,
    held_task_id bigint, held_fencing_token bigint, result jsonb, follow_ups jsonb, strict boolean,
    lease interval, max integer)
RETURNS TABLE(settled aedb_queue.outcome, task_id bigint, payload jsonb, attempts integer, fencing_token bigint,
              lease_deadline timestamptz, priority bigint, enqueued_at timestamptz, progress jsonb) AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_complete_and_claim($2, $3, $4, $5, $6, $7, $8, $9, $10);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_fail_and_claim(shard integer, queue text, owner_id text,
    held_task_id bigint, held_fencing_token bigint, error text, retry_in interval, dead_letter boolean,
    strict boolean, lease interval, max integer)
RETURNS TABLE(settled aedb_queue.outcome, task_id bigint, payload jsonb, attempts integer, fencing_token bigint,
              lease_deadline timestamptz, priority bigint, enqueued_at timestamptz, progress jsonb) AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_fail_and_claim($2, $3, $4, $5, $6, $7, $8, $9, $10, $11);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_heartbeat(shard integer, queue text, task_id bigint, fencing_token bigint,
    extend interval, progress jsonb)
RETURNS aedb_queue.outcome AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_heartbeat($2, $3, $4, $5, $6);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_release(shard integer, queue text, task_id bigint, fencing_token bigint,
    delay interval, strict boolean)
RETURNS aedb_queue.outcome AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_release($2, $3, $4, $5, $6);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_cancel(shard integer, queue text, task_id bigint) RETURNS boolean AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_cancel($2, $3);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_get(shard integer, queue text, task_id bigint)
RETURNS SETOF aedb_queue.task_row AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_get($2, $3);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_parents(shard integer, queue text, task_id bigint)
RETURNS SETOF aedb_queue.task_row AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_parents($2, $3);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_children(shard integer, queue text, task_id bigint)
RETURNS SETOF aedb_queue.task_row AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_children($2, $3);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_errors(shard integer, queue text, task_id bigint)
RETURNS TABLE(attempt integer, failed_at timestamptz, error text) AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_errors($2, $3);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_list(shard integer, queue text, state text, "limit" integer)
RETURNS SETOF aedb_queue.task_row AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_list($2, $3, $4);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_find(shard integer, task_id bigint, idempotency_key text, queue text)
RETURNS SETOF aedb_queue.task_row AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_find($2, $3, $4);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_overview(shard integer, exact_limit integer, queue_name text)
RETURNS TABLE(queue text, paused boolean, waiting bigint, scheduled bigint, blocked bigint, ready bigint,
              in_flight bigint, dead bigint, completed_kept bigint, estimated text[], oldest_ready_age interval,
              next_due timestamptz, expired_leases bigint) AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_overview($2, $3);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_counters(shard integer)
RETURNS TABLE(queue text, enqueued bigint, completed bigint, failed bigint, dead_lettered bigint,
              reclaimed bigint, cancelled bigint, since timestamptz) AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_counters();
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_access(shard integer)
RETURNS TABLE(queue text, produce boolean, work boolean, administer boolean) AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_access();
$$ LANGUAGE plproxy;

-- Operator calls, each applied shard by shard (section 4).
CREATE FUNCTION aedb_queue_shard.queue_pause(shard integer, queue text) RETURNS boolean AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_pause($2);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_resume(shard integer, queue text) RETURNS boolean AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_resume($2);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_configure_key(shard integer, queue text, concurrency_key text, concurrency_limit integer) RETURNS boolean AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_configure_key($2, $3, $4);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_configure_fairness(shard integer, queue text, fairness_key text, weight integer) RETURNS boolean AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_configure_fairness($2, $3, $4);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_retry_dead(shard integer, queue text, task_id bigint, max integer) RETURNS bigint AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_retry_dead($2, $3, $4);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_purge(shard integer, queue text, state text, force boolean) RETURNS bigint AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_purge($2, $3, $4);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_grant(shard integer, queue_pattern text, role text, privilege text) RETURNS boolean AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_grant($2, $3, $4);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_revoke(shard integer, queue_pattern text, role text, privilege text) RETURNS boolean AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_revoke($2, $3, $4);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_confine(shard integer, role text) RETURNS boolean AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_confine($2);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_unconfine(shard integer, role text) RETURNS boolean AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT aedb_queue.queue_unconfine($2);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_reap(shard integer, queue text, max integer)
RETURNS TABLE(promoted bigint, reclaimed bigint, dead_lettered bigint, fired bigint) AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_reap($2, $3);
$$ LANGUAGE plproxy;

CREATE FUNCTION aedb_queue_shard.queue_configure(shard integer, queue text, max_attempts integer,
    backoff_base interval, backoff_max interval, default_lease interval, max_payload_bytes integer,
    keep_completed interval, keep_idempotency_keys interval, notify boolean, reset boolean,
    concurrency_limit integer, rate_limit integer, rate_interval interval, rate_burst integer,
    ordering_on_dead text, fair_share boolean)
RETURNS TABLE(queue text, max_attempts integer, backoff_base interval, backoff_max interval,
              default_lease interval, max_payload_bytes integer, keep_completed interval,
              keep_idempotency_keys interval, notify boolean, paused boolean, concurrency_limit integer,
              rate_limit integer, rate_interval interval, rate_burst integer, ordering_on_dead text,
              fair_share boolean) AS $$
    CLUSTER aedb_queue_shard.server_of(shard); RUN ON 0;
    SELECT * FROM aedb_queue.queue_configure($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17);
$$ LANGUAGE plproxy;

-- ---------------------------------------------------------------------------
-- 3. The worker and producer surface, under the extension's names.

-- The key an enqueue is placed by: its shard_key; else, when unkeyed tasks
-- go by queue, its queue (which keeps every per-queue key on one shard);
-- else the first of its ordering, concurrency and idempotency keys (each
-- of which must stay on one shard to mean anything). NULL: spread.
CREATE FUNCTION aedb_queue_shard.routing_key(queue text, shard_key text, ordering_key text,
    concurrency_key text, idempotency_key text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN shard_key IS NOT NULL THEN shard_key
                WHEN aedb_queue_shard.by_queue() THEN queue
                ELSE coalesce(ordering_key, concurrency_key, idempotency_key) END
$$;

-- Where an enqueue may go, in the order to try: the parents' shard when the
-- task waits for others (a task waits only for tasks of its own shard; an
-- explicit shard_key must agree), else the shard of its routing key, else
-- every shard in this session's turn (the caller moves on only when nothing
-- reached a shard).
CREATE FUNCTION aedb_queue_shard.enqueue_shards(wait_for bigint[], shard_key text, key text)
RETURNS SETOF integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    parents integer[];
    first_parent bigint;
BEGIN
    SELECT array_agg(DISTINCT (p >> 48)::integer ORDER BY (p >> 48)::integer), min(p)
      INTO parents, first_parent
      FROM unnest(wait_for) p WHERE p IS NOT NULL;
    IF cardinality(parents) > 1 THEN
        RAISE EXCEPTION 'invalid argument "wait_for": parents on shards %; a task waits only for tasks of its own shard',
            array_to_string(parents, ', ')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF first_parent IS NOT NULL THEN
        IF shard_key IS NOT NULL AND aedb_queue_shard.shard_for_key(shard_key) <> parents[1] THEN
            RAISE EXCEPTION 'invalid argument "shard_key": it belongs to shard %, the parents in "wait_for" are on shard %',
                aedb_queue_shard.shard_for_key(shard_key), parents[1]
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'A child goes to its parents'' shard: leave shard_key out.';
        END IF;
        RETURN NEXT aedb_queue_shard.shard_of(first_parent);
    ELSIF key IS NOT NULL THEN
        RETURN NEXT aedb_queue_shard.shard_for_key(key);
    ELSE
        RETURN QUERY SELECT aedb_queue_shard.rotation('enqueue');
    END IF;
END
$$;

CREATE FUNCTION aedb_queue.queue_enqueue(queue text, payload jsonb DEFAULT NULL, delay interval DEFAULT '0',
    priority bigint DEFAULT 0, max_attempts integer DEFAULT NULL, backoff_base interval DEFAULT NULL,
    backoff_max interval DEFAULT NULL, idempotency_key text DEFAULT NULL, wait_for bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'dead_letter', concurrency_key text DEFAULT NULL,
    ordering_key text DEFAULT NULL, fairness_key text DEFAULT NULL, shard_key text DEFAULT NULL)
RETURNS aedb_queue.enqueued LANGUAGE plpgsql AS $$
DECLARE
    key text := aedb_queue_shard.routing_key(queue, shard_key, ordering_key, concurrency_key, idempotency_key);
    s integer;
    done aedb_queue.enqueued;
    code text; message text; detail text; hint text;
    first_failed integer;
BEGIN
    FOR s IN SELECT aedb_queue_shard.enqueue_shards(wait_for, shard_key, key) LOOP
        BEGIN
            SELECT * INTO STRICT done FROM aedb_queue_shard.queue_enqueue(s, queue, payload, delay, priority,
                max_attempts, backoff_base, backoff_max, idempotency_key, wait_for, on_parent_failure,
                concurrency_key, ordering_key, fairness_key);
            PERFORM aedb_queue_shard.served('enqueue', s);
            RETURN done;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            -- Only an unkeyed task whose shard never saw it may go elsewhere.
            IF NOT aedb_queue_shard.never_sent(code, message)
               OR key IS NOT NULL OR wait_for IS NOT NULL THEN
                PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
            END IF;
            first_failed := coalesce(first_failed, s);
        END;
    END LOOP;
    IF first_failed IS NULL THEN
        RAISE EXCEPTION 'this router has no shards' USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'Add one with aedb_queue.queue_router_add_shard(shard, conninfo).';
    END IF;
    RAISE EXCEPTION 'every shard is unavailable' USING ERRCODE = 'connection_failure', DETAIL = message;
END
$$;

CREATE FUNCTION aedb_queue.queue_enqueue_batch(queue text, payloads jsonb[], delay interval DEFAULT '0',
    priority bigint DEFAULT 0, max_attempts integer DEFAULT NULL, backoff_base interval DEFAULT NULL,
    backoff_max interval DEFAULT NULL, wait_for bigint[] DEFAULT NULL, on_parent_failure text DEFAULT 'dead_letter',
    concurrency_key text DEFAULT NULL, ordering_key text DEFAULT NULL, fairness_key text DEFAULT NULL,
    shard_key text DEFAULT NULL)
RETURNS SETOF bigint LANGUAGE plpgsql AS $$
DECLARE
    key text := aedb_queue_shard.routing_key(queue, shard_key, ordering_key, concurrency_key, NULL);
    s integer;
    ids bigint[];
    code text; message text; detail text; hint text;
    first_failed integer;
BEGIN
    FOR s IN SELECT aedb_queue_shard.enqueue_shards(wait_for, shard_key, key) LOOP
        BEGIN
            ids := ARRAY(SELECT aedb_queue_shard.queue_enqueue_batch(s, queue, payloads, delay, priority,
                max_attempts, backoff_base, backoff_max, wait_for, on_parent_failure, concurrency_key,
                ordering_key, fairness_key));
            PERFORM aedb_queue_shard.served('enqueue', s);
            RETURN QUERY SELECT unnest(ids);
            RETURN;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            IF NOT aedb_queue_shard.never_sent(code, message)
               OR key IS NOT NULL OR wait_for IS NOT NULL THEN
                PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
            END IF;
            first_failed := coalesce(first_failed, s);
        END;
    END LOOP;
    IF first_failed IS NULL THEN
        RAISE EXCEPTION 'this router has no shards' USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'Add one with aedb_queue.queue_router_add_shard(shard, conninfo).';
    END IF;
    RAISE EXCEPTION 'every shard is unavailable' USING ERRCODE = 'connection_failure', DETAIL = message;
END
$$;

-- Claim: shard by shard in this session's turn, at most one try each; the
-- first shard that hands out tasks ends the call, so a task is leased only
-- by a call that returns it. Shards that cannot be reached are passed over;
-- an error a shard raises (bad argument, no right) is the caller's.
CREATE FUNCTION aedb_queue.queue_claim(queue text, owner_id text, lease interval DEFAULT NULL, max integer DEFAULT 1)
RETURNS TABLE(task_id bigint, payload jsonb, attempts integer, fencing_token bigint, lease_deadline timestamptz,
              priority bigint, enqueued_at timestamptz, progress jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    s integer;
    got bigint;
    reached boolean := false;
    code text; message text; detail text; hint text;
BEGIN
    FOR s IN SELECT aedb_queue_shard.claim_order(queue) LOOP
        BEGIN
            RETURN QUERY SELECT * FROM aedb_queue_shard.queue_claim(s, queue, owner_id, lease, max);
            GET DIAGNOSTICS got = ROW_COUNT;
            reached := true;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            IF NOT aedb_queue_shard.is_unavailable(code, message) THEN
                PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
            END IF;
            got := 0;
        END;
        IF got > 0 THEN
            PERFORM aedb_queue_shard.served('claim', s);
            RETURN;
        END IF;
    END LOOP;
    IF NOT reached AND message IS NOT NULL THEN
        RAISE EXCEPTION 'every shard is unavailable' USING ERRCODE = 'connection_failure', DETAIL = message;
    END IF;
END
$$;

-- Calls on one task go to the shard its id names. A shard's error comes
-- back as the shard raised it; one that cannot be reached is 08006.

CREATE FUNCTION aedb_queue.queue_complete(queue text, task_id bigint, fencing_token bigint, result jsonb DEFAULT NULL, follow_ups jsonb DEFAULT NULL, strict boolean DEFAULT false)
RETURNS aedb_queue.outcome LANGUAGE plpgsql AS $$
DECLARE
    s integer := aedb_queue_shard.shard_of(task_id);
    code text; message text; detail text; hint text;
BEGIN
    RETURN aedb_queue_shard.queue_complete(s, queue, task_id, fencing_token, result, follow_ups, strict);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
    RETURN NULL;
END
$$;

CREATE FUNCTION aedb_queue.queue_fail(queue text, task_id bigint, fencing_token bigint, error text, retry_in interval DEFAULT NULL, dead_letter boolean DEFAULT false)
RETURNS aedb_queue.outcome LANGUAGE plpgsql AS $$
DECLARE
    s integer := aedb_queue_shard.shard_of(task_id);
    code text; message text; detail text; hint text;
BEGIN
    RETURN aedb_queue_shard.queue_fail(s, queue, task_id, fencing_token, error, retry_in, dead_letter);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
    RETURN NULL;
END
$$;

CREATE FUNCTION aedb_queue.queue_heartbeat(queue text, task_id bigint, fencing_token bigint, extend interval, progress jsonb DEFAULT NULL)
RETURNS aedb_queue.outcome LANGUAGE plpgsql AS $$
DECLARE
    s integer := aedb_queue_shard.shard_of(task_id);
    code text; message text; detail text; hint text;
BEGIN
    RETURN aedb_queue_shard.queue_heartbeat(s, queue, task_id, fencing_token, extend, progress);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
    RETURN NULL;
END
$$;

CREATE FUNCTION aedb_queue.queue_release(queue text, task_id bigint, fencing_token bigint, delay interval DEFAULT '0', strict boolean DEFAULT false)
RETURNS aedb_queue.outcome LANGUAGE plpgsql AS $$
DECLARE
    s integer := aedb_queue_shard.shard_of(task_id);
    code text; message text; detail text; hint text;
BEGIN
    RETURN aedb_queue_shard.queue_release(s, queue, task_id, fencing_token, delay, strict);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
    RETURN NULL;
END
$$;

CREATE FUNCTION aedb_queue.queue_cancel(queue text, task_id bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    s integer := aedb_queue_shard.shard_of(task_id);
    code text; message text; detail text; hint text;
BEGIN
    RETURN aedb_queue_shard.queue_cancel(s, queue, task_id);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
    RETURN NULL;
END
$$;

CREATE FUNCTION aedb_queue.queue_get(queue text, task_id bigint)
RETURNS SETOF aedb_queue.task_row LANGUAGE plpgsql AS $$
DECLARE
    s integer := aedb_queue_shard.shard_of(task_id);
    code text; message text; detail text; hint text;
BEGIN
    RETURN QUERY SELECT * FROM aedb_queue_shard.queue_get(s, queue, task_id);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
END
$$;

CREATE FUNCTION aedb_queue.queue_parents(queue text, task_id bigint)
RETURNS SETOF aedb_queue.task_row LANGUAGE plpgsql AS $$
DECLARE
    s integer := aedb_queue_shard.shard_of(task_id);
    code text; message text; detail text; hint text;
BEGIN
    RETURN QUERY SELECT * FROM aedb_queue_shard.queue_parents(s, queue, task_id);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
END
$$;

CREATE FUNCTION aedb_queue.queue_children(queue text, task_id bigint)
RETURNS SETOF aedb_queue.task_row LANGUAGE plpgsql AS $$
DECLARE
    s integer := aedb_queue_shard.shard_of(task_id);
    code text; message text; detail text; hint text;
BEGIN
    RETURN QUERY SELECT * FROM aedb_queue_shard.queue_children(s, queue, task_id);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
END
$$;

CREATE FUNCTION aedb_queue.queue_errors(queue text, task_id bigint)
RETURNS TABLE(attempt integer, failed_at timestamptz, error text) LANGUAGE plpgsql AS $$
DECLARE
    s integer := aedb_queue_shard.shard_of(task_id);
    code text; message text; detail text; hint text;
BEGIN
    RETURN QUERY SELECT * FROM aedb_queue_shard.queue_errors(s, queue, task_id);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
END
$$;

-- A row of queue_complete_and_claim / queue_fail_and_claim, kept while the
-- call decides whether to claim on other shards.
CREATE TYPE aedb_queue_shard.settled_row AS (settled aedb_queue.outcome, task_id bigint, payload jsonb,
    attempts integer, fencing_token bigint, lease_deadline timestamptz, priority bigint, enqueued_at timestamptz,
    progress jsonb);

-- How long a worker loop on queue_complete_and_claim or
-- queue_fail_and_claim stays on one shard. The call claims on the held
-- task's shard, so a loop keeps to that shard while it has work. After
-- aedb_queue_router.max_stay such claims in a row (default 100) a session's
-- next call first claims on the other shards in its turn, and only then
-- settles the held task alone, so a shard that never runs dry cannot keep
-- the others' tasks waiting.
CREATE FUNCTION aedb_queue_shard.may_stay() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    max_stay text := coalesce(nullif(pg_catalog.current_setting('aedb_queue_router.max_stay', true), ''), '100');
    stayed text := coalesce(nullif(pg_catalog.current_setting('aedb_queue_router.stayed', true), ''), '0');
BEGIN
    IF max_stay !~ '^[0-9]{1,9}$' THEN
        RAISE EXCEPTION 'invalid value for setting "aedb_queue_router.max_stay": "%"', max_stay
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use a whole number of calls, 0 or more.';
    END IF;
    RETURN stayed::integer < max_stay::integer;
END
$$;

-- Counts one more claim on the held task's shard (again), or starts over.
CREATE FUNCTION aedb_queue_shard.stayed(again boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.set_config('aedb_queue_router.stayed',
        CASE WHEN again
             THEN (coalesce(nullif(pg_catalog.current_setting('aedb_queue_router.stayed', true), ''), '0')::integer + 1)::text
             ELSE '0' END,
        false);
END
$$;

-- The first shard other than `held_shard`, in this session's turn, that
-- hands out tasks, and those tasks (settled left NULL); NULL and no tasks
-- when none did. Nothing is settled yet, so a shard's own error (a bad
-- argument, a missing right) ends the call as it would a direct one.
CREATE FUNCTION aedb_queue_shard.claim_on_another(held_shard integer, queue text, owner_id text, lease interval,
    max integer, OUT shard integer, OUT tasks aedb_queue_shard.settled_row[])
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    s integer;
    code text; message text; detail text; hint text;
BEGIN
    FOR s IN SELECT r FROM aedb_queue_shard.claim_order(queue) r WHERE r <> held_shard LOOP
        BEGIN
            SELECT array_agg(ROW(NULL, c.*)::aedb_queue_shard.settled_row) INTO tasks
              FROM aedb_queue_shard.queue_claim(s, queue, owner_id, lease, max) c;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            IF NOT aedb_queue_shard.is_unavailable(code, message) THEN
                PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
            END IF;
            tasks := NULL;
        END;
        IF cardinality(tasks) > 0 THEN
            shard := s;
            RETURN;
        END IF;
    END LOOP;
    tasks := NULL;
END
$$;

-- Hands tasks claimed for a call that then failed back to their shard
-- (queue_release: ready again, the attempt not counted). Best effort: a
-- task whose release fails is reclaimed when its lease runs out.
CREATE FUNCTION aedb_queue_shard.hand_back(shard integer, queue text, tasks aedb_queue_shard.settled_row[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t aedb_queue_shard.settled_row;
BEGIN
    FOREACH t IN ARRAY coalesce(tasks, '{}') LOOP
        BEGIN
            PERFORM aedb_queue_shard.queue_release(shard, queue, t.task_id, t.fencing_token, '0', false);
        EXCEPTION WHEN OTHERS THEN
            NULL;
        END;
    END LOOP;
END
$$;

-- Settle and claim: both on the held task's shard in one statement (one
-- commit there); when that shard has nothing to hand out, the claim goes on
-- through the other shards in this session's turn.
CREATE FUNCTION aedb_queue_shard.claim_elsewhere(held_outcome aedb_queue.outcome, held_shard integer, queue text,
    owner_id text, lease interval, max integer)
RETURNS TABLE(settled aedb_queue.outcome, task_id bigint, payload jsonb, attempts integer, fencing_token bigint,
              lease_deadline timestamptz, priority bigint, enqueued_at timestamptz, progress jsonb)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    s integer;
    got bigint;
BEGIN
    FOR s IN SELECT r FROM aedb_queue_shard.claim_order(queue) r WHERE r <> held_shard LOOP
        BEGIN
            RETURN QUERY SELECT held_outcome, c.* FROM aedb_queue_shard.queue_claim(s, queue, owner_id, lease, max) c;
            GET DIAGNOSTICS got = ROW_COUNT;
        EXCEPTION WHEN OTHERS THEN
            -- The settle has committed: a shard that cannot serve the claim
            -- only means no task from it.
            got := 0;
        END;
        IF got > 0 THEN
            PERFORM aedb_queue_shard.served('claim', s);
            PERFORM aedb_queue_shard.stayed(false);
            RETURN;
        END IF;
    END LOOP;
    RETURN QUERY SELECT held_outcome, NULL::bigint, NULL::jsonb, NULL::integer, NULL::bigint, NULL::timestamptz,
        NULL::bigint, NULL::timestamptz, NULL::jsonb;
END
$$;

-- The rows of a settle-and-claim whose held task was settled alone after
-- claim_on_another found tasks on `shard`: the stay starts over.
CREATE FUNCTION aedb_queue_shard.claimed_first(outcome aedb_queue.outcome, shard integer,
    tasks aedb_queue_shard.settled_row[])
RETURNS TABLE(settled aedb_queue.outcome, task_id bigint, payload jsonb, attempts integer, fencing_token bigint,
              lease_deadline timestamptz, priority bigint, enqueued_at timestamptz, progress jsonb)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
    PERFORM aedb_queue_shard.served('claim', shard);
    PERFORM aedb_queue_shard.stayed(false);
    RETURN QUERY SELECT outcome, u.task_id, u.payload, u.attempts, u.fencing_token, u.lease_deadline,
        u.priority, u.enqueued_at, u.progress FROM unnest(tasks) u;
END
$$;

-- The rows of a settle-and-claim run on the held task's shard: its claims
-- (one more stay, unless the call looked at the other shards first), or,
-- when it claimed nothing, a claim through the other shards.
CREATE FUNCTION aedb_queue_shard.claimed_on_held(rows_of_shard aedb_queue_shard.settled_row[], looked boolean,
    held_shard integer, queue text, owner_id text, lease interval, max integer)
RETURNS TABLE(settled aedb_queue.outcome, task_id bigint, payload jsonb, attempts integer, fencing_token bigint,
              lease_deadline timestamptz, priority bigint, enqueued_at timestamptz, progress jsonb)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    claimed bigint := (SELECT count(u.task_id) FROM unnest(rows_of_shard) u);
    outcome aedb_queue.outcome := (SELECT min(u.settled::text) FROM unnest(rows_of_shard) u);
BEGIN
    IF claimed > 0 OR max < 1 THEN
        PERFORM aedb_queue_shard.stayed(claimed > 0 AND NOT looked);
        RETURN QUERY SELECT (u).* FROM unnest(rows_of_shard) u;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM aedb_queue_shard.claim_elsewhere(outcome, held_shard, queue, owner_id, lease, max);
END
$$;

CREATE FUNCTION aedb_queue.queue_complete_and_claim(queue text, owner_id text, held_task_id bigint,
    held_fencing_token bigint, result jsonb DEFAULT NULL, follow_ups jsonb DEFAULT NULL, strict boolean DEFAULT false,
    lease interval DEFAULT NULL, max integer DEFAULT 1)
RETURNS TABLE(settled aedb_queue.outcome, task_id bigint, payload jsonb, attempts integer, fencing_token bigint,
              lease_deadline timestamptz, priority bigint, enqueued_at timestamptz, progress jsonb)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    s integer := aedb_queue_shard.shard_of(held_task_id);
    looked boolean := NOT aedb_queue_shard.may_stay();
    other record;
    outcome aedb_queue.outcome;
    on_held aedb_queue_shard.settled_row[];
    code text; message text; detail text; hint text;
BEGIN
    -- Stayed max_stay times: claim on another shard first, then complete
    -- the held task alone (handing the claimed tasks back if that fails).
    IF looked THEN
        SELECT * INTO other FROM aedb_queue_shard.claim_on_another(s, queue, owner_id, lease, max);
        IF other.shard IS NOT NULL THEN
            BEGIN
                outcome := aedb_queue_shard.queue_complete(s, queue, held_task_id, held_fencing_token,
                    result, follow_ups, strict);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                    detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
                PERFORM aedb_queue_shard.hand_back(other.shard, queue, other.tasks);
                PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
            END;
            RETURN QUERY SELECT * FROM aedb_queue_shard.claimed_first(outcome, other.shard, other.tasks);
            RETURN;
        END IF;
    END IF;
    BEGIN
        SELECT array_agg(c::aedb_queue_shard.settled_row) INTO on_held
          FROM aedb_queue_shard.queue_complete_and_claim(s, queue, owner_id, held_task_id, held_fencing_token,
               result, follow_ups, strict, lease, max) c;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
        PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
    END;
    RETURN QUERY SELECT * FROM aedb_queue_shard.claimed_on_held(on_held, looked, s, queue, owner_id, lease, max);
END
$$;

CREATE FUNCTION aedb_queue.queue_fail_and_claim(queue text, owner_id text, held_task_id bigint,
    held_fencing_token bigint, error text, retry_in interval DEFAULT NULL, dead_letter boolean DEFAULT false,
    strict boolean DEFAULT false, lease interval DEFAULT NULL, max integer DEFAULT 1)
RETURNS TABLE(settled aedb_queue.outcome, task_id bigint, payload jsonb, attempts integer, fencing_token bigint,
              lease_deadline timestamptz, priority bigint, enqueued_at timestamptz, progress jsonb)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    s integer := aedb_queue_shard.shard_of(held_task_id);
    looked boolean := NOT aedb_queue_shard.may_stay();
    other record;
    outcome aedb_queue.outcome;
    on_held aedb_queue_shard.settled_row[];
    code text; message text; detail text; hint text;
BEGIN
    -- As queue_complete_and_claim. queue_fail has no strict: a fenced-out
    -- failure changed nothing, and strict raises its 40002 here.
    IF looked THEN
        SELECT * INTO other FROM aedb_queue_shard.claim_on_another(s, queue, owner_id, lease, max);
        IF other.shard IS NOT NULL THEN
            BEGIN
                outcome := aedb_queue_shard.queue_fail(s, queue, held_task_id, held_fencing_token,
                    error, retry_in, dead_letter);
                IF strict AND outcome = 'lease_lost' THEN
                    RAISE EXCEPTION 'lease lost: task % is no longer in flight under fencing token %',
                        held_task_id, held_fencing_token
                        USING ERRCODE = 'transaction_integrity_constraint_violation',
                              HINT = 'The lease expired and the task was reclaimed, or it was cancelled or settled; '
                                     'this transaction is rolled back so its writes do not apply twice.';
                END IF;
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                    detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
                PERFORM aedb_queue_shard.hand_back(other.shard, queue, other.tasks);
                PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
            END;
            RETURN QUERY SELECT * FROM aedb_queue_shard.claimed_first(outcome, other.shard, other.tasks);
            RETURN;
        END IF;
    END IF;
    BEGIN
        SELECT array_agg(c::aedb_queue_shard.settled_row) INTO on_held
          FROM aedb_queue_shard.queue_fail_and_claim(s, queue, owner_id, held_task_id, held_fencing_token,
               error, retry_in, dead_letter, strict, lease, max) c;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
        PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
    END;
    RETURN QUERY SELECT * FROM aedb_queue_shard.claimed_on_held(on_held, looked, s, queue, owner_id, lease, max);
END
$$;

-- A batch settle: one call per shard with that shard's entries, results in
-- the order of the shards. Strict means all or nothing, which across shards
-- would take two-phase commit: refused.
CREATE FUNCTION aedb_queue.queue_complete_batch(queue text, task_ids bigint[], fencing_tokens bigint[],
    strict boolean DEFAULT false)
RETURNS TABLE(task_id bigint, outcome aedb_queue.outcome) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    part record;
    settled_on integer[] := '{}';
    unavailable integer[] := '{}';
    code text; message text; detail text; hint text;
BEGIN
    IF task_ids IS NULL OR fencing_tokens IS NULL
       OR cardinality(task_ids) <> cardinality(fencing_tokens)
       OR array_position(task_ids, NULL) IS NOT NULL OR cardinality(task_ids) = 0 THEN
        -- The shard's own checks word these errors: let the first shard say it.
        BEGIN
            RETURN QUERY SELECT * FROM aedb_queue_shard.queue_complete_batch(
                aedb_queue_shard.shard_of(NULL), queue, task_ids, fencing_tokens, strict);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            PERFORM aedb_queue_shard.reraise(aedb_queue_shard.shard_of(NULL), code, message, detail, hint);
        END;
        RETURN;
    END IF;
    FOR part IN
        SELECT aedb_queue_shard.shard_of(min(t.id)) AS shard, array_agg(t.id ORDER BY t.n) AS ids,
               array_agg(t.token ORDER BY t.n) AS tokens
          FROM unnest(task_ids, fencing_tokens) WITH ORDINALITY AS t(id, token, n)
         GROUP BY t.id >> 48 ORDER BY t.id >> 48
    LOOP
        IF strict AND part.ids <> task_ids THEN
            RAISE EXCEPTION 'invalid argument "strict": the tasks are on more than one shard'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'A strict batch settles all or nothing on one shard; settle each shard''s tasks in a batch of their own.';
        END IF;
        BEGIN
            RETURN QUERY SELECT * FROM aedb_queue_shard.queue_complete_batch(part.shard, queue, part.ids, part.tokens, strict);
            settled_on := settled_on || part.shard;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            IF NOT aedb_queue_shard.is_unavailable(code, message) THEN
                PERFORM aedb_queue_shard.reraise(part.shard, code, message, detail, hint);
            END IF;
            -- The other shards' entries still get settled; the caller
            -- learns which shard's were not.
            unavailable := unavailable || part.shard;
        END;
    END LOOP;
    IF cardinality(unavailable) > 0 THEN
        RAISE EXCEPTION 'shard % is unavailable: its tasks in this batch were not settled', array_to_string(unavailable, ', ')
            USING ERRCODE = 'connection_failure',
                  DETAIL = CASE WHEN cardinality(settled_on) > 0
                                THEN 'The tasks of shard ' || array_to_string(settled_on, ', ') || ' were settled.'
                                ELSE 'No task was settled.' END,
                  HINT = 'Settle the unavailable shard''s tasks again once it is back (task_id >> 48 names the shard).';
    END IF;
END
$$;

-- ---------------------------------------------------------------------------
-- 4. Reads that span shards: asked of every shard and merged. A shard that
-- cannot be reached is left out with a WARNING naming it.

CREATE FUNCTION aedb_queue_shard.pass_over(shard integer, code text, message text, detail text, hint text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF aedb_queue_shard.is_unavailable(code, message) THEN
        RAISE WARNING 'shard % is unavailable: left out', shard USING DETAIL = message;
    ELSE
        PERFORM aedb_queue_shard.reraise(shard, code, message, detail, hint);
    END IF;
END
$$;

CREATE FUNCTION aedb_queue.queue_list(queue text, state text DEFAULT NULL, "limit" integer DEFAULT 100)
RETURNS SETOF aedb_queue.task_row LANGUAGE plpgsql AS $$
DECLARE
    s integer;
    found aedb_queue.task_row[] := '{}';
    code text; message text; detail text; hint text;
BEGIN
    FOR s IN SELECT aedb_queue_shard.shards() LOOP
        BEGIN
            found := found || ARRAY(SELECT t FROM aedb_queue_shard.queue_list(s, queue, state, "limit") t);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            PERFORM aedb_queue_shard.pass_over(s, code, message, detail, hint);
        END;
    END LOOP;
    RETURN QUERY SELECT (t).* FROM unnest(found) t ORDER BY (t).created_at, (t).task_id LIMIT "limit";
END
$$;

CREATE FUNCTION aedb_queue.queue_find(task_id bigint DEFAULT NULL, idempotency_key text DEFAULT NULL,
    queue text DEFAULT NULL)
RETURNS SETOF aedb_queue.task_row LANGUAGE plpgsql AS $$
DECLARE
    s integer;
    code text; message text; detail text; hint text;
BEGIN
    -- By id: the task's shard; by idempotency key: every shard.
    FOR s IN SELECT r FROM aedb_queue_shard.shards() r WHERE task_id IS NULL
             UNION ALL SELECT aedb_queue_shard.shard_of(task_id) WHERE task_id IS NOT NULL LOOP
        BEGIN
            RETURN QUERY SELECT * FROM aedb_queue_shard.queue_find(s, task_id, idempotency_key, queue);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            IF task_id IS NULL THEN
                PERFORM aedb_queue_shard.pass_over(s, code, message, detail, hint);
            ELSE
                PERFORM aedb_queue_shard.reraise(s, code, message, detail, hint);
            END IF;
        END;
    END LOOP;
END
$$;

-- Figures per queue summed over the shards; a queue shows paused when any
-- shard has it paused, its oldest ready task's age and its next due time are
-- the extremes, and a count estimated on any shard is listed as estimated.
CREATE TYPE aedb_queue_shard.overview_row AS (queue text, paused boolean, waiting bigint, scheduled bigint,
    blocked bigint, ready bigint, in_flight bigint, dead bigint, completed_kept bigint, estimated text[],
    oldest_ready_age interval, next_due timestamptz, expired_leases bigint);

CREATE FUNCTION aedb_queue.queue_overview(exact_limit integer DEFAULT 1000, queue_name text DEFAULT NULL)
RETURNS TABLE(queue text, paused boolean, waiting bigint, scheduled bigint, blocked bigint, ready bigint,
              in_flight bigint, dead bigint, completed_kept bigint, estimated text[], oldest_ready_age interval,
              next_due timestamptz, expired_leases bigint)
LANGUAGE plpgsql AS $$
DECLARE
    s integer;
    found aedb_queue_shard.overview_row[] := '{}';
    code text; message text; detail text; hint text;
BEGIN
    FOR s IN SELECT aedb_queue_shard.shards() LOOP
        BEGIN
            found := found || ARRAY(SELECT o::aedb_queue_shard.overview_row
                                      FROM aedb_queue_shard.queue_overview(s, exact_limit, queue_name) o);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            PERFORM aedb_queue_shard.pass_over(s, code, message, detail, hint);
        END;
    END LOOP;
    RETURN QUERY
        SELECT o.queue, bool_or(o.paused), sum(o.waiting)::bigint, sum(o.scheduled)::bigint,
               sum(o.blocked)::bigint, sum(o.ready)::bigint, sum(o.in_flight)::bigint, sum(o.dead)::bigint,
               sum(o.completed_kept)::bigint,
               ARRAY(SELECT DISTINCT e FROM unnest(found) o2, unnest(o2.estimated) e
                      WHERE o2.queue = o.queue ORDER BY e),
               max(o.oldest_ready_age), min(o.next_due), sum(o.expired_leases)::bigint
          FROM unnest(found) o GROUP BY o.queue ORDER BY o.queue;
END
$$;

-- Event counts summed over the shards; `since`: the latest of the shards'
-- starts, from when every shard has been counting.
CREATE TYPE aedb_queue_shard.counters_row AS (queue text, enqueued bigint, completed bigint, failed bigint,
    dead_lettered bigint, reclaimed bigint, cancelled bigint, since timestamptz);

CREATE FUNCTION aedb_queue.queue_counters()
RETURNS TABLE(queue text, enqueued bigint, completed bigint, failed bigint, dead_lettered bigint,
              reclaimed bigint, cancelled bigint, since timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    s integer;
    found aedb_queue_shard.counters_row[] := '{}';
    code text; message text; detail text; hint text;
BEGIN
    FOR s IN SELECT aedb_queue_shard.shards() LOOP
        BEGIN
            found := found || ARRAY(SELECT c::aedb_queue_shard.counters_row FROM aedb_queue_shard.queue_counters(s) c);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            PERFORM aedb_queue_shard.pass_over(s, code, message, detail, hint);
        END;
    END LOOP;
    RETURN QUERY
        SELECT c.queue, sum(c.enqueued)::bigint, sum(c.completed)::bigint, sum(c.failed)::bigint,
               sum(c.dead_lettered)::bigint, sum(c.reclaimed)::bigint, sum(c.cancelled)::bigint, max(c.since)
          FROM unnest(found) c GROUP BY c.queue ORDER BY c.queue NULLS LAST;
END
$$;

-- What the caller may do on each queue: only what it may do on every shard
-- that answered.
CREATE TYPE aedb_queue_shard.access_row AS (queue text, produce boolean, work boolean, administer boolean);

CREATE FUNCTION aedb_queue.queue_access()
RETURNS TABLE(queue text, produce boolean, work boolean, administer boolean)
LANGUAGE plpgsql AS $$
DECLARE
    s integer;
    found aedb_queue_shard.access_row[] := '{}';
    code text; message text; detail text; hint text;
BEGIN
    FOR s IN SELECT aedb_queue_shard.shards() LOOP
        BEGIN
            found := found || ARRAY(SELECT a::aedb_queue_shard.access_row FROM aedb_queue_shard.queue_access(s) a);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            PERFORM aedb_queue_shard.pass_over(s, code, message, detail, hint);
        END;
    END LOOP;
    RETURN QUERY
        SELECT a.queue, bool_and(a.produce), bool_and(a.work), bool_and(a.administer)
          FROM unnest(found) a GROUP BY a.queue ORDER BY a.queue;
END
$$;

-- ---------------------------------------------------------------------------
-- 5. Operator calls: applied on every shard, one row per shard with the
-- shard's answer or its error (error_code: its SQLSTATE, 08006 when it could
-- not be reached). A call every shard refuses for the same reason (a bad
-- argument, no right) raises that error instead: the call was wrong.

-- The message a shard's error is reported with in a per-shard row.
CREATE FUNCTION aedb_queue_shard.error_text(shard integer, code text, message text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN aedb_queue_shard.is_unavailable(code, message) THEN 'shard ' || shard || ' is unavailable'
                ELSE coalesce(substring(message FROM 'REMOTE ERROR: (.*)$'), message) END
$$;

CREATE FUNCTION aedb_queue_shard.error_code(code text, message text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN aedb_queue_shard.is_unavailable(code, message) THEN '08006' ELSE code END
$$;

-- Raises the shards' common error when every shard refused the call with
-- the same SQLSTATE (not 08006).
CREATE FUNCTION aedb_queue_shard.refused_everywhere(codes text[], shard integer, code text, message text,
    detail text, hint text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(codes) > 0 AND codes[1] IS NOT NULL AND codes[1] <> '08006'
       AND (SELECT bool_and(c IS NOT DISTINCT FROM codes[1]) FROM unnest(codes) c) THEN
        PERFORM aedb_queue_shard.reraise(shard, code, message, detail, hint);
    END IF;
END
$$;

-- An operator call on every shard, one row per shard: its result as text,
-- or its error (error_code 08006 when it could not be reached). `call` is
-- one of this file's constant call texts, the PL/Proxy function with $1 for
-- the shard and $2[i] for the call's i-th argument (cast to its type);
-- the arguments travel as parameters, never spliced into the text. When
-- every shard refused with the same SQLSTATE, that error is raised instead.
-- Like everything here it runs as the caller (not SECURITY DEFINER), so a
-- caller who passes a call text of its own runs only what it could run
-- itself.
CREATE FUNCTION aedb_queue_shard.on_every_shard(call text, args text[])
RETURNS TABLE(shard integer, result text, error_code text, error text) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    s integer;
    answer text;
    codes text[] := '{}';
    code text; message text; detail text; hint text;
BEGIN
    FOR s IN SELECT aedb_queue_shard.shards() LOOP
        BEGIN
            EXECUTE 'SELECT (' || call || ')::text' INTO answer USING s, args;
            RETURN QUERY SELECT s, answer, NULL::text, NULL::text;
            codes := codes || NULL::text;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            codes := codes || aedb_queue_shard.error_code(code, message);
            RETURN QUERY SELECT s, NULL::text, aedb_queue_shard.error_code(code, message),
                aedb_queue_shard.error_text(s, code, message);
        END;
    END LOOP;
    PERFORM aedb_queue_shard.refused_everywhere(codes, s, code, message, detail, hint);
END
$$;

CREATE FUNCTION aedb_queue.queue_pause(queue text)
RETURNS TABLE(shard integer, result boolean, error_code text, error text) LANGUAGE sql AS $$
    SELECT e.shard, e.result::boolean, e.error_code, e.error
    FROM aedb_queue_shard.on_every_shard('aedb_queue_shard.queue_pause($1, $2[1])', ARRAY[$1]) e
$$;

CREATE FUNCTION aedb_queue.queue_resume(queue text)
RETURNS TABLE(shard integer, result boolean, error_code text, error text) LANGUAGE sql AS $$
    SELECT e.shard, e.result::boolean, e.error_code, e.error
    FROM aedb_queue_shard.on_every_shard('aedb_queue_shard.queue_resume($1, $2[1])', ARRAY[$1]) e
$$;

CREATE FUNCTION aedb_queue.queue_configure_key(queue text, concurrency_key text, concurrency_limit integer)
RETURNS TABLE(shard integer, result boolean, error_code text, error text) LANGUAGE sql AS $$
    SELECT e.shard, e.result::boolean, e.error_code, e.error
    FROM aedb_queue_shard.on_every_shard('aedb_queue_shard.queue_configure_key($1, $2[1], $2[2], $2[3]::integer)', ARRAY[$1, $2, $3::text]) e
$$;

CREATE FUNCTION aedb_queue.queue_configure_fairness(queue text, fairness_key text, weight integer)
RETURNS TABLE(shard integer, result boolean, error_code text, error text) LANGUAGE sql AS $$
    SELECT e.shard, e.result::boolean, e.error_code, e.error
    FROM aedb_queue_shard.on_every_shard('aedb_queue_shard.queue_configure_fairness($1, $2[1], $2[2], $2[3]::integer)', ARRAY[$1, $2, $3::text]) e
$$;

CREATE FUNCTION aedb_queue.queue_retry_dead(queue text, task_id bigint DEFAULT NULL, max integer DEFAULT NULL)
RETURNS TABLE(shard integer, result bigint, error_code text, error text) LANGUAGE sql AS $$
    SELECT e.shard, e.result::bigint, e.error_code, e.error
    FROM aedb_queue_shard.on_every_shard('aedb_queue_shard.queue_retry_dead($1, $2[1], $2[2]::bigint, $2[3]::integer)', ARRAY[$1, $2::text, $3::text]) e
$$;

CREATE FUNCTION aedb_queue.queue_purge(queue text, state text, force boolean DEFAULT false)
RETURNS TABLE(shard integer, result bigint, error_code text, error text) LANGUAGE sql AS $$
    SELECT e.shard, e.result::bigint, e.error_code, e.error
    FROM aedb_queue_shard.on_every_shard('aedb_queue_shard.queue_purge($1, $2[1], $2[2], $2[3]::boolean)', ARRAY[$1, $2, $3::text]) e
$$;

CREATE FUNCTION aedb_queue.queue_grant(queue_pattern text, role text, privilege text)
RETURNS TABLE(shard integer, result boolean, error_code text, error text) LANGUAGE sql AS $$
    SELECT e.shard, e.result::boolean, e.error_code, e.error
    FROM aedb_queue_shard.on_every_shard('aedb_queue_shard.queue_grant($1, $2[1], $2[2], $2[3])', ARRAY[$1, $2, $3]) e
$$;

CREATE FUNCTION aedb_queue.queue_revoke(queue_pattern text, role text, privilege text)
RETURNS TABLE(shard integer, result boolean, error_code text, error text) LANGUAGE sql AS $$
    SELECT e.shard, e.result::boolean, e.error_code, e.error
    FROM aedb_queue_shard.on_every_shard('aedb_queue_shard.queue_revoke($1, $2[1], $2[2], $2[3])', ARRAY[$1, $2, $3]) e
$$;

CREATE FUNCTION aedb_queue.queue_confine(role text)
RETURNS TABLE(shard integer, result boolean, error_code text, error text) LANGUAGE sql AS $$
    SELECT e.shard, e.result::boolean, e.error_code, e.error
    FROM aedb_queue_shard.on_every_shard('aedb_queue_shard.queue_confine($1, $2[1])', ARRAY[$1]) e
$$;

CREATE FUNCTION aedb_queue.queue_unconfine(role text)
RETURNS TABLE(shard integer, result boolean, error_code text, error text) LANGUAGE sql AS $$
    SELECT e.shard, e.result::boolean, e.error_code, e.error
    FROM aedb_queue_shard.on_every_shard('aedb_queue_shard.queue_unconfine($1, $2[1])', ARRAY[$1]) e
$$;

CREATE FUNCTION aedb_queue.queue_reap(queue text DEFAULT NULL, max integer DEFAULT 1000)
RETURNS TABLE(shard integer, promoted bigint, reclaimed bigint, dead_lettered bigint, fired bigint,
              error_code text, error text) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    s integer;
    codes text[] := '{}';
    code text; message text; detail text; hint text;
BEGIN
    FOR s IN SELECT aedb_queue_shard.shards() LOOP
        BEGIN
            RETURN QUERY SELECT s, r.*, NULL::text, NULL::text FROM aedb_queue_shard.queue_reap(s, queue, max) r;
            codes := codes || NULL::text;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            codes := codes || aedb_queue_shard.error_code(code, message);
            RETURN QUERY SELECT s, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
                aedb_queue_shard.error_code(code, message), aedb_queue_shard.error_text(s, code, message);
        END;
    END LOOP;
    PERFORM aedb_queue_shard.refused_everywhere(codes, s, code, message, detail, hint);
END
$$;

-- Settings: its arguments and its result columns share names, which
-- PL/pgSQL cannot hold, hence a SQL function over one that can. Each
-- shard's settings row, without the queue the caller named.
CREATE FUNCTION aedb_queue_shard.configure_each(queue text, a_max_attempts integer, a_backoff_base interval,
    a_backoff_max interval, a_default_lease interval, a_max_payload_bytes integer, a_keep_completed interval,
    a_keep_idempotency_keys interval, a_notify boolean, a_reset boolean, a_concurrency_limit integer,
    a_rate_limit integer, a_rate_interval interval, a_rate_burst integer, a_ordering_on_dead text,
    a_fair_share boolean)
RETURNS TABLE(shard integer, max_attempts integer, backoff_base interval, backoff_max interval,
              default_lease interval, max_payload_bytes integer, keep_completed interval,
              keep_idempotency_keys interval, notify boolean, paused boolean, concurrency_limit integer,
              rate_limit integer, rate_interval interval, rate_burst integer, ordering_on_dead text,
              fair_share boolean, error_code text, error text) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    s integer;
    codes text[] := '{}';
    code text; message text; detail text; hint text;
BEGIN
    FOR s IN SELECT aedb_queue_shard.shards() LOOP
        BEGIN
            -- The row without its first column: the queue the caller named.
            RETURN QUERY SELECT s, c.max_attempts, c.backoff_base, c.backoff_max, c.default_lease,
                    c.max_payload_bytes, c.keep_completed, c.keep_idempotency_keys, c.notify, c.paused,
                    c.concurrency_limit, c.rate_limit, c.rate_interval, c.rate_burst, c.ordering_on_dead,
                    c.fair_share, NULL::text, NULL::text
                FROM aedb_queue_shard.queue_configure(s, queue, a_max_attempts, a_backoff_base, a_backoff_max,
                     a_default_lease, a_max_payload_bytes, a_keep_completed, a_keep_idempotency_keys, a_notify,
                     a_reset, a_concurrency_limit, a_rate_limit, a_rate_interval, a_rate_burst, a_ordering_on_dead,
                     a_fair_share) c;
            codes := codes || NULL::text;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            codes := codes || aedb_queue_shard.error_code(code, message);
            RETURN QUERY SELECT s, NULL::integer, NULL::interval, NULL::interval, NULL::interval,
                NULL::integer, NULL::interval, NULL::interval, NULL::boolean, NULL::boolean, NULL::integer,
                NULL::integer, NULL::interval, NULL::integer, NULL::text, NULL::boolean,
                aedb_queue_shard.error_code(code, message), aedb_queue_shard.error_text(s, code, message);
        END;
    END LOOP;
    PERFORM aedb_queue_shard.refused_everywhere(codes, s, code, message, detail, hint);
END
$$;

CREATE FUNCTION aedb_queue.queue_configure(queue text, max_attempts integer DEFAULT NULL,
    backoff_base interval DEFAULT NULL, backoff_max interval DEFAULT NULL, default_lease interval DEFAULT NULL,
    max_payload_bytes integer DEFAULT NULL, keep_completed interval DEFAULT NULL,
    keep_idempotency_keys interval DEFAULT NULL, notify boolean DEFAULT NULL, reset boolean DEFAULT false,
    concurrency_limit integer DEFAULT NULL, rate_limit integer DEFAULT NULL, rate_interval interval DEFAULT NULL,
    rate_burst integer DEFAULT NULL, ordering_on_dead text DEFAULT NULL, fair_share boolean DEFAULT NULL)
RETURNS TABLE(shard integer, max_attempts integer, backoff_base interval, backoff_max interval,
              default_lease interval, max_payload_bytes integer, keep_completed interval,
              keep_idempotency_keys interval, notify boolean, paused boolean, concurrency_limit integer,
              rate_limit integer, rate_interval interval, rate_burst integer, ordering_on_dead text,
              fair_share boolean, error_code text, error text)
LANGUAGE sql AS $$
    SELECT * FROM aedb_queue_shard.configure_each($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
$$;

-- ---------------------------------------------------------------------------
-- 6. Registering shards (superusers only: each is a foreign server).

-- Adds shard `shard`, reached with `conninfo` (host, port, dbname; keep
-- passwords in the router's .pgpass, not here). The node must report that
-- number (aedb_queue.queue_shard_assign on it); true if added, false if the
-- shard was already registered with this conninfo.
CREATE FUNCTION aedb_queue.queue_router_add_shard(shard integer, conninfo text) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    server text := aedb_queue_shard.server_of(shard);
    known text;
    reported integer;
    code text; message text; detail text; hint text;
BEGIN
    IF shard IS NULL OR conninfo IS NULL THEN
        RAISE EXCEPTION 'argument "%" must not be NULL', CASE WHEN shard IS NULL THEN 'shard' ELSE 'conninfo' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF shard NOT BETWEEN 1 AND 32767 THEN
        RAISE EXCEPTION 'invalid argument "shard": % is not between 1 and 32767', shard
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT option_value INTO known FROM pg_catalog.pg_options_to_table(
        (SELECT srvoptions FROM pg_catalog.pg_foreign_server WHERE srvname = server)) WHERE option_name = 'p0';
    IF known = conninfo AND EXISTS (SELECT FROM aedb_queue_shard.shard r WHERE r.shard = shard) THEN
        RETURN false;
    ELSIF known IS NOT NULL AND known <> conninfo THEN
        RAISE EXCEPTION 'invalid argument "shard": shard % is registered with another conninfo', shard
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Remove it first with aedb_queue.queue_router_remove_shard(shard).';
    END IF;
    -- A server left by an earlier install of the router is taken over.
    IF known IS NULL THEN
        EXECUTE pg_catalog.format('CREATE SERVER %I FOREIGN DATA WRAPPER plproxy OPTIONS (disable_binary %L, p0 %L)',
            server, '1', conninfo);
        EXECUTE pg_catalog.format('CREATE USER MAPPING FOR PUBLIC SERVER %I', server);
        EXECUTE pg_catalog.format('GRANT USAGE ON FOREIGN SERVER %I TO PUBLIC', server);
    END IF;
    INSERT INTO aedb_queue_shard.shard (shard) VALUES (shard);
    BEGIN
        reported := aedb_queue_shard.queue_shard(shard);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
        PERFORM aedb_queue_shard.reraise(shard, code, message, detail, hint);
    END;
    IF reported IS DISTINCT FROM shard THEN
        RAISE EXCEPTION 'invalid argument "shard": the node at that conninfo is shard %, not %', reported, shard
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'On the node: SELECT aedb_queue.queue_shard_assign(n).';
    END IF;
    RETURN true;
END
$$;

-- Forgets a shard: its tasks can no longer be reached through this router.
CREATE FUNCTION aedb_queue.queue_router_remove_shard(shard integer) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
    IF NOT EXISTS (SELECT FROM aedb_queue_shard.shard r WHERE r.shard = shard) THEN
        RETURN false;
    END IF;
    DELETE FROM aedb_queue_shard.shard r WHERE r.shard = shard;
    EXECUTE pg_catalog.format('DROP SERVER %I CASCADE', aedb_queue_shard.server_of(shard));
    RETURN true;
END
$$;

-- Every registered shard: whether it answers, and the number it reports.
CREATE FUNCTION aedb_queue.queue_router_shards()
RETURNS TABLE(shard integer, available boolean, reports_shard integer, error text)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    s integer;
    code text; message text;
BEGIN
    FOR s IN SELECT aedb_queue_shard.shards() LOOP
        shard := s; available := true; reports_shard := NULL; error := NULL;
        BEGIN
            reports_shard := aedb_queue_shard.queue_shard(s);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT;
            available := NOT aedb_queue_shard.is_unavailable(code, message);
            error := aedb_queue_shard.error_text(s, code, message);
        END;
        RETURN NEXT;
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------
-- 7. Quiet calls: after a shard raised an error PL/Proxy drops that
-- connection at its next use with a NOTICE ("dropping stale conn"), which
-- says nothing to the caller; the shard's own WARNINGs still come through.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'aedb_queue'::regnamespace LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET client_min_messages = warning', f);
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------
-- 8. Privileges. The router decides nothing: every call runs on its shard
-- as the caller, whose rights there decide. Only registering shards is kept
-- to superusers (creating a server needs them anyway).
GRANT USAGE ON SCHEMA aedb_queue, aedb_queue_shard TO PUBLIC;
GRANT SELECT ON aedb_queue_shard.shard TO PUBLIC;
REVOKE EXECUTE ON FUNCTION aedb_queue.queue_router_add_shard(integer, text),
    aedb_queue.queue_router_remove_shard(integer) FROM PUBLIC;
