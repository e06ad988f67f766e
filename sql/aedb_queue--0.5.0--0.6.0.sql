-- aedb_queue upgrade 0.5.0 -> 0.6.0, run once by
--   ALTER EXTENSION aedb_queue UPDATE;   (or UPDATE TO '0.6.0')
-- inside that statement's transaction, with search_path set to aedb_queue.
--
-- Rules (docs/upgrades.md): as in aedb_queue--0.1.0--0.2.0.sql. Plain DDL
-- against exactly the 0.5.0 schema; the result must equal a fresh CREATE
-- EXTENSION at 0.6.0 (scripts/upgrade_test.sh compares pg_dump of both);
-- a section per change, below the last one.

\echo Use "ALTER EXTENSION aedb_queue UPDATE TO '0.6.0'" to load this file. \quit

-- 0.6.0 is flow control (issue 12).

-- 1. Concurrency keys: a task's key, the queue's limit, the slots per key,
-- and the blocked state (the index of blocked tasks is in section 3).
ALTER TYPE aedb_queue.task_state ADD VALUE 'blocked';
ALTER TABLE aedb_queue.queue ADD COLUMN concurrency_limit integer CHECK (concurrency_limit >= 1);
ALTER TABLE aedb_queue.task ADD COLUMN concurrency_key text;
CREATE TABLE aedb_queue.concurrency_slot (
    queue             text NOT NULL,
    key               text NOT NULL,
    taken             integer NOT NULL,
    concurrency_limit integer CHECK (concurrency_limit >= 1),
    PRIMARY KEY (queue, key)
);
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.concurrency_slot', '');
REVOKE ALL ON aedb_queue.concurrency_slot FROM PUBLIC;

-- 2. Rate limits: the queue's settings and its token bucket.
ALTER TABLE aedb_queue.queue ADD COLUMN rate_limit integer CHECK (rate_limit >= 1),
                             ADD COLUMN rate_interval interval,
                             ADD COLUMN rate_burst integer CHECK (rate_burst >= 1);
CREATE TABLE aedb_queue.rate_bucket (
    queue        text PRIMARY KEY,
    micro_tokens bigint NOT NULL,
    at           timestamptz NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.rate_bucket', '');
REVOKE ALL ON aedb_queue.rate_bucket FROM PUBLIC;

-- 3. Ordering keys: a task's key, the queue's policy for dead tasks, the
-- head of each key's line; the index of blocked tasks for both kinds of
-- key. Its predicate names no label newer than 0.1.0's (see schema.sql):
-- an update from before 0.5.0 adds 'waiting' in this same transaction.
-- It holds the waiting tasks as well, so 0.5.0's index of them goes.
DROP INDEX aedb_queue.task_waiting_idx;
ALTER TABLE aedb_queue.queue ADD COLUMN ordering_on_dead text CHECK (ordering_on_dead IN ('block', 'release'));
ALTER TABLE aedb_queue.task ADD COLUMN ordering_key text;
CREATE INDEX task_blocked_idx   ON aedb_queue.task (queue, concurrency_key, ordering_key,
                                                    (CASE WHEN ordering_key IS NULL THEN priority END) DESC,
                                                    task_id) WHERE state > 'dead';
CREATE TABLE aedb_queue.ordering_slot (
    queue text NOT NULL,
    key   text NOT NULL,
    head  bigint,
    PRIMARY KEY (queue, key)
);
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.ordering_slot', '');
REVOKE ALL ON aedb_queue.ordering_slot FROM PUBLIC;

-- 4. Fair share: the queue's setting, a task's key and virtual time, the
-- keys' weights and times.
ALTER TABLE aedb_queue.queue ADD COLUMN fair_share boolean;
-- The ready index ranks tasks by virtual time where they have one, else by
-- id (schema.sql): rebuilt, under this transaction's lock on the table.
ALTER TABLE aedb_queue.task ADD COLUMN fairness_key text, ADD COLUMN fair_vt bigint;
DROP INDEX aedb_queue.task_ready_idx;
CREATE INDEX task_ready_idx     ON aedb_queue.task (queue, priority DESC, (-coalesce(fair_vt, task_id)) DESC) WHERE state = 'ready';
CREATE TABLE aedb_queue.fairness_key (
    queue  text NOT NULL,
    key    text NOT NULL,
    vt     bigint NOT NULL,
    weight integer CHECK (weight BETWEEN 1 AND 1000),
    PRIMARY KEY (queue, key)
);
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.fairness_key', '');
REVOKE ALL ON aedb_queue.fairness_key FROM PUBLIC;

-- queue_enqueue and queue_enqueue_batch gain concurrency_key, queue_configure
-- concurrency_limit: new signatures, so made anew (0.5.0's symbols stay in
-- the library).
DROP FUNCTION "queue_enqueue"(text, jsonb, interval, bigint, integer, interval, interval, text, bigint[], text);
CREATE FUNCTION "queue_enqueue"(
	"queue" TEXT, /* Option < & str > */
	"payload" jsonb DEFAULT NULL, /* Option < RawJsonb > */
	"delay" interval DEFAULT '0', /* Option < Interval > */
	"priority" bigint DEFAULT 0, /* Option < i64 > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"backoff_base" interval DEFAULT NULL, /* Option < Interval > */
	"backoff_max" interval DEFAULT NULL, /* Option < Interval > */
	"idempotency_key" TEXT DEFAULT NULL, /* Option < & str > */
	"wait_for" bigint[] DEFAULT NULL, /* :: std :: option :: Option < Array < '_, i64 > > */
	"on_parent_failure" TEXT DEFAULT 'dead_letter', /* Option < & str > */
	"concurrency_key" TEXT DEFAULT NULL, /* Option < & str > */
	"ordering_key" TEXT DEFAULT NULL, /* Option < & str > */
	"fairness_key" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS aedb_queue.enqueued /* Enqueued */

LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'enqueue_v060_wrapper';

DROP FUNCTION "queue_enqueue_batch"(text, jsonb[], interval, bigint, integer, interval, interval, bigint[], text);
CREATE FUNCTION "queue_enqueue_batch"(
	"queue" TEXT, /* Option < & str > */
	"payloads" jsonb[], /* Option < RawJsonbArray > */
	"delay" interval DEFAULT '0', /* Option < Interval > */
	"priority" bigint DEFAULT 0, /* Option < i64 > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"backoff_base" interval DEFAULT NULL, /* Option < Interval > */
	"backoff_max" interval DEFAULT NULL, /* Option < Interval > */
	"wait_for" bigint[] DEFAULT NULL, /* :: std :: option :: Option < Array < '_, i64 > > */
	"on_parent_failure" TEXT DEFAULT 'dead_letter', /* Option < & str > */
	"concurrency_key" TEXT DEFAULT NULL, /* Option < & str > */
	"ordering_key" TEXT DEFAULT NULL, /* Option < & str > */
	"fairness_key" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS SETOF bigint /* i64 */

LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'enqueue_batch_v060_wrapper';

DROP FUNCTION "queue_configure"(text, integer, interval, interval, interval, integer, interval, interval, boolean, boolean);
CREATE FUNCTION "queue_configure"(
	"queue" TEXT, /* Option < & str > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"backoff_base" interval DEFAULT NULL, /* Option < Interval > */
	"backoff_max" interval DEFAULT NULL, /* Option < Interval > */
	"default_lease" interval DEFAULT NULL, /* Option < Interval > */
	"max_payload_bytes" INT DEFAULT NULL, /* Option < i32 > */
	"keep_completed" interval DEFAULT NULL, /* Option < Interval > */
	"keep_idempotency_keys" interval DEFAULT NULL, /* Option < Interval > */
	"notify" bool DEFAULT NULL, /* Option < bool > */
	"reset" bool DEFAULT false, /* Option < bool > */
	"concurrency_limit" INT DEFAULT NULL, /* Option < i32 > */
	"rate_limit" INT DEFAULT NULL, /* Option < i32 > */
	"rate_interval" interval DEFAULT NULL, /* Option < Interval > */
	"rate_burst" INT DEFAULT NULL, /* Option < i32 > */
	"ordering_on_dead" TEXT DEFAULT NULL, /* Option < & str > */
	"fair_share" bool DEFAULT NULL /* Option < bool > */
) RETURNS TABLE (
	"queue" TEXT,  /* String */
	"max_attempts" INT,  /* Option < i32 > */
	"backoff_base" interval,  /* Option < Interval > */
	"backoff_max" interval,  /* Option < Interval > */
	"default_lease" interval,  /* Option < Interval > */
	"max_payload_bytes" INT,  /* Option < i32 > */
	"keep_completed" interval,  /* Option < Interval > */
	"keep_idempotency_keys" interval,  /* Option < Interval > */
	"notify" bool,  /* bool */
	"paused" bool,  /* bool */
	"concurrency_limit" INT,  /* Option < i32 > */
	"rate_limit" INT,  /* Option < i32 > */
	"rate_interval" interval,  /* Option < Interval > */
	"rate_burst" INT,  /* Option < i32 > */
	"ordering_on_dead" TEXT,  /* Option < String > */
	"fair_share" bool  /* bool */
)

LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'configure_v060_wrapper';

CREATE FUNCTION "queue_configure_key"(
	"queue" TEXT, /* Option < & str > */
	"concurrency_key" TEXT, /* Option < & str > */
	"concurrency_limit" INT /* Option < i32 > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_configure_key_wrapper';

CREATE FUNCTION "queue_configure_fairness"(
	"queue" TEXT, /* Option < & str > */
	"fairness_key" TEXT, /* Option < & str > */
	"weight" INT /* Option < i32 > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_configure_fairness_wrapper';

REVOKE ALL ON FUNCTION "queue_enqueue", "queue_enqueue_batch", "queue_configure", "queue_configure_key",
    "queue_configure_fairness" FROM PUBLIC;
GRANT EXECUTE ON FUNCTION "queue_enqueue", "queue_enqueue_batch" TO aedb_queue_producer;
GRANT EXECUTE ON FUNCTION "queue_enqueue", "queue_enqueue_batch", "queue_configure", "queue_configure_key",
    "queue_configure_fairness" TO aedb_queue_admin;

-- The views show keys: tasks.concurrency_key, ordering_key and
-- fairness_key, queue_stats.blocked, concurrency_limit, rate_limit,
-- rate_tokens and fair_share, and the new concurrency_keys, ordering_keys
-- and fairness_keys.
DROP VIEW aedb_queue.queue_stats;
DROP VIEW aedb_queue.tasks;
CREATE VIEW aedb_queue.tasks WITH (security_barrier) AS
SELECT t.task_id,
       t.queue,
       t.state,
       t.concurrency_key,
       t.ordering_key,
       t.fairness_key,
       -- The parents a waiting task still waits for (those not completed).
       CASE WHEN t.waiting_on > 0 THEN ARRAY(
           SELECT d.parent_id FROM aedb_queue.task_dependency d
            WHERE d.child_id = t.task_id
              AND EXISTS (SELECT 1 FROM aedb_queue.task p WHERE p.task_id = d.parent_id)
            ORDER BY d.parent_id) END AS waits_for,
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

CREATE VIEW aedb_queue.queue_stats WITH (security_barrier) AS
SELECT q.name AS queue,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = q.name AND t.state > 'dead' AND t.waiting_on > 0) AS waiting,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = q.name AND t.state = 'scheduled') AS scheduled,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = q.name AND t.state > 'dead' AND t.state::text = 'blocked') AS blocked,
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
       q.paused,
       q.concurrency_limit,
       q.rate_limit,
       -- Whole tokens in the bucket now: claims that may start at once.
       (SELECT floor(least(coalesce(q.rate_burst, q.rate_limit),
                           (b.micro_tokens
                            + greatest(extract(epoch FROM now() - b.at), 0) * 1000000 * q.rate_limit
                              / extract(epoch FROM coalesce(q.rate_interval, interval '1 second')))
                           / 1000000))::bigint
         FROM aedb_queue.rate_bucket b WHERE b.queue = q.name) AS rate_tokens,
       coalesce(q.fair_share, false) AS fair_share
FROM aedb_queue.queue q
WHERE aedb_queue_internal.can_read(q.name);

CREATE VIEW aedb_queue.concurrency_keys WITH (security_barrier) AS
SELECT s.queue,
       s.key AS concurrency_key,
       coalesce(s.concurrency_limit, q.concurrency_limit, 1) AS concurrency_limit,
       s.concurrency_limit IS NOT NULL AS own_limit,
       s.taken,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = s.queue AND t.state = 'in_flight' AND t.lease_deadline IS NOT NULL
           AND t.concurrency_key = s.key) AS in_flight,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = s.queue AND t.state > 'dead' AND t.state::text = 'blocked' AND t.concurrency_key = s.key) AS blocked,
       s.taken >= coalesce(s.concurrency_limit, q.concurrency_limit, 1) AS at_limit
FROM aedb_queue.concurrency_slot s
LEFT JOIN aedb_queue.queue q ON q.name = s.queue
WHERE aedb_queue_internal.can_read(s.queue);

CREATE VIEW aedb_queue.ordering_keys WITH (security_barrier) AS
SELECT o.queue,
       o.key AS ordering_key,
       o.head AS head_task_id,
       h.state AS head_state,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = o.queue AND t.state > 'dead' AND t.state::text = 'blocked'
           AND t.ordering_key = o.key AND t.concurrency_key IS NULL) AS in_line,
       h.state = 'dead' AS stopped_by_dead
FROM aedb_queue.ordering_slot o
LEFT JOIN aedb_queue.task h ON h.task_id = o.head
WHERE aedb_queue_internal.can_read(o.queue);
CREATE VIEW aedb_queue.fairness_keys WITH (security_barrier) AS
SELECT f.queue,
       f.key AS fairness_key,
       coalesce(f.weight, 1) AS weight,
       (SELECT count(*) FROM aedb_queue.task t
         WHERE t.queue = f.queue AND t.state = 'ready' AND t.fair_vt IS NOT NULL
           AND coalesce(t.fairness_key, '') = f.key) AS ready,
       greatest(f.vt - coalesce((SELECT coalesce(t.fair_vt, t.task_id) FROM aedb_queue.task t
                                  WHERE t.queue = f.queue AND t.state = 'ready'
                                  ORDER BY t.priority DESC, -coalesce(t.fair_vt, t.task_id) DESC LIMIT 1), f.vt), 0) / 1000 AS ahead
FROM aedb_queue.fairness_key f
WHERE aedb_queue_internal.can_read(f.queue);
REVOKE ALL ON aedb_queue.tasks, aedb_queue.queue_stats, aedb_queue.concurrency_keys, aedb_queue.ordering_keys,
    aedb_queue.fairness_keys FROM PUBLIC;
GRANT SELECT ON aedb_queue.tasks, aedb_queue.queue_stats, aedb_queue.concurrency_keys, aedb_queue.ordering_keys,
    aedb_queue.fairness_keys TO aedb_queue_admin;
