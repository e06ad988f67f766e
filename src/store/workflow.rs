//! Durable workflows (0.9.0): the steps a task recorded, its event waits,
//! and events. Every write to a task's steps or waits first locks the task
//! in flight under the caller's fencing token, so a worker whose lease was
//! lost records nothing.

use std::cell::Cell;

use pgrx::datum::{DatumWithOid, Interval, TimestampWithTimeZone};

use super::latest::read_latest;
use super::flow::{self, keys_of, SlotChanges};
use super::{
    execute, with_client, Statement, BOOL, INT4, INT8, INT8_ARRAY, JSONB, TEXT, TIMESTAMPTZ,
};
use crate::datum::RawJsonb;
use crate::errors::{internal, Result};

/// The task in flight under the token, locked until the transaction ends
/// (a reclaim waits, then finds the token moved on); its attempt.
static LOCK_HELD: Statement = Statement {
    sql: "SELECT attempts FROM aedb_queue.task
          WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
          FOR UPDATE",
    args: &[INT8, TEXT, INT8],
    clock: false,
};

/// Records a step unless one of that name is recorded; returns it if it
/// recorded it. Its result is the first of: a sleep's wake time $7
/// (`{"until"}`), an event wait's end, its payload as JSON text $8 and
/// whether it timed out $9 (`{"payload", "timed_out"}`), the result $6 as
/// given (see [`StepResult`]). The task's first step marks it
/// (has_dependents): its completion then archives it with its result, and
/// its steps stay with it (kept for aedb_queue.keep_workflows). The task
/// is locked already (LOCK_HELD); a plain task's completion is unchanged.
static RECORD_STEP: Statement = Statement {
    sql: "WITH marked AS (
              UPDATE aedb_queue.task SET has_dependents = true
              WHERE task_id = $1 AND has_dependents IS NOT TRUE)
          INSERT INTO aedb_queue.task_step
              (task_id, step, queue, result, attempt, fencing_token, recorded_at)
          VALUES ($1, $2, $3,
                  CASE WHEN $7 IS NOT NULL THEN jsonb_build_object('until', $7)
                       WHEN $9 IS NOT NULL THEN jsonb_build_object('payload', $8::jsonb, 'timed_out', $9)
                       ELSE $6 END,
                  $4, $5, $10)
          ON CONFLICT (task_id, step) DO NOTHING
          RETURNING task_id",
    args: &[INT8, TEXT, TEXT, INT4, INT8, JSONB, TIMESTAMPTZ, TEXT, BOOL],
    clock: true,
};

/// A recorded sleep's wake time (NULL: the step is not a sleep).
static SLEEP_UNTIL: Statement = Statement {
    sql: "SELECT true, (result ->> 'until')::timestamptz
          FROM aedb_queue.task_step WHERE task_id = $1 AND step = $2",
    args: &[INT8, TEXT],
    clock: false,
};

static STEP_RESULT: Statement = Statement {
    sql: "SELECT result FROM aedb_queue.task_step WHERE task_id = $1 AND step = $2",
    args: &[INT8, TEXT],
    clock: false,
};

static STEPS: Statement = Statement {
    sql: "SELECT step, result, attempt, fencing_token, recorded_at
          FROM aedb_queue.task_step WHERE task_id = $1 AND queue = $2
          ORDER BY recorded_at, step",
    args: &[INT8, TEXT],
    clock: false,
};

/// Serializes the emit and the waits of one event key for the rest of the
/// transaction: a wait that commits first is seen by the emit that follows
/// it, an emit that commits first by the wait. The two-key form, with a
/// class of our own, stays clear of an application's one-key locks.
static LOCK_KEY: Statement = Statement {
    sql: "SELECT pg_catalog.pg_advisory_xact_lock(1634035810,
                 pg_catalog.hashtext($1 OPERATOR(pg_catalog.||) E'\\n' OPERATOR(pg_catalog.||) $2))",
    args: &[TEXT, TEXT],
    clock: false,
};

/// The event's payload as text (under the newest snapshot: see `latest`).
static EVENT: Statement = Statement {
    sql: "SELECT payload::text, true FROM aedb_queue.event WHERE queue = $1 AND key = $2",
    args: &[TEXT, TEXT],
    clock: false,
};

static EMIT: Statement = Statement {
    sql: "INSERT INTO aedb_queue.event (queue, key, payload, emitted_at)
          VALUES ($1, $2, $3, $4)
          ON CONFLICT (queue, key) DO NOTHING
          RETURNING true",
    args: &[TEXT, TEXT, JSONB],
    clock: true,
};

/// The wait of a task's step, made by its first call: its deadline stays.
static WAIT: Statement = Statement {
    sql: "INSERT INTO aedb_queue.event_wait (task_id, step, queue, key, deadline)
          VALUES ($1, $2, $3, $4, $6 + $5)
          ON CONFLICT (task_id, step) DO UPDATE SET deadline = aedb_queue.event_wait.deadline
          RETURNING deadline",
    args: &[INT8, TEXT, TEXT, TEXT, super::INTERVAL],
    clock: true,
};

static END_WAIT: Statement = Statement {
    sql: "DELETE FROM aedb_queue.event_wait WHERE task_id = $1 AND step = $2",
    args: &[INT8, TEXT],
    clock: false,
};

/// Makes the tasks parked on the event due now.
static WAKE_WAITERS: Statement = Statement {
    sql: "UPDATE aedb_queue.task t SET not_before = $3, updated_at = $3
          FROM aedb_queue.event_wait w
          WHERE w.queue = $1 AND w.key = $2 AND t.task_id = w.task_id AND t.queue = $1
            AND t.state = 'scheduled' AND t.not_before > $3
          RETURNING t.task_id",
    args: &[TEXT, TEXT],
    clock: true,
};

/// The next `$2` task ids with steps or waits after `$1`, and which of them
/// belong to no task, live or kept completed.
macro_rules! orphans_after {
    ($table:literal) => {
        concat!(
            "WITH seen AS (SELECT DISTINCT task_id FROM (
                 SELECT task_id FROM aedb_queue.",
            $table,
            " WHERE task_id > $1 ORDER BY task_id LIMIT $2) s),
             gone AS (DELETE FROM aedb_queue.",
            $table,
            " x WHERE x.task_id = ANY(ARRAY(
                 SELECT task_id FROM seen
                 WHERE NOT EXISTS (SELECT 1 FROM aedb_queue.task t WHERE t.task_id = seen.task_id)
                   AND NOT EXISTS (SELECT 1 FROM aedb_queue.completed_task c WHERE c.task_id = seen.task_id)))
               RETURNING 1)
             SELECT (SELECT max(task_id) FROM seen), (SELECT count(*) FROM seen), (SELECT count(*) FROM gone)"
        )
    };
}

static SWEEP_STEPS: Statement = Statement {
    sql: orphans_after!("task_step"),
    args: &[INT8, INT8],
    clock: false,
};

static SWEEP_WAITS: Statement = Statement {
    sql: orphans_after!("event_wait"),
    args: &[INT8, INT8],
    clock: false,
};

static WAITS: Statement = Statement {
    sql: "SELECT step, key, deadline FROM aedb_queue.event_wait
          WHERE task_id = $1 AND queue = $2 ORDER BY deadline, step",
    args: &[INT8, TEXT],
    clock: false,
};

/// Deletes the queue's events emitted before `$2`.
static PURGE_EVENTS: Statement = Statement {
    sql: "DELETE FROM aedb_queue.event WHERE queue = $1 AND emitted_at < $2 RETURNING 1",
    args: &[TEXT, TIMESTAMPTZ],
    clock: false,
};

/// The task's state, locked (an operator's action on its steps).
static LOCK_TASK: Statement = Statement {
    sql: "SELECT state::text FROM aedb_queue.task WHERE task_id = $1 AND queue = $2 FOR UPDATE",
    args: &[INT8, TEXT],
    clock: false,
};

/// Drops the step `$2` and every step recorded after it (in the order
/// `queue_steps` lists them), and the task's waits; the names dropped.
static DROP_STEPS_FROM: Statement = Statement {
    sql: "WITH f AS (SELECT recorded_at, step FROM aedb_queue.task_step WHERE task_id = $1 AND step = $2),
               waits AS (DELETE FROM aedb_queue.event_wait w WHERE w.task_id = $1 AND EXISTS (SELECT 1 FROM f)),
               dropped AS (
                   DELETE FROM aedb_queue.task_step s USING f
                   WHERE s.task_id = $1 AND (s.recorded_at, s.step) >= (f.recorded_at, f.step)
                   RETURNING s.step, s.recorded_at)
          SELECT step FROM dropped ORDER BY recorded_at, step",
    args: &[INT8, TEXT],
    clock: false,
};

/// A parked task (scheduled) due now.
static DUE_NOW: Statement = Statement {
    sql: "UPDATE aedb_queue.task SET not_before = $2, updated_at = $2
          WHERE task_id = $1 AND state = 'scheduled' AND not_before > $2
          RETURNING task_id",
    args: &[INT8],
    clock: true,
};

/// Links the workflow `$2` as a dependent of each of the tasks `$1` (it is
/// released when the last of them ends, and they are kept with their
/// results when they complete: `LINK_PARENTS` marked them).
static LINK_WORKFLOW: Statement = Statement {
    sql: "INSERT INTO aedb_queue.task_dependency (parent_id, child_id, run_on_failure)
          SELECT p, $2, true FROM unnest($1::bigint[]) p
          ON CONFLICT (parent_id, child_id) DO NOTHING",
    args: &[INT8_ARRAY, INT8],
    clock: false,
};

/// How each of the tasks `$1` stands: kept completed with its result, or
/// live or dead with its last error.
static TASK_OUTCOMES: Statement = Statement {
    sql: "SELECT task_id, 'completed', result, NULL::text FROM aedb_queue.completed_task
          WHERE task_id = ANY($1)
          UNION ALL
          SELECT task_id, CASE WHEN state = 'dead' THEN 'dead' ELSE 'live' END, NULL::jsonb, last_error
          FROM aedb_queue.task WHERE task_id = ANY($1)",
    args: &[INT8_ARRAY],
    clock: false,
};

/// Parks the held workflow waiting for `$4` tasks, the attempt not
/// counted (as RELEASE); due at once when they end. A task with an
/// ordering key is left alone (a waiting task cannot hold its line). It
/// is marked as taking part in a DAG (archived on completion).
static PARK_WAITING: Statement = Statement {
    sql: "UPDATE aedb_queue.task
          SET state = 'waiting', waiting_on = $4, not_before = $5, has_dependents = true,
              attempts = greatest(attempts - 1, 0),
              owner_id = NULL, lease_deadline = NULL, updated_at = $5
          WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
            AND ordering_key IS NULL
          RETURNING task_id, concurrency_key, NULL::text",
    args: &[INT8, TEXT, INT8, INT4],
    clock: true,
};

#[cfg(any(test, feature = "pg_test"))]
pub(crate) static WORKFLOW_STATEMENTS: &[(&str, &Statement)] = &[
    ("LOCK_HELD", &LOCK_HELD),
    ("RECORD_STEP", &RECORD_STEP),
    ("SLEEP_UNTIL", &SLEEP_UNTIL),
    ("STEP_RESULT", &STEP_RESULT),
    ("STEPS", &STEPS),
    ("EVENT", &EVENT),
    ("EMIT", &EMIT),
    ("WAIT", &WAIT),
    ("END_WAIT", &END_WAIT),
    ("WAKE_WAITERS", &WAKE_WAITERS),
    ("WAITS", &WAITS),
    ("PURGE_EVENTS", &PURGE_EVENTS),
    ("LINK_WORKFLOW", &LINK_WORKFLOW),
    ("TASK_OUTCOMES", &TASK_OUTCOMES),
    ("PARK_WAITING", &PARK_WAITING),
    ("LOCK_TASK", &LOCK_TASK),
    ("DROP_STEPS_FROM", &DROP_STEPS_FROM),
    ("DUE_NOW", &DUE_NOW),
    ("SWEEP_STEPS", &SWEEP_STEPS),
    ("SWEEP_WAITS", &SWEEP_WAITS),
];

/// The task, if it is in flight under `fencing_token`, locked; its attempt.
pub fn lock_held(queue: &str, task_id: i64, fencing_token: i64) -> Result<Option<i32>> {
    with_client(|client| {
        let args = [task_id.into(), queue.into(), fencing_token.into()];
        Ok(execute(client, &LOCK_HELD, &args)?
            .first(|row| row.get::<i32>(1))?
            .flatten())
    })
}

/// What a recorded step holds.
pub enum StepResult<'a> {
    /// The handler's result, as given (`queue_step_record`).
    Given(Option<RawJsonb>),
    /// A result built here (`queue_await_tasks`' entries).
    Built(pgrx::JsonB),
    /// A sleep's wake time: `{"until": at}`.
    Sleep(TimestampWithTimeZone),
    /// An event wait's end: `{"payload": the event's payload (JSON text;
    /// None: null), "timed_out": ...}`.
    Event {
        payload: Option<&'a str>,
        timed_out: bool,
    },
}

/// A step of a task held (see [`lock_held`]) with `result`: false if one
/// of that name is recorded already (the first record stands).
pub fn record_step(
    queue: &str,
    task_id: i64,
    fencing_token: i64,
    attempt: i32,
    step: &str,
    result: StepResult<'_>,
) -> Result<bool> {
    let (mut until, mut payload, mut timed_out) = (None, None, None);
    let given: DatumWithOid<'_> = match result {
        StepResult::Given(json) => json.into(),
        StepResult::Built(json) => json.into(),
        StepResult::Sleep(at) => {
            until = Some(at);
            Option::<RawJsonb>::None.into()
        }
        StepResult::Event {
            payload: event,
            timed_out: ended,
        } => {
            (payload, timed_out) = (event, Some(ended));
            Option::<RawJsonb>::None.into()
        }
    };
    with_client(|client| {
        let args = [
            task_id.into(),
            step.into(),
            queue.into(),
            attempt.into(),
            fencing_token.into(),
            given,
            until.into(),
            payload.into(),
            timed_out.into(),
        ];
        Ok(!execute(client, &RECORD_STEP, &args)?.is_empty())
    })
}

/// A recorded step's wake time: None if the step is not recorded,
/// Some(None) if it is not a sleep.
pub fn sleep_until(task_id: i64, step: &str) -> Result<Option<Option<TimestampWithTimeZone>>> {
    with_client(|client| {
        execute(client, &SLEEP_UNTIL, &[task_id.into(), step.into()])?
            .first(|row| row.get::<TimestampWithTimeZone>(2))
    })
}

/// A recorded step's result: None if the step is not recorded, Some(None)
/// if its result is NULL.
pub fn step_result(task_id: i64, step: &str) -> Result<Option<Option<pgrx::JsonB>>> {
    with_client(|client| {
        execute(client, &STEP_RESULT, &[task_id.into(), step.into()])?
            .first(|row| row.get::<pgrx::JsonB>(1))
    })
}

/// One recorded step, as `queue_steps` returns it.
pub struct StepRow {
    pub step: String,
    pub result: Option<pgrx::JsonB>,
    pub attempt: i32,
    pub fencing_token: i64,
    pub recorded_at: TimestampWithTimeZone,
}

pub fn steps(queue: &str, task_id: i64) -> Result<Vec<StepRow>> {
    with_client(|client| {
        execute(client, &STEPS, &[task_id.into(), queue.into()])?.map(|row| {
            Ok(StepRow {
                step: row.get::<String>(1)?.ok_or_else(|| internal("step is NULL"))?,
                result: row.get::<pgrx::JsonB>(2)?,
                attempt: row.get::<i32>(3)?.unwrap_or(0),
                fencing_token: row.get::<i64>(4)?.unwrap_or(0),
                recorded_at: row
                    .get::<TimestampWithTimeZone>(5)?
                    .ok_or_else(|| internal("recorded_at is NULL"))?,
            })
        })
    })
}

/// Takes the event key's lock (see LOCK_KEY) until the transaction ends.
pub fn lock_event_key(queue: &str, key: &str) -> Result<()> {
    with_client(|client| {
        execute(client, &LOCK_KEY, &[queue.into(), key.into()])?;
        Ok(())
    })
}

/// The event's payload as JSON text, if it was emitted (Some(None): with
/// a NULL payload), read under the newest snapshot.
pub fn event(queue: &str, key: &str) -> Result<Option<Option<String>>> {
    with_client(|_| {
        let mut rows = read_latest(&EVENT, &[queue.into(), key.into()])?;
        Ok(rows.pop().map(|mut row| row.swap_remove(0)))
    })
}

/// Emits the event unless one of that key was; true if this call did.
pub fn emit(queue: &str, key: &str, payload: Option<RawJsonb>) -> Result<bool> {
    with_client(|client| {
        let args = [queue.into(), key.into(), payload.into()];
        Ok(!execute(client, &EMIT, &args)?.is_empty())
    })
}

/// The wait of the step, made now if it is the first: its deadline.
pub fn wait(
    queue: &str,
    task_id: i64,
    step: &str,
    key: &str,
    timeout: Interval,
) -> Result<TimestampWithTimeZone> {
    with_client(|client| {
        let args = [
            task_id.into(),
            step.into(),
            queue.into(),
            key.into(),
            timeout.into(),
        ];
        execute(client, &WAIT, &args)?
            .first(|row| row.get::<TimestampWithTimeZone>(1))?
            .flatten()
            .ok_or_else(|| internal("the wait returned no deadline"))
    })
}

pub fn end_wait(task_id: i64, step: &str) -> Result<()> {
    with_client(|client| {
        execute(client, &END_WAIT, &[task_id.into(), step.into()])?;
        Ok(())
    })
}

/// Makes the tasks parked on the event due now; how many.
pub fn wake_waiters(queue: &str, key: &str) -> Result<usize> {
    with_client(|client| Ok(execute(client, &WAKE_WAITERS, &[queue.into(), key.into()])?.len()))
}

/// The events a task waits for: (step, key, deadline).
pub fn waits(queue: &str, task_id: i64) -> Result<Vec<(String, String, TimestampWithTimeZone)>> {
    with_client(|client| {
        execute(client, &WAITS, &[task_id.into(), queue.into()])?.map(|row| {
            Ok((
                row.get::<String>(1)?.unwrap_or_default(),
                row.get::<String>(2)?.unwrap_or_default(),
                row.get::<TimestampWithTimeZone>(3)?
                    .ok_or_else(|| internal("deadline is NULL"))?,
            ))
        })
    })
}

/// Links the workflow as a dependent of `tasks` (see LINK_WORKFLOW).
pub fn link_workflow(tasks: &[i64], workflow: i64) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    with_client(|client| {
        execute(client, &LINK_WORKFLOW, &[tasks.to_vec().into(), workflow.into()])?;
        Ok(())
    })
}

/// How a task a workflow waits for stands.
pub struct TaskOutcome {
    pub task_id: i64,
    /// "completed", "dead" or "live".
    pub state: String,
    pub result: Option<pgrx::JsonB>,
    pub error: Option<String>,
}

pub fn task_outcomes(tasks: &[i64]) -> Result<Vec<TaskOutcome>> {
    with_client(|client| {
        execute(client, &TASK_OUTCOMES, &[tasks.to_vec().into()])?.map(|row| {
            Ok(TaskOutcome {
                task_id: row.get::<i64>(1)?.unwrap_or_default(),
                state: row.get::<String>(2)?.unwrap_or_default(),
                result: row.get::<pgrx::JsonB>(3)?,
                error: row.get::<String>(4)?,
            })
        })
    })
}

/// Parks the held workflow waiting for `count` tasks; None if it has an
/// ordering key, else the queues where tasks became ready (a freed slot).
pub fn park_waiting(
    queue: &str,
    task_id: i64,
    fencing_token: i64,
    count: i32,
) -> Result<Option<Vec<String>>> {
    with_client(|client| {
        let args = [
            task_id.into(),
            queue.into(),
            fencing_token.into(),
            count.into(),
        ];
        let rows = execute(client, &PARK_WAITING, &args)?;
        let mut slots = SlotChanges::default();
        let Some(()) = rows.first(|row| keys_of(&mut slots, queue, task_id, row, 2, true))? else {
            return Ok(None);
        };
        Ok(Some(flow::settle_in(client, slots)?))
    })
}

/// Deletes the queue's events emitted before `before`; how many.
pub fn purge_events(queue: &str, before: TimestampWithTimeZone) -> Result<i64> {
    with_client(|client| {
        Ok(execute(client, &PURGE_EVENTS, &[queue.into(), before.into()])?.len() as i64)
    })
}

/// The live task's state, locked; None if the queue has no such live task.
pub fn lock_task(queue: &str, task_id: i64) -> Result<Option<String>> {
    with_client(|client| {
        Ok(execute(client, &LOCK_TASK, &[task_id.into(), queue.into()])?
            .first(|row| row.get::<String>(1))?
            .flatten())
    })
}

/// Drops the step and those recorded after it, and the task's waits: the
/// names dropped (none: the step is not recorded).
pub fn drop_steps_from(task_id: i64, step: &str) -> Result<Vec<String>> {
    with_client(|client| {
        execute(client, &DROP_STEPS_FROM, &[task_id.into(), step.into()])?
            .map(|row| row.get::<String>(1).map(Option::unwrap_or_default))
    })
}

/// Makes a parked task due now; whether it was parked.
pub fn due_now(task_id: i64) -> Result<bool> {
    with_client(|client| Ok(!execute(client, &DUE_NOW, &[task_id.into()])?.is_empty()))
}

thread_local! {
    /// Where this backend's sweeps go on: the last task id each looked at.
    static SWEPT_STEPS: Cell<i64> = const { Cell::new(0) };
    static SWEPT_WAITS: Cell<i64> = const { Cell::new(0) };
}

/// Deletes the steps and waits of tasks that are gone (completed and not
/// kept, cancelled, purged), looking at up to `limit` rows of each table
/// after where this backend's last sweep stopped, and starting over at the
/// end: each call costs at most `limit` rows, and every row is looked at
/// within a few calls. How many rows it deleted.
pub fn sweep(limit: i64) -> Result<i64> {
    let mut deleted = 0;
    for (stmt, cursor) in [(&SWEEP_STEPS, &SWEPT_STEPS), (&SWEEP_WAITS, &SWEPT_WAITS)] {
        let after = cursor.with(Cell::get);
        let (last, seen, gone) = with_client(|client| {
            execute(client, stmt, &[after.into(), limit.into()])?
                .first(|row| Ok((row.get::<i64>(1)?, row.get::<i64>(2)?, row.get::<i64>(3)?)))?
                .ok_or_else(|| internal("the sweep returned no row"))
        })?;
        let more = seen.unwrap_or(0) >= limit;
        cursor.with(|c| c.set(if more { last.unwrap_or(0) } else { 0 }));
        deleted += gone.unwrap_or(0);
    }
    Ok(deleted)
}
