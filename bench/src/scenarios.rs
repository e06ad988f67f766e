//! The measured workloads, for the Rust-driven systems.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::Value;

use crate::db::{now_micros, payload, Cluster, Conn, Result};
use crate::systems::{self, System, QUEUE};

/// What one measurement produced.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub jobs: u64,
    pub seconds: f64,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub backlog_end: Option<i64>,
    /// Commits and WAL bytes of the measured window, and the jobs they were
    /// spent on (settled by the end of the window, including jobs finished
    /// while the workers stopped).
    pub cost: Option<Cost>,
    /// Per second of a steady window, when asked for (see `Timeline`).
    pub timeline: Option<Timeline>,
}

/// Per second of a steady window, from its start (`t0_ms`, Unix ms): jobs
/// enqueued, jobs picked up (by handler start) and their pickup latencies.
/// The drivers report the same shape (`"timeline": true` in the request).
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct Timeline {
    pub t0_ms: f64,
    pub enqueued: Vec<u64>,
    pub done: Vec<u64>,
    pub p50_us: Vec<Option<f64>>,
    pub p99_us: Vec<Option<f64>>,
}

/// A burst in a steady run: the producer at `rate` from `at` seconds for
/// `seconds` seconds, then back to the base rate.
#[derive(Clone, Copy, Debug, Default)]
pub struct Burst {
    pub rate: u64,
    pub at: u64,
    pub seconds: u64,
}

impl Burst {
    /// Jobs owed after `elapsed` seconds at `base` jobs/s with this burst.
    pub fn due(&self, base: u64, elapsed: f64) -> f64 {
        let extra = if self.seconds > 0 && self.rate > 0 {
            (self.rate as f64 - base as f64)
                * (elapsed - self.at as f64).clamp(0.0, self.seconds as f64)
        } else {
            0.0
        };
        base as f64 * elapsed + extra
    }
}

/// Pickups recorded by `record` while a timeline is wanted: (Unix µs, latency µs).
static SINK_ON: AtomicBool = AtomicBool::new(false);
static SINK: std::sync::Mutex<Vec<(i64, u64)>> = std::sync::Mutex::new(Vec::new());

/// The application_name of the harness's snapshot holder: the windows'
/// quiescence checks (here and in the drivers) do not wait for it.
pub const HOLDER_APP: &str = "aedb-bench-hold";

#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    pub commits: i64,
    pub wal_bytes: i64,
    pub jobs: u64,
    /// autovacuum + autoanalyze runs on the database's tables in the window.
    pub autovacuum: i64,
}

impl Cost {
    pub fn commits_per_job(&self) -> Option<f64> {
        (self.jobs > 0).then(|| self.commits as f64 / self.jobs as f64)
    }
    pub fn wal_per_job(&self) -> Option<f64> {
        (self.jobs > 0).then(|| self.wal_bytes as f64 / self.jobs as f64)
    }
}

/// The counters a window's cost is the difference of. Statistics reach the
/// shared counters lazily (an idle backend may hold its counts for up to
/// 10 s), but every backend flushes them when it exits: a window is opened
/// and closed with no client backend connected to the database, so the
/// difference holds exactly the window's transactions. The counters are
/// read from a connection to another database, which counts no commit here.
/// WAL is cluster-wide; the cluster has no other activity but autovacuum,
/// checkpoints and this harness.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    commits: i64,
    wal: i64,
    autovacuum: i64,
}

const AUTOVACUUM_SQL: &str = "SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint FROM pg_stat_user_tables";

async fn quiesce_and_read(cluster: &Cluster, db: &str) -> Result<(i64, i64)> {
    let admin = cluster.connect("postgres").await?;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let n: i64 = admin
            .client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND application_name <> $2",
                &[&db, &HOLDER_APP],
            )
            .await?
            .get(0);
        if n == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{n} client backend(s) still connected to {db}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    admin.batch("SELECT pg_stat_clear_snapshot()").await?;
    let row = admin
        .client
        .query_one(
            "SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint FROM pg_stat_database WHERE datname = $1",
            &[&db],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

impl Window {
    /// Call with every connection to the database closed.
    pub async fn open(cluster: &Cluster, db: &str) -> Result<Window> {
        let autovacuum = cluster
            .connect(db)
            .await?
            .scalar_i64(AUTOVACUUM_SQL)
            .await?;
        let (commits, wal) = quiesce_and_read(cluster, db).await?;
        Ok(Window {
            commits,
            wal,
            autovacuum,
        })
    }

    /// Call after every connection of the window was dropped.
    pub async fn close(self, cluster: &Cluster, db: &str, jobs: u64) -> Result<Cost> {
        let (commits, wal) = quiesce_and_read(cluster, db).await?;
        let autovacuum = cluster
            .connect(db)
            .await?
            .scalar_i64(AUTOVACUUM_SQL)
            .await?;
        Ok(Cost {
            commits: commits - self.commits,
            wal_bytes: wal - self.wal,
            jobs,
            autovacuum: autovacuum - self.autovacuum,
        })
    }
}

impl Measured {
    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.jobs as f64 / self.seconds
        } else {
            0.0
        }
    }
}

pub struct Ctx {
    pub cluster: Cluster,
    pub system: System,
}

impl Ctx {
    pub fn db(&self) -> String {
        self.system.db_name()
    }

    pub async fn fresh(&self) -> Result<Conn> {
        let conn = self.cluster.recreate(&self.db()).await?;
        self.system.setup(&conn).await?;
        Ok(conn)
    }

    pub async fn connect(&self) -> Result<Conn> {
        self.cluster.connect(&self.db()).await
    }
}

/// Loads `jobs` ready jobs in batches of 1,000 (not timed), then refreshes
/// statistics and checkpoints so every drain starts from the same state.
pub async fn preload(ctx: &Ctx, conn: &mut Conn, queue: &str, jobs: usize) -> Result<()> {
    let mut left = jobs;
    while left > 0 {
        let n = left.min(1_000);
        let batch: Vec<Value> = (0..n).map(|_| payload()).collect();
        systems::enqueue_batch(ctx.system, conn, queue, &batch).await?;
        left -= n;
    }
    settle_storage(conn).await
}

pub async fn settle_storage(conn: &Conn) -> Result<()> {
    conn.batch("ANALYZE; CHECKPOINT;").await
}

#[derive(Clone, Copy)]
pub enum EnqueueMode {
    /// `producers` connections, one job per call (one transaction each);
    /// with `notify`, the queue sends NOTIFY on every commit (aedb_queue only).
    Single { producers: usize, notify: bool },
    /// One connection, `size` jobs per call.
    Batch { size: usize },
}

pub async fn enqueue(ctx: &Ctx, mode: EnqueueMode, jobs: usize) -> Result<Measured> {
    let setup = ctx.fresh().await?;
    if let EnqueueMode::Single { notify: true, .. } = mode {
        setup
            .batch(&format!(
                "SELECT * FROM aedb_queue.queue_configure('{QUEUE}', notify => true)"
            ))
            .await?;
    }
    drop(setup);
    let window = Window::open(&ctx.cluster, &ctx.db()).await?;
    // The clock starts once every producer is connected and has made one
    // call, rolled back: an application's connections outlive far more
    // enqueues than a cell makes, so neither a backend's start-up nor its
    // first call (the statement's preparation, loading the extension's
    // library, per-backend caches) is timed. A rolled-back call commits
    // nothing; its WAL is a few hundred bytes against the cell's megabytes.
    let producers = match mode {
        EnqueueMode::Single { producers, .. } => producers,
        EnqueueMode::Batch { .. } => 1,
    };
    let mut conns = Vec::with_capacity(producers);
    for _ in 0..producers {
        let mut conn = ctx.connect().await?;
        conn.batch("BEGIN").await?;
        match mode {
            EnqueueMode::Single { .. } => {
                systems::enqueue_one(ctx.system, &mut conn, QUEUE, &payload()).await?
            }
            EnqueueMode::Batch { size } => {
                let batch: Vec<Value> = (0..size.min(10)).map(|_| payload()).collect();
                systems::enqueue_batch(ctx.system, &mut conn, QUEUE, &batch).await?
            }
        }
        conn.batch("ROLLBACK").await?;
        conns.push(conn);
    }
    let start = Instant::now();
    match mode {
        EnqueueMode::Single { producers, .. } => {
            let mut tasks = Vec::new();
            for mut conn in conns {
                let system = ctx.system;
                let share = jobs / producers;
                tasks.push(tokio::spawn(async move {
                    for _ in 0..share {
                        systems::enqueue_one(system, &mut conn, QUEUE, &payload()).await?;
                    }
                    Ok::<_, crate::db::BoxError>(())
                }));
            }
            for t in tasks {
                t.await??;
            }
        }
        EnqueueMode::Batch { size } => {
            let mut conn = conns.pop().expect("one connection");
            let mut left = jobs;
            while left > 0 {
                let n = left.min(size);
                let batch: Vec<Value> = (0..n).map(|_| payload()).collect();
                systems::enqueue_batch(ctx.system, &mut conn, QUEUE, &batch).await?;
                left -= n;
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(Measured {
        jobs: jobs as u64,
        seconds,
        cost: Some(window.close(&ctx.cluster, &ctx.db(), jobs as u64).await?),
        ..Default::default()
    })
}

/// A pool of workers running until told to stop, counting settled jobs.
struct Workers {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    handles: Vec<tokio::task::JoinHandle<Result<Histogram<u64>>>>,
}

impl Workers {
    async fn start(ctx: &Ctx, queue: &'static str, workers: usize, batch: i32) -> Result<Workers> {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::new();
        for w in 0..workers {
            let mut conn = ctx.connect().await?;
            let (system, stop, done) = (ctx.system, stop.clone(), done.clone());
            handles.push(tokio::spawn(async move {
                let owner = format!("w{w}");
                let mut latency = latency_histogram();
                let mut held = None;
                while !stop.load(Ordering::Relaxed) {
                    let settled = if system.settles_in_claim() {
                        loop_once(system, &mut conn, queue, &owner, &mut held, &mut latency).await?
                    } else {
                        work_once(system, &mut conn, queue, &owner, batch, &mut latency).await?
                    };
                    if settled == 0 {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    done.fetch_add(settled, Ordering::Relaxed);
                }
                Ok(latency)
            }));
        }
        Ok(Workers {
            stop,
            done,
            handles,
        })
    }

    fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    async fn stop(self) -> Result<Histogram<u64>> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = latency_histogram();
        for h in self.handles {
            all.add(h.await??).unwrap();
        }
        Ok(all)
    }
}

/// One worker iteration: claim in one transaction, settle in the next (how
/// real workers run). Per-job settlement when `batch` is 1, batched otherwise.
async fn work_once(
    system: System,
    conn: &mut Conn,
    queue: &str,
    owner: &str,
    batch: i32,
    latency: &mut Histogram<u64>,
) -> Result<u64> {
    if system == System::Pgq {
        let Some(events) = systems::pgq_consume(conn).await? else {
            return Ok(0);
        };
        record(latency, events.iter().copied());
        return Ok(events.len() as u64);
    }
    let jobs = systems::claim(system, conn, queue, owner, batch).await?;
    record(latency, jobs.iter().map(|j| j.enqueued_micros));
    if !jobs.is_empty() {
        systems::complete(system, conn, queue, &jobs, batch == 1).await?;
    }
    Ok(jobs.len() as u64)
}

/// One call of a settle-and-claim worker: the first claims (plain claim),
/// every later one settles the job it holds and claims the next in one call.
/// A worker stopped while holding a job leaves it unsettled (not counted).
async fn loop_once(
    system: System,
    conn: &mut Conn,
    queue: &str,
    owner: &str,
    held: &mut Option<systems::Job>,
    latency: &mut Histogram<u64>,
) -> Result<u64> {
    let (settled, next) = match held.take() {
        None => (
            false,
            systems::claim(system, conn, queue, owner, 1).await?.pop(),
        ),
        Some(job) => systems::settle_and_claim(system, conn, queue, owner, job).await?,
    };
    record(latency, next.iter().map(|j| j.enqueued_micros));
    *held = next;
    Ok(settled as u64)
}

/// Pickup latencies from 1 µs to an hour at 3 significant digits. Fixed
/// bounds: `saturating_record` never resizes, it clamps to the bounds.
fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

fn record(latency: &mut Histogram<u64>, enqueued: impl Iterator<Item = Option<i64>>) {
    let now = now_micros();
    let sink = SINK_ON.load(Ordering::Relaxed);
    for t in enqueued.flatten() {
        let us = (now - t).max(0) as u64;
        latency.saturating_record(us);
        if sink {
            SINK.lock().unwrap().push((now, us));
        }
    }
}

/// Drains `jobs` preloaded jobs with `workers` workers, or as many as the
/// window allows; the rate is jobs settled per second from the first claim.
pub async fn drain(
    ctx: &Ctx,
    jobs: usize,
    workers: usize,
    batch: i32,
    window: Duration,
) -> Result<Measured> {
    let mut conn = ctx.fresh().await?;
    preload(ctx, &mut conn, QUEUE, jobs).await?;
    drop(conn);
    drain_loaded(ctx, jobs as u64, workers, batch, window).await
}

pub async fn drain_loaded(
    ctx: &Ctx,
    target: u64,
    workers: usize,
    batch: i32,
    window: Duration,
) -> Result<Measured> {
    let costs = Window::open(&ctx.cluster, &ctx.db()).await?;
    let start = Instant::now();
    let pool = Workers::start(ctx, QUEUE, workers, batch).await?;
    while pool.done() < target && start.elapsed() < window {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let jobs = pool.done();
    let done = pool.done.clone();
    pool.stop().await?;
    let settled = done.load(Ordering::Relaxed);
    Ok(Measured {
        jobs,
        seconds,
        cost: Some(costs.close(&ctx.cluster, &ctx.db(), settled).await?),
        ..Default::default()
    })
}

/// Producers at a fixed rate for `seconds` while `workers` workers process:
/// pickup latency (claim time − enqueue time) and the backlog left at the end.
pub async fn steady(ctx: &Ctx, rate: u64, seconds: u64, workers: usize) -> Result<Measured> {
    steady_shaped(ctx, rate, seconds, workers, None, false).await
}

/// `steady`, with an optional burst and an optional per-second timeline.
pub async fn steady_shaped(
    ctx: &Ctx,
    rate: u64,
    seconds: u64,
    workers: usize,
    burst: Option<Burst>,
    timeline: bool,
) -> Result<Measured> {
    let shape = burst.unwrap_or_default();
    let setup = ctx.fresh().await?;
    settle_storage(&setup).await?;
    drop(setup);
    let costs = Window::open(&ctx.cluster, &ctx.db()).await?;
    let mut conn = ctx.connect().await?;
    let pool = Workers::start(ctx, QUEUE, workers, 1).await?;
    let tick = Duration::from_millis(10);
    let per_tick = (rate as f64 * tick.as_secs_f64()).max(1.0);
    if timeline {
        SINK.lock().unwrap().clear();
        SINK_ON.store(true, Ordering::Relaxed);
    }
    let start = Instant::now();
    let t0_us = now_micros();
    let mut enq_per_s: Vec<u64> = Vec::new();
    let mut enqueued = 0u64;
    let mut interval = tokio::time::interval(tick);
    while start.elapsed() < Duration::from_secs(seconds) {
        interval.tick().await;
        // Catch up to the schedule if a tick was late, so the rate holds.
        let elapsed = start.elapsed().as_secs_f64();
        let due = if burst.is_some() {
            shape.due(rate, elapsed) as u64
        } else {
            (elapsed / tick.as_secs_f64() * per_tick) as u64
        };
        let n = due.saturating_sub(enqueued);
        if n > 0 {
            let batch: Vec<Value> = (0..n).map(|_| payload()).collect();
            let i = ((now_micros() - t0_us).max(0) / 1_000_000) as usize;
            if enq_per_s.len() <= i {
                enq_per_s.resize(i + 1, 0);
            }
            enq_per_s[i] += n;
            systems::enqueue_batch(ctx.system, &mut conn, QUEUE, &batch).await?;
            enqueued += n;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let done = pool.done();
    let counter = pool.done.clone();
    let latency = pool.stop().await;
    let timeline = timeline.then(|| {
        SINK_ON.store(false, Ordering::Relaxed);
        build_timeline(t0_us, enq_per_s, std::mem::take(&mut *SINK.lock().unwrap()))
    });
    let latency = latency?;
    drop(conn);
    // Per job settled; the producer's commits and WAL are in the window too.
    let cost = costs
        .close(&ctx.cluster, &ctx.db(), counter.load(Ordering::Relaxed))
        .await?;
    Ok(Measured {
        jobs: done,
        seconds: elapsed,
        p50_us: Some(latency.value_at_quantile(0.5)),
        p99_us: Some(latency.value_at_quantile(0.99)),
        backlog_end: Some(enqueued as i64 - done as i64),
        cost: Some(cost),
        timeline,
    })
}

fn build_timeline(t0_us: i64, mut enqueued: Vec<u64>, events: Vec<(i64, u64)>) -> Timeline {
    let mut per_s: Vec<Vec<u64>> = vec![Vec::new(); enqueued.len()];
    for (t, us) in events {
        let i = ((t - t0_us).max(0) / 1_000_000) as usize;
        if per_s.len() <= i {
            per_s.resize(i + 1, Vec::new());
        }
        per_s[i].push(us);
    }
    enqueued.resize(per_s.len(), 0);
    let pct = |v: &[u64], p: f64| {
        (!v.is_empty()).then(|| {
            let idx = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            v[idx] as f64
        })
    };
    for v in &mut per_s {
        v.sort_unstable();
    }
    Timeline {
        t0_ms: t0_us as f64 / 1000.0,
        enqueued,
        done: per_s.iter().map(|v| v.len() as u64).collect(),
        p50_us: per_s.iter().map(|v| pct(v, 0.5)).collect(),
        p99_us: per_s.iter().map(|v| pct(v, 0.99)).collect(),
    }
}

pub enum Clutter {
    /// The measured queue itself holds this many ready jobs.
    Ready(usize),
    /// Future-dated and dead jobs ahead of (older than) the ready ones.
    FutureAndDead { future: usize, dead: usize },
    /// Other queues, each with this many ready jobs, beside the measured one.
    OtherQueues { queues: usize, each: usize },
}

/// Loads clutter with set-based SQL (fast, not timed), then the jobs to drain.
pub async fn clutter(
    ctx: &Ctx,
    clutter: &Clutter,
    jobs: usize,
    workers: usize,
    window: Duration,
) -> Result<Measured> {
    let conn = ctx.fresh().await?;
    let mut target = jobs as u64;
    match *clutter {
        Clutter::Ready(n) => {
            bulk_ready(ctx.system, &conn, QUEUE, n).await?;
            target = n as u64;
        }
        Clutter::FutureAndDead { future, dead } => {
            bulk_future(ctx.system, &conn, future).await?;
            bulk_dead(ctx.system, &conn, dead).await?;
            bulk_ready(ctx.system, &conn, QUEUE, jobs).await?;
        }
        Clutter::OtherQueues { queues, each } => {
            for i in 0..queues {
                bulk_ready(ctx.system, &conn, &format!("other{i}"), each).await?;
            }
            bulk_ready(ctx.system, &conn, QUEUE, jobs).await?;
        }
    }
    conn.batch("VACUUM ANALYZE").await?;
    settle_storage(&conn).await?;
    drop(conn);
    drain_loaded(ctx, target, workers, 1, window).await
}

/// What a concurrency-key cell loads before its drain (aedb_queue only).
#[derive(Clone, Copy)]
pub enum KeyLoad {
    /// Unkeyed tasks: the unlimited drain rate, and the clean one.
    Unkeyed,
    /// The tasks spread evenly over `keys` keys, one batch per key.
    Spread { keys: usize },
    /// `tasks` tasks of one key first, its one ready task held (see
    /// `hold_saturated_key`), then the unkeyed tasks to drain.
    Saturated { tasks: usize },
}

/// The key whose every slot the saturated cell keeps taken.
const SATURATED_KEY: &str = "saturated";

/// Drains `jobs` tasks after `load` (not timed). Every cell loads through
/// the same statement and ends with the same VACUUM ANALYZE and CHECKPOINT,
/// so the cells differ in their keys only.
pub async fn keys(
    ctx: &Ctx,
    load: KeyLoad,
    jobs: usize,
    workers: usize,
    window: Duration,
) -> Result<Measured> {
    let mut conn = ctx.fresh().await?;
    // The unkeyed queue is left as the per-job drain's, unconfigured; the
    // keyed ones state their limit (1, also the default).
    if !matches!(load, KeyLoad::Unkeyed) {
        conn.batch(&format!(
            "SELECT * FROM aedb_queue.queue_configure('{QUEUE}', concurrency_limit => 1)"
        ))
        .await?;
    }
    match load {
        KeyLoad::Unkeyed => enqueue_keyed(&mut conn, None, jobs).await?,
        KeyLoad::Spread { keys } => {
            for k in 0..keys {
                let share = jobs / keys + usize::from(k < jobs % keys);
                enqueue_keyed(&mut conn, Some(&format!("k{k}")), share).await?;
            }
        }
        KeyLoad::Saturated { tasks } => {
            enqueue_keyed(&mut conn, Some(SATURATED_KEY), tasks).await?;
            hold_saturated_key(&mut conn, tasks).await?;
            enqueue_keyed(&mut conn, None, jobs).await?;
        }
    }
    // The held claim leaves a dead version; vacuum every cell alike.
    conn.batch("VACUUM ANALYZE").await?;
    settle_storage(&conn).await?;
    drop(conn);
    drain_loaded(ctx, jobs as u64, workers, 1, window).await
}

/// `n` tasks of `key` (None: unkeyed) in batches of 1,000, as `preload`.
async fn enqueue_keyed(conn: &mut Conn, key: Option<&str>, n: usize) -> Result<()> {
    let mut left = n;
    while left > 0 {
        let k = left.min(1_000);
        let batch: Vec<Value> = (0..k).map(|_| payload()).collect();
        systems::enqueue_batch_keyed(conn, QUEUE, &batch, key).await?;
        left -= k;
    }
    Ok(())
}

/// Claims the saturated key's one ready task (the queue's only one yet) for
/// an hour, longer than any window, and checks the key is full: one task in
/// flight, the rest blocked. Otherwise the drain would settle the key's
/// tasks one after the other, each freeing the slot for the next, and count
/// them. The claim commits: no connection holds it open, as the window's
/// counters are read with no client connected.
async fn hold_saturated_key(conn: &mut Conn, tasks: usize) -> Result<()> {
    conn.batch(&format!(
        "SELECT * FROM aedb_queue.queue_claim('{QUEUE}', 'holder', '1 hour', 1)"
    ))
    .await?;
    let row = conn
        .client
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'in_flight'), count(*) FILTER (WHERE state = 'blocked')
             FROM aedb_queue.task WHERE concurrency_key = $1",
            &[&SATURATED_KEY],
        )
        .await?;
    let (held, blocked): (i64, i64) = (row.get(0), row.get(1));
    if held != 1 || blocked != tasks as i64 - 1 {
        return Err(format!(
            "saturated key: {held} in flight and {blocked} blocked, expected 1 and {}",
            tasks - 1
        )
        .into());
    }
    Ok(())
}

/// The fair-share load: one big key's tasks first, then `small_keys` keys
/// of `small_each` tasks each (aedb_queue only).
#[derive(Clone, Copy)]
pub struct FairLoad {
    pub big: usize,
    pub small_keys: usize,
    pub small_each: usize,
}

impl FairLoad {
    pub fn small(&self) -> usize {
        self.small_keys * self.small_each
    }
    pub fn total(&self) -> usize {
        self.big + self.small()
    }
}

/// What one fair-share cell measured.
#[derive(Clone, Debug, Default)]
pub struct FairDrain {
    /// Seconds the load's enqueue calls took (not the VACUUM and CHECKPOINT).
    pub load_seconds: f64,
    /// Completions (every key) and seconds from the first claim until the
    /// drain stopped, the small keys' completions among them.
    pub done: u64,
    pub seconds: f64,
    pub small_done: u64,
    /// The completions counted (every key) when the last small task
    /// completed, and the seconds from the first claim until then; None
    /// unless every small task completed before the drain stopped.
    pub at_last_small: Option<(u64, f64)>,
    pub cost: Option<Cost>,
}

/// The fair-share scenario's big key.
const BIG_KEY: &str = "big";

/// Loads `load` into a fresh database's queue (set to fair share first when
/// `fair_share`; left unconfigured, first in, first out, otherwise): the big
/// key's tasks in batches of 1,000, then each small key's in one batch with
/// `"small": true` in the payload, every batch through the same statement
/// with its fairness key; then VACUUM ANALYZE and CHECKPOINT, as the keys
/// cells. `workers` workers then claim and complete one task at a time, as
/// in the per-job drain, counting completions; each small task's completion
/// notes the count it made, the last one also the time. The drain stops
/// once `stop_at` tasks have completed or after `window`, so that both cells
/// give a rate over the same stretch (the fair cell's small tasks are done
/// within its first second).
pub async fn fair(
    ctx: &Ctx,
    fair_share: bool,
    load: FairLoad,
    workers: usize,
    stop_at: u64,
    window: Duration,
) -> Result<FairDrain> {
    let mut conn = ctx.fresh().await?;
    if fair_share {
        conn.batch(&format!(
            "SELECT * FROM aedb_queue.queue_configure('{QUEUE}', fair_share => true)"
        ))
        .await?;
    }
    let started = Instant::now();
    let mut left = load.big;
    while left > 0 {
        let n = left.min(1_000);
        let batch: Vec<Value> = (0..n).map(|_| payload()).collect();
        systems::enqueue_batch_fair(&mut conn, QUEUE, &batch, BIG_KEY).await?;
        left -= n;
    }
    for k in 0..load.small_keys {
        let batch: Vec<Value> = (0..load.small_each)
            .map(|_| {
                let mut p = payload();
                p[systems::SMALL_MARK] = Value::Bool(true);
                p
            })
            .collect();
        systems::enqueue_batch_fair(&mut conn, QUEUE, &batch, &format!("small{k}")).await?;
    }
    let load_seconds = started.elapsed().as_secs_f64();
    conn.batch("VACUUM ANALYZE").await?;
    settle_storage(&conn).await?;
    drop(conn);

    let small_total = load.small() as u64;
    let costs = Window::open(&ctx.cluster, &ctx.db()).await?;
    let stop = Arc::new(AtomicBool::new(false));
    // Completions (every key), the small ones, the highest count a small
    // one made, and the microseconds from the start to the last small one.
    let tally = Arc::new([
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    ]);
    let mut conns = Vec::with_capacity(workers);
    for _ in 0..workers {
        conns.push(ctx.connect().await?);
    }
    let start = Instant::now();
    let mut handles = Vec::with_capacity(workers);
    for (w, mut conn) in conns.into_iter().enumerate() {
        let (stop, tally) = (stop.clone(), tally.clone());
        handles.push(tokio::spawn(async move {
            let owner = format!("w{w}");
            while !stop.load(Ordering::Relaxed) {
                let jobs = systems::claim(System::Aedb, &mut conn, QUEUE, &owner, 1).await?;
                if jobs.is_empty() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                systems::complete(System::Aedb, &mut conn, QUEUE, &jobs, true).await?;
                for job in &jobs {
                    let n = tally[0].fetch_add(1, Ordering::SeqCst) + 1;
                    if job.small {
                        tally[2].fetch_max(n, Ordering::SeqCst);
                        if tally[1].fetch_add(1, Ordering::SeqCst) + 1 == small_total {
                            tally[3].store(start.elapsed().as_micros() as u64, Ordering::SeqCst);
                        }
                    }
                }
            }
            Ok::<_, crate::db::BoxError>(())
        }));
    }
    while tally[0].load(Ordering::SeqCst) < stop_at && start.elapsed() < window {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let (done, small_done) = (
        tally[0].load(Ordering::SeqCst),
        tally[1].load(Ordering::SeqCst),
    );
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await??;
    }
    // Completions made while the workers stopped count in the cost, not in
    // the rate or the small tasks' tally (as `drain_loaded`).
    let settled = tally[0].load(Ordering::SeqCst);
    Ok(FairDrain {
        load_seconds,
        done,
        seconds,
        small_done,
        at_last_small: (small_done == small_total).then(|| {
            (
                tally[2].load(Ordering::SeqCst),
                tally[3].load(Ordering::SeqCst) as f64 / 1e6,
            )
        }),
        cost: Some(costs.close(&ctx.cluster, &ctx.db(), settled).await?),
    })
}

const PAYLOAD_SQL: &str = "jsonb_build_object('t', (extract(epoch from clock_timestamp()) * 1e6)::bigint, 'kind', 'bench', 'pad', repeat('x', 64))";

/// Batches of aedb_queue hold at most 10,000 tasks (SQLSTATE 54000 above).
const AEDB_BATCH_MAX: usize = 10_000;

/// `sql(k)` for chunks of at most AEDB_BATCH_MAX that add up to `n`.
async fn in_chunks(conn: &Conn, n: usize, sql: impl Fn(usize) -> String) -> Result<()> {
    let mut left = n;
    while left > 0 {
        let k = left.min(AEDB_BATCH_MAX);
        conn.batch(&sql(k)).await?;
        left -= k;
    }
    Ok(())
}

async fn bulk_ready(system: System, conn: &Conn, queue: &str, n: usize) -> Result<()> {
    let sql = match system {
        System::Aedb => {
            return in_chunks(conn, n, |k| format!(
                "SELECT count(*) FROM aedb_queue.queue_enqueue_batch('{queue}', ARRAY(SELECT {PAYLOAD_SQL} FROM generate_series(1, {k})))"
            ))
            .await
        }
        System::Baseline => format!("INSERT INTO jobs (queue, payload) SELECT '{queue}', {PAYLOAD_SQL} FROM generate_series(1, {n})"),
        _ => unreachable!("clutter runs on aedb_queue and the baseline"),
    };
    conn.batch(&sql).await
}

async fn bulk_future(system: System, conn: &Conn, n: usize) -> Result<()> {
    let sql = match system {
        System::Aedb => {
            return in_chunks(conn, n, |k| format!(
                "SELECT count(*) FROM aedb_queue.queue_enqueue_batch('{QUEUE}', ARRAY(SELECT {PAYLOAD_SQL} FROM generate_series(1, {k})), delay => '1 day')"
            ))
            .await
        }
        System::Baseline => format!(
            "INSERT INTO jobs (queue, payload, run_at) SELECT '{QUEUE}', {PAYLOAD_SQL}, now() + interval '1 day' FROM generate_series(1, {n})"
        ),
        _ => unreachable!(),
    };
    conn.batch(&sql).await
}

async fn bulk_dead(system: System, conn: &Conn, n: usize) -> Result<()> {
    bulk_ready(system, conn, QUEUE, n).await?;
    let sql = match system {
        System::Aedb => "UPDATE aedb_queue.task SET state = 'dead', attempts = max_attempts WHERE state = 'ready'",
        System::Baseline => "UPDATE jobs SET state = 'dead' WHERE state = 'ready' AND run_at <= now()",
        _ => unreachable!(),
    };
    conn.batch(sql).await
}

/// Phase rates of a closed-loop drain (a producer keeps the backlog topped
/// up) while a REPEATABLE READ snapshot is held for `hold`, then released.
pub struct LongTx {
    pub clean: f64,
    pub held: f64,
    pub after: Vec<f64>,
    pub dead_tuples: i64,
    pub size_bytes: i64,
}

pub async fn long_transaction(
    ctx: &Ctx,
    workers: usize,
    clean: Duration,
    hold: Duration,
    after: Duration,
) -> Result<LongTx> {
    let mut conn = ctx.fresh().await?;
    preload(ctx, &mut conn, QUEUE, 20_000).await?;
    let pool = Workers::start(ctx, QUEUE, workers, 1).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (system, stop, done) = (ctx.system, stop.clone(), pool.done.clone());
        let mut conn = ctx.connect().await?;
        tokio::spawn(async move {
            let mut enqueued = 20_000u64;
            while !stop.load(Ordering::Relaxed) {
                if enqueued.saturating_sub(done.load(Ordering::Relaxed)) < 20_000 {
                    let batch: Vec<Value> = (0..500).map(|_| payload()).collect();
                    systems::enqueue_batch(system, &mut conn, QUEUE, &batch).await?;
                    enqueued += 500;
                } else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            Ok::<_, crate::db::BoxError>(())
        })
    };
    let window_rate = |from: u64, secs: f64| move |to: u64| (to - from) as f64 / secs;
    let mark = pool.done();
    tokio::time::sleep(clean).await;
    let clean_rate = window_rate(mark, clean.as_secs_f64())(pool.done());

    let snapshot = ctx.connect().await?;
    snapshot
        .batch("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class;")
        .await?;
    let mark = pool.done();
    tokio::time::sleep(hold).await;
    let held_rate = window_rate(mark, hold.as_secs_f64())(pool.done());
    let table = hot_table(ctx.system);
    let dead_tuples = conn
        .scalar_i64(&format!("SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE relname = '{table}'"))
        .await?;
    snapshot.batch("COMMIT").await?;

    let mut after_rates = Vec::new();
    let step = Duration::from_secs(10).min(after);
    let mut elapsed = Duration::ZERO;
    while elapsed < after {
        let mark = pool.done();
        tokio::time::sleep(step).await;
        after_rates.push(window_rate(mark, step.as_secs_f64())(pool.done()));
        elapsed += step;
    }
    stop.store(true, Ordering::Relaxed);
    producer.await??;
    pool.stop().await?;
    let size_bytes = conn.scalar_i64(ctx.system.size_sql()).await?;
    Ok(LongTx {
        clean: clean_rate,
        held: held_rate,
        after: after_rates,
        dead_tuples,
        size_bytes,
    })
}

/// The table the claim path reads, whose dead tuples a held snapshot pins.
fn hot_table(system: System) -> &'static str {
    match system {
        System::Aedb => "task",
        _ => "jobs",
    }
}

/// One churn round's rate and WAL volume.
pub struct ChurnRound {
    pub rate: f64,
    pub wal_per_job: f64,
}

/// Processes `total` jobs at a steady backlog of about `backlog` (batched
/// claims of 100), sampling the size after each fifth; then lets the queue
/// drain, waits for autovacuum to visit the hot table, and processes
/// another `total`: growth is bounded when that second round reuses the
/// space the first one left. (At these rates a round takes seconds, less
/// than autovacuum's one-minute naptime, so a single round cannot show it.)
/// Returns (jobs/s of the first round, [(jobs done, bytes)], per round: its
/// rate and WAL bytes per job). Prints each round's relation sizes.
pub async fn churn_size(
    ctx: &Ctx,
    total: u64,
    rounds: u64,
    backlog: u64,
    workers: usize,
) -> Result<(f64, Vec<(u64, i64)>, Vec<ChurnRound>)> {
    let mut conn = ctx.fresh().await?;
    preload(ctx, &mut conn, QUEUE, backlog as usize).await?;
    let pool = Workers::start(ctx, QUEUE, workers, 100).await?;
    let start = Instant::now();
    let mut enqueued = backlog;
    let step = (total / 5).max(1);
    let mut samples = Vec::new();
    let mut rate = 0.0;
    let mut per_round = Vec::new();
    for round_end in (1..=rounds).map(|r| r * total) {
        if round_end > total {
            wait_for_autovacuum(ctx, &mut conn).await?;
        }
        let (round_start, done_before) = (Instant::now(), pool.done());
        let lsn_before = wal_lsn(&conn).await?;
        while pool.done() < round_end {
            let next_sample = step * (samples.len() as u64 + 1);
            if round_end == total && samples.len() < 4 && pool.done() >= next_sample {
                samples.push((next_sample, conn.scalar_i64(ctx.system.size_sql()).await?));
            }
            if enqueued.saturating_sub(pool.done()) < backlog && enqueued < round_end + backlog {
                let batch: Vec<Value> = (0..1_000).map(|_| payload()).collect();
                systems::enqueue_batch(ctx.system, &mut conn, QUEUE, &batch).await?;
                enqueued += 1_000;
            } else {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let jobs = (pool.done() - done_before) as f64;
        let round = ChurnRound {
            rate: jobs / round_start.elapsed().as_secs_f64(),
            wal_per_job: (wal_lsn(&conn).await? - lsn_before) as f64 / jobs,
        };
        samples.push((round_end, conn.scalar_i64(ctx.system.size_sql()).await?));
        println!(
            "  churn {} round {}: {:.0} jobs/s, {:.0} WAL bytes/job, {}",
            ctx.system.name(),
            per_round.len() + 1,
            round.rate,
            round.wal_per_job,
            relation_sizes(ctx.system, &conn).await?
        );
        per_round.push(round);
        if round_end == total {
            rate = pool.done() as f64 / start.elapsed().as_secs_f64();
        }
    }
    pool.stop().await?;
    Ok((rate, samples, per_round))
}

async fn wal_lsn(conn: &Conn) -> Result<i64> {
    conn.scalar_i64("SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint")
        .await
}

/// The hot table's and its indexes' sizes in MB, and its vacuum counters.
async fn relation_sizes(system: System, conn: &Conn) -> Result<String> {
    let table = match system {
        System::Aedb => "aedb_queue.task",
        _ => "public.jobs",
    };
    let sizes = conn
        .client
        .query_one(
            &format!(
                "SELECT string_agg(c.relname || ' ' || round(pg_relation_size(c.oid) / 1048576.0, 1), ', ' ORDER BY c.relkind DESC, c.relname)
                 || format(' | n_dead_tup %s, autovacuum_count %s, n_tup_hot_upd %s', s.n_dead_tup, s.autovacuum_count, s.n_tup_hot_upd)
                 FROM pg_class c, pg_stat_user_tables s
                 WHERE s.relid = '{table}'::regclass
                   AND (c.oid = s.relid OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = s.relid))
                 GROUP BY s.n_dead_tup, s.autovacuum_count, s.n_tup_hot_upd"
            ),
            &[],
        )
        .await?;
    Ok(sizes.get(0))
}

/// Waits (at most three minutes) until autovacuum has cleaned the hot table:
/// a run that ends after the round but began during it would leave most of
/// the round's dead versions, so wait for the dead-tuple count itself.
async fn wait_for_autovacuum(ctx: &Ctx, conn: &mut Conn) -> Result<()> {
    let table = hot_table(ctx.system);
    let dead_sql = format!(
        "SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE relname = '{table}'"
    );
    let deadline = Instant::now() + Duration::from_secs(180);
    while Instant::now() < deadline && conn.scalar_i64(&dead_sql).await? > 50_000 {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

/// Who drains in the worker-runtime cells.
#[derive(Debug, Clone, Copy)]
pub enum Runtime {
    /// The bench's own settle-and-claim loop (aedb-loop): the fastest
    /// hand-written aedb_queue worker.
    HandWritten,
    /// The Rust worker runtime (clients/rust), no-op handlers, in this process.
    Rust,
    /// The Python worker runtime (clients/python), no-op handlers, in a
    /// process of its own (`clients/python/benchmarks/drain.py`).
    Python,
}

/// Drains `jobs` preloaded tasks with `workers` handlers through `runtime`,
/// or as many as the window allows.
pub async fn runtime_drain(
    cluster: &Cluster,
    runtime: Runtime,
    jobs: usize,
    workers: usize,
    window: Duration,
) -> Result<Measured> {
    let system = match runtime {
        Runtime::HandWritten => System::AedbLoop,
        Runtime::Rust | Runtime::Python => System::Aedb,
    };
    let ctx = Ctx {
        cluster: cluster.clone(),
        system,
    };
    let mut conn = ctx.fresh().await?;
    preload(&ctx, &mut conn, QUEUE, jobs).await?;
    drop(conn);
    let target = jobs as u64;
    match runtime {
        Runtime::HandWritten => drain_loaded(&ctx, target, workers, 1, window).await,
        Runtime::Rust => rust_runtime_drain(&ctx, target, workers, window).await,
        Runtime::Python => python_runtime_drain(&ctx, workers, window).await,
    }
}

/// Jobs are counted as the handlers are called (at most `workers` of them
/// not yet completed when the window closes); the costs as completed.
async fn rust_runtime_drain(
    ctx: &Ctx,
    target: u64,
    workers: usize,
    window: Duration,
) -> Result<Measured> {
    use aedb_queue_client::{handler, Done, QueueOptions, Task, TaskError, Worker};
    let costs = Window::open(&ctx.cluster, &ctx.db()).await?;
    let done = Arc::new(AtomicU64::new(0));
    let counter = done.clone();
    let worker = Worker::builder(&ctx.cluster.url(&ctx.db()))?
        .listen(false)
        .queue(
            QueueOptions::new(QUEUE)
                .concurrency(workers)
                .lease(Duration::from_secs(30)),
            handler(move |_task: Task<Value>| {
                counter.fetch_add(1, Ordering::Relaxed);
                async { Ok::<_, TaskError>(Done::new()) }
            }),
        )
        .build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let start = Instant::now();
    let run = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    while done.load(Ordering::Relaxed) < target && start.elapsed() < window {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let jobs = done.load(Ordering::Relaxed);
    let _ = stop.send(());
    let report = run.await??;
    Ok(Measured {
        jobs,
        seconds,
        cost: Some(
            costs
                .close(&ctx.cluster, &ctx.db(), report.completed)
                .await?,
        ),
        ..Default::default()
    })
}

/// The Python runtime's own clock: from its first claim to the window's
/// end or an empty queue (`drain.py` prints jobs and seconds as JSON).
async fn python_runtime_drain(ctx: &Ctx, workers: usize, window: Duration) -> Result<Measured> {
    let python = std::env::var("AEDB_CLIENT_PYTHON")
        .map_err(|_| "AEDB_CLIENT_PYTHON is not set (bench/run.sh sets it)")?;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../clients/python/benchmarks/drain.py"
    );
    let costs = Window::open(&ctx.cluster, &ctx.db()).await?;
    let out = tokio::process::Command::new(python)
        .arg(script)
        .args(["--dsn", &ctx.cluster.url(&ctx.db()), "--queue", QUEUE])
        .args(["--handlers", &workers.to_string()])
        .args(["--max-seconds", &window.as_secs_f64().to_string()])
        .output()
        .await?;
    if !out.status.success() {
        return Err(format!("drain.py failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().ok_or("drain.py printed nothing")?;
    let result: Value = serde_json::from_str(line)?;
    let jobs = result["jobs"].as_u64().ok_or("drain.py: no jobs")?;
    let seconds = result["seconds"].as_f64().ok_or("drain.py: no seconds")?;
    Ok(Measured {
        jobs,
        seconds,
        cost: Some(costs.close(&ctx.cluster, &ctx.db(), jobs).await?),
        ..Default::default()
    })
}

/// Wake-up latency through the Rust runtime: an idle worker (8 handlers,
/// LISTEN on, a 5 s poll behind it) and one producer enqueueing one task
/// per transaction at `rate` into a queue that notifies. Latency is from
/// the payload's time (before the enqueue's commit) to the handler's start.
pub async fn runtime_wakeup(cluster: &Cluster, rate: u64, seconds: u64) -> Result<Measured> {
    use aedb_queue_client::{handler, Done, QueueOptions, Task, TaskError, Worker};
    let ctx = Ctx {
        cluster: cluster.clone(),
        system: System::Aedb,
    };
    let setup = ctx.fresh().await?;
    setup
        .client
        .execute(
            "SELECT aedb_queue.queue_configure($1, notify => true)",
            &[&QUEUE],
        )
        .await?;
    settle_storage(&setup).await?;
    drop(setup);
    let latency = Arc::new(std::sync::Mutex::new(latency_histogram()));
    let done = Arc::new(AtomicU64::new(0));
    let (seen, counter) = (latency.clone(), done.clone());
    let worker = Worker::builder(&ctx.cluster.url(&ctx.db()))?
        .queue(
            QueueOptions::new(QUEUE)
                .concurrency(8)
                .poll_interval(Duration::from_secs(5)),
            handler(move |task: Task<Value>| {
                record(
                    &mut seen.lock().expect("not poisoned"),
                    [task.payload["t"].as_i64()].into_iter(),
                );
                counter.fetch_add(1, Ordering::Relaxed);
                async { Ok::<_, TaskError>(Done::new()) }
            }),
        )
        .build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    // The worker's first claim (nothing) and its LISTEN, before the clock.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut conn = ctx.connect().await?;
    let tick = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now();
    let mut interval = tokio::time::interval(tick);
    let mut enqueued = 0u64;
    while start.elapsed() < Duration::from_secs(seconds) {
        interval.tick().await;
        systems::enqueue_one(System::Aedb, &mut conn, QUEUE, &payload()).await?;
        enqueued += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let wait = Instant::now();
    while done.load(Ordering::Relaxed) < enqueued && wait.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = stop.send(());
    run.await??;
    let latency = latency.lock().expect("not poisoned").clone();
    let jobs = done.load(Ordering::Relaxed);
    Ok(Measured {
        jobs,
        seconds: elapsed,
        p50_us: Some(latency.value_at_quantile(0.5)),
        p99_us: Some(latency.value_at_quantile(0.99)),
        backlog_end: Some(enqueued as i64 - jobs as i64),
        cost: None,
        timeline: None,
    })
}
