-- aedb_queue schema: one set of tables holds every queue; queues are rows.

-- Helpers that are not API. Plain CREATE SCHEMA: one made beforehand by
-- someone else is refused, not adopted.
CREATE SCHEMA aedb_queue_internal;

-- Refuse a schema aedb_queue that someone else prepared: CREATE EXTENSION
-- adopts an existing schema of that name, and its owner (or any role with
-- CREATE on it) could put functions and operators there that look like
-- ours (docs/security.md). One is adopted only as an earlier DROP EXTENSION
-- left it: PostgreSQL makes the control file's schema before the extension
-- exists and never counts it as a member, so DROP EXTENSION keeps it, empty,
-- owned by the installing role, granted only to the extension's own roles.
DO $$
DECLARE
    ns oid := 'aedb_queue'::pg_catalog.regnamespace;
    owner oid := (SELECT nspowner FROM pg_catalog.pg_namespace WHERE oid = ns);
    ours oid[] := ARRAY(SELECT oid FROM pg_catalog.pg_roles
                        WHERE rolname IN ('aedb_queue_producer', 'aedb_queue_worker', 'aedb_queue_admin'));
BEGIN
    IF owner <> (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = pg_catalog.current_user())
       OR EXISTS (SELECT 1 FROM pg_catalog.aclexplode((SELECT nspacl FROM pg_catalog.pg_namespace WHERE oid = ns)) a
                  WHERE a.grantee OPERATOR(pg_catalog.<>) owner
                    AND NOT (a.grantee OPERATOR(pg_catalog.=) ANY (ours)))
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_default_acl WHERE defaclnamespace = ns)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_depend
                  WHERE refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass AND refobjid = ns
                    AND classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_extension'::pg_catalog.regclass)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE relnamespace = ns)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_proc WHERE pronamespace = ns)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_type WHERE typnamespace = ns)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_operator WHERE oprnamespace = ns)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_extension
                  WHERE extnamespace = ns AND extname OPERATOR(pg_catalog.<>) 'aedb_queue') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'insufficient_privilege',
            MESSAGE = 'schema aedb_queue already exists and was not made by this CREATE EXTENSION',
            HINT = 'Drop or rename that schema (check what is in it first), then CREATE EXTENSION aedb_queue again.';
    END IF;
END
$$;

-- 'waiting': for parent tasks to complete (task_dependency), appended in
-- 0.5.0; 'blocked': due, waiting for a slot of its concurrency key
-- (concurrency_slot), appended in 0.6.0 (an upgrade adds enum values at
-- the end).
CREATE TYPE aedb_queue.task_state AS ENUM ('scheduled', 'ready', 'in_flight', 'dead', 'waiting', 'blocked');

-- What a fenced call (complete, fail, heartbeat) did.
CREATE TYPE aedb_queue.outcome AS ENUM ('applied', 'lease_lost');

-- What queue_enqueue returns (src/enqueued.rs says why not a TABLE).
CREATE TYPE aedb_queue.enqueued AS (task_id bigint, deduplicated boolean);

-- Task ids double as the FIFO order within a priority.
CREATE SEQUENCE aedb_queue.task_id_seq AS bigint;

-- The queue registry and per-queue settings (queue_configure). A NULL
-- setting means the extension's default.
CREATE TABLE aedb_queue.queue (
    name                  text PRIMARY KEY,
    created_at            timestamptz NOT NULL DEFAULT now(),
    max_attempts          integer CHECK (max_attempts >= 1),
    backoff_base          interval,
    backoff_max           interval,
    default_lease         interval,
    max_payload_bytes     integer CHECK (max_payload_bytes >= 1),
    -- How long completed tasks stay readable in completed_task; NULL: not kept.
    keep_completed        interval,
    -- How long idempotency keys of finished tasks dedup; NULL: forever.
    keep_idempotency_keys interval,
    notify                boolean NOT NULL DEFAULT false,
    paused                boolean NOT NULL DEFAULT false,
    -- How many tasks of one concurrency key may be ready or in flight at
    -- once; NULL: 1 (concurrency_slot may override it per key).
    concurrency_limit     integer CHECK (concurrency_limit >= 1),
    -- At most rate_limit claims per rate_interval, rate_burst at once (a
    -- token bucket, rate_bucket); NULL rate_limit: no limit, NULL
    -- rate_interval: 1 second, NULL rate_burst: rate_limit.
    rate_limit            integer CHECK (rate_limit >= 1),
    rate_interval         interval,
    rate_burst            integer CHECK (rate_burst >= 1),
    -- What a dead task does to its ordering key: 'block' (NULL) keeps the
    -- key's later tasks waiting until it is re-driven, cancelled or
    -- purged; 'release' lets the next one run.
    ordering_on_dead      text CHECK (ordering_on_dead IN ('block', 'release')),
    -- Claims share the ready tasks of each priority across fairness keys
    -- (task.fair_vt) instead of serving them first in, first out.
    fair_share            boolean
);

-- The token bucket of each rate-limited queue, apart from the queue's row:
-- every claim writes it, and every write to aedb_queue.queue drops every
-- backend's copy of the settings. Claims take the row with SKIP LOCKED: a
-- claim that finds it taken gets no tokens rather than waiting.
CREATE TABLE aedb_queue.rate_bucket (
    queue        text PRIMARY KEY,
    -- Millionths of a token, as of at.
    micro_tokens bigint NOT NULL,
    at           timestamptz NOT NULL
);

-- No CHECK constraints: PostgreSQL re-reads each one from its stored text
-- and compiles it in every INSERT and UPDATE, about a fifth of an enqueue's
-- or a claim's instructions (bench/results/claim-profile.md). Only the
-- extension writes this table, and its statements keep the invariants
-- (max_attempts >= 1; a lease and an owner exactly while in flight), which
-- the tests check after every step (tests::assert_task_invariants).
--
-- Columns an enqueue sets for good come first, those claims, settles and
-- heartbeats change last, and pages are left half empty: an UPDATE whose
-- new row version fits on the old one's page logs only the bytes after the
-- prefix the two versions share, so a claim's WAL record leaves out the
-- payload and everything before it. In the benchmark's batched drain that
-- is 675 WAL bytes a job instead of 937 (bench/results/wal-layout.md).
CREATE TABLE aedb_queue.task (
    task_id         bigint PRIMARY KEY DEFAULT nextval('aedb_queue.task_id_seq'),
    queue           text NOT NULL,
    priority        bigint NOT NULL DEFAULT 0,
    max_attempts    integer NOT NULL,
    backoff_base    interval NOT NULL,
    backoff_max     interval NOT NULL,
    created_at      timestamptz NOT NULL,
    idempotency_key text,
    payload         jsonb,
    not_before      timestamptz NOT NULL,
    state           aedb_queue.task_state NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    fencing_token   bigint NOT NULL DEFAULT 0,
    lease_deadline  timestamptz,
    updated_at      timestamptz NOT NULL,
    owner_id        text,
    progress        jsonb,
    last_error      text,
    -- Parents not yet completed (task_dependency); NULL for a task that
    -- never waited. Counted on the child's row so that parents completing
    -- at once in different sessions serialize on it: the last one sees 0.
    waiting_on      integer,
    -- Its completion keeps it (with its result) in completed_task: some
    -- task waits for it (its completion releases them), it waits or waited
    -- for others, or it recorded a workflow step (0.9.0; its archived row
    -- is then marked in_workflow). NULL or false for nearly every task, so
    -- their completions take the plain path.
    has_dependents  boolean,
    -- Tasks sharing a key in a queue take its slots (concurrency_slot);
    -- NULL for a task with no key, whose paths never look at slots.
    concurrency_key text,
    -- Tasks sharing an ordering key in a queue run one at a time in task
    -- id order (ordering_slot names the one that may); never set together
    -- with concurrency_key.
    ordering_key    text,
    -- In a fair-share queue, the task's share (NULL key: the share of the
    -- tasks without one) and its virtual start time: claims serve the
    -- lowest first, and each key's tasks are spaced by 1000 / its weight
    -- from where the queue's head stood (fairness_key). NULL elsewhere:
    -- the ready index ranks a task by this time if it has one, else by id.
    fairness_key    text,
    fair_vt         bigint,
    -- Every error the task met, oldest first, the last 20 (queue_errors):
    -- [{"attempt", "at", "error"}]. NULL until its first failure, so the
    -- rows of tasks that never fail stay as narrow as they were.
    errors          jsonb
) WITH (fillfactor = 50);
ALTER SEQUENCE aedb_queue.task_id_seq OWNED BY aedb_queue.task.task_id;

-- One partial index per state, each leading with the queue: a claim reads
-- only the ready entries of its own queue, so future, dead and in-flight
-- tasks (and other queues) never enter its scan. The ready index is in
-- service order (priority descending, then rank: a fair-share queue's
-- virtual times, every other task's id, so first in, first out) with both
-- keys descending, so a claim can resume after a position with one row
-- comparison, (priority, -rank) < (p, -r), which the primary key cannot
-- serve. Fair share has no index of its own: each partial index costs
-- every statement that writes a task row (see task_blocked_idx), and a
-- third key would cost every entry written.
CREATE INDEX task_ready_idx     ON aedb_queue.task (queue, priority DESC, (-coalesce(fair_vt, task_id)) DESC) WHERE state = 'ready';
CREATE INDEX task_scheduled_idx ON aedb_queue.task (queue, not_before)            WHERE state = 'scheduled';
-- The redundant "lease_deadline IS NOT NULL" keeps fenced point lookups
-- (complete, fail, heartbeat: task_id = $1 AND state = 'in_flight') on the
-- primary key: the planner may otherwise pick this small-looking index and
-- filter every in-flight task of the queue. The reclaim's range condition on
-- lease_deadline implies it, so reclaims still use the index.
CREATE INDEX task_in_flight_idx ON aedb_queue.task (queue, lease_deadline)        WHERE state = 'in_flight' AND lease_deadline IS NOT NULL;
CREATE INDEX task_dead_idx      ON aedb_queue.task (queue, task_id)               WHERE state = 'dead';
-- Waiting and blocked tasks by key: a freed slot goes to the first of its
-- key in service order, an ordering key's line moves on to its first by
-- id; queue_list and queue_stats find a queue's waiting tasks here too
-- (waiting_on > 0 exactly while a task is waiting). One index for both
-- kinds of key and both states (a task never has both keys): every
-- statement that writes a task row opens and prepares each partial index
-- of the table, about 9,000 instructions a claim for each (docs/flow-
-- control.md), whether or not the row goes in. The CASE orders a line by
-- id alone (priority is not its order); statements name it as written
-- here, with the other key's column, so the planner reads the index in
-- order (store/flow/mod.rs, blocked_order!). The predicate names 'dead',
-- the last label 0.1.0 had: an upgrade cannot name a label in the
-- transaction that adds it, and one from 0.4.0 adds 'waiting' as well.
CREATE INDEX task_blocked_idx   ON aedb_queue.task (queue, concurrency_key, ordering_key,
                                                    (CASE WHEN ordering_key IS NULL THEN priority END) DESC,
                                                    task_id) WHERE state > 'dead';

-- The slots of each concurrency key in use: taken counts the key's tasks
-- that are ready or in flight, never more than the limit while others of
-- the key are blocked. Every change to a key's taken count or to its set
-- of blocked tasks happens under this row's lock, and a freed slot is
-- given in a statement started after the lock was taken, so it sees every
-- blocked task committed before (docs/flow-control.md). A row goes when no
-- slot is taken, unless it holds the key's own limit.
CREATE TABLE aedb_queue.concurrency_slot (
    queue             text NOT NULL,
    key               text NOT NULL,
    taken             integer NOT NULL,
    -- This key's limit; NULL: the queue's.
    concurrency_limit integer CHECK (concurrency_limit >= 1),
    PRIMARY KEY (queue, key)
);

-- Each fairness key of a fair-share queue: its weight, and the virtual
-- time its last task starts at (the next starts 1000 / weight later, or at
-- the queue's head if that is later: a key that was idle gets no credit).
CREATE TABLE aedb_queue.fairness_key (
    queue  text NOT NULL,
    key    text NOT NULL,
    vt     bigint NOT NULL,
    -- NULL: 1.
    weight integer CHECK (weight BETWEEN 1 AND 1000),
    PRIMARY KEY (queue, key)
);

-- The head of each ordering key with tasks in line: the one task of the
-- key that may be ready, in flight, scheduled for a retry, or (with
-- ordering_on_dead 'block') dead. Changed, as concurrency_slot, only under
-- the row's lock, the next head picked by a statement started after it.
CREATE TABLE aedb_queue.ordering_slot (
    queue text NOT NULL,
    key   text NOT NULL,
    -- NULL only inside the transaction that is picking the next head.
    head  bigint,
    PRIMARY KEY (queue, key)
);

-- Which tasks wait for which (queue_enqueue's wait_for). A row lives
-- until its parent fails (then the child's policy is applied and the row
-- goes) or, for a completed parent, until the parent's kept row expires,
-- which it does only once no child of it is left: so children can read
-- their parents' results whatever the parent queue's retention.
CREATE TABLE aedb_queue.task_dependency (
    parent_id      bigint NOT NULL,
    child_id       bigint NOT NULL,
    -- The child's policy when this parent is dead-lettered or cancelled:
    -- true runs it anyway, false dead-letters it naming the parent.
    run_on_failure boolean NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX task_dependency_child_idx ON aedb_queue.task_dependency (child_id);

-- Keys outlive their tasks, so a retried enqueue after completion still dedups.
CREATE TABLE aedb_queue.idempotency_key (
    queue      text NOT NULL,
    key        text NOT NULL,
    task_id    bigint NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);

-- Completed tasks of queues that keep them (queue_configure keep_completed),
-- and of every queue the tasks that took part in a workflow or a DAG of
-- dependencies (in_workflow), readable through queue_get until queue_reap
-- deletes them.
CREATE TABLE aedb_queue.completed_task (
    task_id         bigint PRIMARY KEY,
    queue           text NOT NULL,
    priority        bigint NOT NULL,
    attempts        integer NOT NULL,
    max_attempts    integer NOT NULL,
    fencing_token   bigint NOT NULL,
    owner_id        text,
    payload         jsonb,
    progress        jsonb,
    result          jsonb,
    idempotency_key text,
    created_at      timestamptz NOT NULL,
    completed_at    timestamptz NOT NULL,
    -- Kept because it took part in a workflow or a DAG (task.has_dependents):
    -- for the longer of the queue's keep_completed and the GUC
    -- aedb_queue.keep_workflows (0.9.0; an upgrade adds it last).
    in_workflow     boolean NOT NULL DEFAULT false
);
CREATE INDEX completed_task_age_idx ON aedb_queue.completed_task (queue, completed_at);
-- The workflow and DAG tasks, which expire later than the others: their
-- expiry reads the oldest in order here (0.9.0).
CREATE INDEX completed_task_workflow_idx ON aedb_queue.completed_task (queue, completed_at) WHERE in_workflow;

-- A task as queue_get and queue_list return it, live or kept after
-- completion: the one definition of its columns (src/store/admin.rs builds
-- the rows in this order).
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

-- Per-queue grants (queue_grant): a role holding any is confined to them.
CREATE TABLE aedb_queue.queue_grant (
    role      regrole NOT NULL,
    pattern   text NOT NULL,
    privilege text NOT NULL CHECK (privilege IN ('producer', 'worker', 'admin')),
    PRIMARY KEY (role, pattern, privilege)
);

-- Confined roles (queue_confine, or a first queue_grant by an unconfined
-- admin): such a role, and every member of it, may use only what the
-- grants of the confined roles it belongs to allow. Only unconfined admins
-- add or remove rows (docs/security.md).
CREATE TABLE aedb_queue.confined_role (
    role        regrole PRIMARY KEY,
    confined_at timestamptz NOT NULL
);

-- Periodic schedules (queue_schedule_upsert): each fire time between
-- fired_up_to and now makes one task in the schedule's queue. A firer locks
-- the row, enqueues the tasks and moves fired_up_to past them in one
-- transaction, so two firers never both own a fire time (docs/schedules.md).
-- Names are per queue: a tenant cannot learn or block another's names.
CREATE TABLE aedb_queue.schedule (
    queue          text NOT NULL,
    name           text NOT NULL,
    cron           text NOT NULL,
    time_zone      text NOT NULL,
    payload        jsonb,
    priority       bigint NOT NULL,
    max_attempts   integer,
    backoff_base   interval,
    backoff_max    interval,
    -- 'skip' (only the latest missed fire time gets a task) or 'catch_up'
    -- (the latest catch_up_limit of them do).
    missed         text NOT NULL,
    catch_up_limit integer,
    -- The payload key that receives the fire time; NULL: none.
    fire_time_key  text,
    paused         boolean NOT NULL DEFAULT false,
    -- The last fire time dealt with (or when the pattern was set or the
    -- schedule resumed): only later ones are owed.
    fired_up_to    timestamptz NOT NULL,
    next_fire_at   timestamptz NOT NULL,
    -- Why the last fire made no task (the fire time is then given up).
    last_error     text,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (queue, name)
);
-- What a reap of every queue, or of one, fires next.
CREATE INDEX schedule_due_idx       ON aedb_queue.schedule (next_fire_at)        WHERE NOT paused;
CREATE INDEX schedule_queue_due_idx ON aedb_queue.schedule (queue, next_fire_at) WHERE NOT paused;

-- A schedule as queue_schedule_list and queue_schedule_upsert return it:
-- the one definition of its columns (src/store/schedule.rs builds them).
CREATE TYPE aedb_queue.schedule_row AS (
    queue          text,
    name           text,
    cron           text,
    time_zone      text,
    payload        jsonb,
    priority       bigint,
    max_attempts   integer,
    backoff_base   interval,
    backoff_max    interval,
    missed         text,
    catch_up_limit integer,
    fire_time_key  text,
    paused         boolean,
    fired_up_to    timestamptz,
    next_fire_at   timestamptz,
    -- The next five fire times from next_fire_at (queue_cron_preview).
    upcoming       timestamptz[],
    last_error     text,
    created_at     timestamptz,
    updated_at     timestamptz
);

-- queue_reap() finds the queues that keep idempotency keys for a limited
-- time without reading every registered queue.
CREATE INDEX queue_keeps_keys_idx ON aedb_queue.queue (name) WHERE keep_idempotency_keys IS NOT NULL;

-- Durable workflows (0.9.0, docs/guide.md): the steps a task's handler
-- recorded, each under the fencing token of the claim that ran it. A step
-- runs once: its first record stands. queue_reap() of every queue removes
-- the rows of tasks that are gone (kept completed tasks keep theirs).
CREATE TABLE aedb_queue.task_step (
    task_id       bigint NOT NULL,
    step          text NOT NULL,
    queue         text NOT NULL,
    result        jsonb,
    attempt       integer NOT NULL,
    fencing_token bigint NOT NULL,
    recorded_at   timestamptz NOT NULL,
    PRIMARY KEY (task_id, step)
);

-- Events by key, within a queue; the first emit of a key stands.
CREATE TABLE aedb_queue.event (
    queue      text NOT NULL,
    key        text NOT NULL,
    payload    jsonb,
    emitted_at timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);

-- Tasks parked until an event, or until their deadline: one row per
-- waiting step; the deadline is its first call's.
CREATE TABLE aedb_queue.event_wait (
    task_id  bigint NOT NULL,
    step     text NOT NULL,
    queue    text NOT NULL,
    key      text NOT NULL,
    deadline timestamptz NOT NULL,
    PRIMARY KEY (task_id, step)
);
CREATE INDEX event_wait_key_idx ON aedb_queue.event_wait (queue, key);

-- pg_dump skips the contents of extension tables unless told otherwise.
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.queue', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.task', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.task_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.idempotency_key', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.completed_task', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.queue_grant', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.confined_role', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.schedule', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.task_dependency', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.concurrency_slot', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.rate_bucket', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.ordering_slot', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.fairness_key', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.task_step', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.event', '');
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.event_wait', '');
