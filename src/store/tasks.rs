//! Statements on tasks: enqueue, claim, settle, reap.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Instant;

use aedb_queue_core::scan_hint::ScanHints;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::spi::{SpiClient, SpiTupleTable};

use super::{
    column, execute, first_i64, required_column, with_client, Statement, BOOL, INT4, INT8,
    INT8_ARRAY, INTERVAL, JSONB, JSONB_ARRAY, TEXT, TIMESTAMPTZ,
};
use crate::datum::RawJsonb;
use crate::errors::{internal, Result};
use crate::guc;
use pgrx::{pg_sys, FromDatum, IntoDatum};

use super::bulk::{self, Values};

/// The queue registry row, created by the first enqueue (`reap` of all queues
/// walks this registry). Returns a row only when it created one.
static REGISTER_QUEUE: Statement = Statement {
    sql: "INSERT INTO aedb_queue.queue (name) VALUES ($1) ON CONFLICT DO NOTHING RETURNING true",
    args: &[TEXT],
    clock: false,
};

static INSERT_TASK: Statement = Statement {
    sql: "INSERT INTO aedb_queue.task (task_id, queue, state, not_before, priority, max_attempts,
                                       backoff_base, backoff_max, payload, idempotency_key,
                                       created_at, updated_at)
          VALUES (COALESCE($2, nextval('aedb_queue.task_id_seq')), $1,
                  CASE WHEN $3 THEN 'scheduled' ELSE 'ready' END::aedb_queue.task_state,
                  $11 + $4, $5, $6, $7, $8, $9, $10,
                  $11, $11)
          RETURNING task_id",
    args: &[
        TEXT, INT8, BOOL, INTERVAL, INT8, INT4, INTERVAL, INTERVAL, JSONB, TEXT,
    ],
    clock: true,
};

/// The batch's rows through the executor, when `bulk::write` declines.
static INSERT_BATCH: Statement = Statement {
    sql: "INSERT INTO aedb_queue.task (task_id, queue, state, not_before, priority, max_attempts,
                                       backoff_base, backoff_max, payload, created_at, updated_at)
          SELECT b.task_id, $1, $2::aedb_queue.task_state, $3, $4, $5, $6, $7, b.payload, $8, $8
          FROM unnest($9::bigint[], $10::jsonb[]) AS b(task_id, payload)",
    args: &[
        TEXT,
        TEXT,
        TIMESTAMPTZ,
        INT8,
        INT4,
        INTERVAL,
        INTERVAL,
        TIMESTAMPTZ,
        INT8_ARRAY,
        JSONB_ARRAY,
    ],
    clock: false,
};

/// Takes the key, waiting for a concurrent holder to commit or roll back;
/// returns the reserved task id, or no row when the key already exists.
static RESERVE_KEY: Statement = Statement {
    sql: "INSERT INTO aedb_queue.idempotency_key (queue, key, task_id, created_at)
          VALUES ($1, $2, nextval('aedb_queue.task_id_seq'), $3)
          ON CONFLICT DO NOTHING
          RETURNING task_id",
    args: &[TEXT, TEXT],
    clock: true,
};

static LOOKUP_KEY: Statement = Statement {
    sql: "SELECT task_id FROM aedb_queue.idempotency_key WHERE queue = $1 AND key = $2",
    args: &[TEXT, TEXT],
    clock: false,
};

/// Whether the queue has a due timer or an expired lease from $2 on, so a
/// claim can skip the heavier REAP when there is nothing to do, and the time
/// of the check. Each side reads one range of its index in index order: an
/// `EXISTS` may be planned as a table scan that stops at the first match, and
/// with many future timers and no match that scan reads the whole table. The
/// upper bound keeps the in-flight scan off the entries of completed tasks,
/// whose deadlines lie in the future.
static REAP_NEEDED: Statement = Statement {
    sql: "SELECT (SELECT not_before FROM aedb_queue.task
                  WHERE queue = $1 AND state = 'scheduled'
                    AND not_before >= $2 AND not_before <= $3
                  ORDER BY not_before LIMIT 1) IS NOT NULL
              OR (SELECT lease_deadline FROM aedb_queue.task
                  WHERE queue = $1 AND state = 'in_flight' AND lease_deadline IS NOT NULL
                    AND lease_deadline >= $2 AND lease_deadline < $3
                  ORDER BY lease_deadline LIMIT 1) IS NOT NULL,
             $3",
    args: &[TEXT, TIMESTAMPTZ],
    clock: true,
};

/// Promotes due timers and reclaims expired leases of one queue, up to $2 and
/// $3 of each, due at or after $4. An expired lease means the worker vanished,
/// not that the work failed: back to ready at once (no backoff), or dead when
/// no attempt is left.
static REAP: Statement = Statement {
    sql: "WITH promoted AS (
              UPDATE aedb_queue.task
              SET state = 'ready', updated_at = $5
              WHERE task_id = ANY(ARRAY(
                  SELECT task_id FROM aedb_queue.task
                  WHERE queue = $1 AND state = 'scheduled'
                    AND not_before >= $4 AND not_before <= $5
                  ORDER BY not_before
                  LIMIT $2
                  FOR UPDATE SKIP LOCKED))
              RETURNING 1),
          reclaimed AS (
              UPDATE aedb_queue.task
              SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'ready' END::aedb_queue.task_state,
                  last_error = CASE WHEN attempts >= max_attempts
                                    THEN 'lease expired; attempts exhausted'
                                    ELSE 'lease expired; requeued' END,
                  owner_id = NULL, lease_deadline = NULL, updated_at = $5
              WHERE task_id = ANY(ARRAY(
                  SELECT task_id FROM aedb_queue.task
                  WHERE queue = $1 AND state = 'in_flight'
                    AND lease_deadline >= $4 AND lease_deadline < $5
                  ORDER BY lease_deadline
                  LIMIT $3
                  FOR UPDATE SKIP LOCKED))
              RETURNING state = 'dead' AS dead)
          SELECT (SELECT count(*) FROM promoted),
                 (SELECT count(*) FROM reclaimed WHERE NOT dead),
                 (SELECT count(*) FROM reclaimed WHERE dead)",
    args: &[TEXT, INT4, INT4, TIMESTAMPTZ],
    clock: true,
};

/// One claim statement around the subquery that picks and locks the tasks.
/// `$now` names the clock parameter (the statement's last).
macro_rules! claim_picked {
    ($pick:expr, $now:literal) => {
        concat!(
            "UPDATE aedb_queue.task
             SET state = 'in_flight', attempts = attempts + 1, fencing_token = fencing_token + 1,
                 owner_id = $3, lease_deadline = ", $now, " + $4,
                 updated_at = ", $now, "
             WHERE task_id = ANY(ARRAY(",
            $pick,
            "))
             RETURNING task_id, payload, attempts, fencing_token, lease_deadline, priority,
                       created_at, progress"
        )
    };
}

/// The subquery of a claim from the head of the ready index, in `$order`.
macro_rules! ready_head {
    ($order:literal) => {
        concat!(
            "SELECT task_id FROM aedb_queue.task
             WHERE queue = $1 AND state = 'ready'
             ORDER BY ",
            $order,
            "
             LIMIT $2
             FOR UPDATE SKIP LOCKED"
        )
    };
}

static CLAIM: Statement = Statement {
    sql: claim_picked!(ready_head!("priority DESC, -task_id DESC"), "$5"),
    args: &[TEXT, INT4, TEXT, INTERVAL],
    clock: true,
};

/// CLAIM in the order 0.1.0's ready index serves (see `schema_current`).
static CLAIM_0_1_0: Statement = Statement {
    sql: claim_picked!(ready_head!("priority DESC, task_id"), "$5"),
    args: &[TEXT, INT4, TEXT, INTERVAL],
    clock: true,
};

/// CLAIM resumed after position ($5 priority, $6 task id) in service order
/// (see `scan_hint`): higher priorities from their head, then the ready index
/// from that position on, one range each. The outer LIMIT stops pulling (and
/// locking) once it has $2 tasks. Locking clauses are not allowed on UNION
/// members, hence the subqueries.
static CLAIM_AFTER: Statement = Statement {
    sql: claim_picked!(
        "SELECT task_id FROM (
             SELECT task_id FROM (SELECT task_id FROM aedb_queue.task
                 WHERE queue = $1 AND state = 'ready' AND priority > $5
                 ORDER BY priority DESC, -task_id DESC LIMIT $2 FOR UPDATE SKIP LOCKED) AS higher
             UNION ALL
             SELECT task_id FROM (SELECT task_id FROM aedb_queue.task
                 WHERE queue = $1 AND state = 'ready' AND (priority, -task_id) < ($5, -$6)
                 ORDER BY priority DESC, -task_id DESC LIMIT $2 FOR UPDATE SKIP LOCKED) AS after
         ) AS resumed
         LIMIT $2",
        "$7"
    ),
    args: &[TEXT, INT4, TEXT, INTERVAL, INT8, INT8],
    clock: true,
};

/// The fence: a settlement applies only to the task in flight under this token.
static COMPLETE: Statement = Statement {
    sql: "DELETE FROM aedb_queue.task
          WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
          RETURNING task_id",
    args: &[INT8, TEXT, INT8],
    clock: false,
};

/// The same fence as COMPLETE, for many tasks in one statement.
static COMPLETE_MANY: Statement = Statement {
    sql: "DELETE FROM aedb_queue.task t
          USING unnest($2::bigint[], $3::bigint[]) AS s(task_id, fencing_token)
          WHERE t.task_id = s.task_id AND t.queue = $1 AND t.state = 'in_flight'
            AND t.fencing_token = s.fencing_token
          RETURNING t.task_id, t.fencing_token",
    args: &[TEXT, INT8_ARRAY, INT8_ARRAY],
    clock: false,
};

static LOCK_FOR_FAIL: Statement = Statement {
    sql: "SELECT attempts, max_attempts, backoff_base, backoff_max FROM aedb_queue.task
          WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
          FOR UPDATE",
    args: &[INT8, TEXT, INT8],
    clock: false,
};

/// `$2` is the new state (scheduled, ready or dead); `$3` the retry delay, NULL for dead.
static SETTLE_FAILURE: Statement = Statement {
    sql: "UPDATE aedb_queue.task
          SET state = $2::aedb_queue.task_state,
              not_before = COALESCE($5 + $3, not_before),
              last_error = $4, owner_id = NULL, lease_deadline = NULL,
              updated_at = $5
          WHERE task_id = $1",
    args: &[INT8, TEXT, INTERVAL, TEXT],
    clock: true,
};

static HEARTBEAT: Statement = Statement {
    sql: "UPDATE aedb_queue.task
          SET lease_deadline = $6 + $4, progress = COALESCE($5, progress),
              updated_at = $6
          WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
          RETURNING task_id",
    args: &[INT8, TEXT, INT8, INTERVAL, JSONB],
    clock: true,
};

static CANCEL: Statement = Statement {
    sql: "DELETE FROM aedb_queue.task WHERE task_id = $1 AND queue = $2 RETURNING task_id",
    args: &[INT8, TEXT],
    clock: false,
};

/// Every registered queue (the 0.1.0 schema has nothing better to go by).
static QUEUE_NAMES: Statement = Statement {
    sql: "SELECT name FROM aedb_queue.queue ORDER BY name",
    args: &[],
    clock: false,
};

/// The next queue name after `$prev` among the entries of one partial index:
/// a skip scan, one index descent per distinct queue.
macro_rules! next_queue {
    ($table:literal, $where:literal, $prev:literal) => {
        concat!(
            "(SELECT t.queue FROM aedb_queue.",
            $table,
            " t WHERE ",
            $where,
            " AND t.queue > ",
            $prev,
            " ORDER BY t.queue LIMIT 1)"
        )
    };
}

macro_rules! distinct_queues {
    ($name:literal, $table:literal, $where:literal) => {
        concat!(
            $name,
            "(queue) AS (",
            next_queue!($table, $where, "''"),
            " UNION ALL SELECT ",
            next_queue!($table, $where, "p.queue"),
            " FROM ",
            $name,
            " p WHERE p.queue IS NOT NULL)"
        )
    };
}

/// The queues with work for `queue_reap()`: a due timer, an
/// expired lease, kept completed tasks, or idempotency keys to expire. The
/// cost grows with the queues that have timers, leases or kept tasks at
/// all, and with those that keep keys for a limited time, not with every
/// queue name ever registered.
pub(crate) static QUEUES_WITH_WORK: Statement = Statement {
    sql: concat!(
        "WITH RECURSIVE ",
        distinct_queues!("timers", "task", "t.state = 'scheduled'"),
        ", ",
        distinct_queues!(
            "leases",
            "task",
            "t.state = 'in_flight' AND t.lease_deadline IS NOT NULL"
        ),
        ", ",
        distinct_queues!("kept", "completed_task", "true"),
        "
        SELECT queue FROM timers p WHERE p.queue IS NOT NULL AND (
            SELECT t.not_before FROM aedb_queue.task t
            WHERE t.queue = p.queue AND t.state = 'scheduled'
            ORDER BY t.not_before LIMIT 1) <= $1
        UNION
        SELECT queue FROM leases p WHERE p.queue IS NOT NULL AND (
            SELECT t.lease_deadline FROM aedb_queue.task t
            WHERE t.queue = p.queue AND t.state = 'in_flight' AND t.lease_deadline IS NOT NULL
            ORDER BY t.lease_deadline LIMIT 1) < $1
        UNION
        SELECT queue FROM kept WHERE queue IS NOT NULL
        UNION
        SELECT name FROM aedb_queue.queue WHERE keep_idempotency_keys IS NOT NULL
        ORDER BY 1"
    ),
    args: &[],
    clock: true,
};

/// The statements of the task lifecycle, by name, for the plan tests: each
/// touches a bounded set of tasks, so none may scan the task table.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) static LIFECYCLE_STATEMENTS: &[(&str, &Statement)] = &[
    ("QUEUES_WITH_WORK", &QUEUES_WITH_WORK),
    ("INSERT_TASK", &INSERT_TASK),
    ("INSERT_BATCH", &INSERT_BATCH),
    ("RESERVE_KEY", &RESERVE_KEY),
    ("LOOKUP_KEY", &LOOKUP_KEY),
    ("REAP_NEEDED", &REAP_NEEDED),
    ("REAP", &REAP),
    ("CLAIM", &CLAIM),
    ("CLAIM_AFTER", &CLAIM_AFTER),
    ("COMPLETE", &COMPLETE),
    ("COMPLETE_MANY", &COMPLETE_MANY),
    ("LOCK_FOR_FAIL", &LOCK_FOR_FAIL),
    ("SETTLE_FAILURE", &SETTLE_FAILURE),
    ("HEARTBEAT", &HEARTBEAT),
    ("CANCEL", &CANCEL),
];

/// A new task's stored fields.
pub struct NewTask<'a> {
    pub queue: &'a str,
    /// The queue's registry row existed when its settings were read.
    pub registered: bool,
    pub scheduled: bool,
    pub delay: Interval,
    pub priority: i64,
    pub max_attempts: i32,
    pub backoff_base: Interval,
    pub backoff_max: Interval,
}

/// Registers the task's queue unless its settings were read from the
/// registry. A registration invalidates every backend's settings copies, so
/// theirs (and ours, if this transaction rolls back) learn of it.
fn register(client: &mut SpiClient<'_>, task: &NewTask<'_>) -> Result<()> {
    if task.registered {
        return Ok(());
    }
    // The registration drops every backend's settings copies (the table's
    // trigger; sent here on schemas older than 0.3.0, which have none), so
    // a later enqueue finds the row and skips this.
    if execute(client, &REGISTER_QUEUE, &[task.queue.into()])?
        .next()
        .is_some()
    {
        super::copies_stale_without_trigger(c"queue");
    }
    Ok(())
}

pub fn insert_task(
    task: &NewTask<'_>,
    task_id: Option<i64>,
    payload: Option<RawJsonb>,
    key: Option<&str>,
) -> Result<i64> {
    with_client(|client| {
        register(client, task)?;
        let args = [
            task.queue.into(),
            task_id.into(),
            task.scheduled.into(),
            task.delay.into(),
            task.priority.into(),
            task.max_attempts.into(),
            task.backoff_base.into(),
            task.backoff_max.into(),
            payload.into(),
            key.into(),
        ];
        first_i64(execute(client, &INSERT_TASK, &args)?)?
            .ok_or_else(|| internal("INSERT returned no task id"))
    })
}

/// Inserts one task per payload; returns their ids in payload order.
pub fn insert_batch(task: &NewTask<'_>, payloads: &[Option<RawJsonb>]) -> Result<Vec<i64>> {
    with_client(|client| {
        register(client, task)?;
        let batch = BatchStart::new(task, payloads.len())?;
        if !write_batch(task, payloads, &batch)? {
            // SAFETY: timestamptz datums are plain integers.
            let (now, not_before) = unsafe {
                (
                    TimestampWithTimeZone::from_datum(batch.now, false),
                    TimestampWithTimeZone::from_datum(batch.not_before, false),
                )
            };
            let args = [
                task.queue.into(),
                batch.state_label.into(),
                not_before.into(),
                task.priority.into(),
                task.max_attempts.into(),
                task.backoff_base.into(),
                task.backoff_max.into(),
                now.into(),
                batch.ids.as_slice().into(),
                payloads.into(),
            ];
            execute(client, &INSERT_BATCH, &args)?;
        }
        Ok(batch.ids)
    })
}

// Built-in SQL functions called directly; pgrx's bindings wrap them as Rust
// functions, and DirectFunctionCall wants the C entry points.
extern "C-unwind" {
    fn nextval_oid(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
    fn timestamptz_pl_interval(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

/// What every task of a batch shares, found without a statement: the
/// creation and due times (the call's clock, and the clock + delay), the
/// state, and the
/// batch's ids from the task sequence, in payload order.
struct BatchStart {
    now: pg_sys::Datum,
    not_before: pg_sys::Datum,
    state_label: &'static str,
    state: pg_sys::Oid,
    ids: Vec<i64>,
}

impl BatchStart {
    fn new(task: &NewTask<'_>, count: usize) -> Result<Self> {
        let sequence = crate::catalog::relation_oid(c"task_id_seq")
            .ok_or_else(|| internal("no sequence aedb_queue.task_id_seq"))?;
        let delay = task
            .delay
            .into_datum()
            .ok_or_else(|| internal("the batch delay is NULL"))?;
        let (state_label, label) = if task.scheduled {
            ("scheduled", c"scheduled")
        } else {
            ("ready", c"ready")
        };
        // SAFETY: built-in functions called with arguments of their types;
        // nextval checks the (owner's) rights on the sequence.
        unsafe {
            let now = crate::clock::now_datum();
            let not_before = pg_sys::DirectFunctionCall2Coll(
                Some(timestamptz_pl_interval),
                pg_sys::InvalidOid,
                now,
                delay,
            );
            let ids = (0..count)
                .map(|_| {
                    pg_sys::DirectFunctionCall1Coll(
                        Some(nextval_oid),
                        pg_sys::InvalidOid,
                        pg_sys::Datum::from(sequence),
                    )
                    .value() as i64
                })
                .collect();
            Ok(BatchStart {
                now,
                not_before,
                state_label,
                state: crate::catalog::enum_label_oid(c"task_state", label),
                ids,
            })
        }
    }
}

/// The batch through `bulk::write`; false when it declined.
fn write_batch(
    task: &NewTask<'_>,
    payloads: &[Option<RawJsonb>],
    batch: &BatchStart,
) -> Result<bool> {
    let relid = crate::catalog::relation_oid(c"task")
        .ok_or_else(|| internal("no table aedb_queue.task"))?;
    let datum =
        |value: Option<pg_sys::Datum>| value.ok_or_else(|| internal("a batch value is NULL"));
    let ids: Vec<Option<pg_sys::Datum>> = batch.ids.iter().map(|id| id.into_datum()).collect();
    let payloads: Vec<Option<pg_sys::Datum>> = payloads
        .iter()
        .map(|p| p.and_then(IntoDatum::into_datum))
        .collect();
    let columns = [
        (c"task_id", Values::PerRow(&ids)),
        (c"queue", Values::Same(datum(task.queue.into_datum())?)),
        (c"state", Values::Same(pg_sys::Datum::from(batch.state))),
        (c"not_before", Values::Same(batch.not_before)),
        (
            c"priority",
            Values::Same(datum(task.priority.into_datum())?),
        ),
        (c"attempts", Values::Same(datum(0i32.into_datum())?)),
        (
            c"max_attempts",
            Values::Same(datum(task.max_attempts.into_datum())?),
        ),
        (
            c"backoff_base",
            Values::Same(datum(task.backoff_base.into_datum())?),
        ),
        (
            c"backoff_max",
            Values::Same(datum(task.backoff_max.into_datum())?),
        ),
        (c"fencing_token", Values::Same(datum(0i64.into_datum())?)),
        (c"payload", Values::PerRow(&payloads)),
        (c"created_at", Values::Same(batch.now)),
        (c"updated_at", Values::Same(batch.now)),
    ];
    Ok(bulk::write(relid, &columns, ids.len()))
}

/// `Some(id)`: the key is ours, insert the task under `id`. `None`: it was taken.
pub fn reserve_key(queue: &str, key: &str) -> Result<Option<i64>> {
    with_client(|client| first_i64(execute(client, &RESERVE_KEY, &[queue.into(), key.into()])?))
}

pub fn lookup_key(queue: &str, key: &str) -> Result<Option<i64>> {
    with_client(|client| first_i64(execute(client, &LOOKUP_KEY, &[queue.into(), key.into()])?))
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub promoted: i64,
    pub reclaimed: i64,
    pub dead_lettered: i64,
}

/// Promotes up to `promote` due timers and reclaims up to `reclaim` expired leases of `queue`.
pub fn reap(queue: &str, promote: i32, reclaim: i32) -> Result<Reaped> {
    let from_head = TimestampWithTimeZone::negative_infinity();
    with_client(|client| reap_in(client, queue, promote, reclaim, from_head))
}

/// REAP over the index entries due at or after `due_after`.
fn reap_in(
    client: &mut SpiClient<'_>,
    queue: &str,
    promote: i32,
    reclaim: i32,
    due_after: TimestampWithTimeZone,
) -> Result<Reaped> {
    let args = [
        queue.into(),
        promote.into(),
        reclaim.into(),
        due_after.into(),
    ];
    let table = execute(client, &REAP, &args)?;
    let row = table.first();
    Ok(Reaped {
        promoted: row.get::<i64>(1).map_err(internal)?.unwrap_or(0),
        reclaimed: row.get::<i64>(2).map_err(internal)?.unwrap_or(0),
        dead_lettered: row.get::<i64>(3).map_err(internal)?.unwrap_or(0),
    })
}

pub struct ClaimedTask {
    pub task_id: i64,
    pub payload: Option<RawJsonb>,
    pub attempts: i32,
    pub fencing_token: i64,
    pub lease_deadline: TimestampWithTimeZone,
    pub priority: i64,
    pub enqueued_at: TimestampWithTimeZone,
    pub progress: Option<RawJsonb>,
}

type Hints = ScanHints<TimestampWithTimeZone>;

/// Queues whose hints one backend keeps; past this many, it starts over.
const HINTED_QUEUES_MAX: usize = 1024;

thread_local! {
    /// This backend's scan hints, per queue.
    static HINTS: RefCell<HashMap<String, Hints>> = RefCell::new(HashMap::new());
}

/// Leases up to `max` ready tasks; with `reap`, first promotes and reclaims
/// up to that many in the same SPI connection. Scans resume where this
/// backend's last claim on the queue stopped while its hints are fresh.
pub fn claim(
    queue: &str,
    owner_id: &str,
    lease: Interval,
    max: i32,
    reap: Option<i32>,
) -> Result<Vec<ClaimedTask>> {
    let now = Instant::now();
    let mut hints = HINTS
        .with(|all| all.borrow().get(queue).copied())
        .unwrap_or_else(|| Hints::new(now));
    let current = super::schema_current();
    let lifetime = if current {
        guc::claim_rescan_interval()
    } else {
        std::time::Duration::ZERO
    };
    hints.refresh(now, lifetime);
    let tasks = with_client(|client| {
        if let Some(limit) = reap {
            reap_if_due(client, queue, limit, &mut hints)?;
        }
        let mut tasks = Vec::new();
        if let Some((priority, task_id)) = hints.ready_after() {
            let args = [
                queue.into(),
                max.into(),
                owner_id.into(),
                lease.into(),
                priority.into(),
                task_id.into(),
            ];
            tasks = claimed_tasks(execute(client, &CLAIM_AFTER, &args)?)?;
            if tasks.len() < max as usize {
                hints.came_up_short();
            }
        }
        let missing = max - tasks.len() as i32;
        if missing > 0 {
            let args = [queue.into(), missing.into(), owner_id.into(), lease.into()];
            let full = if current { &CLAIM } else { &CLAIM_0_1_0 };
            tasks.extend(claimed_tasks(execute(client, full, &args)?)?);
        }
        // UPDATE … RETURNING has no order; hand tasks out in service order.
        tasks.sort_unstable_by_key(|t| (std::cmp::Reverse(t.priority), t.task_id));
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

/// Runs REAP when the cheap check finds a due timer or an expired lease past
/// the hint; moves the hint when everything due was handled.
fn reap_if_due(
    client: &mut SpiClient<'_>,
    queue: &str,
    limit: i32,
    hints: &mut Hints,
) -> Result<()> {
    let due_after = hints
        .due_after()
        .unwrap_or_else(TimestampWithTimeZone::negative_infinity);
    let table = execute(client, &REAP_NEEDED, &[queue.into(), due_after.into()])?;
    let row = table.first();
    let needed = row.get::<bool>(1).map_err(internal)? == Some(true);
    let checked_at: TimestampWithTimeZone = row
        .get(2)
        .map_err(internal)?
        .ok_or_else(|| internal("REAP_NEEDED returned no time"))?;
    if !needed {
        hints.reaped(checked_at, true, false);
        return Ok(());
    }
    let reaped = reap_in(client, queue, limit, limit, due_after)?;
    let cut_short =
        reaped.promoted >= limit as i64 || reaped.reclaimed + reaped.dead_lettered >= limit as i64;
    hints.reaped(
        checked_at,
        !cut_short,
        reaped.promoted + reaped.reclaimed > 0,
    );
    Ok(())
}

/// The tasks a claim statement returned.
fn claimed_tasks(table: SpiTupleTable<'_>) -> Result<Vec<ClaimedTask>> {
    let mut tasks = Vec::new();
    for row in table {
        tasks.push(ClaimedTask {
            task_id: required_column(&row, 1)?,
            payload: column(&row, 2)?,
            attempts: required_column(&row, 3)?,
            fencing_token: required_column(&row, 4)?,
            lease_deadline: required_column(&row, 5)?,
            priority: required_column(&row, 6)?,
            enqueued_at: required_column(&row, 7)?,
            progress: column(&row, 8)?,
        });
    }
    Ok(tasks)
}

/// Deletes the task if it is in flight under `fencing_token`; true if it was.
pub fn complete(queue: &str, task_id: i64, fencing_token: i64) -> Result<bool> {
    with_client(|client| {
        Ok(!execute(
            client,
            &COMPLETE,
            &[task_id.into(), queue.into(), fencing_token.into()],
        )?
        .is_empty())
    })
}

/// Deletes each task in flight under its token; returns the (id, token)
/// pairs that were.
pub fn complete_many(
    queue: &str,
    task_ids: &[i64],
    fencing_tokens: &[i64],
) -> Result<Vec<(i64, i64)>> {
    with_client(|client| {
        let args = [
            queue.into(),
            task_ids.to_vec().into(),
            fencing_tokens.to_vec().into(),
        ];
        execute(client, &COMPLETE_MANY, &args)?
            .map(|row| {
                Ok((
                    required_column::<i64>(&row, 1)?,
                    required_column::<i64>(&row, 2)?,
                ))
            })
            .collect()
    })
}

pub struct FailingTask {
    pub attempts: i32,
    pub max_attempts: i32,
    pub backoff_base: Interval,
    pub backoff_max: Interval,
}

/// Locks the task if it is in flight under `fencing_token`.
pub fn lock_for_fail(queue: &str, task_id: i64, fencing_token: i64) -> Result<Option<FailingTask>> {
    with_client(|client| {
        let table = execute(
            client,
            &LOCK_FOR_FAIL,
            &[task_id.into(), queue.into(), fencing_token.into()],
        )?;
        let Some(row) = table.into_iter().next() else {
            return Ok(None);
        };
        Ok(Some(FailingTask {
            attempts: required_column(&row, 1)?,
            max_attempts: required_column(&row, 2)?,
            backoff_base: required_column(&row, 3)?,
            backoff_max: required_column(&row, 4)?,
        }))
    })
}

pub fn settle_failure(
    task_id: i64,
    state: &str,
    delay: Option<Interval>,
    error: &str,
) -> Result<()> {
    with_client(|client| {
        execute(
            client,
            &SETTLE_FAILURE,
            &[task_id.into(), state.into(), delay.into(), error.into()],
        )?;
        Ok(())
    })
}

pub fn heartbeat(
    queue: &str,
    task_id: i64,
    fencing_token: i64,
    extend: Interval,
    progress: Option<RawJsonb>,
) -> Result<bool> {
    with_client(|client| {
        let args = [
            task_id.into(),
            queue.into(),
            fencing_token.into(),
            extend.into(),
            progress.into(),
        ];
        Ok(!execute(client, &HEARTBEAT, &args)?.is_empty())
    })
}

pub fn cancel(queue: &str, task_id: i64) -> Result<bool> {
    with_client(|client| Ok(!execute(client, &CANCEL, &[task_id.into(), queue.into()])?.is_empty()))
}

/// The queues `queue_reap()` has work in (on the 0.1.0 schema: all of them).
pub fn queues_with_work() -> Result<Vec<String>> {
    with_client(|client| {
        let statement = if super::schema_current() {
            &QUEUES_WITH_WORK
        } else {
            &QUEUE_NAMES
        };
        execute(client, statement, &[])?
            .map(|row| required_column::<String>(&row, 1))
            .collect()
    })
}
