//! Writing new tasks: one enqueue, a batch, or a completion's follow-ups.
//!
//! Every path writes its rows through `am::insert::write`, straight to the
//! heap and indexes, without a statement: a statement's executor start and
//! end, its planned expressions and the SPI connection around it cost more
//! than the row itself. Where the seam (`direct`) declines, the rows go
//! through `INSERT_TASKS`.

use pgrx::datum::TimestampWithTimeZone;
use pgrx::spi::SpiClient;
use pgrx::{pg_sys, FromDatum, IntoDatum};

use super::am::insert::{self as am_insert, Values};
use super::direct::{self, Operation};
use super::flow::SlotChanges;
use super::owner::OwnerRights;
use super::timestamptz::{self, interval_datum};
use super::{
    execute, first_i64, with_client, SchemaLevel, Statement, Versioned, INT4, INT8, INT8_ARRAY,
    INTERVAL, JSONB_ARRAY, TEXT, TIMESTAMPTZ,
};
use crate::counters::{self, Counter};
use crate::datum::RawJsonb;
use crate::errors::{internal, Result};
use pgrx::datum::Interval;

/// The queue registry row, created by the first enqueue (`reap` of all queues
/// walks this registry). Returns a row only when it created one.
static REGISTER_QUEUE: Statement = Statement {
    sql: "INSERT INTO aedb_queue.queue (name) VALUES ($1) ON CONFLICT DO NOTHING RETURNING true",
    args: &[TEXT],
    clock: false,
};

/// The rows through the executor, where the direct write declines. `$deps`
/// lists the dependency and key columns, which older schemas lack.
macro_rules! insert_tasks {
    ($deps:literal, $values:literal) => {
        concat!(
            "INSERT INTO aedb_queue.task (task_id, queue, state, not_before, priority, max_attempts,
                                       backoff_base, backoff_max, payload, idempotency_key,
                                       created_at, updated_at, last_error", $deps, ")
          SELECT b.task_id, $1, $2::aedb_queue.task_state, $3, $4, $5, $6, $7, b.payload, $11, $8, $8,
                 $12", $values, "
          FROM unnest($9::bigint[], $10::jsonb[], $17::bigint[]) AS b(task_id, payload, fair_vt)"
        )
    };
}

const INSERT_TASKS_ARGS: &[pgrx::pg_sys::PgBuiltInOids] = &[
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
    TEXT,
    TEXT,
    INT4,
    TEXT,
    TEXT,
    TEXT,
    INT8_ARRAY,
];

pub(super) static INSERT_TASKS: Versioned = Versioned {
    current: Statement {
        sql: insert_tasks!(
            ", waiting_on, concurrency_key, ordering_key, fairness_key, fair_vt",
            ", $13, $14, $15, $16, b.fair_vt"
        ),
        args: INSERT_TASKS_ARGS,
        clock: false,
    },
    older: &[
        (
            SchemaLevel::V060,
            Statement {
                sql: insert_tasks!(", waiting_on", ", $13"),
                args: INSERT_TASKS_ARGS,
                clock: false,
            },
        ),
        (
            SchemaLevel::V050,
            Statement {
                sql: insert_tasks!("", ""),
                args: INSERT_TASKS_ARGS,
                clock: false,
            },
        ),
    ],
};

/// Takes the key, waiting for a concurrent holder to commit or roll back;
/// returns the reserved task id, or no row when the key already exists.
pub(super) static RESERVE_KEY: Statement = Statement {
    sql: "INSERT INTO aedb_queue.idempotency_key (queue, key, task_id, created_at)
          VALUES ($1, $2, nextval('aedb_queue.task_id_seq'), $3)
          ON CONFLICT DO NOTHING
          RETURNING task_id",
    args: &[TEXT, TEXT],
    clock: true,
};

pub(super) static LOOKUP_KEY: Statement = Statement {
    sql: "SELECT task_id FROM aedb_queue.idempotency_key WHERE queue = $1 AND key = $2",
    args: &[TEXT, TEXT],
    clock: false,
};

/// How a new task starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewState<'a> {
    Ready,
    /// Until its delay has passed.
    Scheduled,
    /// For this many parents to complete.
    Waiting(i32),
    /// Dead-lettered at once, with this error (a parent is dead).
    Dead(&'a str),
}

/// A new task's stored fields.
pub struct NewTask<'a> {
    pub queue: &'a str,
    /// The queue's registry row existed when its settings were read.
    pub registered: bool,
    pub state: NewState<'a>,
    pub delay: Interval,
    pub priority: i64,
    pub max_attempts: i32,
    pub backoff_base: Interval,
    pub backoff_max: Interval,
    /// Its slots decide when a due task of the key is ready (`flow`).
    pub concurrency_key: Option<&'a str>,
    /// Its line decides when it may run (`flow`).
    pub ordering_key: Option<&'a str>,
    pub fairness_key: Option<&'a str>,
    /// The queue shares its claims across fairness keys: each task gets
    /// its virtual start time (`flow::take_virtual_times`).
    pub fair_share: bool,
}

/// Inserts one task, under `task_id` (a reserved idempotency key's) or a
/// new id; returns its id.
pub fn insert_task(
    task: &NewTask<'_>,
    task_id: Option<i64>,
    payload: Option<RawJsonb>,
    key: Option<&str>,
) -> Result<i64> {
    let ids = insert(task, task_id, &[payload], key)?;
    ids.first()
        .copied()
        .ok_or_else(|| internal("one task inserted, no id"))
}

/// Inserts one task per payload; returns their ids in payload order.
pub fn insert_batch(task: &NewTask<'_>, payloads: &[Option<RawJsonb>]) -> Result<Vec<i64>> {
    insert(task, None, payloads, None)
}

/// The rows of one insert: an id and a payload each, and the idempotency
/// key (of a single row).
struct Rows<'a> {
    ids: Vec<i64>,
    payloads: &'a [Option<RawJsonb>],
    key: Option<&'a str>,
    /// Each row's virtual start time in a fair-share queue, else empty.
    fair_vts: Vec<i64>,
}

/// Inserts one row per payload, the first under `first_id` if given;
/// returns the ids.
fn insert(
    task: &NewTask<'_>,
    first_id: Option<i64>,
    payloads: &[Option<RawJsonb>],
    key: Option<&str>,
) -> Result<Vec<i64>> {
    // Before the ids are drawn, so the error names the INSERT.
    super::am::target::refuse_if_read_only(super::am::Write::Insert);
    if !task.registered {
        with_client(|client| register(client, task))?;
    }
    let shared = Shared::new(task)?;
    // As the owner, like our statements: the sequence's rights are the
    // owner's, index expressions and predicates run with its rights, and
    // the caller's identity never reaches them.
    let (rows, written) = {
        let _rights = OwnerRights::enter()?;
        let drawn = payloads.len() - usize::from(first_id.is_some());
        let mut ids = Vec::with_capacity(payloads.len());
        ids.extend(first_id);
        draw_task_ids(&mut ids, drawn)?;
        let fair_vts = if task.fair_share {
            with_client(|client| {
                super::flow::take_virtual_times(
                    client,
                    task.queue,
                    task.fairness_key,
                    payloads.len(),
                )
            })?
        } else {
            Vec::new()
        };
        let rows = Rows {
            ids,
            payloads,
            key,
            fair_vts,
        };
        let written = write(task, &rows, &shared)?;
        (rows, written)
    };
    if !written {
        with_client(|client| insert_through_executor(client, task, &rows, &shared))?;
    }
    if shared.state_label == "blocked" {
        let mut slots = SlotChanges::default();
        if let Some(key) = task.concurrency_key {
            slots.arrived(task.queue, key);
        }
        if let Some(key) = task.ordering_key {
            slots.joined(task.queue, key);
        }
        with_client(|client| super::flow::settle_in(client, slots))?;
    }
    let n = rows.ids.len() as u64;
    counters::count(task.queue, Counter::Enqueued, n);
    if let NewState::Dead(_) = task.state {
        counters::count(task.queue, Counter::DeadLettered, n);
    }
    Ok(rows.ids)
}

/// Registers the task's queue unless its settings were read from the
/// registry. A registration invalidates every backend's settings copies, so
/// theirs (and ours, if this transaction rolls back) learn of it.
fn register(client: &mut SpiClient<'_>, task: &NewTask<'_>) -> Result<()> {
    // The registration drops every backend's settings copies (the table's
    // trigger; sent here on schemas older than 0.3.0, which have none), so
    // a later enqueue finds the row and skips this.
    if !execute(client, &REGISTER_QUEUE, &[task.queue.into()])?.is_empty() {
        super::copies_stale_without_trigger(c"queue");
    }
    Ok(())
}

// A built-in SQL function called directly; pgrx's bindings wrap it as a Rust
// function, and DirectFunctionCall wants the C entry point.
extern "C-unwind" {
    fn nextval_oid(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

/// Appends `count` ids from the task sequence to `ids`, in order.
fn draw_task_ids(ids: &mut Vec<i64>, count: usize) -> Result<()> {
    let sequence = crate::oids::relation_oid(c"task_id_seq")
        .ok_or_else(|| internal("no sequence aedb_queue.task_id_seq"))?;
    // SAFETY: a built-in function called with an argument of its type; it
    // checks the current user's (the owner's) rights on the sequence.
    ids.extend((0..count).map(|_| unsafe {
        pg_sys::DirectFunctionCall1Coll(
            Some(nextval_oid),
            pg_sys::InvalidOid,
            pg_sys::Datum::from(sequence),
        )
        .value() as i64
    }));
    Ok(())
}

/// What every row shares, found without a statement: the creation and due
/// times (the call's clock, and the clock + delay) and the state.
struct Shared {
    now: pg_sys::Datum,
    not_before: pg_sys::Datum,
    state_label: &'static str,
    state: pg_sys::Oid,
}

impl Shared {
    fn new(task: &NewTask<'_>) -> Result<Self> {
        let (state_label, label) = match task.state {
            NewState::Ready if task.concurrency_key.is_some() => ("blocked", c"blocked"),
            // In its key's line, even with a delay: the head decides.
            NewState::Ready | NewState::Scheduled if task.ordering_key.is_some() => {
                ("blocked", c"blocked")
            }
            NewState::Ready => ("ready", c"ready"),
            NewState::Scheduled => ("scheduled", c"scheduled"),
            NewState::Waiting(_) => ("waiting", c"waiting"),
            NewState::Dead(_) => ("dead", c"dead"),
        };
        let now = crate::clock::now_datum();
        let not_before = timestamptz::plus(now, &task.delay);
        Ok(Shared {
            now,
            not_before,
            state_label,
            state: crate::oids::enum_label_oid(c"task_state", label),
        })
    }
}

/// Columns `write` names at most (the task table's, with room to spare).
const COLUMNS_MAX: usize = 32;

/// A column's datum for each row; a one-row enqueue's without allocating.
enum RowDatums {
    One([Option<pg_sys::Datum>; 1]),
    Many(Vec<Option<pg_sys::Datum>>),
}

impl RowDatums {
    fn of<T>(items: &[T], datum: impl Fn(&T) -> Option<pg_sys::Datum>) -> Self {
        match items {
            [one] => RowDatums::One([datum(one)]),
            _ => RowDatums::Many(items.iter().map(datum).collect()),
        }
    }

    fn as_slice(&self) -> &[Option<pg_sys::Datum>] {
        match self {
            RowDatums::One(one) => one,
            RowDatums::Many(many) => many,
        }
    }
}

/// The rows through `am::insert::write`; false when it declined.
fn write(task: &NewTask<'_>, rows: &Rows<'_>, shared: &Shared) -> Result<bool> {
    let Ok(admission) = direct::admission(Operation::Enqueue) else {
        return Ok(false);
    };
    let relid =
        crate::oids::relation_oid(c"task").ok_or_else(|| internal("no table aedb_queue.task"))?;
    let datum =
        |value: Option<pg_sys::Datum>| value.ok_or_else(|| internal("a task value is NULL"));
    let ids = RowDatums::of(&rows.ids, |id| id.into_datum());
    let payloads = RowDatums::of(rows.payloads, |p| p.and_then(IntoDatum::into_datum));
    // In the table's column order, which `am::insert::write` finds fastest; room
    // for every column, so pushing never reallocates.
    let mut columns = Vec::with_capacity(COLUMNS_MAX);
    columns.extend([
        (c"task_id", Values::PerRow(ids.as_slice())),
        (c"queue", Values::Same(datum(task.queue.into_datum())?)),
        (
            c"priority",
            Values::Same(datum(task.priority.into_datum())?),
        ),
        (
            c"max_attempts",
            Values::Same(datum(task.max_attempts.into_datum())?),
        ),
        (
            c"backoff_base",
            Values::Same(interval_datum(&task.backoff_base)),
        ),
        (
            c"backoff_max",
            Values::Same(interval_datum(&task.backoff_max)),
        ),
        (c"created_at", Values::Same(shared.now)),
    ]);
    // Left out, a column is NULL.
    if let Some(key) = rows.key {
        columns.push((c"idempotency_key", Values::Same(datum(key.into_datum())?)));
    }
    columns.extend([
        (c"payload", Values::PerRow(payloads.as_slice())),
        (c"not_before", Values::Same(shared.not_before)),
        (c"state", Values::Same(pg_sys::Datum::from(shared.state))),
        (c"attempts", Values::Same(datum(0i32.into_datum())?)),
        (c"fencing_token", Values::Same(datum(0i64.into_datum())?)),
        (c"updated_at", Values::Same(shared.now)),
    ]);
    match task.state {
        NewState::Dead(error) => {
            columns.push((c"last_error", Values::Same(datum(error.into_datum())?)))
        }
        NewState::Waiting(parents) => {
            columns.push((c"waiting_on", Values::Same(datum(parents.into_datum())?)))
        }
        NewState::Ready | NewState::Scheduled => {}
    }
    if let Some(key) = task.concurrency_key {
        columns.push((c"concurrency_key", Values::Same(datum(key.into_datum())?)));
    }
    if let Some(key) = task.ordering_key {
        columns.push((c"ordering_key", Values::Same(datum(key.into_datum())?)));
    }
    if let Some(key) = task.fairness_key {
        columns.push((c"fairness_key", Values::Same(datum(key.into_datum())?)));
    }
    let vts: Vec<Option<pg_sys::Datum>> = rows.fair_vts.iter().map(|vt| vt.into_datum()).collect();
    if !vts.is_empty() {
        columns.push((c"fair_vt", Values::PerRow(&vts)));
    }
    Ok(am_insert::write(relid, &columns, rows.ids.len(), &admission).is_ok())
}

fn insert_through_executor(
    client: &mut SpiClient<'_>,
    task: &NewTask<'_>,
    rows: &Rows<'_>,
    shared: &Shared,
) -> Result<()> {
    // SAFETY: timestamptz datums are plain integers.
    let (now, not_before) = unsafe {
        (
            TimestampWithTimeZone::from_datum(shared.now, false),
            TimestampWithTimeZone::from_datum(shared.not_before, false),
        )
    };
    let vts = fair_vts_or_nulls(rows);
    let args = [
        task.queue.into(),
        shared.state_label.into(),
        not_before.into(),
        task.priority.into(),
        task.max_attempts.into(),
        task.backoff_base.into(),
        task.backoff_max.into(),
        now.into(),
        rows.ids.as_slice().into(),
        rows.payloads.into(),
        rows.key.into(),
        match task.state {
            NewState::Dead(error) => Some(error),
            _ => None,
        }
        .into(),
        match task.state {
            NewState::Waiting(parents) => Some(parents),
            _ => None,
        }
        .into(),
        task.concurrency_key.into(),
        task.ordering_key.into(),
        task.fairness_key.into(),
        vts.as_slice().into(),
    ];
    execute(client, INSERT_TASKS.get(), &args)?;
    Ok(())
}

/// `Some(id)`: the key is ours, insert the task under `id`. `None`: it was taken.
pub fn reserve_key(queue: &str, key: &str) -> Result<Option<i64>> {
    with_client(|client| first_i64(execute(client, &RESERVE_KEY, &[queue.into(), key.into()])?))
}

pub fn lookup_key(queue: &str, key: &str) -> Result<Option<i64>> {
    with_client(|client| first_i64(execute(client, &LOOKUP_KEY, &[queue.into(), key.into()])?))
}

/// The rows' virtual times for INSERT_TASKS's unnest: NULLs outside a
/// fair-share queue, one per row either way.
fn fair_vts_or_nulls(rows: &Rows<'_>) -> Vec<Option<i64>> {
    if rows.fair_vts.is_empty() {
        vec![None; rows.ids.len()]
    } else {
        rows.fair_vts.iter().copied().map(Some).collect()
    }
}
