//! A workflow's children: tasks a step enqueues ([`Task::spawn_children`])
//! and a later step waits for ([`Task::wait_for_tasks`]), parked meanwhile.

use deadpool_postgres::Object;
use futures_util::future::try_join_all;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_postgres::types::ToSql;

use crate::enqueue::{enqueue_pooled, EnqueueOptions};
use crate::sql;
use crate::statement;
use crate::task::{Parked, ParkedOn, Task, TaskError};

/// A task for [`Task::spawn_children`] to enqueue: its queue, payload and
/// options.
#[derive(Debug, Clone)]
pub struct Child<P = Value> {
    pub queue: String,
    pub payload: P,
    pub options: EnqueueOptions,
}

impl<P> Child<P> {
    pub fn new(queue: impl Into<String>, payload: P) -> Child<P> {
        Child {
            queue: queue.into(),
            payload,
            options: EnqueueOptions::default(),
        }
    }

    pub fn options(mut self, options: EnqueueOptions) -> Child<P> {
        self.options = options;
        self
    }
}

/// How a child ended, as [`Task::wait_for_tasks`] returns it (the entry
/// `queue_await_tasks` recorded).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum ChildOutcome<R = Value> {
    /// Completed with `result` (JSON null if it returned none: use an
    /// `Option` for `R` when that can happen).
    Completed { task_id: i64, result: R },
    /// Dead-lettered (given up) with its last error.
    Dead { task_id: i64, error: Option<String> },
    /// Never made, cancelled, gone, or in a queue this role may not read.
    Missing { task_id: i64 },
}

impl<R> ChildOutcome<R> {
    pub fn task_id(&self) -> i64 {
        match self {
            ChildOutcome::Completed { task_id, .. }
            | ChildOutcome::Dead { task_id, .. }
            | ChildOutcome::Missing { task_id } => *task_id,
        }
    }

    /// A completed child's result.
    pub fn result(&self) -> Option<&R> {
        match self {
            ChildOutcome::Completed { result, .. } => Some(result),
            _ => None,
        }
    }
}

impl<T> Task<T> {
    /// Enqueues `children` as the step `name`, exactly once, and returns
    /// their ids in order: the enqueues, the links that keep a child's
    /// result until [`wait_for_tasks`](Task::wait_for_tasks) reads it, and
    /// the step's record (the ids) commit in one transaction, so a crash
    /// or a lost lease leaves no child behind, and a handler run again gets
    /// the recorded ids instead of enqueuing again. This is a
    /// [`step_in`](Task::step_in): writes made in
    /// [`transaction`](Task::transaction) before it commit with it. Needs
    /// the producer right on the children's queues.
    pub async fn spawn_children<P, I>(&self, name: &str, children: I) -> Result<Vec<i64>, TaskError>
    where
        P: Serialize,
        I: IntoIterator<Item = Child<P>>,
    {
        let children: Vec<Child<P>> = children.into_iter().collect();
        self.step_in(name, |tx| async move {
            let ids = self.enqueue_children(&tx, &children).await?;
            self.link_children(&tx, name, &ids).await?;
            Ok(ids)
        })
        .await
    }

    /// Pipelined on the step's transaction: one round trip, not one per child.
    async fn enqueue_children<P: Serialize>(
        &self,
        tx: &Object,
        children: &[Child<P>],
    ) -> Result<Vec<i64>, TaskError> {
        let mode = self.lease.statements;
        let enqueued = try_join_all(
            children
                .iter()
                .map(|c| enqueue_pooled(mode, tx, &c.queue, &c.payload, &c.options)),
        )
        .await?;
        Ok(enqueued.into_iter().map(|e| e.task_id).collect())
    }

    /// Without the link, a child that completes before the wait would be
    /// gone (its queue may keep no completed tasks) and read as missing.
    async fn link_children(&self, tx: &Object, name: &str, ids: &[i64]) -> Result<(), TaskError> {
        let params: [&(dyn ToSql + Sync); 5] =
            [&self.queue, &self.id, &self.fencing_token, &name, &ids];
        let row =
            statement::query_one(self.lease.statements, tx, &sql::LINK_TASKS, &params).await?;
        if row.get::<_, String>(0) != "applied" {
            return Err(self.lease.lose(name));
        }
        Ok(())
    }

    /// Waits for the tasks `ids` (children from
    /// [`spawn_children`](Task::spawn_children)) as the step `name`. While
    /// any is live, the task is handed back until the last one completes,
    /// is dead-lettered or cancelled, the attempt not counted, and this
    /// returns a parked error ([`TaskError::is_parked`]) to return at once
    /// with `?`. Then returns how each ended, in order, results decoded as
    /// `R`; recorded, so a later call returns the same with no round trip.
    pub async fn wait_for_tasks<R: DeserializeOwned>(
        &self,
        name: &str,
        ids: &[i64],
    ) -> Result<Vec<ChildOutcome<R>>, TaskError> {
        if let Some(recorded) = self.replay(name).await? {
            return Ok(recorded);
        }
        let conn = self.lease.pool.get().await?;
        let params: [&(dyn ToSql + Sync); 5] =
            [&self.queue, &self.id, &self.fencing_token, &name, &ids];
        let row =
            statement::query_one(self.lease.statements, &conn, &sql::AWAIT_TASKS, &params).await?;
        let (outcome, waiting): (String, bool) = (row.get(0), row.get(1));
        if outcome != "applied" {
            return Err(self.lease.lose(name));
        }
        if waiting {
            return Err(self.lease.park(Parked {
                step: name.to_string(),
                on: ParkedOn::Tasks { count: ids.len() },
            }));
        }
        let results: Value = row.get::<_, Option<Value>>(2).unwrap_or_default();
        self.lease.remember(name, results.clone());
        super::decode(name, results)
    }
}
