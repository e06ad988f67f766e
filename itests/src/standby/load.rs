//! Load for failover tests: producers that enqueue through a failover
//! connection string and record every acknowledged enqueue, the record of
//! acknowledged completions workers add to, the ledger table workers write
//! in their completing transactions, and the figures drawn from them
//! (rates, recovery time).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use postgres::NoTls;

use crate::{describe, json, try_enqueue_with, Client, EnqueueOpts};

/// One acknowledgement: the call returned (for a completion, its commit did).
#[derive(Debug, Clone)]
pub struct Ack {
    pub key: String,
    pub task_id: i64,
    /// The fencing token completed under (0 for an enqueue).
    pub token: i64,
    /// Seconds since the run started, on the test's clock.
    pub at: f64,
}

/// Everything the server acknowledged during a run, in order.
pub struct Acks {
    start: Instant,
    enqueued: Mutex<Vec<Ack>>,
    completed: Mutex<Vec<Ack>>,
    /// Enqueues whose answer the connection took with it (retried with the
    /// same idempotency key on the next connection).
    pub unsure_enqueues: AtomicU64,
    /// Completions whose commit's answer the connection took with it.
    pub unsure_completions: AtomicU64,
    /// Strict completions refused with 40002.
    pub lease_lost: AtomicU64,
}

impl Default for Acks {
    fn default() -> Self {
        Acks {
            start: Instant::now(),
            enqueued: Mutex::default(),
            completed: Mutex::default(),
            unsure_enqueues: AtomicU64::new(0),
            unsure_completions: AtomicU64::new(0),
            lease_lost: AtomicU64::new(0),
        }
    }
}

impl Acks {
    /// Seconds since the run started.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn enqueued(&self, key: &str, task_id: i64) {
        let ack = self.ack(key, task_id, 0);
        self.enqueued.lock().unwrap().push(ack);
    }

    pub fn completed(&self, key: &str, task_id: i64, token: i64) {
        let ack = self.ack(key, task_id, token);
        self.completed.lock().unwrap().push(ack);
    }

    fn ack(&self, key: &str, task_id: i64, token: i64) -> Ack {
        Ack {
            key: key.to_string(),
            task_id,
            token,
            at: self.now(),
        }
    }

    pub fn enqueues(&self) -> Vec<Ack> {
        self.enqueued.lock().unwrap().clone()
    }

    pub fn completions(&self) -> Vec<Ack> {
        self.completed.lock().unwrap().clone()
    }

    /// The first completion acknowledged at or after `since`, in seconds
    /// from `since`.
    pub fn first_completion_after(&self, since: f64) -> Option<f64> {
        self.completed
            .lock()
            .unwrap()
            .iter()
            .map(|a| a.at - since)
            .filter(|d| *d >= 0.0)
            .reduce(f64::min)
    }

    /// Acknowledged completions per second in `[from, to)`.
    pub fn rate(&self, from: f64, to: f64) -> f64 {
        let n = self
            .completed
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.at >= from && a.at < to)
            .count();
        n as f64 / (to - from)
    }

    /// Acknowledged enqueues per second in `[from, to)`.
    pub fn enqueue_rate(&self, from: f64, to: f64) -> f64 {
        let n = self
            .enqueued
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.at >= from && a.at < to)
            .count();
        n as f64 / (to - from)
    }

    /// The completion rate workers can be back at after a fault, in
    /// completions per second: their rate in the 2 s before `fault_at`,
    /// unless the producers enqueue less than that since `promoted_at`
    /// (before the fault the workers may have been eating a backlog, after
    /// it they may be waiting for the producers).
    pub fn reachable_rate(&self, fault_at: f64, promoted_at: f64) -> f64 {
        let before = self.rate(fault_at - 2.0, fault_at);
        let demand = self.enqueue_rate(promoted_at, self.now());
        before.min(demand)
    }

    /// Seconds from `since` to the start of the first 1 s window (moved
    /// in 50 ms steps, starting at `since`) in which completions reached
    /// `share` of `rate` (completions per second); `None` if no window
    /// ending by `until` did.
    pub fn recovered_after(&self, since: f64, until: f64, rate: f64, share: f64) -> Option<f64> {
        let mut from = since;
        while from + 1.0 <= until {
            if self.rate(from, from + 1.0) >= share * rate {
                return Some(from - since);
            }
            from += 0.05;
        }
        None
    }
}

/// Whether `e` means the connection is gone (closed, reset, refused, or the
/// server shutting down or crashing): the call's outcome is unknown and a
/// new connection may be tried.
pub fn connection_lost(e: &postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(code) => {
            let code = code.code();
            code.starts_with("08") || code.starts_with("57P")
        }
    }
}

/// Connects with `dsn`, retrying every 20 ms for up to 60 s (a failover
/// connection string fails while no server accepts writes); `None` once
/// `stop` is set.
pub fn connect_retrying(dsn: &str, stop: &AtomicBool) -> Option<Client> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        match Client::connect(dsn, NoTls) {
            Ok(c) => return Some(c),
            Err(e) => assert!(
                Instant::now() < deadline,
                "no server accepted writes for 60 s: {}",
                describe(&e)
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A producer until `stop`: enqueues `{"key": "p<n>-<i>"}` into `queue`
/// with the key as idempotency key, one call a `pace`, and records each
/// acknowledgement. A call whose connection fails is retried with the same
/// key on a new connection: the key makes the retry create the task only if
/// the first call's did not commit.
pub fn produce(
    dsn: &str,
    queue: &str,
    producer: usize,
    pace: Duration,
    acks: &Acks,
    stop: &AtomicBool,
) {
    let mut conn: Option<Client> = None;
    let mut i = 0u64;
    let mut retrying = false;
    while !stop.load(Ordering::SeqCst) {
        let Some(c) = conn.as_mut() else {
            conn = connect_retrying(dsn, stop);
            continue;
        };
        let key = format!("p{producer}-{i}");
        let opts = EnqueueOpts::default().key(&key);
        match try_enqueue_with(c, queue, Some(&json!({ "key": key })), &opts) {
            Ok(e) => {
                acks.enqueued(&key, e.task_id);
                i += 1;
                retrying = false;
                std::thread::sleep(pace);
            }
            Err(e) if connection_lost(&e) => {
                if !retrying {
                    acks.unsure_enqueues.fetch_add(1, Ordering::Relaxed);
                    retrying = true;
                }
                conn = None;
            }
            Err(e) => panic!("producer {producer}: {}", describe(&e)),
        }
    }
}

/// Creates the ledger workers write in their completing transactions: one
/// row per completion that committed (no unique constraint, so a task
/// completed twice shows as two rows).
pub fn create_ledger(su: &mut Client, ledger: &str) {
    su.batch_execute(&format!(
        "CREATE TABLE {ledger} (key text NOT NULL, task_id bigint NOT NULL, token bigint NOT NULL,
                                worker text NOT NULL, attempts int NOT NULL,
                                at timestamptz NOT NULL DEFAULT clock_timestamp());
         GRANT SELECT, INSERT ON {ledger} TO PUBLIC;"
    ))
    .expect("create the ledger");
}

/// One row of the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub task_id: i64,
    pub token: i64,
    pub worker: String,
    pub attempts: i32,
    pub at: std::time::SystemTime,
}

/// The ledger's rows by key.
pub fn ledger_by_key(c: &mut Client, ledger: &str) -> HashMap<String, Vec<Completion>> {
    let mut by_key: HashMap<String, Vec<Completion>> = HashMap::new();
    let rows = c
        .query(
            &format!("SELECT key, task_id, token, worker, attempts, at FROM {ledger}"),
            &[],
        )
        .expect("read the ledger");
    for r in rows {
        by_key.entry(r.get(0)).or_default().push(Completion {
            task_id: r.get(1),
            token: r.get(2),
            worker: r.get(3),
            attempts: r.get(4),
            at: r.get(5),
        });
    }
    by_key
}

/// Waits (up to `bound`) until `queue` holds no task, read as the superuser
/// on `c`; false if it still did.
pub fn wait_empty(c: &mut Client, queue: &str, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        let left: i64 = c
            .query_one(
                "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
                &[&queue],
            )
            .unwrap()
            .get(0);
        if left == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}
