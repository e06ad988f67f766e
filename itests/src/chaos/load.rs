//! Producers in the test process, and the names a chaos run uses.
//!
//! A producer enqueues one task at a time and in batches (through the
//! COPY-style writer of `queue_enqueue_batch`) and writes the new ids into
//! the application's `produced` table in the same statement: that table
//! holds exactly the tasks that committed, whatever the client saw. The
//! ids whose commit returned OK are the *acknowledged* ones.
//!
//! Producers keep the backlog between bounds so that the workers, not the
//! producers, set the completion rate the recovery times are measured on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls, Row, Transaction};
use serde_json::{json, Value};

use super::is_connection_fault;
use super::worker::ChildConfig;
use crate::{describe, unique_queue, Cluster, ADMIN, SERVICE};

/// The tables and queues of one run.
#[derive(Debug, Clone)]
pub struct Names {
    pub main_queue: String,
    pub follow_queue: String,
    /// One row per committed completion (`chaos/worker.rs`).
    pub ledger: String,
    /// One row per committed enqueue of the main queue.
    pub produced: String,
}

impl Names {
    pub fn new(tag: &str) -> Names {
        let main_queue = unique_queue(&format!("chaos_{tag}"));
        Names {
            follow_queue: format!("{main_queue}_follow"),
            ledger: format!("{main_queue}_done"),
            produced: format!("{main_queue}_produced"),
            main_queue,
        }
    }

    /// The worker processes' configuration (`name` gets the slot appended).
    pub fn child_config(&self, cluster: &Cluster) -> ChildConfig {
        ChildConfig {
            dsn: format!(
                "{} application_name=aedb_chaos_worker",
                cluster.dsn(SERVICE)
            ),
            main_queue: self.main_queue.clone(),
            follow_queue: self.follow_queue.clone(),
            ledger: self.ledger.clone(),
            name: "w".into(),
        }
    }

    /// Creates the ledger tables and the queues: attempts enough that no
    /// task of a run is dead-lettered by repeated kills (an expired lease
    /// counts an attempt).
    pub fn create(&self, cluster: &Cluster) {
        let mut su = cluster.connect();
        su.batch_execute(&format!(
            "CREATE TABLE {l} (queue text NOT NULL, task_id bigint NOT NULL, parent bigint,
                               how text NOT NULL, worker text NOT NULL, attempt int NOT NULL,
                               done_at timestamptz NOT NULL DEFAULT clock_timestamp());
             CREATE INDEX ON {l} (done_at);
             CREATE TABLE {p} (task_id bigint NOT NULL);",
            l = self.ledger,
            p = self.produced
        ))
        .unwrap();
        let mut admin = cluster.connect_as(ADMIN);
        for q in [&self.main_queue, &self.follow_queue] {
            admin
                .execute(
                    "SELECT 1 FROM aedb_queue.queue_configure($1::text, max_attempts => 1000)",
                    &[q],
                )
                .unwrap();
        }
    }
}

/// The state producers share with the test.
pub struct Producers {
    dsn: String,
    names: Names,
    stop: AtomicBool,
    /// Producers' batches between their statement and their commit's
    /// answer: a fault injected while this is above 0 hits a batch in flight.
    pub batches_in_flight: AtomicU64,
    pub acked: Mutex<Vec<i64>>,
    /// Commits whose answer was lost (a fault): they may or may not have
    /// committed; `produced` says which.
    pub unknown_outcomes: AtomicU64,
    /// Batch enqueues a fault cut off (the connection went while one was
    /// in flight).
    pub interrupted_batches: AtomicU64,
    pub errors: Mutex<Vec<String>>,
    high_water: i64,
}

/// How many tasks a producer's batch holds.
pub const PRODUCER_BATCH: usize = 400;
/// How long a producer's batch transaction stays open after the batch
/// (the application's own work in it): long enough that a fault injected
/// while a batch is in flight lands before its commit.
pub const HOLD_BATCH: Duration = Duration::from_millis(300);

impl Producers {
    pub fn new(cluster: &Cluster, names: &Names, backlog: i64) -> Producers {
        Producers {
            dsn: format!(
                "{} application_name=aedb_chaos_producer",
                cluster.dsn(crate::PRODUCER)
            ),
            names: names.clone(),
            stop: AtomicBool::new(false),
            batches_in_flight: AtomicU64::new(0),
            acked: Mutex::default(),
            unknown_outcomes: AtomicU64::new(0),
            interrupted_batches: AtomicU64::new(0),
            errors: Mutex::default(),
            high_water: backlog,
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn acked(&self) -> Vec<i64> {
        self.acked.lock().unwrap().clone()
    }

    /// Enqueues `n` tasks before the workers start.
    pub fn prefill(&self, n: usize) {
        let mut c = self.connect(Instant::now() + Duration::from_secs(30));
        let mut left = n;
        while left > 0 {
            let k = left.min(PRODUCER_BATCH);
            let ids = self
                .enqueue_batch(&mut c, k, Duration::ZERO)
                .expect("prefill");
            self.acked.lock().unwrap().extend(ids);
            left -= k;
        }
    }

    /// A producer's loop until [`Producers::stop`] or `bound`.
    pub fn run(&self, seed: u64, bound: Instant) {
        let mut c = self.connect(bound);
        let mut round = seed;
        while !self.stop.load(Ordering::SeqCst) && Instant::now() < bound {
            match self.one_round(&mut c, round) {
                Ok(()) => round += 1,
                Err(e) if is_connection_fault(&e) || c.is_closed() => {
                    c = self.connect(bound);
                }
                Err(e) => {
                    self.errors.lock().unwrap().push(describe(&e));
                    thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    fn one_round(&self, c: &mut Client, round: u64) -> Result<(), postgres::Error> {
        let backlog = self.backlog(c)?;
        if backlog >= self.high_water {
            thread::sleep(Duration::from_millis(10));
            return Ok(());
        }
        let ids = if round.is_multiple_of(4) {
            self.enqueue_one(c)?
        } else {
            self.batches_in_flight.fetch_add(1, Ordering::SeqCst);
            let r = self.enqueue_batch(c, PRODUCER_BATCH, HOLD_BATCH);
            self.batches_in_flight.fetch_sub(1, Ordering::SeqCst);
            if matches!(&r, Err(e) if is_connection_fault(e) || c.is_closed()) {
                self.interrupted_batches.fetch_add(1, Ordering::SeqCst);
            }
            r?
        };
        self.acked.lock().unwrap().extend(ids);
        Ok(())
    }

    /// Tasks enqueued and not yet completed, from the application's tables.
    fn backlog(&self, c: &mut Client) -> Result<i64, postgres::Error> {
        let acked = self.acked.lock().unwrap().len() as i64;
        let done: i64 = c
            .query_one(
                &format!(
                    "SELECT count(*) FROM {} WHERE queue = $1",
                    self.names.ledger
                ),
                &[&self.names.main_queue],
            )?
            .get(0);
        Ok(acked - done)
    }

    /// A batch of `n`, its transaction held open `hold` after the statement.
    fn enqueue_batch(
        &self,
        c: &mut Client,
        n: usize,
        hold: Duration,
    ) -> Result<Vec<i64>, postgres::Error> {
        let payloads: Vec<Value> = (0..n)
            .map(|i| json!({ "i": i, "pad": "x".repeat(40) }))
            .collect();
        let sql = format!(
            "INSERT INTO {} (task_id) SELECT id FROM \
             aedb_queue.queue_enqueue_batch($1::text, $2::jsonb[]) AS id RETURNING task_id",
            self.names.produced
        );
        let mut tx = c.transaction()?;
        let rows = tx.query(&sql, &[&self.names.main_queue, &payloads])?;
        thread::sleep(hold);
        self.commit_ids(tx, &rows)
    }

    fn enqueue_one(&self, c: &mut Client) -> Result<Vec<i64>, postgres::Error> {
        let sql = format!(
            "INSERT INTO {} (task_id) \
             SELECT (aedb_queue.queue_enqueue($1::text, $2::jsonb)).task_id RETURNING task_id",
            self.names.produced
        );
        let mut tx = c.transaction()?;
        let rows = tx.query(&sql, &[&self.names.main_queue, &json!({ "one": true })])?;
        self.commit_ids(tx, &rows)
    }

    /// The ids `rows` hold once `tx` committed (its answer came back OK).
    fn commit_ids(&self, tx: Transaction<'_>, rows: &[Row]) -> Result<Vec<i64>, postgres::Error> {
        let ids = rows.iter().map(|r| r.get(0)).collect();
        if let Err(e) = tx.commit() {
            self.unknown_outcomes.fetch_add(1, Ordering::SeqCst);
            return Err(e);
        }
        Ok(ids)
    }

    fn connect(&self, bound: Instant) -> Client {
        connect_retrying(&self.dsn, bound)
    }
}

/// A session of `dsn`, retried until `bound` (the server may be restarting).
pub fn connect_retrying(dsn: &str, bound: Instant) -> Client {
    loop {
        match Client::connect(dsn, NoTls) {
            Ok(c) => return c,
            Err(e) if Instant::now() < bound => {
                let _ = e;
                thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("cannot connect ({dsn}) before the bound: {e}"),
        }
    }
}
