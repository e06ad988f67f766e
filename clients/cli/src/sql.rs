//! Every SQL statement of the command line, and the calls that run them.
//!
//! Every value, queue names included, is a bound parameter: no statement is
//! ever built from input. Statements are assembled at compile time only
//! (`concat!` of literals). Columns are cast on the server to a few types
//! (int8, int4, bool, text, jsonb, float8), timestamps to ISO 8601 text and
//! intervals to text, so rows convert to [`Record`]s without date crates.

use serde_json::Value;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Row};

use crate::error::{Error, Result};
use crate::output::Record;

/// The columns read from `aedb_queue.queue_stats`, in the view's order.
macro_rules! stats_columns {
    () => {
        "queue::text AS queue, waiting::int8 AS waiting, scheduled::int8 AS scheduled, \
         blocked::int8 AS blocked, ready::int8 AS ready, in_flight::int8 AS in_flight, \
         dead::int8 AS dead, completed_kept::int8 AS completed_kept, \
         oldest_ready_age::text AS oldest_ready_age, \
         to_json(next_due) #>> '{}' AS next_due, expired_leases::int8 AS expired_leases, \
         paused AS paused, concurrency_limit::int8 AS concurrency_limit, \
         rate_limit::int8 AS rate_limit, rate_tokens::int8 AS rate_tokens, \
         fair_share AS fair_share"
    };
}

/// Every column of an `aedb_queue.task_row` (`queue_get`, `queue_list`).
macro_rules! task_columns {
    () => {
        "task_id::int8 AS task_id, queue::text AS queue, state::text AS state, \
         to_json(not_before) #>> '{}' AS not_before, priority::int8 AS priority, \
         attempts::int4 AS attempts, max_attempts::int4 AS max_attempts, \
         owner_id::text AS owner_id, fencing_token::int8 AS fencing_token, \
         to_json(lease_deadline) #>> '{}' AS lease_deadline, payload AS payload, \
         progress AS progress, last_error::text AS last_error, \
         idempotency_key::text AS idempotency_key, backoff_base::text AS backoff_base, \
         backoff_max::text AS backoff_max, to_json(created_at) #>> '{}' AS created_at, \
         to_json(updated_at) #>> '{}' AS updated_at, result AS result, \
         to_json(completed_at) #>> '{}' AS completed_at"
    };
}

const STATS_ALL: &str = concat!(
    "SELECT ",
    stats_columns!(),
    " FROM aedb_queue.queue_stats ORDER BY queue"
);
const STATS_ONE: &str = concat!(
    "SELECT ",
    stats_columns!(),
    " FROM aedb_queue.queue_stats WHERE queue = $1::text"
);
const LIST: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM aedb_queue.queue_list($1::text, $2::text, $3::int4)"
);
const GET: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM aedb_queue.queue_get($1::text, $2::int8)"
);
// The operator's actions, shared with `serve` (its buttons run these).
pub(crate) const RETRY_DEAD: &str =
    "SELECT aedb_queue.queue_retry_dead($1::text, task_id => $2::int8, max => $3::int4)::int8";
pub(crate) const PURGE: &str =
    "SELECT aedb_queue.queue_purge($1::text, $2::text, force => $3::bool)::int8";
/// `queue_retry_from_step(queue, task_id, step)`: the steps dropped, in order.
pub(crate) const RETRY_FROM_STEP: &str =
    "SELECT aedb_queue.queue_retry_from_step($1::text, $2::int8, $3::text)::text[]";
/// A workflow's recorded steps (`queue_steps`), in recording order. The
/// last column is the wake time of a sleep step (its result is the
/// extension's `{"until": timestamptz}`), on this session's clock and in
/// the same text as the task's `not_before`, so that a task parked on that
/// sleep is seen by comparing the two; NULL for any other step. The cast
/// runs only on text shaped as the extension writes it, so that a step's
/// own result can never make the statement fail.
macro_rules! step_columns {
    () => {
        "step::text AS step, to_json(recorded_at) #>> '{}' AS recorded_at, \
         attempt::int4 AS attempt, fencing_token::int8 AS fencing_token, result AS result, \
         CASE WHEN jsonb_typeof(result) = 'object' AND result - 'until' = '{}'::jsonb \
              AND jsonb_typeof(result -> 'until') = 'string' \
              AND (result ->> 'until') ~ \
                  '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?([+-][0-9]{2}(:[0-9]{2})?|Z)?$' \
              THEN to_json((result ->> 'until')::timestamptz) #>> '{}' END AS sleep_until"
    };
}
pub(crate) use step_columns;
const STEPS: &str = concat!(
    "SELECT ",
    step_columns!(),
    " FROM aedb_queue.queue_steps($1::text, $2::int8)"
);
/// The events a task waits for (`queue_waits`), by deadline.
const WAITS: &str = "SELECT step::text AS step, key::text AS key, \
     to_json(deadline) #>> '{}' AS deadline FROM aedb_queue.queue_waits($1::text, $2::int8)";
pub(crate) const PAUSE: &str = "SELECT aedb_queue.queue_pause($1::text)";
pub(crate) const RESUME: &str = "SELECT aedb_queue.queue_resume($1::text)";
/// The CLI's pause and resume: only a queue the role can see in
/// queue_stats (no row comes back otherwise), so that a typo does not create
/// a queue; `--create` runs [`PAUSE`] / [`RESUME`] instead.
macro_rules! if_known {
    () => {
        " WHERE EXISTS (SELECT 1 FROM aedb_queue.queue_stats WHERE queue = $1::text)"
    };
}
const PAUSE_KNOWN: &str = concat!("SELECT aedb_queue.queue_pause($1::text)", if_known!());
const RESUME_KNOWN: &str = concat!("SELECT aedb_queue.queue_resume($1::text)", if_known!());
/// A duration flag's text read by interval input, in seconds.
const INTERVAL_SECS: &str = "SELECT extract(epoch FROM $1::text::interval)::float8";
const ENQUEUE: &str = "SELECT task_id::int8, deduplicated \
     FROM aedb_queue.queue_enqueue($1::text, $2::jsonb, \
          delay => $3::text::interval, priority => $4::int8, \
          idempotency_key => $5::text)";
const ENQUEUE_BATCH: &str = "SELECT b.id::int8 \
     FROM aedb_queue.queue_enqueue_batch($1::text, $2::jsonb[], \
          delay => $3::text::interval, priority => $4::int8) \
          WITH ORDINALITY AS b(id, ord) ORDER BY b.ord";
/// The channel `queue_configure(notify => true)` queues notify on.
pub const LISTEN: &str = "LISTEN aedb_queue; LISTEN aedb_queue_completed";
/// The channel completions notify on where `aedb_queue.notify_completions`
/// is on; the payload is `<queue> <tasks> <first task id>`.
pub const COMPLETED_CHANNEL: &str = "aedb_queue_completed";

/// One row as a [`Record`], each column converted by its type.
fn record(row: &Row) -> Result<Record> {
    let mut rec = Record::default();
    for (i, col) in row.columns().iter().enumerate() {
        let v: Option<Value> = match *col.type_() {
            Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Value::from),
            Type::INT4 => row.try_get::<_, Option<i32>>(i)?.map(Value::from),
            Type::BOOL => row.try_get::<_, Option<bool>>(i)?.map(Value::from),
            Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Value::from),
            Type::TEXT => row.try_get::<_, Option<String>>(i)?.map(Value::from),
            Type::JSONB | Type::JSON => row.try_get::<_, Option<Value>>(i)?,
            ref other => {
                return Err(Error::msg(format!(
                    "internal: column {} has unexpected type {other}",
                    col.name()
                )))
            }
        };
        rec.push(col.name(), v.unwrap_or(Value::Null));
    }
    Ok(rec)
}

fn records(rows: &[Row]) -> Result<Vec<Record>> {
    rows.iter().map(record).collect()
}

/// `queue_stats`: every queue the role may read, or one (None if absent).
pub async fn stats_all(c: &Client) -> Result<Vec<Record>> {
    records(&c.query(STATS_ALL, &[]).await?)
}

pub async fn stats_one(c: &Client, queue: &str) -> Result<Option<Record>> {
    let rows = c.query(STATS_ONE, &[&queue]).await?;
    rows.first().map(record).transpose()
}

/// `queue_list(queue, state, "limit")`.
pub async fn list(c: &Client, queue: &str, state: Option<&str>, limit: i32) -> Result<Vec<Record>> {
    records(&c.query(LIST, &[&queue, &state, &limit]).await?)
}

/// `queue_get(queue, task_id)`: the task, live or kept, or None.
pub async fn get(c: &Client, queue: &str, task_id: i64) -> Result<Option<Record>> {
    let rows = c.query(GET, &[&queue, &task_id]).await?;
    rows.first().map(record).transpose()
}

/// `queue_retry_dead(queue, task_id, max)`: how many moved back to ready.
pub async fn retry_dead(
    c: &Client,
    queue: &str,
    task_id: Option<i64>,
    max: Option<i32>,
) -> Result<i64> {
    Ok(c.query_one(RETRY_DEAD, &[&queue, &task_id, &max])
        .await?
        .try_get(0)?)
}

/// `queue_purge(queue, state, force)`: how many were deleted.
pub async fn purge(c: &Client, queue: &str, state: &str, force: bool) -> Result<i64> {
    Ok(c.query_one(PURGE, &[&queue, &state, &force])
        .await?
        .try_get(0)?)
}

/// `queue_pause` / `queue_resume`: whether that changed anything, or None
/// if the queue is unknown (nothing done) and `create` was not asked for.
pub async fn set_paused(
    c: &Client,
    queue: &str,
    paused: bool,
    create: bool,
) -> Result<Option<bool>> {
    let sql = match (paused, create) {
        (true, true) => PAUSE,
        (false, true) => RESUME,
        (true, false) => PAUSE_KNOWN,
        (false, false) => RESUME_KNOWN,
    };
    let rows = c.query(sql, &[&queue]).await?;
    rows.first()
        .map(|r| r.try_get(0))
        .transpose()
        .map_err(Error::from)
}

/// A duration's text in seconds, as interval input reads it.
pub async fn interval_secs(c: &Client, text: &str) -> Result<f64> {
    Ok(c.query_one(INTERVAL_SECS, &[&text]).await?.try_get(0)?)
}

/// `queue_enqueue`: (task_id, deduplicated).
pub async fn enqueue(
    c: &Client,
    queue: &str,
    payload: Option<&Value>,
    delay: &str,
    priority: i64,
    idempotency_key: Option<&str>,
) -> Result<(i64, bool)> {
    let row = c
        .query_one(
            ENQUEUE,
            &[&queue, &payload, &delay, &priority, &idempotency_key],
        )
        .await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

/// `queue_enqueue_batch`: the ids, in payload order.
pub async fn enqueue_batch(
    c: &Client,
    queue: &str,
    payloads: &[Value],
    delay: &str,
    priority: i64,
) -> Result<Vec<i64>> {
    let rows = c
        .query(ENQUEUE_BATCH, &[&queue, &payloads, &delay, &priority])
        .await?;
    rows.iter()
        .map(|r| r.try_get(0).map_err(Error::from))
        .collect()
}

/// `queue_steps(queue, task_id)`: the steps recorded, in order (with the
/// `sleep_until` column of [`step_columns`]).
pub async fn steps(c: &Client, queue: &str, task_id: i64) -> Result<Vec<Record>> {
    records(&c.query(STEPS, &[&queue, &task_id]).await?)
}

/// `queue_waits(queue, task_id)`: the events the task waits for.
pub async fn waits(c: &Client, queue: &str, task_id: i64) -> Result<Vec<Record>> {
    records(&c.query(WAITS, &[&queue, &task_id]).await?)
}

/// `queue_retry_from_step(queue, task_id, step)`: the steps dropped.
pub async fn retry_from_step(
    c: &Client,
    queue: &str,
    task_id: i64,
    step: &str,
) -> Result<Vec<String>> {
    let row = c
        .query_one(RETRY_FROM_STEP, &[&queue, &task_id, &step])
        .await?;
    Ok(row
        .try_get::<_, Option<Vec<String>>>(0)?
        .unwrap_or_default())
}
