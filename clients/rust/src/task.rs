//! What a handler gets (a [`Task`]) and returns ([`Done`] or [`TaskError`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard, OnceCell};
use tokio_postgres::Row;

use crate::duration::micros;
use crate::error::Result;
use crate::sql;
use crate::statement::{self, Statements};
use crate::telemetry::Cause;

/// A task as the claiming statements return it (columns from `at` on:
/// task_id, payload, attempts, fencing_token, progress).
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    pub id: i64,
    pub payload: Option<Value>,
    pub attempts: i32,
    pub fencing_token: i64,
    pub progress: Option<Value>,
}

impl Claimed {
    /// None for the settle-and-claim calls' row that claimed nothing.
    pub fn from_row(row: &Row, at: usize) -> Option<Claimed> {
        let id: Option<i64> = row.get(at);
        Some(Claimed {
            id: id?,
            payload: row.get(at + 1),
            attempts: row.get(at + 2),
            fencing_token: row.get(at + 3),
            progress: row.get(at + 4),
        })
    }
}

/// The lease a running handler holds, shared with the runtime: its
/// heartbeats, its lost flag, the handler's own transaction if it opened
/// one, and a workflow's recorded steps and park.
pub(crate) struct Lease {
    pub pool: Pool,
    pub statements: Statements,
    pub queue: String,
    pub id: i64,
    pub token: i64,
    pub extend: Duration,
    pub lost: AtomicBool,
    pub tx: Mutex<Option<Object>>,
    /// The task's recorded steps (name, result), loaded on a workflow
    /// call's first use in this claim.
    pub steps: OnceCell<std::sync::Mutex<HashMap<String, Value>>>,
    /// Set when a sleep or a wait handed the task back: the runtime
    /// settles nothing.
    pub parked: std::sync::Mutex<Option<Parked>>,
}

/// Where a workflow's task was parked, for the runtime's log line.
#[derive(Debug, Clone)]
pub(crate) struct Parked {
    pub step: String,
    pub on: ParkedOn,
}

/// What a parked task waits for. Times are as the database wrote them.
#[derive(Debug, Clone)]
pub(crate) enum ParkedOn {
    Sleep {
        until: String,
    },
    /// An event, or its deadline (`until`).
    Event {
        key: String,
        until: String,
    },
    /// Other tasks (children): no time, the last one's end wakes it.
    Tasks {
        count: usize,
    },
}

impl Lease {
    /// Extends the lease (and records `progress`); false when it was lost.
    pub async fn heartbeat(&self, progress: Option<&Value>) -> Result<bool> {
        let conn = self.pool.get().await?;
        let extend = micros("extend", self.extend)?;
        let outcome: String = statement::query_one(
            self.statements,
            &conn,
            &sql::HEARTBEAT,
            &[&self.queue, &self.id, &self.token, &extend, &progress],
        )
        .await?
        .get(0);
        let held = outcome == "applied";
        if !held {
            self.lost.store(true, Ordering::Relaxed);
        }
        Ok(held)
    }
}

/// A claimed task, as a handler sees it. `T` is the payload's type
/// (`serde_json::Value` unless the handler was made with a typed payload).
pub struct Task<T = Value> {
    pub id: i64,
    pub queue: String,
    /// This attempt's number (1 on the first claim).
    pub attempts: i32,
    pub fencing_token: i64,
    pub payload: T,
    /// What an earlier attempt checkpointed, if anything.
    pub progress: Option<Value>,
    pub(crate) lease: Arc<Lease>,
}

impl<T> Task<T> {
    pub(crate) fn with_payload<U>(self, payload: U) -> (Task<U>, T) {
        (
            Task {
                id: self.id,
                queue: self.queue,
                attempts: self.attempts,
                fencing_token: self.fencing_token,
                payload,
                progress: self.progress,
                lease: self.lease,
            },
            self.payload,
        )
    }

    /// Records `progress` durably now (the next attempt gets it if this one
    /// does not finish) and extends the lease. False when the lease was
    /// lost: another worker may own the task; stop and return.
    pub async fn checkpoint<P: Serialize + ?Sized>(&self, progress: &P) -> Result<bool> {
        let progress = serde_json::to_value(progress)?;
        self.lease.heartbeat(Some(&progress)).await
    }

    /// True once a heartbeat found the lease lost; the result will be dropped.
    pub fn lease_lost(&self) -> bool {
        self.lease.lost.load(Ordering::Relaxed)
    }

    /// The handler's own transaction, begun on first use: what it writes
    /// there commits together with the task's completion (strict: if the
    /// lease was lost, it all rolls back), and rolls back if the handler
    /// fails. A workflow's [`step_in`](Task::step_in) commits it with the
    /// step's record instead; the next call begins a new one.
    pub async fn transaction(&self) -> Result<MappedMutexGuard<'_, Object>> {
        let slot = self.lease.tx.lock().await;
        self.lease.begin(slot).await
    }
}

impl Lease {
    /// The handler's transaction in `slot`, begun if none is open.
    pub(crate) async fn begin<'a>(
        &self,
        mut slot: MutexGuard<'a, Option<Object>>,
    ) -> Result<MappedMutexGuard<'a, Object>> {
        if slot.is_none() {
            let conn = self.pool.get().await?;
            conn.batch_execute(sql::BEGIN).await?;
            *slot = Some(conn);
        }
        Ok(MutexGuard::map(slot, |s| s.as_mut().expect("opened above")))
    }
}

/// A finished task: its result and follow-ups, enqueued in the
/// completion's transaction.
#[derive(Debug, Clone, Default)]
pub struct Done {
    pub(crate) result: Option<Value>,
    pub(crate) follow_ups: Vec<Value>,
}

impl Done {
    pub fn new() -> Done {
        Done::default()
    }

    /// Kept as the task's `result` (where the queue keeps completed tasks).
    pub fn with_result(mut self, result: Value) -> Done {
        self.result = Some(result);
        self
    }

    /// Enqueues a task into `queue` when this one completes, exactly once.
    pub fn follow_up(self, queue: &str, payload: Value) -> Done {
        self.follow_up_spec(serde_json::json!({ "queue": queue, "payload": payload }))
    }

    /// A follow-up with any of its options (`delay`, `priority`, ...; see
    /// `queue_complete`'s `follow_ups` in the README).
    pub fn follow_up_spec(mut self, spec: Value) -> Done {
        self.follow_ups.push(spec);
        self
    }

    pub(crate) fn follow_ups(&self) -> Option<Value> {
        (!self.follow_ups.is_empty()).then(|| Value::Array(self.follow_ups.clone()))
    }
}

/// Why a workflow call stopped the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Parked,
    LeaseLost,
}

/// A failed attempt. By default the task is retried after the queue's
/// backoff while attempts remain; `?` on any error gives that.
pub struct TaskError {
    pub(crate) message: String,
    pub(crate) retry_in: Option<Duration>,
    pub(crate) dead_letter: bool,
    /// Not a failure: a workflow call stopped the handler (parked, or the
    /// lease was lost); the runtime settles nothing.
    pub(crate) stop: Option<Stop>,
    /// What failed, for the `otel` feature's `error.type`.
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    pub(crate) cause: Cause,
}

impl TaskError {
    /// Retry after the queue's backoff (dead once attempts run out).
    pub fn retry(message: impl fmt::Display) -> TaskError {
        TaskError {
            message: message.to_string(),
            retry_in: None,
            dead_letter: false,
            stop: None,
            cause: Cause::Handler,
        }
    }

    /// Retry after `delay` instead of the backoff.
    pub fn retry_in(message: impl fmt::Display, delay: Duration) -> TaskError {
        TaskError {
            retry_in: Some(delay),
            ..TaskError::retry(message)
        }
    }

    /// Give up now: the task goes to the dead letters with this error.
    pub fn dead_letter(message: impl fmt::Display) -> TaskError {
        TaskError {
            dead_letter: true,
            ..TaskError::retry(message)
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// A sleep or a wait handed the task back (parked until a time, an
    /// event or the end of other tasks): not a failure. Return it (`?`) at
    /// once; the runtime settles nothing, the slot is freed, the attempt is
    /// not counted, and the handler runs again when the task wakes.
    pub fn is_parked(&self) -> bool {
        self.stop == Some(Stop::Parked)
    }

    /// A workflow call found the lease lost (another worker may have the
    /// task): nothing was recorded; return it (`?`), the runtime settles
    /// nothing.
    pub fn is_lease_lost(&self) -> bool {
        self.stop == Some(Stop::LeaseLost)
    }

    pub(crate) fn stopped(stop: Stop, message: impl fmt::Display) -> TaskError {
        TaskError {
            stop: Some(stop),
            ..TaskError::retry(message)
        }
    }

    pub(crate) fn caused_by(self, cause: Cause) -> TaskError {
        TaskError { cause, ..self }
    }
}

/// Any error, its causes in the message (a database error's own line is
/// only "db error"; its cause says what failed).
impl<E: std::error::Error + Send + Sync + 'static> From<E> for TaskError {
    fn from(error: E) -> TaskError {
        let mut message = error.to_string();
        let mut cause = error.source();
        while let Some(c) = cause {
            let line = c.to_string();
            if !message.ends_with(&line) {
                message.push_str(": ");
                message.push_str(&line);
            }
            cause = c.source();
        }
        TaskError::retry(message)
    }
}

impl fmt::Debug for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskError")
            .field("message", &self.message)
            .field("retry_in", &self.retry_in)
            .field("dead_letter", &self.dead_letter)
            .field("stop", &self.stop)
            .finish()
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
