//! `queue_get`, `queue_list`, and the read check behind the views in `sql/inspect.sql`.

use aedb_queue_core::grants::{Action, Pattern};
use aedb_queue_core::validate;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;

use super::{checked_name, readable_task, required};
use crate::datum::{RawJsonb, RawTaskRow};
use crate::errors::{run, Result};
use crate::{guc, security, store};

/// One task of the queue, live or (when the queue keeps them) completed.
#[pg_extern(stable)]
fn queue_get(queue: Option<&str>, task_id: Option<i64>) -> SetOfIterator<'static, RawTaskRow> {
    run(|| {
        let (queue, task_id) = readable_task(queue, task_id)?;
        Ok(SetOfIterator::new(store::get_task(queue, task_id)?))
    })
}

/// Up to `limit` tasks of the queue: ready in service order, then in flight
/// by lease deadline, scheduled by due time, dead oldest first, completed
/// newest first; or only those of `state`.
#[pg_extern(stable)]
fn queue_list(
    queue: Option<&str>,
    state: default!(Option<&str>, "NULL"),
    limit: default!(Option<i32>, 100),
) -> SetOfIterator<'static, RawTaskRow> {
    run(|| {
        let (queue, limit) = listing(queue, state, limit)?;
        Ok(SetOfIterator::new(store::list_tasks(queue, state, limit)?))
    })
}

/// The arguments every listing of a queue's tasks takes, checked: the
/// queue, the caller's right to read it (first: the state's error echoes
/// the argument), the state, the limit.
fn listing<'a>(
    queue: Option<&'a str>,
    state: Option<&str>,
    limit: Option<i32>,
) -> Result<(&'a str, i32)> {
    let queue = checked_name("queue", queue)?;
    security::authorize(Action::Read, queue)?;
    if let Some(state) = state {
        validate::listed_state(state)?;
    }
    Ok((queue, validate::list_limit(required("limit", limit)?)?))
}

/// A page of up to `limit` tasks of the queue in task id order, live or
/// (when the queue keeps them) completed: those after `after_task_id` (or
/// from the first), or the last ones before `before_task_id`, that pass
/// every filter given: `state`, created and last changed (completed: its
/// completion) in [`*_after`, `*_before`), a payload containing
/// `payload_contains` (jsonb `@>`) and having the top-level key
/// `payload_has_key`. The next page starts after the last row's id, the
/// previous one before the first's.
#[allow(clippy::too_many_arguments)]
#[pg_extern(stable)]
fn queue_tasks(
    queue: Option<&str>,
    state: default!(Option<&str>, "NULL"),
    after_task_id: default!(Option<i64>, "NULL"),
    before_task_id: default!(Option<i64>, "NULL"),
    created_after: default!(Option<TimestampWithTimeZone>, "NULL"),
    created_before: default!(Option<TimestampWithTimeZone>, "NULL"),
    updated_after: default!(Option<TimestampWithTimeZone>, "NULL"),
    updated_before: default!(Option<TimestampWithTimeZone>, "NULL"),
    payload_contains: default!(Option<RawJsonb>, "NULL"),
    payload_has_key: default!(Option<&str>, "NULL"),
    limit: default!(Option<i32>, 100),
) -> SetOfIterator<'static, RawTaskRow> {
    run(|| {
        let (queue, limit) = listing(queue, state, limit)?;
        let start = validate::page_start(after_task_id, before_task_id)?;
        // A filter is no larger than a payload may be (54000): each row read
        // is compared with it.
        let most = guc::max_payload_bytes();
        if let Some(json) = payload_contains {
            validate::payload_size("payload_contains", json.byte_size(), most)?;
        }
        if let Some(key) = payload_has_key {
            validate::payload_size("payload_has_key", key.len(), most)?;
        }
        let filter = store::TaskFilter {
            state,
            created_after,
            created_before,
            updated_after,
            updated_before,
            payload_contains,
            payload_has_key,
        };
        Ok(SetOfIterator::new(store::page_tasks(queue, &filter, start, limit)?))
    })
}

/// The tasks a task of `queue` waits or waited for: live (with their
/// state) or kept after completion (with their results, kept until every
/// child has run). Parents in queues the caller may not read are left out.
#[pg_extern(stable)]
fn queue_parents(queue: Option<&str>, task_id: Option<i64>) -> SetOfIterator<'static, RawTaskRow> {
    run(|| readable_links(queue, task_id, store::parents_of))
}

/// The tasks that wait or waited for a task of `queue` (`wait_for`): live
/// with their state, or completed with their results. Children in queues
/// the caller may not read are left out.
#[pg_extern(stable)]
fn queue_children(queue: Option<&str>, task_id: Option<i64>) -> SetOfIterator<'static, RawTaskRow> {
    run(|| readable_links(queue, task_id, store::children_of))
}

/// The linked tasks `links` finds for a task of `queue`, keeping those
/// whose queue the caller may read (dependencies came with 0.5.0).
fn readable_links(
    queue: Option<&str>,
    task_id: Option<i64>,
    links: fn(&str, i64) -> Result<Vec<(String, RawTaskRow)>>,
) -> Result<SetOfIterator<'static, RawTaskRow>> {
    let (queue, task_id) = readable_task(queue, task_id)?;
    if store::schema_level() < store::SchemaLevel::V050 {
        return Ok(SetOfIterator::new(Vec::new()));
    }
    let mut visible = Vec::new();
    for (linked_queue, row) in links(queue, task_id)? {
        if security::may(Action::Read, &Pattern::Exact(linked_queue))? {
            visible.push(row);
        }
    }
    Ok(SetOfIterator::new(visible))
}

/// Every error a live task of `queue` met, oldest first: one row per
/// failed attempt, expired lease or failed parent (the last 20 kept).
#[pg_extern(stable)]
fn queue_errors(
    queue: Option<&str>,
    task_id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(attempt, Option<i32>),
        name!(failed_at, Option<TimestampWithTimeZone>),
        name!(error, Option<String>),
    ),
> {
    run(|| {
        let (queue, task_id) = readable_task(queue, task_id)?;
        Ok(TableIterator::new(store::errors_of(queue, task_id)?))
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
