//! Every SQL statement the client sends, in one place. Arguments are always
//! bound ($n), never spliced; the queue's name is an argument like any other.
//! Durations travel as whole microseconds (`int8`), made intervals here.
//! Each statement names its parameters' types, as the server infers them
//! (checked by a test), for the unnamed statements a transaction pooler
//! needs ([`crate::statement::Statements::Unnamed`]).

use tokio_postgres::types::Type;

/// A statement and the types of its parameters ($1, $2, ...).
pub struct Sql {
    pub text: &'static str,
    pub types: &'static [Type],
}

pub const ENQUEUE: Sql = Sql {
    text: "SELECT task_id, deduplicated FROM aedb_queue.queue_enqueue(
    $1, $2, delay => $3::int8 * interval '1 microsecond', priority => $4, max_attempts => $5,
    idempotency_key => $6, wait_for => $7, concurrency_key => $8, ordering_key => $9,
    fairness_key => $10)",
    types: &[
        Type::TEXT,
        Type::JSONB,
        Type::INT8,
        Type::INT8,
        Type::INT4,
        Type::TEXT,
        Type::INT8_ARRAY,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
    ],
};

pub const ENQUEUE_BATCH: Sql = Sql {
    text: "SELECT task_id FROM aedb_queue.queue_enqueue_batch(
    $1, $2, delay => $3::int8 * interval '1 microsecond', priority => $4, max_attempts => $5,
    concurrency_key => $6, ordering_key => $7, fairness_key => $8, wait_for => $9) AS task_id",
    types: &[
        Type::TEXT,
        Type::JSONB_ARRAY,
        Type::INT8,
        Type::INT8,
        Type::INT4,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8_ARRAY,
    ],
};

pub const CLAIM: Sql = Sql {
    text: "SELECT task_id, payload, attempts, fencing_token, progress
    FROM aedb_queue.queue_claim($1, $2, lease => $3::int8 * interval '1 microsecond', max => $4)",
    types: &[Type::TEXT, Type::TEXT, Type::INT8, Type::INT4],
};

/// Completes the held task and claims up to `max` more; `settled` on every
/// row, one row with NULL task columns when nothing was claimed.
pub const COMPLETE_AND_CLAIM: Sql = Sql {
    text: "SELECT settled::text, task_id, payload, attempts, fencing_token, progress
    FROM aedb_queue.queue_complete_and_claim($1, $2, $3, $4, result => $5, follow_ups => $6,
        lease => $7::int8 * interval '1 microsecond', max => $8)",
    types: &[
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::JSONB,
        Type::JSONB,
        Type::INT8,
        Type::INT4,
    ],
};

pub const FAIL_AND_CLAIM: Sql = Sql {
    text: "SELECT settled::text, task_id, payload, attempts, fencing_token, progress
    FROM aedb_queue.queue_fail_and_claim($1, $2, $3, $4, $5,
        retry_in => $6::int8 * interval '1 microsecond', dead_letter => $7,
        lease => $8::int8 * interval '1 microsecond', max => $9)",
    types: &[
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::INT8,
        Type::BOOL,
        Type::INT8,
        Type::INT4,
    ],
};

pub const COMPLETE: Sql = Sql {
    text: "SELECT aedb_queue.queue_complete($1, $2, $3, result => $4, follow_ups => $5)::text",
    types: &[Type::TEXT, Type::INT8, Type::INT8, Type::JSONB, Type::JSONB],
};

/// Inside the handler's own transaction: a lost lease raises 40002 and the
/// handler's writes roll back with it.
pub const COMPLETE_STRICT: Sql = Sql {
    text: "SELECT aedb_queue.queue_complete($1, $2, $3, result => $4, follow_ups => $5, strict => true)::text",
    types: &[Type::TEXT, Type::INT8, Type::INT8, Type::JSONB, Type::JSONB],
};

pub const FAIL: Sql = Sql {
    text: "SELECT aedb_queue.queue_fail($1, $2, $3, $4,
    retry_in => $5::int8 * interval '1 microsecond', dead_letter => $6)::text",
    types: &[
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::INT8,
        Type::BOOL,
    ],
};

pub const HEARTBEAT: Sql = Sql {
    text: "SELECT aedb_queue.queue_heartbeat($1, $2, $3,
    $4::int8 * interval '1 microsecond', progress => $5)::text",
    types: &[Type::TEXT, Type::INT8, Type::INT8, Type::INT8, Type::JSONB],
};

/// After a failure that applied: whether it dead-lettered the task (dead,
/// at the fencing token of the attempt that failed), for the log line and
/// the attempt's span.
pub const DEAD_AT_TOKEN: Sql = Sql {
    text: "SELECT EXISTS (SELECT FROM aedb_queue.queue_get($1, $2)
    WHERE state = 'dead' AND fencing_token = $3)",
    types: &[Type::TEXT, Type::INT8, Type::INT8],
};

pub const RELEASE: Sql = Sql {
    text: "SELECT aedb_queue.queue_release($1, $2, $3)::text",
    types: &[Type::TEXT, Type::INT8, Type::INT8],
};

/// A workflow's recorded steps (step name, result), loaded once per claim.
pub const STEPS: Sql = Sql {
    text: "SELECT step, result FROM aedb_queue.queue_steps($1, $2)",
    types: &[Type::TEXT, Type::INT8],
};

/// Records a step's result under the claim's fencing token: `applied`, or
/// `lease_lost` (nothing recorded); 23505 when the step is recorded already.
pub const STEP_RECORD: Sql = Sql {
    text: "SELECT aedb_queue.queue_step_record($1, $2, $3, $4, $5)::text",
    types: &[Type::TEXT, Type::INT8, Type::INT8, Type::TEXT, Type::JSONB],
};

/// Inside the handler's own transaction: a lost lease raises 40002 and the
/// step's effect (written in the same transaction) rolls back with it.
pub const STEP_RECORD_STRICT: Sql = Sql {
    text: "SELECT aedb_queue.queue_step_record($1, $2, $3, $4, $5, strict => true)::text",
    types: &[Type::TEXT, Type::INT8, Type::INT8, Type::TEXT, Type::JSONB],
};

/// A durable sleep for a duration ($5, microseconds) or until a time ($6),
/// one of them NULL. `waiting`: the task was handed back until `wake_at`.
pub const SLEEP: Sql = Sql {
    text: "SELECT outcome::text, waiting, wake_at::text FROM aedb_queue.queue_sleep($1, $2, $3, $4,
    duration => $5::int8 * interval '1 microsecond', until => $6)",
    types: &[
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::INT8,
        Type::TIMESTAMPTZ,
    ],
};

/// Waits for the event ($5) of the queue, at most $6 microseconds from the
/// first call. `waiting`: the task was handed back until the event or
/// `wake_at` (the deadline).
pub const AWAIT_EVENT: Sql = Sql {
    text: "SELECT outcome::text, waiting, wake_at::text, payload, timed_out
    FROM aedb_queue.queue_await_event($1, $2, $3, $4, $5, $6::int8 * interval '1 microsecond')",
    types: &[
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
    ],
};

/// Links a workflow's children ($5) without parking or recording, in the
/// transaction that enqueued them: a child that completes at once is kept
/// with its result. `lease_lost` when the fence refused it.
pub const LINK_TASKS: Sql = Sql {
    text: "SELECT outcome::text
    FROM aedb_queue.queue_await_tasks($1, $2, $3, $4, $5, park => false)",
    types: &[
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::INT8_ARRAY,
    ],
};

/// Waits for tasks ($5) as a step. `waiting`: the task was handed back
/// until the last of them ends; else `results`, one entry per task (recorded).
pub const AWAIT_TASKS: Sql = Sql {
    text: "SELECT outcome::text, waiting, results
    FROM aedb_queue.queue_await_tasks($1, $2, $3, $4, $5)",
    types: &[
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::INT8_ARRAY,
    ],
};

/// Emits an event of a queue: true if this call emitted it, false if it
/// was emitted already (the first emit stands).
pub const EMIT: Sql = Sql {
    text: "SELECT aedb_queue.queue_emit($1, $2, $3)",
    types: &[Type::TEXT, Type::TEXT, Type::JSONB],
};

pub const LISTEN: &str = "LISTEN aedb_queue";

/// The worker's check at start (a simple query: no statement is prepared,
/// so it works behind any pooler).
pub const EXTENSION_VERSION: &str =
    "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'aedb_queue'";

pub const BEGIN: &str = "BEGIN";
pub const COMMIT: &str = "COMMIT";
pub const ROLLBACK: &str = "ROLLBACK";

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[&Sql] = &[
        &ENQUEUE,
        &ENQUEUE_BATCH,
        &CLAIM,
        &COMPLETE_AND_CLAIM,
        &FAIL_AND_CLAIM,
        &COMPLETE,
        &COMPLETE_STRICT,
        &FAIL,
        &HEARTBEAT,
        &DEAD_AT_TOKEN,
        &RELEASE,
        &STEPS,
        &STEP_RECORD,
        &STEP_RECORD_STRICT,
        &SLEEP,
        &AWAIT_EVENT,
        &LINK_TASKS,
        &AWAIT_TASKS,
        &EMIT,
    ];

    /// The types each statement declares are those the server infers from
    /// its text: prepared and unnamed, a statement means the same.
    #[test]
    fn declared_parameter_types_are_the_servers() {
        let cluster = aedb_queue_itests::Cluster::shared();
        let mut c = cluster.connect_as(aedb_queue_itests::SERVICE);
        for sql in ALL {
            let prepared = c.prepare(sql.text).expect(sql.text);
            assert_eq!(prepared.params(), sql.types, "{}", sql.text);
        }
    }
}
