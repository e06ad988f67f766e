//! Producing tasks: one or a batch, on any connection or transaction of the
//! caller's (the outbox: a task exists if and only if the caller's
//! transaction commits), or through a pooled [`Client`](crate::Client).

use std::time::Duration;

use deadpool_postgres::Object;
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Row};

use crate::duration::micros;
use crate::error::{Error, Result};
use crate::sql;
use crate::statement::{self, Statements};

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
    let (payload, delay) = (
        serde_json::to_value(payload)?,
        micros("delay", options.delay)?,
    );
    let row = client
        .query_one(
            sql::ENQUEUE.text,
            &enqueue_args(&queue, &payload, &delay, options),
        )
        .await?;
    Ok(Enqueued::from_row(&row))
}

/// [`enqueue`] on a pooled connection, the statement sent as `mode` says.
pub(crate) async fn enqueue_pooled<T: Serialize + ?Sized>(
    mode: Statements,
    conn: &Object,
    queue: &str,
    payload: &T,
    options: &EnqueueOptions,
) -> Result<Enqueued> {
    let (payload, delay) = (
        serde_json::to_value(payload)?,
        micros("delay", options.delay)?,
    );
    let args = enqueue_args(&queue, &payload, &delay, options);
    let row = statement::query_one(mode, conn, &sql::ENQUEUE, &args).await?;
    Ok(Enqueued::from_row(&row))
}

impl Enqueued {
    fn from_row(row: &Row) -> Enqueued {
        Enqueued {
            task_id: row.get(0),
            deduplicated: row.get(1),
        }
    }
}

/// `sql::ENQUEUE`'s arguments.
fn enqueue_args<'a>(
    queue: &'a &str,
    payload: &'a Value,
    delay: &'a i64,
    options: &'a EnqueueOptions,
) -> [&'a (dyn ToSql + Sync); 10] {
    [
        queue,
        payload,
        delay,
        &options.priority,
        &options.max_attempts,
        &options.idempotency_key,
        &options.wait_for,
        &options.concurrency_key,
        &options.ordering_key,
        &options.fairness_key,
    ]
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
    let (payloads, delay) = batch_values(payloads, options)?;
    let rows = client
        .query(
            sql::ENQUEUE_BATCH.text,
            &batch_args(&queue, &payloads, &delay, options),
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// [`enqueue_batch`] on a pooled connection, the statement sent as `mode` says.
pub(crate) async fn enqueue_batch_pooled<T: Serialize>(
    mode: Statements,
    conn: &Object,
    queue: &str,
    payloads: &[T],
    options: &EnqueueOptions,
) -> Result<Vec<i64>> {
    let (payloads, delay) = batch_values(payloads, options)?;
    let args = batch_args(&queue, &payloads, &delay, options);
    let rows = statement::query(mode, conn, &sql::ENQUEUE_BATCH, &args).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The payloads as JSON and the delay in microseconds, once the options
/// are checked for a batch.
fn batch_values<T: Serialize>(
    payloads: &[T],
    options: &EnqueueOptions,
) -> Result<(Vec<Value>, i64)> {
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
    Ok((payloads, micros("delay", options.delay)?))
}

/// `sql::ENQUEUE_BATCH`'s arguments.
fn batch_args<'a>(
    queue: &'a &str,
    payloads: &'a Vec<Value>,
    delay: &'a i64,
    options: &'a EnqueueOptions,
) -> [&'a (dyn ToSql + Sync); 9] {
    [
        queue,
        payloads,
        delay,
        &options.priority,
        &options.max_attempts,
        &options.concurrency_key,
        &options.ordering_key,
        &options.fairness_key,
        &options.wait_for,
    ]
}
