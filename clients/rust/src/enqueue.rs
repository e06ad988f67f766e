//! Producing tasks: one or a batch, on any connection or transaction of the
//! caller's (the outbox: a task exists if and only if the caller's
//! transaction commits), or through a pooled [`Client`](crate::Client).

use std::time::Duration;

use serde::Serialize;
use tokio_postgres::{GenericClient, ToStatement};

use crate::duration::micros;
use crate::error::{Error, Result};
use crate::sql;

/// How a task is enqueued; every field is optional (the queue's settings
/// and the SQL defaults apply). Build it with the methods.
#[derive(Debug, Clone, Default)]
pub struct EnqueueOptions {
    delay: Duration,
    priority: i64,
    max_attempts: Option<i32>,
    idempotency_key: Option<String>,
    wait_for: Option<Vec<i64>>,
    concurrency_key: Option<String>,
    ordering_key: Option<String>,
    fairness_key: Option<String>,
}

impl EnqueueOptions {
    pub fn new() -> Self {
        Self::default()
    }
    /// Ready only after `delay` (a timer).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
    /// Higher first; 0 by default.
    pub fn priority(mut self, priority: i64) -> Self {
        self.priority = priority;
        self
    }
    pub fn max_attempts(mut self, attempts: i32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }
    /// A second enqueue with the same key returns the first task (single
    /// enqueues only).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
    /// The task waits until these tasks have completed.
    pub fn wait_for(mut self, parents: impl Into<Vec<i64>>) -> Self {
        self.wait_for = Some(parents.into());
        self
    }
    pub fn concurrency_key(mut self, key: impl Into<String>) -> Self {
        self.concurrency_key = Some(key.into());
        self
    }
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }
    pub fn fairness_key(mut self, key: impl Into<String>) -> Self {
        self.fairness_key = Some(key.into());
        self
    }
}

/// What `queue_enqueue` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    pub task_id: i64,
    /// True when an earlier task with the same idempotency key was returned.
    pub deduplicated: bool,
}

/// Enqueues one task on `client` (a connection or a transaction).
pub async fn enqueue<C, T>(
    client: &C,
    queue: &str,
    payload: &T,
    options: &EnqueueOptions,
) -> Result<Enqueued>
where
    C: GenericClient + Sync,
    T: Serialize + ?Sized,
{
    enqueue_with(client, sql::ENQUEUE, queue, payload, options).await
}

/// [`enqueue`] with the statement given (text, or prepared on a pooled
/// connection).
pub(crate) async fn enqueue_with<C, S, T>(
    client: &C,
    statement: &S,
    queue: &str,
    payload: &T,
    options: &EnqueueOptions,
) -> Result<Enqueued>
where
    C: GenericClient + Sync,
    S: ToStatement + Sync + Send + ?Sized,
    T: Serialize + ?Sized,
{
    let payload = serde_json::to_value(payload)?;
    let delay = micros("delay", options.delay)?;
    let row = client
        .query_one(
            statement,
            &[
                &queue,
                &payload,
                &delay,
                &options.priority,
                &options.max_attempts,
                &options.idempotency_key,
                &options.wait_for,
                &options.concurrency_key,
                &options.ordering_key,
                &options.fairness_key,
            ],
        )
        .await?;
    Ok(Enqueued {
        task_id: row.get(0),
        deduplicated: row.get(1),
    })
}

/// Enqueues many tasks in one statement; returns their ids in order. The
/// options apply to every task; an idempotency key is refused (one key
/// cannot name many tasks).
pub async fn enqueue_batch<C, T>(
    client: &C,
    queue: &str,
    payloads: &[T],
    options: &EnqueueOptions,
) -> Result<Vec<i64>>
where
    C: GenericClient + Sync,
    T: Serialize,
{
    enqueue_batch_with(client, sql::ENQUEUE_BATCH, queue, payloads, options).await
}

pub(crate) async fn enqueue_batch_with<C, S, T>(
    client: &C,
    statement: &S,
    queue: &str,
    payloads: &[T],
    options: &EnqueueOptions,
) -> Result<Vec<i64>>
where
    C: GenericClient + Sync,
    S: ToStatement + Sync + Send + ?Sized,
    T: Serialize,
{
    if options.idempotency_key.is_some() {
        return Err(Error::invalid(
            "idempotency_key",
            "is for single enqueues only",
        ));
    }
    let payloads = payloads
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()?;
    let delay = micros("delay", options.delay)?;
    let rows = client
        .query(
            statement,
            &[
                &queue,
                &payloads,
                &delay,
                &options.priority,
                &options.max_attempts,
                &options.concurrency_key,
                &options.ordering_key,
                &options.fairness_key,
                &options.wait_for,
            ],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
