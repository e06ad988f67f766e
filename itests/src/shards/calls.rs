//! The calls the router tests make that the crate's helpers do not have
//! (a shard key, batch and fail-and-claim settles, release, errors, the
//! per-shard rows of operator calls), each returning the server's error as
//! is where a test expects one.

use postgres::types::Type;

use crate::{claimed_at, settled_and_claimed, Claimed, GenericClient, Outcome, Value};

type Result<T> = std::result::Result<T, postgres::Error>;

/// `queue_enqueue(queue, payload, shard_key => ..)` through the router: the
/// new task's id.
pub fn try_enqueue_keyed(
    c: &mut impl GenericClient,
    queue: &str,
    payload: &Value,
    shard_key: Option<&str>,
) -> Result<i64> {
    Ok(c.query_typed_one(
        "SELECT task_id::int8 FROM aedb_queue.queue_enqueue($1::text, $2::jsonb, shard_key => $3::text)",
        &[(&queue, Type::TEXT), (payload, Type::JSONB), (&shard_key, Type::TEXT)],
    )?
    .get(0))
}

/// `queue_claim(queue, owner_id, lease, max)`, errors returned.
pub fn try_claim(
    c: &mut impl GenericClient,
    queue: &str,
    owner: &str,
    lease: &str,
    max: i32,
) -> Result<Vec<Claimed>> {
    let rows = c.query_typed(
        "SELECT task_id::int8, payload, attempts::int4, fencing_token::int8, lease_deadline, \
                priority::int8, enqueued_at, progress \
         FROM aedb_queue.queue_claim($1::text, $2::text, $3::text::interval, $4::int4)",
        &[
            (&queue, Type::TEXT),
            (&owner, Type::TEXT),
            (&lease, Type::TEXT),
            (&max, Type::INT4),
        ],
    )?;
    Ok(rows.iter().map(|r| claimed_at(r, 0)).collect())
}

/// `queue_release(queue, task_id, fencing_token)`.
pub fn try_release(
    c: &mut impl GenericClient,
    queue: &str,
    task_id: i64,
    token: i64,
) -> Result<Outcome> {
    let row = c.query_typed_one(
        "SELECT aedb_queue.queue_release($1::text, $2::int8, $3::int8)::text",
        &[
            (&queue, Type::TEXT),
            (&task_id, Type::INT8),
            (&token, Type::INT8),
        ],
    )?;
    Ok(Outcome::parse(row.get(0)))
}

/// `queue_errors(queue, task_id)`: (attempt, error), oldest first.
pub fn try_errors(
    c: &mut impl GenericClient,
    queue: &str,
    task_id: i64,
) -> Result<Vec<(i32, String)>> {
    let rows = c.query_typed(
        "SELECT attempt::int4, error::text FROM aedb_queue.queue_errors($1::text, $2::int8) ORDER BY attempt",
        &[(&queue, Type::TEXT), (&task_id, Type::INT8)],
    )?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// `queue_complete_batch(queue, task_ids, fencing_tokens, strict)`: each
/// task's outcome, by id.
pub fn try_complete_batch(
    c: &mut impl GenericClient,
    queue: &str,
    tasks: &[(i64, i64)],
    strict: bool,
) -> Result<Vec<(i64, Outcome)>> {
    let ids: Vec<i64> = tasks.iter().map(|t| t.0).collect();
    let tokens: Vec<i64> = tasks.iter().map(|t| t.1).collect();
    let rows = c.query_typed(
        "SELECT task_id::int8, outcome::text \
         FROM aedb_queue.queue_complete_batch($1::text, $2::int8[], $3::int8[], $4::bool) ORDER BY task_id",
        &[(&queue, Type::TEXT), (&ids, Type::INT8_ARRAY), (&tokens, Type::INT8_ARRAY), (&strict, Type::BOOL)],
    )?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), Outcome::parse(r.get(1))))
        .collect())
}

/// `queue_fail_and_claim(queue, owner_id, held_task_id, held_fencing_token,
/// error, retry_in => '0', lease, max)`: the held task's outcome and the
/// tasks claimed.
pub fn try_fail_and_claim(
    c: &mut impl GenericClient,
    queue: &str,
    owner: &str,
    held: (i64, i64),
    error: &str,
    lease: &str,
    max: i32,
) -> Result<(Outcome, Vec<Claimed>)> {
    let rows = c.query_typed(
        "SELECT settled::text, task_id::int8, payload, attempts::int4, fencing_token::int8, \
                lease_deadline, priority::int8, enqueued_at, progress \
         FROM aedb_queue.queue_fail_and_claim($1::text, $2::text, $3::int8, $4::int8, $5::text, \
              retry_in => '0', lease => $6::text::interval, max => $7::int4)",
        &[
            (&queue, Type::TEXT),
            (&owner, Type::TEXT),
            (&held.0, Type::INT8),
            (&held.1, Type::INT8),
            (&error, Type::TEXT),
            (&lease, Type::TEXT),
            (&max, Type::INT4),
        ],
    )?;
    Ok(settled_and_claimed(&rows, "queue_fail_and_claim"))
}

/// One shard's row of an operator call through the router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRow {
    pub shard: i32,
    /// The shard's answer (`result`), NULL when it raised an error.
    pub result: Option<String>,
    pub error_code: Option<String>,
    pub error: Option<String>,
}

/// The per-shard rows of `SELECT shard, result::text, error_code, error
/// FROM aedb_queue.<call>` (e.g. `"queue_pause($1)"` with `queue`).
pub fn try_operator_rows(
    c: &mut impl GenericClient,
    call: &str,
    queue: &str,
) -> Result<Vec<ShardRow>> {
    let sql = format!(
        "SELECT shard::int4, result::text, error_code::text, error::text FROM aedb_queue.{call} ORDER BY shard"
    );
    let rows = c.query_typed(sql.as_str(), &[(&queue, Type::TEXT)])?;
    Ok(rows
        .iter()
        .map(|r| ShardRow {
            shard: r.get(0),
            result: r.get(1),
            error_code: r.get(2),
            error: r.get(3),
        })
        .collect())
}

/// `queue_configure(queue, max_attempts => .., keep_completed => ..)`
/// through the router: each shard's row as (shard, error_code).
pub fn configure_everywhere(
    c: &mut impl GenericClient,
    queue: &str,
    max_attempts: i32,
    keep_completed: &str,
) -> Vec<(i32, Option<String>)> {
    let rows = c
        .query_typed(
            "SELECT shard::int4, error_code::text FROM aedb_queue.queue_configure($1::text, \
                 max_attempts => $2::int4, keep_completed => $3::text::interval) ORDER BY shard",
            &[
                (&queue, Type::TEXT),
                (&max_attempts, Type::INT4),
                (&keep_completed, Type::TEXT),
            ],
        )
        .unwrap_or_else(|e| {
            panic!(
                "queue_configure through the router: {}",
                crate::describe(&e)
            )
        });
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}
