-- PROTOTYPE (measurement only, not a migration): aedb_queue.task rebuilt with
-- the columns a claim leaves alone first and the ones it changes last, so a
-- claim's UPDATE that stays on its page is WAL-logged as the changed tail
-- only (heap_update's prefix compression). Same columns, constraints and
-- indexes as sql/schema.sql 0.3.0. The psql views over the table are
-- dropped (they pin its row type); nothing else in the extension refers to
-- column positions.
ALTER EXTENSION aedb_queue DROP VIEW aedb_queue.tasks;
ALTER EXTENSION aedb_queue DROP VIEW aedb_queue.queue_stats;
DROP VIEW aedb_queue.tasks, aedb_queue.queue_stats;
ALTER SEQUENCE aedb_queue.task_id_seq OWNED BY NONE;
ALTER EXTENSION aedb_queue DROP TABLE aedb_queue.task;
DROP TABLE aedb_queue.task;
CREATE TABLE aedb_queue.task (
    task_id         bigint PRIMARY KEY DEFAULT nextval('aedb_queue.task_id_seq'),
    not_before      timestamptz NOT NULL,
    priority        bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    backoff_base    interval NOT NULL,
    backoff_max     interval NOT NULL,
    max_attempts    integer NOT NULL CHECK (max_attempts >= 1),
    queue           text NOT NULL,
    idempotency_key text,
    payload         jsonb,
    -- changed by claims, heartbeats and failures:
    fencing_token   bigint NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL,
    lease_deadline  timestamptz,
    attempts        integer NOT NULL DEFAULT 0,
    state           aedb_queue.task_state NOT NULL,
    owner_id        text,
    progress        jsonb,
    last_error      text,
    CHECK (state <> 'in_flight' OR owner_id IS NOT NULL),
    CHECK ((state = 'in_flight') = (lease_deadline IS NOT NULL))
);
ALTER SEQUENCE aedb_queue.task_id_seq OWNED BY aedb_queue.task.task_id;
CREATE INDEX task_ready_idx     ON aedb_queue.task (queue, priority DESC, (-task_id) DESC) WHERE state = 'ready';
CREATE INDEX task_scheduled_idx ON aedb_queue.task (queue, not_before)            WHERE state = 'scheduled';
CREATE INDEX task_in_flight_idx ON aedb_queue.task (queue, lease_deadline)        WHERE state = 'in_flight' AND lease_deadline IS NOT NULL;
CREATE INDEX task_dead_idx      ON aedb_queue.task (queue, task_id)               WHERE state = 'dead';
