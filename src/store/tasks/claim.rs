//! Claiming ready tasks: by the direct claim where the seam admits it,
//! else by the CLAIM and CLAIM_AFTER statements, resumed after this
//! backend's hint (`hints`) and reaping first when due work waits.

use std::time::Instant;

use pgrx::datum::Interval;
use pgrx::spi::SpiClient;

use super::hints::{reap_if_due, resuming_pays, Hints, HINTED_QUEUES_MAX, HINTS};
use crate::errors::{internal, Result};
use crate::guc;
use crate::store::claimed::ClaimedTask;
use crate::store::direct::{self, claim::From};
use crate::store::{
    execute, with_client, Rows, SchemaLevel, Statement, Versioned, INT4, INT8, INTERVAL, TEXT,
};

/// One claim statement around the subquery that picks and locks the tasks.
/// The write fetches each locked row by the ctid the lock returned (a Tid
/// Scan), not by a second descent of the primary key: about 5,000
/// instructions a task. The ctid is the locked version's; should that
/// version be newer than the statement's snapshot (between the snapshot and
/// the lock, other workers claimed the task and handed it back), the write
/// does not see it: the task stays ready, untouched, for the next claim
/// (which, resumed past it, reaches it at the next rescan from the head).
/// `$now` names the clock parameter (the statement's last); `$floor` the
/// least token this timeline hands out (`fence::token_floor`, given by
/// `token_floor()`); `$rank` the task's rank in service order after
/// priority (see `CLAIM`).
macro_rules! claim_picked {
    ($pick:expr, $floor:literal, $now:literal, $rank:literal) => {
        concat!(
            "UPDATE aedb_queue.task
             SET state = 'in_flight', attempts = attempts + 1,
                 fencing_token = greatest(fencing_token + 1, ",
            $floor,
            "),
                 owner_id = $3, lease_deadline = ",
            $now,
            " + $4,
                 updated_at = ",
            $now,
            "
             WHERE ctid = ANY(ARRAY(",
            $pick,
            "))
             RETURNING task_id, payload, attempts, fencing_token, lease_deadline, priority,
                       created_at, progress, ",
            $rank
        )
    };
}

/// The subquery of a claim from the head of the ready index, in `$order`.
macro_rules! ready_head {
    ($order:literal) => {
        concat!(
            "SELECT ctid FROM aedb_queue.task
             WHERE queue = $1 AND state = 'ready'
             ORDER BY ",
            $order,
            "
             LIMIT $2
             FOR UPDATE SKIP LOCKED"
        )
    };
}

/// CLAIM_AFTER's subquery: higher priorities from their head, then the
/// ready index from position ($5 priority, `$position`) on, one range each.
macro_rules! ready_after {
    ($order:literal, $position:literal) => {
        concat!(
            "SELECT ctid FROM (
                 SELECT ctid FROM (SELECT ctid FROM aedb_queue.task
                     WHERE queue = $1 AND state = 'ready' AND priority > $5
                     ORDER BY ",
            $order,
            " LIMIT $2 FOR UPDATE SKIP LOCKED) AS higher
                 UNION ALL
                 SELECT ctid FROM (SELECT ctid FROM aedb_queue.task
                     WHERE queue = $1 AND state = 'ready' AND ",
            $position,
            "
                     ORDER BY ",
            $order,
            " LIMIT $2 FOR UPDATE SKIP LOCKED) AS after
             ) AS resumed
             LIMIT $2"
        )
    };
}

/// A claim from the head of the ready index: in service order, priority,
/// then rank: a fair-share queue's tasks' virtual start times, every other
/// task's id (its `fair_vt` is NULL). The older schemas' ready indexes
/// serve the orders below.
pub(super) static CLAIM: Versioned = Versioned {
    current: Statement {
        sql: claim_picked!(
            ready_head!("priority DESC, -coalesce(fair_vt, task_id) DESC"),
            "$5",
            "$6",
            "coalesce(fair_vt, task_id)"
        ),
        args: &[TEXT, INT4, TEXT, INTERVAL, INT8],
        clock: true,
    },
    older: &[
        (
            SchemaLevel::V060,
            Statement {
                sql: claim_picked!(
                    ready_head!("priority DESC, -task_id DESC"),
                    "$5",
                    "$6",
                    "task_id"
                ),
                args: &[TEXT, INT4, TEXT, INTERVAL, INT8],
                clock: true,
            },
        ),
        (
            SchemaLevel::V020,
            Statement {
                sql: claim_picked!(ready_head!("priority DESC, task_id"), "$5", "$6", "task_id"),
                args: &[TEXT, INT4, TEXT, INTERVAL, INT8],
                clock: true,
            },
        ),
    ],
};

/// CLAIM resumed after position ($5 priority, $6 task id) in service order
/// (see `scan_hint`), in a queue that does not share its claims (each
/// task ranked by its id). The outer LIMIT stops pulling (and locking) once it has
/// $2 tasks. Locking clauses are not allowed on UNION members, hence the
/// subqueries.
pub(super) static CLAIM_AFTER: Versioned = Versioned {
    current: Statement {
        sql: claim_picked!(
            ready_after!(
                "priority DESC, -coalesce(fair_vt, task_id) DESC",
                "(priority, -coalesce(fair_vt, task_id)) < ($5, -$6)"
            ),
            "$7",
            "$8",
            "coalesce(fair_vt, task_id)"
        ),
        args: &[TEXT, INT4, TEXT, INTERVAL, INT8, INT8, INT8],
        clock: true,
    },
    older: &[(
        SchemaLevel::V060,
        Statement {
            sql: claim_picked!(
                ready_after!(
                    "priority DESC, -task_id DESC",
                    "(priority, -task_id) < ($5, -$6)"
                ),
                "$7",
                "$8",
                "task_id"
            ),
            args: &[TEXT, INT4, TEXT, INTERVAL, INT8, INT8, INT8],
            clock: true,
        },
    )],
};

/// Leases up to `max` ready tasks; with `reap`, first promotes and reclaims
/// up to that many in the same SPI connection. Scans resume where this
/// backend's last claim on the queue stopped while its hints are fresh and
/// an old snapshot makes that pay (`horizon`).
///
/// The check for due timers and expired leases runs once per hint lifetime
/// (`claim_rescan_interval`) while claims are served in full; a claim that
/// comes up short checks at once and claims again what it promoted. So a
/// busy queue's timers and expired leases wait at most one interval for a
/// claim, and an idle queue's none.
pub fn claim(
    queue: &str,
    owner_id: &str,
    lease: Interval,
    max: i32,
    reap: Option<i32>,
    fair: bool,
) -> Result<Vec<ClaimedTask>> {
    if fair {
        return claim_fair(queue, owner_id, lease, max, reap);
    }
    let now = Instant::now();
    let mut hints = HINTS
        .with(|all| all.borrow().get(queue).copied())
        .unwrap_or_else(|| Hints::new(now));
    let current = crate::store::schema_current();
    let lifetime = if current {
        guc::claim_rescan_interval()
    } else {
        std::time::Duration::ZERO
    };
    hints.refresh(now, lifetime);
    let tasks = with_client(|client| {
        let mut checked = false;
        if let (Some(limit), None) = (reap, hints.due_after()) {
            reap_if_due(client, queue, limit, &mut hints)?;
            checked = true;
        }
        let mut tasks = claim_in(client, queue, owner_id, lease, max, &mut hints)?;
        if let (Some(limit), false) = (reap, checked) {
            if tasks.len() < max as usize && reap_if_due(client, queue, limit, &mut hints)? {
                let missing = max - tasks.len() as i32;
                tasks.extend(claim_in(
                    client, queue, owner_id, lease, missing, &mut hints,
                )?);
            }
        }
        // UPDATE … RETURNING has no order; hand tasks out in service order.
        tasks.sort_unstable_by_key(ClaimedTask::service_order);
        Ok(tasks)
    })?;
    hints.claimed(tasks.last().map(|t| (t.priority, t.task_id)));
    HINTS.with(|all| {
        let mut all = all.borrow_mut();
        if all.len() >= HINTED_QUEUES_MAX && !all.contains_key(queue) {
            all.clear();
        }
        all.insert(queue.to_owned(), hints);
    });
    Ok(tasks)
}

/// A fair-share queue's claim: due work promoted first (when `reap`), then
/// the head of the ready index, where the lowest virtual times of each
/// priority stand. Never resumed: a position would pass over the tasks of
/// keys that arrive later with earlier times.
fn claim_fair(
    queue: &str,
    owner_id: &str,
    lease: Interval,
    max: i32,
    reap: Option<i32>,
) -> Result<Vec<ClaimedTask>> {
    with_client(|client| {
        if let Some(limit) = reap {
            let mut hints = Hints::new(Instant::now());
            reap_if_due(client, queue, limit, &mut hints)?;
        }
        let direct = direct::claim::claim(queue, owner_id, &lease, max, From::Head, token_floor())?;
        let mut tasks = match direct {
            Ok(tasks) => tasks,
            Err(_) => {
                let args = [
                    queue.into(),
                    max.into(),
                    owner_id.into(),
                    lease.into(),
                    token_floor().into(),
                ];
                claimed_tasks(execute(client, CLAIM.get(), &args)?)?
            }
        };
        tasks.sort_unstable_by_key(ClaimedTask::service_order);
        Ok(tasks)
    })
}

/// One claim of up to `max` tasks: resumed after the hint when there is one
/// and resuming pays, then from the head for what is still missing.
fn claim_in(
    client: &mut SpiClient<'_>,
    queue: &str,
    owner_id: &str,
    lease: Interval,
    max: i32,
    hints: &mut Hints,
) -> Result<Vec<ClaimedTask>> {
    let position = hints.ready_after().filter(|_| resuming_pays());
    match claim_directly(queue, owner_id, &lease, max, position, hints)? {
        Some(tasks) => Ok(tasks),
        None => claim_by_statements(client, queue, owner_id, lease, max, position, hints),
    }
}

/// `claim_in` without statements (`direct::claim`); None, with nothing
/// claimed, where the statements must run.
fn claim_directly(
    queue: &str,
    owner_id: &str,
    lease: &Interval,
    max: i32,
    position: Option<(i64, i64)>,
    hints: &mut Hints,
) -> Result<Option<Vec<ClaimedTask>>> {
    let floor = token_floor();
    let mut tasks = Vec::new();
    if let Some((priority, rank)) = position {
        let from = From::After(priority, rank);
        let Ok(claimed) = direct::claim::claim(queue, owner_id, lease, max, from, floor)? else {
            return Ok(None);
        };
        tasks = claimed;
        if tasks.len() < max as usize {
            hints.came_up_short();
        }
    }
    let missing = max - tasks.len() as i32;
    if missing > 0 {
        match direct::claim::claim(queue, owner_id, lease, missing, From::Head, floor)? {
            Ok(claimed) => tasks.extend(claimed),
            Err(_) if tasks.is_empty() => return Ok(None),
            // Both calls judge the same table in the same transaction.
            Err(_) => return Err(internal("the direct claim declined after it had claimed")),
        }
    }
    Ok(Some(tasks))
}

/// `claim_in` by the CLAIM_AFTER and CLAIM statements, for a schema or
/// table the direct claim does not serve.
fn claim_by_statements(
    client: &mut SpiClient<'_>,
    queue: &str,
    owner_id: &str,
    lease: Interval,
    max: i32,
    position: Option<(i64, i64)>,
    hints: &mut Hints,
) -> Result<Vec<ClaimedTask>> {
    let mut tasks = Vec::new();
    if let Some((priority, task_id)) = position {
        let args = [
            queue.into(),
            max.into(),
            owner_id.into(),
            lease.into(),
            priority.into(),
            task_id.into(),
            token_floor().into(),
        ];
        tasks = claimed_tasks(execute(client, CLAIM_AFTER.get(), &args)?)?;
        if tasks.len() < max as usize {
            hints.came_up_short();
        }
    }
    let missing = max - tasks.len() as i32;
    if missing > 0 {
        let args = [
            queue.into(),
            missing.into(),
            owner_id.into(),
            lease.into(),
            token_floor().into(),
        ];
        tasks.extend(claimed_tasks(execute(client, CLAIM.get(), &args)?)?);
    }
    Ok(tasks)
}

/// The least fencing token a claim hands out on the timeline this server
/// writes WAL on: a standby promoted after losing the old primary's last
/// claims never hands their tokens out again (`fence::token_floor`).
fn token_floor() -> i64 {
    // SAFETY: both read shared state without side effects; the timeline is
    // fixed once recovery is over (a claim in recovery fails on its UPDATE).
    let timeline = unsafe {
        if pgrx::pg_sys::RecoveryInProgress() {
            0
        } else {
            pgrx::pg_sys::GetWALInsertionTimeLine()
        }
    };
    aedb_queue_core::fence::token_floor(timeline)
}

/// The tasks a claim statement returned.
fn claimed_tasks(rows: Rows<'_>) -> Result<Vec<ClaimedTask>> {
    rows.map(|row| {
        Ok(ClaimedTask {
            task_id: row.required(1)?,
            payload: row.get(2)?,
            attempts: row.required(3)?,
            fencing_token: row.required(4)?,
            lease_deadline: row.required(5)?,
            priority: row.required(6)?,
            enqueued_at: row.required(7)?,
            progress: row.get(8)?,
            rank: row.required(9)?,
        })
    })
}
