//! The soak's load: one producer at a fixed rate, workers whose handlers
//! complete, fail and retry, fail until dead, or drop a task without
//! settling it, the reaper (`queue_reap()` every second, as the in-server
//! reaper runs it) and an operator purging dead letters every minute. Each
//! connects as its own login role, not as the superuser.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::db::{now_micros, Cluster, Conn, Result};

pub const PRODUCER: &str = "soak_producer";
pub const WORKER: &str = "soak_worker";
pub const ADMIN: &str = "soak_admin";
const LEASE_SECONDS: u64 = 5;
const MAX_ATTEMPTS: i32 = 3;
const IDLE_POLL: Duration = Duration::from_millis(5);
const TICK: Duration = Duration::from_millis(10);
const REAP_EVERY: Duration = Duration::from_secs(1);
/// As the in-server reaper: another pass at once while one used its budget.
const REAP_BUDGET: i64 = 1000;
const REAP_PASSES: usize = 10;
const PURGE_DEAD_EVERY: Duration = Duration::from_secs(60);

pub async fn connect(cluster: &Cluster, role: &str) -> Result<Conn> {
    let as_role = Cluster {
        user: role.into(),
        ..cluster.clone()
    };
    as_role.connect(super::DB).await
}

pub async fn utc_now(cluster: &Cluster) -> Result<String> {
    let conn = cluster.connect("postgres").await?;
    let row = conn
        .client
        .query_one(
            "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') || ' UTC'",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// A fresh database with the extension, the soak's login roles (members of
/// the extension's roles; the workers may read their own memory contexts)
/// and the soak queue's settings.
pub async fn setup(cluster: &Cluster, keep_completed: u64) -> Result<()> {
    let conn = cluster.recreate(super::DB).await?;
    conn.batch("CREATE EXTENSION aedb_queue").await?;
    for role in [PRODUCER, WORKER, ADMIN] {
        conn.batch(&format!(
            "DO $$ BEGIN
               IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
                 CREATE ROLE {role} LOGIN;
               END IF;
             END $$"
        ))
        .await?;
    }
    conn.batch(&format!(
        "GRANT aedb_queue_producer TO {PRODUCER};
         GRANT aedb_queue_worker, pg_read_all_stats TO {WORKER};
         GRANT aedb_queue_admin TO {ADMIN};"
    ))
    .await?;
    let admin = connect(cluster, ADMIN).await?;
    admin
        .batch(&format!(
            "SELECT * FROM aedb_queue.queue_configure('{q}', max_attempts => {MAX_ATTEMPTS},
               backoff_base => '1 second', backoff_max => '4 seconds',
               default_lease => '{LEASE_SECONDS} seconds', keep_completed => '{keep_completed} seconds')",
            q = super::QUEUE
        ))
        .await?;
    Ok(())
}

pub async fn preload(conn: &mut Conn, queue: &str, tasks: usize) -> Result<()> {
    for _ in 0..tasks / 1000 {
        let now = now_micros();
        let batch: Vec<Value> = (0..1000).map(|_| payload(now, now, Kind::Plain)).collect();
        enqueue_batch(conn, queue, &batch).await?;
    }
    Ok(())
}

/// Drops what the calibration left, so that the soak starts from an empty,
/// vacuumed table.
pub async fn clear_calibration(cluster: &Cluster, queue: &str) -> Result<()> {
    let admin = connect(cluster, ADMIN).await?;
    admin
        .batch(&format!(
            "SELECT aedb_queue.queue_purge('{queue}', 'ready');
             SELECT aedb_queue.queue_purge('{queue}', 'in_flight', force => true);"
        ))
        .await?;
    let db = cluster.connect(super::DB).await?;
    db.batch("VACUUM ANALYZE").await?;
    Ok(())
}

/// What a task's handler does, fixed by its place in the producer's
/// sequence (out of every 100: 10 timers, 5 retried, 2 dead, 2 dropped).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Kind {
    /// Completes at the first attempt.
    Plain,
    /// Enqueued with a delay of 1 to 30 s, then completes.
    Timer,
    /// Fails its first attempt (retried after the backoff), then completes.
    Retried,
    /// Fails every attempt: dead after `MAX_ATTEMPTS`.
    Dead,
    /// Its first claim is abandoned unsettled (the lease expires and is
    /// reclaimed), then it completes.
    Dropped,
}

enum Action {
    Complete,
    Fail,
    Drop,
}

impl Kind {
    pub fn of_sequence(n: u64) -> Kind {
        match n % 100 {
            0..=9 => Kind::Timer,
            10..=14 => Kind::Retried,
            15..=16 => Kind::Dead,
            17..=18 => Kind::Dropped,
            _ => Kind::Plain,
        }
    }

    /// Spread over 1-30 s, deterministic.
    fn delay_seconds(n: u64) -> f64 {
        (1 + (n * 7919) % 30) as f64
    }

    fn code(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Timer => "timer",
            Kind::Retried => "retried",
            Kind::Dead => "dead",
            Kind::Dropped => "dropped",
        }
    }

    fn from_code(code: &str) -> Kind {
        match code {
            "timer" => Kind::Timer,
            "retried" => Kind::Retried,
            "dead" => Kind::Dead,
            "dropped" => Kind::Dropped,
            _ => Kind::Plain,
        }
    }

    fn action(self, attempts: i32) -> Action {
        match self {
            Kind::Plain | Kind::Timer => Action::Complete,
            Kind::Retried if attempts < 2 => Action::Fail,
            Kind::Dropped if attempts < 2 => Action::Drop,
            Kind::Retried | Kind::Dropped => Action::Complete,
            Kind::Dead => Action::Fail,
        }
    }
}

/// `t`: enqueued, `r`: when it becomes ready (both µs since the epoch).
fn payload(enqueued: i64, ready: i64, kind: Kind) -> Value {
    json!({"t": enqueued, "r": ready, "k": kind.code(), "pad": "x".repeat(64)})
}

/// Latencies from 1 µs to an hour, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// One sampling window's latencies, µs.
pub struct Latencies {
    /// Claim returned − ready, first attempts of tasks ready at once.
    pub pickup: Histogram<u64>,
    /// The same for timers (ready = their due time): includes promotion.
    pub timer_pickup: Histogram<u64>,
    /// Completion committed − ready, every completed task (retries'
    /// backoff and abandoned leases' expiry included).
    pub end_to_end: Histogram<u64>,
}

impl Latencies {
    pub fn new() -> Latencies {
        Latencies {
            pickup: histogram(),
            timer_pickup: histogram(),
            end_to_end: histogram(),
        }
    }

    pub fn add(&mut self, other: &Latencies) {
        self.pickup.add(&other.pickup).unwrap();
        self.timer_pickup.add(&other.timer_pickup).unwrap();
        self.end_to_end.add(&other.end_to_end).unwrap();
    }
}

#[derive(Default)]
pub struct Counts {
    pub enqueued: AtomicU64,
    pub claimed: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    pub dropped: AtomicU64,
    pub lease_lost: AtomicU64,
    pub errors: AtomicU64,
    pub reaped_promoted: AtomicU64,
    pub reaped_reclaimed: AtomicU64,
    pub reaped_dead: AtomicU64,
    pub purged_dead: AtomicU64,
}

/// What the soak's tasks share with each other and the sampler.
pub struct Shared {
    pub stop: AtomicBool,
    pub counts: Counts,
    pub latencies: Mutex<Latencies>,
    /// Bumped by the sampler: each worker then reads its own memory
    /// contexts' total (pg_backend_memory_contexts shows only one's own).
    pub epoch: AtomicU64,
    pub context_bytes: Vec<AtomicI64>,
}

impl Shared {
    pub fn new(workers: usize) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            counts: Counts::default(),
            latencies: Mutex::new(Latencies::new()),
            epoch: AtomicU64::new(0),
            context_bytes: (0..workers).map(|_| AtomicI64::new(0)).collect(),
        }
    }

    pub fn take_latencies(&self) -> Latencies {
        std::mem::replace(&mut *self.latencies.lock().unwrap(), Latencies::new())
    }
}

fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

async fn enqueue_batch(conn: &mut Conn, queue: &str, payloads: &[Value]) -> Result<()> {
    conn.query(
        "SELECT aedb_queue.queue_enqueue_batch($1, $2::jsonb[])",
        &[&queue, &payloads],
    )
    .await?;
    Ok(())
}

async fn enqueue_timer(conn: &mut Conn, queue: &str, payload: &Value, delay: f64) -> Result<()> {
    conn.query(
        "SELECT task_id FROM aedb_queue.queue_enqueue($1, $2, delay => make_interval(secs => $3))",
        &[&queue, payload, &delay],
    )
    .await?;
    Ok(())
}

/// Enqueues on schedule, `rate` tasks/s in 10 ms ticks, catching up after
/// a late tick: one batch of the tick's ready tasks, one call per timer.
async fn produce(
    mut conn: Conn,
    queue: &'static str,
    rate: u64,
    shared: Arc<Shared>,
) -> Result<()> {
    let start = Instant::now();
    let mut interval = tokio::time::interval(TICK);
    let mut sent = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        interval.tick().await;
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        let mut batch = Vec::new();
        for n in sent..due {
            let now = now_micros();
            let kind = Kind::of_sequence(n);
            if kind == Kind::Timer {
                let delay = Kind::delay_seconds(n);
                let p = payload(now, now + (delay * 1e6) as i64, kind);
                enqueue_timer(&mut conn, queue, &p, delay).await?;
            } else {
                batch.push(payload(now, now, kind));
            }
        }
        if !batch.is_empty() {
            enqueue_batch(&mut conn, queue, &batch).await?;
        }
        bump(&shared.counts.enqueued, due - sent);
        sent = due;
    }
    Ok(())
}

const CLAIM: &str =
    "SELECT task_id, payload, attempts, fencing_token FROM aedb_queue.queue_claim($1, $2)";
const COMPLETE: &str = "SELECT aedb_queue.queue_complete($1, $2, $3)::text";
const FAIL: &str = "SELECT aedb_queue.queue_fail($1, $2, $3, $4)::text";

/// One claim and its handler; false when there was nothing to claim.
async fn work_one(conn: &mut Conn, queue: &str, owner: &str, shared: &Shared) -> Result<bool> {
    let rows = conn.query(CLAIM, &[&queue, &owner]).await?;
    let Some(row) = rows.first() else {
        return Ok(false);
    };
    let claimed = now_micros();
    let (task_id, payload): (i64, Option<Value>) = (row.get(0), row.get(1));
    let (attempts, token): (i32, i64) = (row.get(2), row.get(3));
    let payload = payload.unwrap_or(Value::Null);
    let kind = Kind::from_code(payload["k"].as_str().unwrap_or(""));
    let ready = payload["r"].as_i64().unwrap_or(claimed);
    bump(&shared.counts.claimed, 1);
    if attempts == 1 {
        let waited = (claimed - ready).max(0) as u64;
        let mut l = shared.latencies.lock().unwrap();
        match kind {
            Kind::Timer => l.timer_pickup.saturating_record(waited),
            _ => l.pickup.saturating_record(waited),
        }
    }
    let outcome: String = match kind.action(attempts) {
        Action::Drop => {
            bump(&shared.counts.dropped, 1);
            return Ok(true);
        }
        Action::Fail => {
            let row = conn
                .query(FAIL, &[&queue, &task_id, &token, &"soak: handler failed"])
                .await?;
            bump(&shared.counts.failed, 1);
            row[0].get(0)
        }
        Action::Complete => {
            let row = conn.query(COMPLETE, &[&queue, &task_id, &token]).await?;
            let outcome: String = row[0].get(0);
            if outcome == "applied" {
                bump(&shared.counts.completed, 1);
                let done = (now_micros() - ready).max(0) as u64;
                shared
                    .latencies
                    .lock()
                    .unwrap()
                    .end_to_end
                    .saturating_record(done);
            }
            outcome
        }
    };
    if outcome != "applied" {
        bump(&shared.counts.lease_lost, 1);
    }
    Ok(true)
}

/// The worker's own memory contexts, for the sampler.
async fn report_contexts(conn: &Conn, shared: &Shared, index: usize) -> Result<()> {
    let row = conn
        .client
        .query_one(
            "SELECT sum(total_bytes)::bigint FROM pg_backend_memory_contexts",
            &[],
        )
        .await?;
    let bytes: Option<i64> = row.get(0);
    shared.context_bytes[index].store(bytes.unwrap_or(0), Ordering::Relaxed);
    Ok(())
}

async fn work(
    mut conn: Conn,
    queue: &'static str,
    index: usize,
    shared: Arc<Shared>,
) -> Result<()> {
    let owner = format!("soak-worker-{index}");
    let mut epoch = u64::MAX;
    while !shared.stop.load(Ordering::Relaxed) {
        let now = shared.epoch.load(Ordering::Relaxed);
        if now != epoch {
            epoch = now;
            report_contexts(&conn, &shared, index).await?;
        }
        match work_one(&mut conn, queue, &owner, &shared).await {
            Ok(true) => {}
            Ok(false) => tokio::time::sleep(IDLE_POLL).await,
            Err(e) if conn.client.is_closed() => return Err(e),
            Err(e) => {
                if shared.counts.errors.fetch_add(1, Ordering::Relaxed) < 5 {
                    eprintln!("soak: worker {index}: {e}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    Ok(())
}

pub async fn backend_pid(conn: &Conn) -> Result<i32> {
    Ok(conn
        .client
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .get(0))
}

/// Workers connected and running; their backends' pids in `pids` order.
pub async fn start_workers(
    cluster: &Cluster,
    queue: &'static str,
    shared: &Arc<Shared>,
) -> Result<Vec<JoinHandle<Result<()>>>> {
    Ok(start_workers_with_pids(cluster, queue, shared).await?.0)
}

async fn start_workers_with_pids(
    cluster: &Cluster,
    queue: &'static str,
    shared: &Arc<Shared>,
) -> Result<(Vec<JoinHandle<Result<()>>>, Vec<i32>)> {
    let mut handles = Vec::new();
    let mut pids = Vec::new();
    for index in 0..shared.context_bytes.len() {
        let conn = connect(cluster, WORKER).await?;
        pids.push(backend_pid(&conn).await?);
        handles.push(tokio::spawn(work(conn, queue, index, shared.clone())));
    }
    Ok((handles, pids))
}

/// `queue_reap()` every second, as the in-server reaper runs it (the bench
/// cluster preloads the library with its reaper off).
async fn reap(conn: Conn, shared: Arc<Shared>) -> Result<()> {
    let mut interval = tokio::time::interval(REAP_EVERY);
    while !shared.stop.load(Ordering::Relaxed) {
        interval.tick().await;
        for _ in 0..REAP_PASSES {
            let row = conn
                .client
                .query_one(
                    "SELECT promoted, reclaimed, dead_lettered FROM aedb_queue.queue_reap()",
                    &[],
                )
                .await?;
            let (promoted, reclaimed, dead): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
            bump(&shared.counts.reaped_promoted, promoted as u64);
            bump(&shared.counts.reaped_reclaimed, reclaimed as u64);
            bump(&shared.counts.reaped_dead, dead as u64);
            if promoted < REAP_BUDGET && reclaimed + dead < REAP_BUDGET {
                break;
            }
        }
    }
    Ok(())
}

/// The operator's dead-letter policy: what died is looked at, then purged.
async fn purge_dead(conn: Conn, queue: &'static str, shared: Arc<Shared>) -> Result<()> {
    let mut interval = tokio::time::interval(PURGE_DEAD_EVERY);
    interval.tick().await;
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::select! {
            _ = interval.tick() => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
        }
        let row = conn
            .client
            .query_one("SELECT aedb_queue.queue_purge($1, 'dead')", &[&queue])
            .await?;
        bump(&shared.counts.purged_dead, row.get::<_, i64>(0) as u64);
    }
    Ok(())
}

/// Totals at the end of the run.
#[derive(Default, Clone)]
pub struct Totals {
    pub enqueued: u64,
    pub claimed: u64,
    pub completed: u64,
    pub failed: u64,
    pub dropped: u64,
    pub lease_lost: u64,
    pub errors: u64,
    pub reaped_promoted: u64,
    pub reaped_reclaimed: u64,
    pub reaped_dead: u64,
    pub purged_dead: u64,
    /// From `queue_counters()` (None without the preloaded library).
    pub counters: Option<(i64, i64, i64, i64)>,
    /// Tasks of the queue still live at the end, and kept completed.
    pub live_at_end: i64,
    pub kept_at_end: i64,
}

pub struct Soak {
    pub shared: Arc<Shared>,
    pub pids: Vec<i32>,
    tasks: Vec<(&'static str, JoinHandle<Result<()>>)>,
}

impl Soak {
    pub async fn start(
        cluster: &Cluster,
        queue: &'static str,
        rate: u64,
        workers: usize,
    ) -> Result<Soak> {
        let shared = Arc::new(Shared::new(workers));
        let (handles, pids) = start_workers_with_pids(cluster, queue, &shared).await?;
        let mut tasks: Vec<_> = handles.into_iter().map(|h| ("worker", h)).collect();
        let producer = connect(cluster, PRODUCER).await?;
        tasks.push((
            "producer",
            tokio::spawn(produce(producer, queue, rate, shared.clone())),
        ));
        let reaper = connect(cluster, ADMIN).await?;
        tasks.push(("reaper", tokio::spawn(reap(reaper, shared.clone()))));
        let operator = connect(cluster, ADMIN).await?;
        tasks.push((
            "dead-letter purge",
            tokio::spawn(purge_dead(operator, queue, shared.clone())),
        ));
        Ok(Soak {
            shared,
            pids,
            tasks,
        })
    }

    /// An error if one of the soak's tasks stopped early.
    pub fn check(&self) -> Result<()> {
        match self.tasks.iter().find(|(_, h)| h.is_finished()) {
            Some((name, _)) => Err(format!("soak: the {name} stopped early").into()),
            None => Ok(()),
        }
    }

    pub async fn stop(self) -> Result<Totals> {
        self.shared.stop.store(true, Ordering::Relaxed);
        for (name, handle) in self.tasks {
            handle.await?.map_err(|e| format!("soak: {name}: {e}"))?;
        }
        let c = &self.shared.counts;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Ok(Totals {
            enqueued: get(&c.enqueued),
            claimed: get(&c.claimed),
            completed: get(&c.completed),
            failed: get(&c.failed),
            dropped: get(&c.dropped),
            lease_lost: get(&c.lease_lost),
            errors: get(&c.errors),
            reaped_promoted: get(&c.reaped_promoted),
            reaped_reclaimed: get(&c.reaped_reclaimed),
            reaped_dead: get(&c.reaped_dead),
            purged_dead: get(&c.purged_dead),
            ..Totals::default()
        })
    }
}
