//! One handler slot: runs a task's handler with heartbeats, settles it,
//! and while the queue is busy takes its next task from the settling call
//! itself (`queue_complete_and_claim` / `queue_fail_and_claim`).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Object;
use futures_util::FutureExt;
use tokio::sync::{Mutex, OnceCell, OwnedSemaphorePermit};
use tracing::Instrument;

use super::backoff::Backoff;
use super::{Phase, QueueRuntime};
use crate::duration::micros;
use crate::error::{Error, Result};
use crate::handler::payload_value;
use crate::sql;
use crate::statement;
use crate::task::{Claimed, Done, Lease, Parked, ParkedOn, Task, TaskError};
use crate::telemetry::{Attempt, Cause, Outcome};

/// How a handler's run ended.
enum Finished {
    Done(Done),
    Failed(TaskError),
    /// Completed in the handler's own transaction (strict), or found lost
    /// there: nothing left to settle.
    Settled(Outcome),
    /// A heartbeat or a workflow call found the lease lost: the result is
    /// dropped.
    Lost,
    /// A workflow's sleep or event wait handed the task back: nothing to
    /// settle.
    Parked,
    /// Shutdown's deadline passed: hand the task back.
    HandBack,
}

pub(crate) async fn run(q: Arc<QueueRuntime>, first: Claimed, permit: OwnedSemaphorePermit) {
    let mut conn: Option<Object> = None;
    let mut task = first;
    loop {
        let mut attempt = Attempt::start(&q.options.name, &q.shared.owner, &task);
        let finished = work(&q, &task, &mut attempt).await;
        let error = match &finished {
            Finished::Failed(e) => Some(e.message.clone()),
            _ => None,
        };
        let (outcome, next) = settle(&q, &task, finished, &mut conn)
            .instrument(attempt.settling())
            .await;
        let outcome = match outcome {
            Outcome::Failed => fate(&q, &task, &mut conn).await,
            outcome => outcome,
        };
        if let Some(error) = error {
            log_failure(&q, &task, &error, outcome);
        }
        attempt.end(outcome);
        match next {
            Some(next) => task = next,
            None => break,
        }
    }
    drop(permit);
}

async fn work(q: &QueueRuntime, claimed: &Claimed, attempt: &mut Attempt) -> Finished {
    let lease = Arc::new(Lease {
        pool: q.shared.pool.clone(),
        statements: q.shared.statements,
        queue: q.options.name.clone(),
        id: claimed.id,
        token: claimed.fencing_token,
        extend: q.options.lease,
        lost: AtomicBool::new(false),
        tx: Mutex::new(None),
        steps: OnceCell::new(),
        parked: std::sync::Mutex::new(None),
    });
    let task = Task {
        id: claimed.id,
        queue: q.options.name.clone(),
        attempts: claimed.attempts,
        fencing_token: claimed.fencing_token,
        payload: payload_value(claimed.payload.clone()),
        progress: claimed.progress.clone(),
        lease: lease.clone(),
    };
    let handler = AssertUnwindSafe(q.handler.call(task))
        .catch_unwind()
        .instrument(attempt.span().clone());
    tokio::pin!(handler);
    let every = q.options.heartbeat_every();
    let mut next_beat = tokio::time::Instant::now() + every;
    let mut phase = q.shared.phase.clone();
    enum Event<R> {
        Returned(R),
        Beat,
        HandBack,
    }
    let returned = loop {
        let event = tokio::select! {
            returned = &mut handler => Event::Returned(returned),
            _ = tokio::time::sleep_until(next_beat) => Event::Beat,
            _ = phase.wait_for(|p| *p == Phase::HandBack) => Event::HandBack,
        };
        match event {
            Event::Returned(returned) => break returned,
            Event::Beat => {
                next_beat += every;
                if let Err(e) = lease.heartbeat(None).await {
                    tracing::warn!(queue = %q.options.name, task_id = claimed.id, error = %e, "heartbeat failed");
                }
            }
            Event::HandBack => {
                rollback(&lease).await;
                return Finished::HandBack;
            }
        }
    };
    let returned = returned.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_string());
        Err(TaskError::retry(format!("the handler panicked: {message}")).caused_by(Cause::Panic))
    });
    // Parked first: once the task is handed back, a heartbeat finds the
    // lease gone too.
    let parked = lease.parked.lock().expect("never poisoned").take();
    if let Some(parked) = parked {
        rollback(&lease).await;
        q.shared.counters.parked.fetch_add(1, Ordering::Relaxed);
        log_park(q, claimed, &parked);
        return Finished::Parked;
    }
    if lease.lost.load(Ordering::Relaxed) {
        rollback(&lease).await;
        q.shared.counters.lease_lost.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(queue = %q.options.name, task_id = claimed.id, "lease lost while running: result dropped");
        return Finished::Lost;
    }
    match returned {
        Ok(done) => match lease.tx.lock().await.take() {
            Some(tx) => complete_in(q, claimed, &tx, &done).await,
            None => Finished::Done(done),
        },
        Err(error) => {
            attempt.failed(&error);
            rollback(&lease).await;
            Finished::Failed(error)
        }
    }
}

/// The handler's transaction, if it opened one, rolled back.
async fn rollback(lease: &Lease) {
    if let Some(tx) = lease.tx.lock().await.take() {
        if let Err(e) = tx.batch_execute(sql::ROLLBACK).await {
            tracing::warn!(error = %e, "rollback of the handler's transaction failed");
        }
    }
}

/// Completes strictly in the handler's transaction and commits: its writes
/// and the completion stand or fall together.
async fn complete_in(q: &QueueRuntime, claimed: &Claimed, tx: &Object, done: &Done) -> Finished {
    let completed = async {
        statement::query_one(
            q.shared.statements,
            tx,
            &sql::COMPLETE_STRICT,
            &[
                &q.options.name,
                &claimed.id,
                &claimed.fencing_token,
                &done.result,
                &done.follow_ups(),
            ],
        )
        .await?;
        tx.batch_execute(sql::COMMIT).await?;
        Ok::<(), Error>(())
    }
    .await;
    let outcome = match completed {
        Ok(()) => {
            q.shared.counters.completed.fetch_add(1, Ordering::Relaxed);
            Outcome::Completed
        }
        Err(e) => {
            let _ = tx.batch_execute(sql::ROLLBACK).await;
            if e.sqlstate() == Some("40002") {
                q.shared.counters.lease_lost.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(queue = %q.options.name, task_id = claimed.id, "lease lost: the handler's transaction rolled back");
                Outcome::LeaseLost
            } else {
                tracing::error!(queue = %q.options.name, task_id = claimed.id, error = %e, "completing in the handler's transaction failed; the lease will expire");
                Outcome::Unsettled
            }
        }
    };
    Finished::Settled(outcome)
}

/// Settles the task, retrying on a failed connection for as long as the
/// lease would still be ours; returns how the attempt ended (a failure
/// that applied as `Failed` unless the handler dead-lettered it) and the
/// next task when the settling call claimed one.
async fn settle(
    q: &QueueRuntime,
    claimed: &Claimed,
    finished: Finished,
    conn: &mut Option<Object>,
) -> (Outcome, Option<Claimed>) {
    match finished {
        Finished::Settled(outcome) => return (outcome, None),
        Finished::Lost => return (Outcome::LeaseLost, None),
        Finished::Parked => return (Outcome::Parked, None),
        _ => {}
    }
    let until = Instant::now() + q.options.lease;
    let mut backoff = Backoff::default();
    loop {
        let result = settle_once(q, claimed, &finished, conn).await;
        match result {
            Ok(next) => return next,
            Err(e) if e.is_connection() && Instant::now() < until => {
                *conn = None;
                tracing::warn!(queue = %q.options.name, task_id = claimed.id, error = %e, "settling failed; retrying");
                tokio::time::sleep(backoff.next()).await;
            }
            Err(e) => {
                *conn = None;
                tracing::error!(queue = %q.options.name, task_id = claimed.id, error = %e, "settling failed; the lease will expire");
                return (Outcome::Unsettled, None);
            }
        }
    }
}

async fn settle_once(
    q: &QueueRuntime,
    claimed: &Claimed,
    finished: &Finished,
    conn: &mut Option<Object>,
) -> Result<(Outcome, Option<Claimed>)> {
    if conn.is_none() {
        *conn = Some(q.shared.pool.get().await?);
    }
    let c = conn.as_ref().expect("set above");
    let (queue, owner) = (&q.options.name, &q.shared.owner);
    let (id, token) = (claimed.id, claimed.fencing_token);
    let lease = micros("lease", q.options.lease)?;
    let next_wanted = q.shared.running();
    let counters = &q.shared.counters;
    let (outcome, next) = match finished {
        Finished::Done(done) if next_wanted => {
            let row = statement::query_one(
                q.shared.statements,
                c,
                &sql::COMPLETE_AND_CLAIM,
                &[
                    queue,
                    owner,
                    &id,
                    &token,
                    &done.result,
                    &done.follow_ups(),
                    &lease,
                    &1i32,
                ],
            )
            .await?;
            (row.get::<_, String>(0), Claimed::from_row(&row, 1))
        }
        Finished::Done(done) => {
            let row = statement::query_one(
                q.shared.statements,
                c,
                &sql::COMPLETE,
                &[queue, &id, &token, &done.result, &done.follow_ups()],
            )
            .await?;
            (row.get(0), None)
        }
        Finished::Failed(error) if next_wanted => {
            let retry_in = retry_micros(error)?;
            let row = statement::query_one(
                q.shared.statements,
                c,
                &sql::FAIL_AND_CLAIM,
                &[
                    queue,
                    owner,
                    &id,
                    &token,
                    &error.message,
                    &retry_in,
                    &error.dead_letter,
                    &lease,
                    &1i32,
                ],
            )
            .await?;
            (row.get::<_, String>(0), Claimed::from_row(&row, 1))
        }
        Finished::Failed(error) => {
            let retry_in = retry_micros(error)?;
            let row = statement::query_one(
                q.shared.statements,
                c,
                &sql::FAIL,
                &[
                    queue,
                    &id,
                    &token,
                    &error.message,
                    &retry_in,
                    &error.dead_letter,
                ],
            )
            .await?;
            (row.get(0), None)
        }
        Finished::HandBack => {
            let row =
                statement::query_one(q.shared.statements, c, &sql::RELEASE, &[queue, &id, &token])
                    .await?;
            (row.get(0), None)
        }
        Finished::Settled(outcome) => return Ok((*outcome, None)),
        Finished::Lost => return Ok((Outcome::LeaseLost, None)),
        Finished::Parked => return Ok((Outcome::Parked, None)),
    };
    let settled = if outcome == "applied" {
        let (counter, settled) = match finished {
            Finished::Done(_) => (&counters.completed, Outcome::Completed),
            Finished::Failed(e) if e.dead_letter => (&counters.failed, Outcome::DeadLettered),
            Finished::Failed(_) => (&counters.failed, Outcome::Failed),
            _ => (&counters.released, Outcome::Released),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        settled
    } else {
        counters.lease_lost.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(queue = %queue, task_id = id, "lease lost: another worker has the task");
        Outcome::LeaseLost
    };
    Ok((settled, next))
}

/// One line per park: the step, and until when, the event's key or how
/// many tasks it waits for. The slot is free; the task wakes by itself.
fn log_park(q: &QueueRuntime, claimed: &Claimed, parked: &Parked) {
    let (queue, task_id, step) = (&q.options.name, claimed.id, &parked.step);
    match &parked.on {
        ParkedOn::Sleep { until } => tracing::info!(
            %queue, task_id, %step, %until,
            "task parked: sleeping (the attempt is not counted)"
        ),
        ParkedOn::Event { key, until } => tracing::info!(
            %queue, task_id, %step, event = %key, %until,
            "task parked: waiting for an event (the attempt is not counted)"
        ),
        ParkedOn::Tasks { count } => tracing::info!(
            %queue, task_id, %step, tasks = count,
            "task parked: waiting for tasks (the attempt is not counted)"
        ),
    }
}

/// One line per failed attempt that reached the server: the task, its
/// queue and attempt, the error, and whether it will run again.
fn log_failure(q: &QueueRuntime, claimed: &Claimed, error: &str, outcome: Outcome) {
    let fate = match outcome {
        Outcome::Retried => "will be retried",
        Outcome::DeadLettered => "dead-lettered",
        Outcome::Failed => "retried or dead-lettered (could not be read back)",
        _ => return, // lease lost or unsettled: logged where that was found
    };
    tracing::warn!(
        task_id = claimed.id,
        queue = %q.options.name,
        attempt = claimed.attempts,
        error = %error,
        "task failed; {fate}"
    );
}

/// Whether the failure this attempt reported dead-lettered the task (no
/// attempt left) or retried it, read back for the log line and the
/// attempt's span: dead and still at this attempt's fencing token (a later
/// claim moves the token). One query per failed attempt.
async fn fate(q: &QueueRuntime, claimed: &Claimed, conn: &mut Option<Object>) -> Outcome {
    let dead = async {
        if conn.is_none() {
            *conn = Some(q.shared.pool.get().await?);
        }
        let c = conn.as_ref().expect("set above");
        let row = statement::query_one(
            q.shared.statements,
            c,
            &sql::DEAD_AT_TOKEN,
            &[&q.options.name, &claimed.id, &claimed.fencing_token],
        )
        .await?;
        Ok::<bool, Error>(row.get(0))
    }
    .await;
    match dead {
        Ok(true) => Outcome::DeadLettered,
        Ok(false) => Outcome::Retried,
        Err(e) => {
            *conn = None;
            tracing::warn!(queue = %q.options.name, task_id = claimed.id, error = %e, "could not read back whether the failure dead-lettered the task");
            Outcome::Failed
        }
    }
}

fn retry_micros(error: &TaskError) -> Result<Option<i64>, Error> {
    error
        .retry_in
        .map(|d: Duration| micros("retry_in", d))
        .transpose()
}
