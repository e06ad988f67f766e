-- The harness's hand-written baseline (bench/src/systems.rs BASELINE_SCHEMA).
CREATE TABLE jobs (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,
    priority int NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(),
    payload jsonb,
    state text NOT NULL DEFAULT 'ready',
    attempts int NOT NULL DEFAULT 0,
    locked_by text,
    locked_until timestamptz
);
CREATE INDEX jobs_ready ON jobs (queue, priority DESC, id) WHERE state = 'ready';
