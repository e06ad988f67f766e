//! `queue_get`, `queue_list`, and the read check behind the views in `sql/inspect.sql`.

use aedb_queue_core::grants::{Action, Pattern};
use aedb_queue_core::validate;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use super::{checked_name, required};
use crate::errors::run;
use crate::jsonb::RawJsonb;
use crate::security;
use crate::store::{self, TaskRecord};

/// A `queue_get` / `queue_list` row; the column names are in their signatures.
type TaskRow = (
    i64,                           // task_id
    String,                        // queue
    String,                        // state
    Option<TimestampWithTimeZone>, // not_before
    i64,                           // priority
    i32,                           // attempts
    i32,                           // max_attempts
    Option<String>,                // owner_id
    i64,                           // fencing_token
    Option<TimestampWithTimeZone>, // lease_deadline
    Option<RawJsonb>,              // payload
    Option<RawJsonb>,              // progress
    Option<String>,                // last_error
    Option<String>,                // idempotency_key
    Option<Interval>,              // backoff_base
    Option<Interval>,              // backoff_max
    TimestampWithTimeZone,         // created_at
    TimestampWithTimeZone,         // updated_at
    Option<RawJsonb>,              // result
    Option<TimestampWithTimeZone>, // completed_at
);

fn row(t: TaskRecord) -> TaskRow {
    (
        t.task_id,
        t.queue,
        t.state,
        t.not_before,
        t.priority,
        t.attempts,
        t.max_attempts,
        t.owner_id,
        t.fencing_token,
        t.lease_deadline,
        t.payload,
        t.progress,
        t.last_error,
        t.idempotency_key,
        t.backoff_base,
        t.backoff_max,
        t.created_at,
        t.updated_at,
        t.result,
        t.completed_at,
    )
}

/// One task of the queue, live or (when the queue keeps them) completed.
#[pg_extern(stable)]
#[allow(clippy::type_complexity)]
fn queue_get(
    queue: Option<&str>,
    task_id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(task_id, i64),
        name!(queue, String),
        name!(state, String),
        name!(not_before, Option<TimestampWithTimeZone>),
        name!(priority, i64),
        name!(attempts, i32),
        name!(max_attempts, i32),
        name!(owner_id, Option<String>),
        name!(fencing_token, i64),
        name!(lease_deadline, Option<TimestampWithTimeZone>),
        name!(payload, Option<RawJsonb>),
        name!(progress, Option<RawJsonb>),
        name!(last_error, Option<String>),
        name!(idempotency_key, Option<String>),
        name!(backoff_base, Option<Interval>),
        name!(backoff_max, Option<Interval>),
        name!(created_at, TimestampWithTimeZone),
        name!(updated_at, TimestampWithTimeZone),
        name!(result, Option<RawJsonb>),
        name!(completed_at, Option<TimestampWithTimeZone>),
    ),
> {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let task_id = required("task_id", task_id)?;
        security::authorize(Action::Read, queue)?;
        Ok(TableIterator::new(
            store::get_task(queue, task_id)?.into_iter().map(row),
        ))
    })
}

/// Up to `limit` tasks of the queue: ready in service order, then in flight
/// by lease deadline, scheduled by due time, dead oldest first, completed
/// newest first; or only those of `state`.
#[pg_extern(stable)]
#[allow(clippy::type_complexity)]
fn queue_list(
    queue: Option<&str>,
    state: default!(Option<&str>, "NULL"),
    limit: default!(Option<i32>, 100),
) -> TableIterator<
    'static,
    (
        name!(task_id, i64),
        name!(queue, String),
        name!(state, String),
        name!(not_before, Option<TimestampWithTimeZone>),
        name!(priority, i64),
        name!(attempts, i32),
        name!(max_attempts, i32),
        name!(owner_id, Option<String>),
        name!(fencing_token, i64),
        name!(lease_deadline, Option<TimestampWithTimeZone>),
        name!(payload, Option<RawJsonb>),
        name!(progress, Option<RawJsonb>),
        name!(last_error, Option<String>),
        name!(idempotency_key, Option<String>),
        name!(backoff_base, Option<Interval>),
        name!(backoff_max, Option<Interval>),
        name!(created_at, TimestampWithTimeZone),
        name!(updated_at, TimestampWithTimeZone),
        name!(result, Option<RawJsonb>),
        name!(completed_at, Option<TimestampWithTimeZone>),
    ),
> {
    run(|| {
        let queue = checked_name("queue", queue)?;
        if let Some(state) = state {
            validate::listed_state(state)?;
        }
        let limit = validate::list_limit(required("limit", limit)?)?;
        security::authorize(Action::Read, queue)?;
        let tasks = store::list_tasks(queue, state, limit)?;
        Ok(TableIterator::new(tasks.into_iter().map(row)))
    })
}

/// Whether the session may read `queue`: the filter of the views. Not
/// API, so it lives in schema aedb_queue_internal. Parallel restricted: it
/// switches user to read the grants, which only the leader of a parallel
/// query may do.
#[pg_extern(stable, parallel_restricted, schema = "aedb_queue_internal")]
fn can_read(queue: Option<&str>) -> bool {
    run(|| match queue {
        Some(queue) => security::may(Action::Read, &Pattern::Exact(queue.to_string())),
        None => Ok(false),
    })
}

/// Argument checks of 0.1.0's SQL-language queue_get and queue_list: that
/// version's definitions call them until `ALTER EXTENSION aedb_queue UPDATE`,
/// so the library keeps them; no later version declares them in SQL.
#[pg_extern(sql = false)]
fn check_get_args(queue: Option<&str>, task_id: Option<i64>) {
    run(|| {
        checked_name("queue", queue)?;
        required("task_id", task_id)?;
        Ok(())
    })
}

#[pg_extern(sql = false)]
fn check_list_args(queue: Option<&str>, state: Option<&str>, limit: Option<i32>) {
    run(|| {
        checked_name("queue", queue)?;
        if let Some(state) = state {
            validate::state(state)?;
        }
        validate::list_limit(required("limit", limit)?)?;
        Ok(())
    })
}

extension_sql_file!(
    "../../sql/inspect.sql",
    name = "inspect",
    requires = [can_read]
);
