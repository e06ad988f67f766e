//! Durable workflows: a handler's named steps, recorded once under the
//! claim's fencing token ([`Task::step`], [`Task::step_in`]), durable
//! sleeps ([`Task::sleep`], [`Task::sleep_until`]), event waits
//! ([`Task::wait_for_event`]) and children ([`Task::spawn_children`],
//! [`Task::wait_for_tasks`]) that park the task, and the producer's
//! [`emit()`].
//!
//! A parked task is handed back by the database itself (scheduled until the
//! wake time, the attempt not counted): the call returns a [`TaskError`]
//! whose [`is_parked`](TaskError::is_parked) is true, the handler returns it
//! with `?`, and the runtime settles nothing. A lost lease found by a
//! workflow call ends the handler the same way, as a lost lease.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use deadpool_postgres::Object;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::MappedMutexGuard;
use tokio_postgres::types::ToSql;
use tokio_postgres::GenericClient;

use crate::duration::micros;
use crate::error::{Error, Result};
use crate::sql;
use crate::statement;
use crate::task::{Lease, Parked, ParkedOn, Stop, Task, TaskError};

mod children;
pub use children::{Child, ChildOutcome};

/// How an event wait ended ([`Task::wait_for_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event<T = Value> {
    /// The emitted payload (None when the wait timed out, or the event was
    /// emitted without one).
    pub payload: Option<T>,
    /// No event came before the deadline.
    pub timed_out: bool,
}

/// Emits the event `key` of `queue` on `client` (a connection or a
/// transaction of the caller's: waiters wake when it commits). True if this
/// call emitted it, false if it was emitted already (the first emit stands,
/// this one changes nothing). Needs the producer right.
pub async fn emit<C, T>(client: &C, queue: &str, key: &str, payload: &T) -> Result<bool>
where
    C: GenericClient + Sync,
    T: Serialize + ?Sized,
{
    let payload = serde_json::to_value(payload)?;
    let row = client
        .query_one(sql::EMIT.text, &[&queue, &key, &payload])
        .await?;
    Ok(row.get(0))
}

/// [`emit`] on a pooled connection, the statement sent as `mode` says.
pub(crate) async fn emit_pooled<T: Serialize + ?Sized>(
    mode: statement::Statements,
    conn: &Object,
    queue: &str,
    key: &str,
    payload: &T,
) -> Result<bool> {
    let payload = serde_json::to_value(payload)?;
    let row = statement::query_one(mode, conn, &sql::EMIT, &[&queue, &key, &payload]).await?;
    Ok(row.get(0))
}

impl Lease {
    /// The task's recorded steps, read once per claim.
    async fn steps(&self) -> Result<&std::sync::Mutex<HashMap<String, Value>>> {
        self.steps
            .get_or_try_init(|| async {
                let recorded = self.read_steps().await?;
                tracing::debug!(queue = %self.queue, task_id = self.id, steps = recorded.len(), "workflow steps loaded");
                Ok::<_, Error>(std::sync::Mutex::new(recorded))
            })
            .await
    }

    async fn read_steps(&self) -> Result<HashMap<String, Value>> {
        let conn = self.pool.get().await?;
        let rows = statement::query(
            self.statements,
            &conn,
            &sql::STEPS,
            &[&self.queue, &self.id],
        )
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let result: Option<Value> = r.get(1);
                (r.get(0), result.unwrap_or(Value::Null))
            })
            .collect())
    }

    fn recorded(&self, step: &str) -> Option<Value> {
        let steps = self.steps.get()?;
        let steps = steps.lock().expect("the steps' lock is never poisoned");
        steps.get(step).cloned()
    }

    fn remember(&self, step: &str, result: Value) {
        if let Some(steps) = self.steps.get() {
            let mut steps = steps.lock().expect("the steps' lock is never poisoned");
            steps.insert(step.to_string(), result);
        }
    }

    /// The fence refused a workflow call: the runtime drops the handler's
    /// result and settles nothing.
    fn lose(&self, step: &str) -> TaskError {
        self.lost.store(true, Ordering::Relaxed);
        TaskError::stopped(
            Stop::LeaseLost,
            format!("lease lost at step \"{step}\": another worker may have the task"),
        )
    }

    /// The database handed the task back: the runtime settles nothing.
    fn park(&self, parked: Parked) -> TaskError {
        let step = &parked.step;
        let message = match &parked.on {
            ParkedOn::Sleep { until } => {
                format!("parked at step \"{step}\": sleeping until {until}")
            }
            ParkedOn::Event { key, until } => {
                format!("parked at step \"{step}\": waiting for event \"{key}\" until {until}")
            }
            ParkedOn::Tasks { count } => {
                format!("parked at step \"{step}\": waiting for {count} tasks")
            }
        };
        *self
            .parked
            .lock()
            .expect("the park's lock is never poisoned") = Some(parked);
        TaskError::stopped(Stop::Parked, message)
    }
}

impl<T> Task<T> {
    /// A recorded step's result, from the steps loaded once per claim.
    async fn replay<R: DeserializeOwned>(&self, step: &str) -> Result<Option<R>, TaskError> {
        self.lease.steps().await?;
        let Some(result) = self.lease.recorded(step) else {
            return Ok(None);
        };
        tracing::info!(queue = %self.queue, task_id = self.id, step = %step, "workflow step replayed: its recorded result is returned, it does not run again");
        decode(step, result).map(Some)
    }

    /// Runs the step `name` once: if this task recorded it (an earlier
    /// attempt, or before a sleep), returns the recorded result without
    /// running `f`; else runs `f`, records its result (JSON) under this
    /// claim's fencing token, and returns it. The recorded steps are read
    /// once per claim, so a recorded step costs no round trip.
    ///
    /// The record follows the effect: a worker that dies between them runs
    /// the step again, so an effect outside the database must be
    /// idempotent (a key from the task id and the step's name). For an
    /// effect that is a write to this database, [`step_in`](Task::step_in)
    /// makes it exactly once. If the lease was lost, nothing is recorded
    /// and the error ([`TaskError::is_lease_lost`]) ends the handler with
    /// `?`: the runtime settles nothing.
    pub async fn step<R, F, Fut>(&self, name: &str, f: F) -> Result<R, TaskError>
    where
        R: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<R, TaskError>>,
    {
        if let Some(recorded) = self.replay(name).await? {
            return Ok(recorded);
        }
        let result = f().await?;
        let value = serde_json::to_value(&result)?;
        let conn = self.lease.pool.get().await?;
        let recorded = statement::query_one(
            self.lease.statements,
            &conn,
            &sql::STEP_RECORD,
            &[&self.queue, &self.id, &self.fencing_token, &name, &value],
        )
        .await;
        match recorded {
            Ok(row) if row.get::<_, String>(0) == "applied" => {
                self.lease.remember(name, value);
                Ok(result)
            }
            Ok(_) => Err(self.lease.lose(name)),
            // Recorded meanwhile under this token (the same step run twice
            // at once): the first record stands, and is the step's result.
            Err(e) if e.sqlstate() == Some("23505") => {
                let first = self.lease.read_steps().await?.remove(name).ok_or(e)?;
                self.lease.remember(name, first.clone());
                decode(name, first)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A step whose effect is a write to this database, exactly once: `f`
    /// writes in the handler's own transaction (it gets what
    /// [`transaction`](Task::transaction) returns), the step's result is
    /// recorded there with `strict => true`, and the transaction commits.
    /// If the lease was lost, the record raises 40002 and the effect rolls
    /// back with it ([`TaskError::is_lease_lost`]: return it, the runtime
    /// settles nothing); if `f` fails, its writes roll back. A recorded
    /// step returns its result without running `f`.
    ///
    /// Writes made in [`transaction`](Task::transaction) before the step
    /// commit with it; drop the guard that call returned before calling
    /// this one.
    ///
    /// ```no_run
    /// # use aedb_queue_client::{Task, TaskError};
    /// # async fn h(task: Task) -> Result<(), TaskError> {
    /// let id = task.id;
    /// let receipt: String = task
    ///     .step_in("charge", |tx| async move {
    ///         tx.execute("INSERT INTO ledger (task_id, entry) VALUES ($1, 'charge')", &[&id])
    ///             .await?;
    ///         Ok(format!("r-{id}"))
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn step_in<'t, R, F, Fut>(&'t self, name: &str, f: F) -> Result<R, TaskError>
    where
        R: Serialize + DeserializeOwned,
        F: FnOnce(MappedMutexGuard<'t, Object>) -> Fut,
        Fut: Future<Output = Result<R, TaskError>>,
    {
        if let Some(recorded) = self.replay(name).await? {
            return Ok(recorded);
        }
        let slot = self.lease.tx.try_lock().map_err(|_| {
            TaskError::retry(format!(
                "step \"{name}\": the handler's transaction is in use (drop what task.transaction() returned first)"
            ))
        })?;
        let returned = f(self.lease.begin(slot).await?).await;
        let conn = self.lease.tx.lock().await.take();
        let conn = conn.ok_or_else(|| {
            TaskError::retry(format!(
                "step \"{name}\": the handler's transaction is gone"
            ))
        })?;
        let result = match returned {
            Ok(result) => result,
            Err(failed) => {
                rollback(&conn).await;
                return Err(failed);
            }
        };
        let value = match serde_json::to_value(&result) {
            Ok(value) => value,
            Err(e) => {
                rollback(&conn).await;
                return Err(e.into());
            }
        };
        let recorded = async {
            statement::query_one(
                self.lease.statements,
                &conn,
                &sql::STEP_RECORD_STRICT,
                &[&self.queue, &self.id, &self.fencing_token, &name, &value],
            )
            .await?;
            conn.batch_execute(sql::COMMIT).await?;
            Ok::<(), Error>(())
        }
        .await;
        match recorded {
            Ok(()) => {
                self.lease.remember(name, value);
                Ok(result)
            }
            Err(e) => {
                rollback(&conn).await;
                if e.sqlstate() == Some("40002") {
                    Err(self.lease.lose(name))
                } else {
                    Err(e.into())
                }
            }
        }
    }

    /// A durable sleep, as the step `name`: the first call records the
    /// wake time (now + `duration` on the database's clock). While it is
    /// ahead, the task is handed back until then without counting the
    /// attempt, and this returns a parked error ([`TaskError::is_parked`])
    /// to return at once with `?`; the handler runs again at the wake time
    /// (its recorded steps replayed). Once it has passed, returns `Ok`.
    pub async fn sleep(&self, name: &str, duration: Duration) -> Result<(), TaskError> {
        let duration = micros("duration", duration)?;
        self.sleep_as(name, Some(duration), None).await
    }

    /// [`sleep`](Task::sleep) until `until` (compared with the database's
    /// clock).
    pub async fn sleep_until(&self, name: &str, until: SystemTime) -> Result<(), TaskError> {
        self.sleep_as(name, None, Some(until)).await
    }

    async fn sleep_as(
        &self,
        name: &str,
        duration: Option<i64>,
        until: Option<SystemTime>,
    ) -> Result<(), TaskError> {
        let conn = self.lease.pool.get().await?;
        let row = statement::query_one(
            self.lease.statements,
            &conn,
            &sql::SLEEP,
            &[
                &self.queue,
                &self.id,
                &self.fencing_token,
                &name,
                &duration,
                &until,
            ],
        )
        .await?;
        let (outcome, waiting, wake_at): (String, bool, Option<String>) =
            (row.get(0), row.get(1), row.get(2));
        if outcome != "applied" {
            return Err(self.lease.lose(name));
        }
        if waiting {
            return Err(self.lease.park(Parked {
                step: name.to_string(),
                on: ParkedOn::Sleep {
                    until: wake_at.unwrap_or_default(),
                },
            }));
        }
        Ok(())
    }

    /// Waits for the event `key` of this task's queue, as the step `name`,
    /// at most `timeout` from the first call. An event emitted before or
    /// during the wait ends it with its payload (decoded as `P`); without
    /// one, the task is handed back until the event or the deadline, the
    /// attempt not counted, and this returns a parked error
    /// ([`TaskError::is_parked`]) to return at once with `?`. Past the
    /// deadline, the wait ends `timed_out`. Either end is recorded: a later
    /// call returns it with no round trip.
    pub async fn wait_for_event<P: DeserializeOwned>(
        &self,
        name: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<Event<P>, TaskError> {
        self.lease.steps().await?;
        if let Some(ended) = self.lease.recorded(name).and_then(event_of) {
            tracing::info!(queue = %self.queue, task_id = self.id, step = %name, "workflow step replayed: the event wait's recorded end is returned");
            return decode_event(name, ended);
        }
        let timeout = micros("timeout", timeout)?;
        let conn = self.lease.pool.get().await?;
        let params: [&(dyn ToSql + Sync); 6] = [
            &self.queue,
            &self.id,
            &self.fencing_token,
            &name,
            &key,
            &timeout,
        ];
        let row =
            statement::query_one(self.lease.statements, &conn, &sql::AWAIT_EVENT, &params).await?;
        let (outcome, waiting, wake_at): (String, bool, Option<String>) =
            (row.get(0), row.get(1), row.get(2));
        if outcome != "applied" {
            return Err(self.lease.lose(name));
        }
        if waiting {
            return Err(self.lease.park(Parked {
                step: name.to_string(),
                on: ParkedOn::Event {
                    key: key.to_string(),
                    until: wake_at.unwrap_or_default(),
                },
            }));
        }
        let ended = (row.get::<_, Option<Value>>(3), row.get::<_, bool>(4));
        self.lease.remember(
            name,
            serde_json::json!({ "payload": ended.0, "timed_out": ended.1 }),
        );
        decode_event(name, ended)
    }
}

/// The step's transaction rolled back (its effect with it).
async fn rollback(conn: &Object) {
    if let Err(e) = conn.batch_execute(sql::ROLLBACK).await {
        tracing::warn!(error = %e, "rollback of the step's transaction failed");
    }
}

fn decode<R: DeserializeOwned>(step: &str, result: Value) -> Result<R, TaskError> {
    serde_json::from_value(result).map_err(|e| {
        TaskError::retry(format!(
            "the recorded result of step \"{step}\" does not decode: {e}"
        ))
    })
}

/// A recorded event wait's end (payload, timed_out), if `result` is one.
fn event_of(result: Value) -> Option<(Option<Value>, bool)> {
    let timed_out = result.get("timed_out")?.as_bool()?;
    let payload = result.get("payload").filter(|p| !p.is_null()).cloned();
    Some((payload, timed_out))
}

fn decode_event<P: DeserializeOwned>(
    step: &str,
    (payload, timed_out): (Option<Value>, bool),
) -> Result<Event<P>, TaskError> {
    let payload = payload
        .filter(|p| !p.is_null())
        .map(|p| decode(step, p))
        .transpose()?;
    Ok(Event { payload, timed_out })
}
