-- Views for psql. Both show only the queues the current role may read
-- (aedb_queue_internal.can_read applies the per-queue grants); security_barrier keeps
-- a caller's own functions in a WHERE clause from seeing the other rows.

-- One row per task, made for reading: ages and time left as intervals,
-- payloads and errors cut short. queue_get / queue_list give full rows.
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

-- One row per registered queue. Each figure reads one partial index range
-- of its queue (see docs/operations.md for the cost): counts are
-- index-only scans proportional to that state's size; next_due and the
-- head of the ready index are single index probes.
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

-- One row per concurrency key with a slot taken, a task blocked, or a
-- limit of its own. taken = ready + in flight; at_limit: its next due task
-- waits (blocked) until one of them completes, fails or is cancelled.
-- Counts read the key's range of the blocked index and the queue's
-- in-flight entries. state > 'dead' (the blocked index's predicate) and
-- state::text = 'blocked': the upgrades could not name the label (see
-- schema.sql).
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

-- One row per ordering key with tasks in line: the head (the one task of
-- the key that may run: ready, in flight, scheduled for a retry, or dead
-- while the queue's ordering_on_dead is 'block'), and how many wait behind
-- it. stopped_by_dead: the line waits for the dead head to be re-driven,
-- cancelled or purged.
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

-- One row per fairness key of a fair-share queue ('' is the share of its
-- tasks without a key): its weight, its ready tasks, and how far its
-- virtual time runs ahead of the queue's head (in tasks of weight 1: a
-- key that far ahead waits while others catch up). Counts read the
-- queue's range of the ready index.
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
