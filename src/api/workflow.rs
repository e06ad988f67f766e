//! Durable workflows: steps recorded under the fence (`queue_step_record`,
//! `queue_steps`), durable sleeps (`queue_sleep`) and events
//! (`queue_await_event`, `queue_emit`). A workflow is a task whose handler
//! runs named steps: after a crash, a lost lease or a retry, it runs again
//! and each recorded step returns its result instead of running.

use aedb_queue_core::dependency::Parent;
use aedb_queue_core::grants::{Action, Pattern};
use aedb_queue_core::workflow::{self, EventWait, Wait};
use aedb_queue_core::QueueError;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;
use pgrx::JsonB;

use super::settle::Held;
use super::{
    checked_json, checked_name, interval, micros, positive_interval, readable_task, required, wake,
};
use crate::clock::{from_unix_micros, now, unix_micros};
use crate::datum::RawJsonb;
use crate::errors::{internal, run, Result};
use crate::outcome::Outcome;
use crate::security;
use crate::srf::TableIterator;
use crate::store::{self, workflow as steps};
use steps::StepResult;

fn checked_step(value: Option<&str>) -> Result<&str> {
    let step = required("step", value)?;
    workflow::step_name("step", step)?;
    Ok(step)
}

fn checked_key(value: Option<&str>) -> Result<&str> {
    let key = required("key", value)?;
    workflow::event_key("key", key)?;
    Ok(key)
}

/// The arguments a worker's step call starts with, checked in order: the
/// queue, the task held and its token, the step's name.
fn held_step<'a>(
    queue: Option<&'a str>,
    task_id: Option<i64>,
    fencing_token: Option<i64>,
    step: Option<&'a str>,
) -> Result<(Held<'a>, &'a str)> {
    let queue = checked_name("queue", queue)?;
    let held = Held::checked(queue, ("task_id", task_id), ("fencing_token", fencing_token))?;
    Ok((held, checked_step(step)?))
}

/// The last argument of a worker's step call, `strict`, then the caller's
/// right to work the queue; `strict`.
fn work_on(held: Held<'_>, strict: Option<bool>) -> Result<bool> {
    let strict = required("strict", strict)?;
    security::authorize(Action::Work, held.queue)?;
    Ok(strict)
}

/// Records the step of the task held, refusing a step recorded already
/// (23505: a step runs once).
fn record(held: Held<'_>, attempt: i32, step: &str, result: StepResult<'_>) -> Result<()> {
    if !steps::record_step(held.queue, held.task_id, held.fencing_token, attempt, step, result)? {
        return Err(recorded(held, step));
    }
    Ok(())
}

/// The task locked in flight under the caller's token: its attempt; None
/// when the fence failed (40002 under `strict`).
fn lock(held: Held<'_>, strict: bool) -> Result<Option<i32>> {
    match steps::lock_held(held.queue, held.task_id, held.fencing_token)? {
        Some(attempt) => Ok(Some(attempt)),
        None => held.fenced_out(strict).map(|_| None),
    }
}

/// Parks the held task until `until` (scheduled, the attempt not counted).
fn park(held: Held<'_>, until: i64, now: i64) -> Result<()> {
    let delay = interval(until.saturating_sub(now).max(0));
    let woken = store::release(held.queue, held.task_id, held.fencing_token, delay, false)?
        .ok_or_else(|| internal("the task held for a wait was not in flight"))?;
    wake(woken)
}

/// Records a step's result for the task held under `fencing_token`. A
/// worker whose lease was lost records nothing (`lease_lost`, or 40002
/// under `strict`: the caller's own writes in this transaction roll back
/// with it, so a step whose effect is a write here happens exactly once).
/// A step of that name recorded already is 23505: a step runs once.
#[pg_extern]
fn queue_step_record(
    queue: Option<&str>,
    task_id: Option<i64>,
    fencing_token: Option<i64>,
    step: Option<&str>,
    result: default!(Option<RawJsonb>, "NULL"),
    strict: default!(Option<bool>, false),
) -> Outcome {
    run(|| {
        let (held, step) = held_step(queue, task_id, fencing_token, step)?;
        let strict = work_on(held, strict)?;
        let result = checked_json("result", result, &store::settings(held.queue)?)?;
        let Some(attempt) = lock(held, strict)? else {
            return Ok(Outcome::LeaseLost);
        };
        record(held, attempt, step, StepResult::Given(result))?;
        Ok(Outcome::Applied)
    })
}

fn recorded(held: Held<'_>, step: &str) -> QueueError {
    QueueError::StepRecorded {
        task_id: held.task_id,
        step: aedb_queue_core::error::clipped(step).to_string(),
    }
}

/// The steps a task recorded, in the order they were recorded.
#[pg_extern]
fn queue_steps(
    queue: Option<&str>,
    task_id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(step, String),
        name!(result, Option<JsonB>),
        name!(attempt, i32),
        name!(fencing_token, i64),
        name!(recorded_at, TimestampWithTimeZone),
    ),
> {
    run(|| {
        let (queue, task_id) = readable_task(queue, task_id)?;
        let rows = steps::steps(queue, task_id)?;
        Ok(TableIterator::new(rows.into_iter().map(|r| {
            (r.step, r.result, r.attempt, r.fencing_token, r.recorded_at)
        })))
    })
}

/// The events a task waits for (a step each, until its deadline).
#[pg_extern]
fn queue_waits(
    queue: Option<&str>,
    task_id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(step, String),
        name!(key, String),
        name!(deadline, TimestampWithTimeZone),
    ),
> {
    run(|| {
        let (queue, task_id) = readable_task(queue, task_id)?;
        Ok(TableIterator::new(steps::waits(queue, task_id)?))
    })
}

/// A durable sleep, as the step `step`: its first call records the wake
/// time (now + `duration` on the database's clock, or `until`); while that
/// time is ahead, the task is handed back scheduled for it without counting
/// the attempt (`waiting`: the handler returns at once, settling nothing);
/// once it has passed, the handler goes on (`waiting` false).
#[pg_extern]
fn queue_sleep(
    queue: Option<&str>,
    task_id: Option<i64>,
    fencing_token: Option<i64>,
    step: Option<&str>,
    duration: default!(Option<Interval>, "NULL"),
    until: default!(Option<TimestampWithTimeZone>, "NULL"),
    strict: default!(Option<bool>, false),
) -> TableIterator<
    'static,
    (
        name!(outcome, Outcome),
        name!(waiting, bool),
        name!(wake_at, Option<TimestampWithTimeZone>),
    ),
> {
    run(|| {
        let (held, step) = held_step(queue, task_id, fencing_token, step)?;
        let target = workflow::sleep_target(duration.map(micros), until.map(unix_micros))?;
        let strict = work_on(held, strict)?;
        let Some(attempt) = lock(held, strict)? else {
            return Ok(TableIterator::once((Outcome::LeaseLost, false, None)));
        };
        let now = unix_micros(now());
        let wake_at = match steps::sleep_until(held.task_id, step)? {
            Some(Some(at)) => unix_micros(at),
            Some(None) => {
                return Err(QueueError::invalid("step", "is recorded, and is not a sleep"))
            }
            None => {
                let at = target.wake_at(now);
                steps::record_step(held.queue, held.task_id, held.fencing_token, attempt, step,
                                   StepResult::Sleep(from_unix_micros(at)))?;
                at
            }
        };
        let waiting = match workflow::sleep(wake_at, now) {
            Wait::Over => false,
            Wait::Park { until } => {
                park(held, until, now)?;
                true
            }
        };
        Ok(TableIterator::once((Outcome::Applied, waiting, Some(from_unix_micros(wake_at)))))
    })
}

/// An event's payload and whether the wait timed out, from a recorded step.
fn event_result(held: Held<'_>, step: &str) -> Result<Option<(Option<JsonB>, bool)>> {
    let Some(result) = steps::step_result(held.task_id, step)? else {
        return Ok(None);
    };
    let result = result.map(|r| r.0).unwrap_or_default();
    let Some(timed_out) = result.get("timed_out").and_then(|t| t.as_bool()) else {
        return Err(QueueError::invalid("step", "is recorded, and is not an event wait"));
    };
    let payload = result.get("payload").filter(|p| !p.is_null()).cloned().map(JsonB);
    Ok(Some((payload, timed_out)))
}

/// Waits for the event `key` of this queue, as the step `step`: an event
/// emitted before or during the wait ends it with its payload; without
/// one, the task is handed back scheduled until the deadline (the first
/// call's now + `timeout`) without counting the attempt, and an emit makes
/// it due at once (`waiting`: the handler returns, settling nothing); after
/// the deadline, the wait ends with `timed_out`. Either end is recorded:
/// later calls return it.
#[pg_extern]
fn queue_await_event(
    queue: Option<&str>,
    task_id: Option<i64>,
    fencing_token: Option<i64>,
    step: Option<&str>,
    key: Option<&str>,
    timeout: Option<Interval>,
    strict: default!(Option<bool>, false),
) -> TableIterator<
    'static,
    (
        name!(outcome, Outcome),
        name!(waiting, bool),
        name!(wake_at, Option<TimestampWithTimeZone>),
        name!(payload, Option<JsonB>),
        name!(timed_out, bool),
    ),
> {
    run(|| {
        let (held, step) = held_step(queue, task_id, fencing_token, step)?;
        let queue = held.queue;
        let key = checked_key(key)?;
        let timeout = positive_interval("timeout", timeout)?;
        let strict = work_on(held, strict)?;
        let Some(attempt) = lock(held, strict)? else {
            return Ok(TableIterator::once((Outcome::LeaseLost, false, None, None, false)));
        };
        let ended = |deadline| -> Result<_> {
            let (payload, timed_out) = event_result(held, step)?
                .ok_or_else(|| internal("the event wait's step was not recorded"))?;
            Ok(TableIterator::once((Outcome::Applied, false, deadline, payload, timed_out)))
        };
        if event_result(held, step)?.is_some() {
            return ended(None);
        }
        steps::lock_event_key(queue, key)?;
        let record = |payload: Option<&str>, timed_out| -> Result<()> {
            record(held, attempt, step, StepResult::Event { payload, timed_out })?;
            steps::end_wait(held.task_id, step)
        };
        if let Some(payload) = steps::event(queue, key)? {
            record(Some(payload.as_deref().unwrap_or("null")), false)?;
            return ended(None);
        }
        let deadline = steps::wait(queue, held.task_id, step, key, timeout)?;
        let now = unix_micros(now());
        match workflow::event_wait(false, unix_micros(deadline), now) {
            EventWait::TimedOut | EventWait::Emitted => {
                record(None, true)?;
                ended(Some(deadline))
            }
            EventWait::Park { until } => {
                park(held, until, now)?;
                Ok(TableIterator::once((Outcome::Applied, true, Some(deadline), None, false)))
            }
        }
    })
}

/// Waits for other tasks (children a workflow started) as the step
/// `step`: each is linked so that it is kept with its result when it
/// completes, and the workflow, parked `waiting` without counting the
/// attempt, becomes ready when the last of them completes, is
/// dead-lettered or cancelled. Once none is live, the step is recorded
/// with one entry per task, in order: `{"task_id", "state": "completed"
/// | "dead" | "missing", "result" | "error"}` (missing: never made, gone,
/// or in a queue the caller may not read). With `park => false` nothing
/// parks and nothing is recorded: the tasks are linked and their states
/// returned (call it in the transaction that enqueues the children, so
/// that a child completing at once is still kept).
#[pg_extern]
fn queue_await_tasks(
    queue: Option<&str>,
    task_id: Option<i64>,
    fencing_token: Option<i64>,
    step: Option<&str>,
    task_ids: Option<pgrx::datum::Array<'_, i64>>,
    park: default!(Option<bool>, true),
    strict: default!(Option<bool>, false),
) -> TableIterator<
    'static,
    (
        name!(outcome, Outcome),
        name!(waiting, bool),
        name!(results, Option<JsonB>),
    ),
> {
    run(|| {
        let (held, step) = held_step(queue, task_id, fencing_token, step)?;
        let queue = held.queue;
        let ids = super::int8_elements("task_ids", &task_ids)?.to_vec();
        aedb_queue_core::validate::batch_length("task_ids", ids.len())?;
        let park = required("park", park)?;
        let strict = work_on(held, strict)?;
        let Some(attempt) = lock(held, strict)? else {
            return Ok(TableIterator::once((Outcome::LeaseLost, false, None)));
        };
        if park {
            if let Some(result) = steps::step_result(held.task_id, step)? {
                return Ok(TableIterator::once((Outcome::Applied, false, result)));
            }
        }
        let mut readable = Vec::with_capacity(ids.len());
        for (id, owner) in store::parent_queues(&ids)? {
            let owner = Pattern::Exact(owner);
            if security::may(Action::Read, &owner)? || security::may(Action::Enqueue, &owner)? {
                readable.push(id);
            }
        }
        let live: Vec<i64> = if readable.is_empty() {
            Vec::new()
        } else {
            store::link_parents(&readable)?
                .into_iter()
                .filter(|(_, p)| matches!(p, Parent::Live))
                .map(|(id, _)| id)
                .collect()
        };
        steps::link_workflow(&live, held.task_id)?;
        let outcomes = steps::task_outcomes(&readable)?;
        let results = JsonB(serde_json::Value::Array(
            ids.iter().map(|id| outcome_json(*id, outcomes.iter().find(|o| o.task_id == *id))).collect(),
        ));
        if !park {
            return Ok(TableIterator::once((Outcome::Applied, false, Some(results))));
        }
        if live.is_empty() {
            record(held, attempt, step, StepResult::Built(JsonB(results.0.clone())))?;
            return Ok(TableIterator::once((Outcome::Applied, false, Some(results))));
        }
        let Some(woken) = steps::park_waiting(queue, held.task_id, held.fencing_token, live.len() as i32)? else {
            return Err(QueueError::Prerequisite {
                message: format!("task {} has an ordering key: it cannot wait for other tasks", held.task_id),
                hint: "Start the workflow without an ordering key, or wait with queue_sleep between checks.".into(),
            });
        };
        wake(woken)?;
        Ok(TableIterator::once((Outcome::Applied, true, None)))
    })
}

/// One entry of `queue_await_tasks`' results.
fn outcome_json(task_id: i64, outcome: Option<&steps::TaskOutcome>) -> serde_json::Value {
    let mut entry = serde_json::json!({ "task_id": task_id });
    match outcome {
        None => entry["state"] = "missing".into(),
        Some(o) => {
            entry["state"] = o.state.clone().into();
            if o.state == "completed" {
                entry["result"] = o.result.as_ref().map_or(serde_json::Value::Null, |r| r.0.clone());
            }
            if o.state == "dead" {
                entry["error"] = o.error.clone().map_or(serde_json::Value::Null, Into::into);
            }
        }
    }
    entry
}

/// How many due timers beyond its waiters an emit promotes, for those the
/// queue has not promoted yet (they go first).
const WAKE_MARGIN: i32 = 1000;

/// Emits the event `key` of this queue with `payload`, in the caller's
/// transaction: true if this call emitted it, false if it was emitted
/// already (the first emit stands; this one changes nothing). Tasks
/// waiting for it are due at once, and made ready in this transaction
/// (with up to `WAKE_MARGIN` due timers of the queue not yet promoted).
#[pg_extern]
fn queue_emit(
    queue: Option<&str>,
    key: Option<&str>,
    payload: default!(Option<RawJsonb>, "NULL"),
) -> bool {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let key = checked_key(key)?;
        security::authorize(Action::Enqueue, queue)?;
        let payload = checked_json("payload", payload, &store::settings(queue)?)?;
        steps::lock_event_key(queue, key)?;
        if !steps::emit(queue, key, payload)? {
            return Ok(false);
        }
        let woken = steps::wake_waiters(queue, key)?;
        if woken > 0 {
            // Due timers are promoted oldest first: the waiters, due now,
            // come after any the queue has not promoted yet.
            let promoted = store::reap(queue, (woken as i32).saturating_add(WAKE_MARGIN), 0)?.promoted;
            if promoted > 0 {
                wake(vec![queue.to_string()])?;
            }
        }
        Ok(true)
    })
}

/// An operator's retry of a workflow from the step `step`: that step and
/// every step recorded after it are dropped (they run again), and the task
/// runs again at once: a dead task is retried as by `queue_retry_dead`, a
/// parked one (sleeping or waiting) becomes due now. A task in flight is
/// refused (its worker holds it: wait for it, or cancel the task). Returns
/// the steps dropped, in order.
#[pg_extern]
fn queue_retry_from_step(
    queue: Option<&str>,
    task_id: Option<i64>,
    step: Option<&str>,
) -> Vec<String> {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let task_id = required("task_id", task_id)?;
        let step = checked_step(step)?;
        security::authorize(Action::Administer, queue)?;
        let Some(state) = steps::lock_task(queue, task_id)? else {
            return Err(QueueError::invalid(
                "task_id",
                format!("is not a live task of queue {}", aedb_queue_core::error::quoted(queue)),
            ));
        };
        if state == "in_flight" {
            return Err(QueueError::Prerequisite {
                message: format!("task {task_id} is in flight: a worker holds it"),
                hint: "Wait for its attempt to end, or cancel the task.".into(),
            });
        }
        let dropped = steps::drop_steps_from(task_id, step)?;
        if dropped.is_empty() {
            return Err(QueueError::invalid(
                "step",
                format!("is not a recorded step of task {task_id}"),
            ));
        }
        match state.as_str() {
            "dead" => {
                store::retry_dead(queue, Some(task_id), 1)?;
                wake(vec![queue.to_string()])?;
            }
            "scheduled" if steps::due_now(task_id)? => {
                if store::reap(queue, 1000, 0)?.promoted > 0 {
                    wake(vec![queue.to_string()])?;
                }
            }
            _ => {}
        }
        Ok(dropped)
    })
}

/// Deletes the queue's events emitted before `emitted_before` (default:
/// all of them): an event is kept until then, so a wait that starts after
/// its emit still finds it. A wait that starts later waits for a new emit.
/// Returns how many. Admin on the queue.
#[pg_extern]
fn queue_events_purge(
    queue: Option<&str>,
    emitted_before: default!(Option<TimestampWithTimeZone>, "'infinity'"),
) -> i64 {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let before = required("emitted_before", emitted_before)?;
        security::authorize(Action::Administer, queue)?;
        steps::purge_events(queue, before)
    })
}
