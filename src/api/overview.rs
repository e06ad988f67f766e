//! What the operators' dashboards and metrics read: `queue_counters`,
//! `queue_access`, `queue_find` (and `queue_overview`, in
//! `sql/inspect.sql`). Each shows only what the session may read.

use aedb_queue_core::counters::COUNTERS;
use aedb_queue_core::grants::{Action, Pattern};
use aedb_queue_core::QueueError;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::checked_name;
use crate::datum::RawTaskRow;
use crate::errors::{run, Result};
use crate::{clock, counters, security, store};

type CounterRow = (
    Option<String>,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    TimestampWithTimeZone,
);

/// Per-queue event counts since the server started, counted at commit
/// (`src/counters.rs`). The row with no queue is the database's overflow
/// bucket; only unconfined sessions see it.
#[pg_extern(stable)]
fn queue_counters() -> TableIterator<
    'static,
    (
        name!(queue, Option<String>),
        name!(enqueued, i64),
        name!(completed, i64),
        name!(failed, i64),
        name!(dead_lettered, i64),
        name!(reclaimed, i64),
        name!(cancelled, i64),
        name!(since, TimestampWithTimeZone),
    ),
> {
    run(|| {
        let unconfined = !security::identity_rights()?.iter().any(|r| r.is_confined());
        let mut rows: Vec<CounterRow> = Vec::new();
        for slot in counters::snapshot()? {
            let visible = match &slot.queue {
                Some(queue) => readable(queue)?,
                None => unconfined,
            };
            if !visible {
                continue;
            }
            let c: [i64; COUNTERS] = slot.counts.map(|n| n.min(i64::MAX as u64) as i64);
            rows.push((
                slot.queue,
                c[0],
                c[1],
                c[2],
                c[3],
                c[4],
                c[5],
                clock::from_postgres_micros(slot.since),
            ));
        }
        rows.sort_by(|a, b| a.0.is_none().cmp(&b.0.is_none()).then(a.0.cmp(&b.0)));
        Ok(TableIterator::new(rows))
    })
}

/// The functions whose EXECUTE right each kind of access needs, beside
/// the queue's grants.
const ACCESS_FUNCTIONS: [&str; 3] = ["queue_enqueue", "queue_claim", "queue_pause"];

/// For each registered queue the session may read, whether it may enqueue,
/// work (claim and settle) and administer there: its grants and its
/// EXECUTE rights both allow it. A dashboard offers only what this allows;
/// each call still checks for itself.
#[pg_extern(stable)]
fn queue_access() -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(produce, bool),
        name!(work, bool),
        name!(administer, bool),
    ),
> {
    run(|| {
        // SAFETY: the role this call runs as.
        let role = unsafe { pg_sys::GetUserId() };
        let executable = store::executable(role, &ACCESS_FUNCTIONS)?;
        let mut rows = Vec::new();
        for queue in store::queue_names()? {
            if !readable(&queue)? {
                continue;
            }
            let may = |action, i: usize| -> Result<bool> {
                Ok(executable[i] && security::may(action, &Pattern::Exact(queue.clone()))?)
            };
            let produce = may(Action::Enqueue, 0)?;
            let work = may(Action::Work, 1)?;
            let administer = may(Action::Administer, 2)?;
            rows.push((queue, produce, work, administer));
        }
        Ok(TableIterator::new(rows))
    })
}

/// The task with `task_id` (live or kept completed), or the tasks with
/// `idempotency_key` (in `queue`, else in every queue), of the queues the
/// session may read; exactly one of `task_id` and `idempotency_key`.
#[pg_extern(stable)]
fn queue_find(
    task_id: default!(Option<i64>, "NULL"),
    idempotency_key: default!(Option<&str>, "NULL"),
    queue: default!(Option<&str>, "NULL"),
) -> SetOfIterator<'static, RawTaskRow> {
    run(|| {
        let queue = queue.map(|q| checked_name("queue", Some(q))).transpose()?;
        let found = match (task_id, idempotency_key) {
            (Some(id), None) => store::queue_of_task(id)?
                .filter(|q| queue.is_none_or(|wanted| wanted == q))
                .map(|q| (q, id))
                .into_iter()
                .collect(),
            (None, Some(key)) => store::tasks_of_key(key, queue)?,
            _ => {
                return Err(QueueError::invalid(
                    "task_id",
                    "give exactly one of task_id and idempotency_key",
                ))
            }
        };
        let mut rows = Vec::new();
        for (queue, id) in found {
            if readable(&queue)? {
                rows.extend(store::get_task(&queue, id)?);
            }
        }
        Ok(SetOfIterator::new(rows))
    })
}

fn readable(queue: &str) -> Result<bool> {
    security::may(Action::Read, &Pattern::Exact(queue.to_string()))
}

extension_sql_file!(
    "../../sql/overview.sql",
    name = "overview",
    requires = ["inspect"]
);
