//! Every SQL statement the client sends, in one place. Arguments are always
//! bound ($n), never spliced; the queue's name is an argument like any other.
//! Durations travel as whole microseconds (`int8`), made intervals here.

pub const ENQUEUE: &str = "SELECT task_id, deduplicated FROM aedb_queue.queue_enqueue(
    $1, $2, delay => $3::int8 * interval '1 microsecond', priority => $4, max_attempts => $5,
    idempotency_key => $6, wait_for => $7, concurrency_key => $8, ordering_key => $9,
    fairness_key => $10)";

pub const ENQUEUE_BATCH: &str = "SELECT task_id FROM aedb_queue.queue_enqueue_batch(
    $1, $2, delay => $3::int8 * interval '1 microsecond', priority => $4, max_attempts => $5,
    concurrency_key => $6, ordering_key => $7, fairness_key => $8, wait_for => $9) AS task_id";

pub const CLAIM: &str = "SELECT task_id, payload, attempts, fencing_token, progress
    FROM aedb_queue.queue_claim($1, $2, lease => $3::int8 * interval '1 microsecond', max => $4)";

/// Completes the held task and claims up to `max` more; `settled` on every
/// row, one row with NULL task columns when nothing was claimed.
pub const COMPLETE_AND_CLAIM: &str =
    "SELECT settled::text, task_id, payload, attempts, fencing_token, progress
    FROM aedb_queue.queue_complete_and_claim($1, $2, $3, $4, result => $5, follow_ups => $6,
        lease => $7::int8 * interval '1 microsecond', max => $8)";

pub const FAIL_AND_CLAIM: &str =
    "SELECT settled::text, task_id, payload, attempts, fencing_token, progress
    FROM aedb_queue.queue_fail_and_claim($1, $2, $3, $4, $5,
        retry_in => $6::int8 * interval '1 microsecond', dead_letter => $7,
        lease => $8::int8 * interval '1 microsecond', max => $9)";

pub const COMPLETE: &str =
    "SELECT aedb_queue.queue_complete($1, $2, $3, result => $4, follow_ups => $5)::text";

/// Inside the handler's own transaction: a lost lease raises 40002 and the
/// handler's writes roll back with it.
pub const COMPLETE_STRICT: &str =
    "SELECT aedb_queue.queue_complete($1, $2, $3, result => $4, follow_ups => $5, strict => true)::text";

pub const FAIL: &str = "SELECT aedb_queue.queue_fail($1, $2, $3, $4,
    retry_in => $5::int8 * interval '1 microsecond', dead_letter => $6)::text";

pub const HEARTBEAT: &str = "SELECT aedb_queue.queue_heartbeat($1, $2, $3,
    $4::int8 * interval '1 microsecond', progress => $5)::text";

/// With the `otel` feature, after a failure that applied: whether it
/// dead-lettered the task (dead, at the fencing token of the attempt that
/// failed).
pub const DEAD_AT_TOKEN: &str = "SELECT EXISTS (SELECT FROM aedb_queue.queue_get($1, $2)
    WHERE state = 'dead' AND fencing_token = $3)";

pub const RELEASE: &str = "SELECT aedb_queue.queue_release($1, $2, $3)::text";

pub const LISTEN: &str = "LISTEN aedb_queue";

pub const BEGIN: &str = "BEGIN";
pub const COMMIT: &str = "COMMIT";
pub const ROLLBACK: &str = "ROLLBACK";
