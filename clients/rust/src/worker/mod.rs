//! The worker runtime: per queue, a fetcher claims tasks in batches into
//! free handler slots; each slot runs its handler with heartbeats, settles
//! it, and when the queue is busy claims its next task in the same call
//! (`queue_complete_and_claim`: one commit per job). LISTEN wake-ups on a
//! connection of their own, a slow poll behind them. Shutdown stops the
//! claiming, lets handlers finish up to a deadline, then hands the rest
//! back (`queue_release`) without spending their attempts.

mod backoff;
mod fetch;
mod listen;
mod slot;
mod startup;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::Pool;
use tokio::sync::{watch, Notify, Semaphore};

use crate::client::pool;
use crate::connect::Settings;
use crate::error::{Error, Result};
use crate::handler::Handler;
use crate::statement::Statements;

/// How one queue is worked.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    name: String,
    concurrency: usize,
    batch: usize,
    lease: Duration,
    heartbeat: Option<Duration>,
    poll_interval: Duration,
}

impl QueueOptions {
    /// 8 handlers, claims of up to 8, a 30 s lease with a heartbeat every
    /// 10 s, a poll every 5 s when no NOTIFY came.
    pub fn new(queue: impl Into<String>) -> QueueOptions {
        QueueOptions {
            name: queue.into(),
            concurrency: 8,
            batch: 8,
            lease: Duration::from_secs(30),
            heartbeat: None,
            poll_interval: Duration::from_secs(5),
        }
    }
    /// Handlers running at once in this process (and claims of up to as many).
    pub fn concurrency(mut self, handlers: usize) -> Self {
        self.concurrency = handlers;
        self.batch = handlers;
        self
    }
    /// Tasks claimed per claim call, at most `concurrency`.
    pub fn batch(mut self, tasks: usize) -> Self {
        self.batch = tasks;
        self
    }
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }
    /// How often a running handler's lease is extended (a third of the
    /// lease unless set).
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = Some(every);
        self
    }
    /// How long an idle queue waits for a NOTIFY before it claims anyway.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    fn checked(self) -> Result<QueueOptions> {
        if self.name.is_empty() {
            return Err(Error::invalid("queue", "must not be empty"));
        }
        if self.concurrency == 0 {
            return Err(Error::invalid("concurrency", "must be at least 1"));
        }
        if self.batch == 0 || self.batch > self.concurrency {
            return Err(Error::invalid("batch", "must be 1 to concurrency"));
        }
        if self.lease < Duration::from_millis(1) {
            return Err(Error::invalid("lease", "must be at least 1 ms"));
        }
        let heartbeat = self.heartbeat_every();
        if heartbeat.is_zero() || heartbeat >= self.lease {
            return Err(Error::invalid(
                "heartbeat",
                "must be shorter than the lease",
            ));
        }
        if self.poll_interval.is_zero() {
            return Err(Error::invalid("poll_interval", "must be positive"));
        }
        Ok(self)
    }

    fn heartbeat_every(&self) -> Duration {
        self.heartbeat.unwrap_or(self.lease / 3)
    }
}

/// What a run did, counted when it ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    pub completed: u64,
    pub failed: u64,
    /// Handed back unfinished at shutdown, attempts not spent.
    pub released: u64,
    /// Settlements refused by the fence: another worker had the task.
    pub lease_lost: u64,
    /// Workflow tasks handed back by a sleep or an event wait (settled by
    /// nothing, attempts not spent; each wakes and runs again).
    pub parked: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    completed: AtomicU64,
    failed: AtomicU64,
    released: AtomicU64,
    lease_lost: AtomicU64,
    parked: AtomicU64,
}

impl Counters {
    fn report(&self) -> Report {
        Report {
            completed: self.completed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            released: self.released.load(Ordering::Relaxed),
            lease_lost: self.lease_lost.load(Ordering::Relaxed),
            parked: self.parked.load(Ordering::Relaxed),
        }
    }
}

/// Where a run is: claiming, finishing what it holds, or handing it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    Running,
    Draining,
    HandBack,
}

pub(crate) struct Shared {
    pub pool: Pool,
    pub statements: Statements,
    pub owner: String,
    pub phase: watch::Receiver<Phase>,
    pub counters: Counters,
}

impl Shared {
    pub fn running(&self) -> bool {
        *self.phase.borrow() == Phase::Running
    }
}

/// One queue's part of a run.
pub(crate) struct QueueRuntime {
    pub options: QueueOptions,
    pub handler: Arc<dyn Handler>,
    pub slots: Arc<Semaphore>,
    pub wake: Notify,
    pub shared: Arc<Shared>,
}

/// Builds a [`Worker`].
pub struct WorkerBuilder {
    settings: Settings,
    pool: Option<Pool>,
    queues: Vec<(QueueOptions, Arc<dyn Handler>)>,
    shutdown_timeout: Duration,
    listen: bool,
    listen_conninfo: Option<String>,
    statements: Statements,
    owner: Option<String>,
}

impl WorkerBuilder {
    /// Works `options`'s queue with `handler`.
    pub fn queue(mut self, options: QueueOptions, handler: Arc<dyn Handler>) -> Self {
        self.queues.push((options, handler));
        self
    }
    /// How long shutdown lets running handlers finish before it hands
    /// their tasks back (30 s unless set).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }
    /// LISTEN for wake-ups (on unless turned off; the queue needs
    /// `queue_configure(queue, notify => true)` to send them).
    pub fn listen(mut self, on: bool) -> Self {
        self.listen = on;
        self
    }
    /// LISTEN on a connection made from `conninfo` instead of the worker's
    /// own: behind a pooler in transaction mode, the wake-ups need a
    /// session of their own, straight to PostgreSQL (or through a pool in
    /// session mode), while claims and settlements go through the pooler.
    pub fn listen_conninfo(mut self, conninfo: impl Into<String>) -> Self {
        self.listen_conninfo = Some(conninfo.into());
        self
    }
    /// Behind a pooler in transaction mode (PgBouncer's `pool_mode =
    /// transaction` before 1.21, or without `max_prepared_statements`):
    /// every statement is sent unnamed with its parameter types, in one
    /// round trip, so none is missing when the next transaction runs on
    /// another server connection. LISTEN then needs
    /// [`listen_conninfo`](Self::listen_conninfo) (or `listen(false)`).
    /// Off by default: statements are prepared once per connection.
    pub fn transaction_pooler(mut self, on: bool) -> Self {
        self.statements = Statements::behind_transaction_pooler(on);
        self
    }
    /// The owner id claims record (unique per process unless set).
    pub fn owner_id(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
    /// Use this pool for claims and settlements instead of making one.
    pub fn pool(mut self, pool: Pool) -> Self {
        self.pool = Some(pool);
        self
    }

    pub fn build(self) -> Result<Worker> {
        let queues = self
            .queues
            .into_iter()
            .map(|(options, handler)| Ok((options.checked()?, handler)))
            .collect::<Result<Vec<_>>>()?;
        if queues.is_empty() {
            return Err(Error::invalid("queue", "add at least one queue"));
        }
        let mut names = std::collections::HashSet::new();
        if let Some((dup, _)) = queues.iter().find(|(o, _)| !names.insert(o.name.clone())) {
            return Err(Error::invalid(
                "queue",
                format!("{} is added twice", dup.name),
            ));
        }
        let listen_config = match (&self.listen_conninfo, self.statements) {
            (Some(conninfo), _) => Settings::parse(conninfo)?,
            (None, Statements::Unnamed) if self.listen => {
                return Err(Error::invalid(
                    "listen_conninfo",
                    "behind a transaction pooler LISTEN needs a direct connection: \
                     set listen_conninfo, or listen(false)",
                ))
            }
            (None, _) => self.settings.clone(),
        };
        // Each slot's settle and its handler's transaction or checkpoint.
        let size = queues.iter().map(|(o, _)| 2 * o.concurrency).sum::<usize>() + 2;
        let pool = match self.pool {
            Some(pool) => pool,
            None => pool(&self.settings, size)?,
        };
        Ok(Worker {
            database: startup::describe(&self.settings.config()),
            listen_config,
            statements: self.statements,
            pool,
            queues,
            shutdown_timeout: self.shutdown_timeout,
            listen: self.listen,
            owner: self.owner.unwrap_or_else(default_owner),
        })
    }
}

/// A worker process's runtime over one or more queues.
pub struct Worker {
    /// Where the pool connects, for log lines (no password).
    database: String,
    /// Where LISTEN connects.
    listen_config: Settings,
    statements: Statements,
    pool: Pool,
    queues: Vec<(QueueOptions, Arc<dyn Handler>)>,
    shutdown_timeout: Duration,
    listen: bool,
    owner: String,
}

/// After the deadline, handing back is bounded too: a handler that ignores
/// cancellation cannot hold the process.
const HAND_BACK_BOUND: Duration = Duration::from_secs(10);

impl Worker {
    /// A worker connecting with `conninfo` (`host=... user=... dbname=...
    /// sslmode=...` or a `postgresql://` URL; see [`Settings::parse`]), for
    /// every connection: its pool and its LISTEN session.
    pub fn builder(conninfo: &str) -> Result<WorkerBuilder> {
        Ok(WorkerBuilder {
            settings: Settings::parse(conninfo)?,
            pool: None,
            queues: Vec::new(),
            shutdown_timeout: Duration::from_secs(30),
            listen: true,
            listen_conninfo: None,
            statements: Statements::Prepared,
            owner: None,
        })
    }

    /// Runs until `shutdown` resolves (e.g. [`shutdown_signal`]), then
    /// stops claiming, lets handlers finish up to the shutdown timeout and
    /// hands back the tasks still running.
    ///
    /// Fails at once with [`Error::Startup`] when the first connection
    /// cannot be made or finds no aedb_queue extension (a wrong DSN is not
    /// waited out); connections lost after that are retried with backoff.
    pub async fn run<F: Future<Output = ()>>(self, shutdown: F) -> Result<Report> {
        let version = startup::check(&self.pool, &self.database).await?;
        let queues: Vec<String> = self
            .queues
            .iter()
            .map(|(o, _)| format!("{} (concurrency {})", o.name, o.concurrency))
            .collect();
        tracing::info!(
            owner = %self.owner,
            queues = %queues.join(", "),
            database = %self.database,
            extension = %version,
            "aedb_queue worker started"
        );
        let (phase_tx, phase_rx) = watch::channel(Phase::Running);
        let shared = Arc::new(Shared {
            pool: self.pool,
            statements: self.statements,
            owner: self.owner,
            phase: phase_rx,
            counters: Counters::default(),
        });
        let runtimes: Vec<Arc<QueueRuntime>> = self
            .queues
            .into_iter()
            .map(|(options, handler)| {
                Arc::new(QueueRuntime {
                    slots: Arc::new(Semaphore::new(options.concurrency)),
                    options,
                    handler,
                    wake: Notify::new(),
                    shared: shared.clone(),
                })
            })
            .collect();
        let listener = self.listen.then(|| {
            let wakes: HashMap<String, Arc<QueueRuntime>> = runtimes
                .iter()
                .map(|q| (q.options.name.clone(), q.clone()))
                .collect();
            tokio::spawn(listen::run(
                self.listen_config.clone(),
                wakes,
                shared.phase.clone(),
            ))
        });
        let fetchers: Vec<_> = runtimes
            .iter()
            .map(|q| tokio::spawn(fetch::run(q.clone())))
            .collect();

        shutdown.await;
        tracing::info!("shutting down: no more claims, waiting for running handlers");
        let _ = phase_tx.send(Phase::Draining);
        if tokio::time::timeout(self.shutdown_timeout, all_idle(&runtimes))
            .await
            .is_err()
        {
            tracing::warn!("shutdown timeout: handing back the tasks still running");
            let _ = phase_tx.send(Phase::HandBack);
            if tokio::time::timeout(HAND_BACK_BOUND, all_idle(&runtimes))
                .await
                .is_err()
            {
                tracing::error!("handlers still running after the hand-back bound; leaving their leases to expire");
            }
        }
        if let Some(listener) = listener {
            listener.abort();
        }
        for fetcher in fetchers {
            let _ = fetcher.await;
        }
        Ok(shared.counters.report())
    }
}

/// Every slot of every queue free again.
async fn all_idle(runtimes: &[Arc<QueueRuntime>]) {
    for q in runtimes {
        let all = q.options.concurrency as u32;
        let _ = q.slots.acquire_many(all).await;
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

fn default_owner() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("rust-{}-{nanos:08x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_options_are_checked_by_name() {
        let bad = |o: QueueOptions| o.checked().unwrap_err().to_string();
        assert_eq!(
            bad(QueueOptions::new("q").concurrency(0)),
            "invalid argument \"concurrency\": must be at least 1"
        );
        assert_eq!(
            bad(QueueOptions::new("q").concurrency(4).batch(5)),
            "invalid argument \"batch\": must be 1 to concurrency"
        );
        assert_eq!(
            bad(QueueOptions::new("q")
                .lease(Duration::from_secs(3))
                .heartbeat(Duration::from_secs(3))),
            "invalid argument \"heartbeat\": must be shorter than the lease"
        );
        assert_eq!(
            bad(QueueOptions::new("")),
            "invalid argument \"queue\": must not be empty"
        );
        let ok = QueueOptions::new("q")
            .lease(Duration::from_secs(9))
            .checked()
            .unwrap();
        assert_eq!(ok.heartbeat_every(), Duration::from_secs(3));
    }
}
