//! A pooled client for producers.

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde::Serialize;

use crate::connect::Settings;
use crate::enqueue::{self, EnqueueOptions, Enqueued};
use crate::error::{Error, Result};
use crate::statement::Statements;

/// Producers' handle: a pool of connections (deadpool-postgres). Inside a
/// transaction of your own, call [`enqueue::enqueue`](crate::enqueue()) on
/// it instead, so the task commits with your writes.
#[derive(Clone)]
pub struct Client {
    pool: Pool,
    statements: Statements,
}

/// A pool of `size` connections made with `settings` (and their TLS).
pub fn pool(settings: &Settings, size: usize) -> Result<Pool> {
    let manager = Manager::from_config(
        settings.config(),
        settings.connector(),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(1))
        .build()
        .map_err(|e| Error::invalid("config", e))
}

impl Client {
    /// A client over `size` pooled connections from a connection string
    /// (`host=... user=... dbname=... sslmode=...` or a `postgresql://`
    /// URL; see [`Settings::parse`]).
    pub fn connect(conninfo: &str, size: usize) -> Result<Client> {
        Ok(Client::from_pool(pool(&Settings::parse(conninfo)?, size)?))
    }

    pub fn from_pool(pool: Pool) -> Client {
        Client {
            pool,
            statements: Statements::Prepared,
        }
    }

    /// Behind a pooler in transaction mode: statements sent unnamed with
    /// their parameter types instead of prepared once per connection (see
    /// [`WorkerBuilder::transaction_pooler`](crate::WorkerBuilder::transaction_pooler)).
    pub fn transaction_pooler(mut self, on: bool) -> Client {
        self.statements = Statements::behind_transaction_pooler(on);
        self
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Enqueues one task, committed at once.
    pub async fn enqueue<T: Serialize + ?Sized>(
        &self,
        queue: &str,
        payload: &T,
        options: &EnqueueOptions,
    ) -> Result<Enqueued> {
        let conn = self.pool.get().await?;
        enqueue::enqueue_pooled(self.statements, &conn, queue, payload, options).await
    }

    /// Emits the event `key` of `queue`, committed at once (see [`emit`](crate::emit())).
    pub async fn emit<T: Serialize + ?Sized>(
        &self,
        queue: &str,
        key: &str,
        payload: &T,
    ) -> Result<bool> {
        let conn = self.pool.get().await?;
        crate::workflow::emit_pooled(self.statements, &conn, queue, key, payload).await
    }

    /// Enqueues many tasks in one statement, committed at once.
    pub async fn enqueue_batch<T: Serialize>(
        &self,
        queue: &str,
        payloads: &[T],
        options: &EnqueueOptions,
    ) -> Result<Vec<i64>> {
        let conn = self.pool.get().await?;
        enqueue::enqueue_batch_pooled(self.statements, &conn, queue, payloads, options).await
    }
}
