//! Benchmark driver for awa through its own Rust runtime (the `awa` crate).
//!
//!   awa-driver '{"system":"awa","db":"postgres://…","scenario":"enqueue|drain|steady",
//!                "jobs":N,"workers":W,"batch":B,"rate":R,"seconds":S,"payload_bytes":P,
//!                "admin_db":"postgres://…/postgres"}'
//!
//! The same protocol as bench/peers/node/driver.mjs: the last stdout line is
//! the JSON result, everything else goes to stderr; exit 1 on failure, 2 on
//! bad arguments, 3 when the overall time guard (S+120 s, or 300 s when S=0)
//! fires. README.md next to this file says how each scenario drives awa and
//! where each setting comes from; the comments below cite the same sources:
//!
//! - [bench-test]: awa 0.6.9's own benchmarks, shipped in the crate,
//!   `tests/benchmark_test.rs` (`test_throughput_rust_workers_queue_storage`,
//!   `test_queue_storage_runtime_offered_rate`);
//! - [portable]: the adapter its author runs in the cross-system comparison
//!   (hardbyte/postgresql-job-queue-benchmarking, `awa-bench/src/main.rs`,
//!   scenarios `enqueue_throughput` and `worker_throughput`, and
//!   `awa-bench/src/long_horizon.rs`, the run behind the published 14,158
//!   jobs/s at 256 workers on a 4-CPU PostgreSQL);
//! - [docs]: awa's docs/benchmarking.md and its README (repository
//!   hardbyte/awa).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use awa::model::insert::params_with;
use awa::worker::TransitionWorkerRole;
use awa::{
    insert_with, migrations, Client, InsertOpts, InsertParams, JobArgs, JobResult, QueueConfig,
    QueueStorage, QueueStorageConfig,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sqlx::postgres::{PgPool, PgPoolOptions};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const QUEUE: &str = "bench";
/// Batch size used to pre-enqueue for the drain (untimed), as the Node driver.
const PREENQUEUE_CHUNK: usize = 1_000;
/// Completion polling period: awa's own drains poll `queue_counts` every
/// 50 ms ([portable] `wait_for_completion`), as the Node driver does.
const POLL: Duration = Duration::from_millis(50);
/// Steady producer pacing period and calls in flight (as the Node driver).
const TICK: Duration = Duration::from_millis(10);
const MAX_INFLIGHT_INSERTS: usize = 4;
/// Connections in the runtime's pool: awa's docs/benchmarking.md, "Size the
/// connection pool to at least `num_queues * 4 + 20`" (one queue here); its
/// offered-rate benchmark ([bench-test]) uses the same 24 with 1,024
/// workers. No-op handlers use no connection of their own.
const POOL_CONNECTIONS: u32 = 24;
/// The dispatcher's idle poll: 50 ms in every awa benchmark ([bench-test],
/// [portable]); awa's default is 200 ms. LISTEN/NOTIFY wakes it earlier.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The job: `{"i":n,"t":ms,"pad":"xxx…"}`, about `payload_bytes` as JSON.
/// The derive names its kind `bench_job`.
#[derive(Debug, Serialize, Deserialize, JobArgs)]
struct BenchJob {
    i: u64,
    /// Wall-clock enqueue time, Unix milliseconds (steady's pickup latency).
    t: f64,
    pad: String,
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1000.0
}

fn job(i: u64, bytes: usize) -> BenchJob {
    let mut j = BenchJob {
        i,
        t: now_ms(),
        pad: String::new(),
    };
    let overhead = serde_json::to_string(&j).map(|s| s.len()).unwrap_or(0);
    j.pad = "x".repeat(bytes.saturating_sub(overhead));
    j
}

fn opts() -> InsertOpts {
    InsertOpts {
        queue: QUEUE.into(),
        ..Default::default()
    }
}

fn params(first: u64, n: usize, bytes: usize) -> Result<Vec<InsertParams>> {
    (first..first + n as u64)
        .map(|i| params_with(&job(i, bytes), opts()).map_err(Into::into))
        .collect()
}

static T0: OnceLock<Instant> = OnceLock::new();

fn log(msg: &str) {
    let t = T0.get_or_init(Instant::now).elapsed().as_secs_f64();
    eprintln!("awa-driver: {t:7.2} s {msg}");
}

fn die(msg: &str, code: i32) -> ! {
    eprintln!("awa-driver: error: {msg}");
    std::process::exit(code);
}

// ------------------------------------------------------------------ arguments

#[derive(Clone, Debug)]
struct Cfg {
    db: String,
    admin_db: Option<String>,
    scenario: String,
    jobs: usize,
    workers: usize,
    batch: usize,
    rate: f64,
    seconds: f64,
    payload_bytes: usize,
    /// Optional (steady only): per-second buckets in the result, and a
    /// burst, the producer at `burst_rate` from `burst_at` for `burst_seconds`.
    timeline: bool,
    burst_rate: f64,
    burst_at: f64,
    burst_seconds: f64,
    /// Optional (drain, the faults scenario): each handler records its
    /// job's `i` in bench_ledger.
    ledger: bool,
    /// Optional (the harness's backlog scenario): (ready on another queue,
    /// scheduled a year ahead, dead) jobs waiting before the scenario,
    /// written untimed after the schema (see `fill_backlog`).
    backlog: Option<(usize, usize, usize)>,
}

/// Terminal jobs of the measured queue that the backlog put there (its dead
/// ones): left out of every count of jobs done.
static BACKLOG_BASE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// The harness's snapshot holder (held-snapshot scenario): not a client of ours.
const HOLDER_APP: &str = "aedb-bench-hold";
/// The handlers' ledger connections (the faults scenario spares them).
const LEDGER_APP: &str = "bench-ledger";
const LEDGER_SQL: &str = "CREATE TABLE IF NOT EXISTS bench_ledger (job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())";

/// Records a job's `i` in the ledger in its own transaction (awa's handler
/// is not given the transaction that completes its job), retried for up to
/// a minute; then the handler fails retryably, so awa sees the job fail.
async fn ledger_record(pool: &PgPool, i: u64) -> std::result::Result<(), awa::JobError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match sqlx::query("INSERT INTO bench_ledger (job_id) VALUES ($1)")
            .bind(i as i64)
            .execute(pool)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(awa::JobError::retryable(e)),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Jobs the steady producer owes after `elapsed` seconds.
fn due_by(cfg: &Cfg, elapsed: f64) -> f64 {
    let mut extra = 0.0;
    if cfg.burst_seconds > 0.0 && cfg.burst_rate > 0.0 {
        extra =
            (cfg.burst_rate - cfg.rate) * (elapsed - cfg.burst_at).max(0.0).min(cfg.burst_seconds);
    }
    cfg.rate * elapsed + extra
}

fn parse_args() -> Cfg {
    let Some(arg) = std::env::args().nth(1) else {
        die(
            "usage: awa-driver '{\"system\":\"awa\",\"db\":…,\"scenario\":…}'",
            2,
        )
    };
    let a: Value = serde_json::from_str(&arg)
        .unwrap_or_else(|e| die(&format!("argument is not valid JSON: {e}"), 2));
    let num = |k: &str, def: f64| -> f64 {
        match a.get(k) {
            None | Some(Value::Null) => def,
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x >= 0.0 => x,
                _ => die(
                    &format!("\"{k}\" must be a non-negative number (got {v})"),
                    2,
                ),
            },
        }
    };
    let cfg = Cfg {
        db: a["db"].as_str().unwrap_or_default().to_string(),
        admin_db: a["admin_db"].as_str().map(str::to_string),
        scenario: a["scenario"].as_str().unwrap_or_default().to_string(),
        jobs: num("jobs", 0.0) as usize,
        workers: num("workers", 1.0) as usize,
        batch: num("batch", 1.0) as usize,
        rate: num("rate", 0.0),
        seconds: num("seconds", 0.0),
        payload_bytes: num("payload_bytes", 100.0) as usize,
        timeline: a["timeline"].as_bool().unwrap_or(false),
        burst_rate: num("burst_rate", 0.0),
        burst_at: num("burst_at", 0.0),
        burst_seconds: num("burst_seconds", 0.0),
        ledger: a["ledger"].as_bool().unwrap_or(false),
        backlog: a.get("backlog").filter(|b| b.is_object()).map(|b| {
            let n = |k: &str| b[k].as_u64().unwrap_or(0) as usize;
            (n("ready"), n("scheduled"), n("dead"))
        }),
    };
    if a["system"].as_str() != Some("awa") {
        die(
            &format!("\"system\" must be \"awa\" (got {})", a["system"]),
            2,
        );
    }
    if cfg.db.is_empty() {
        die("\"db\" must be a postgres:// connection string", 2);
    }
    if !["enqueue", "drain", "steady"].contains(&cfg.scenario.as_str()) {
        die(
            &format!(
                "\"scenario\" must be enqueue, drain or steady (got {})",
                a["scenario"]
            ),
            2,
        );
    }
    if cfg.workers < 1 || cfg.batch < 1 {
        die("\"workers\" and \"batch\" must be >= 1", 2);
    }
    if cfg.scenario != "steady" && cfg.jobs < 1 {
        die("\"jobs\" must be >= 1 for enqueue and drain", 2);
    }
    if cfg.scenario == "steady" && (cfg.rate <= 0.0 || cfg.seconds <= 0.0) {
        die("steady needs \"rate\" > 0 and \"seconds\" > 0", 2);
    }
    cfg
}

// ------------------------------------------------------------------ awa's configuration

/// Queue storage, awa 0.6's engine, as [portable] sets it up: 16 queue
/// slots, 8 lease slots, 8 claim slots, 1 stripe, receipts on (its defaults,
/// which awa's `QueueStorageConfig::default()` also has).
fn storage_config() -> QueueStorageConfig {
    QueueStorageConfig::default()
}

/// The queue: the harness's B picks the mode, as for every system.
///
/// B = 1: awa's defaults with W worker permits (`max_workers`, "the number
/// of jobs run at once", as pg-boss's `localConcurrency` and
/// graphile-worker's `concurrentJobs`). awa has no per-worker fetch: one
/// dispatcher claims for every free permit in one statement (up to
/// `claim_batch_size`, default 512), and a completion batcher settles
/// finished jobs together (`AWA_COMPLETION_BATCH_SIZE` 512, flush 1 ms,
/// its defaults). That is awa's only way of running per-job handlers, so
/// its per-job cells are not one job per fetch.
///
/// B > 1: awa's own batching, as its throughput benchmarks set it up:
/// `claim_batch_size` B (jobs per claim), and W×B permits, since each job
/// holds a permit until its completion is durable ("no-op handlers hold
/// permits while waiting for durable completion acknowledgement",
/// docs/benchmarking.md: its 10k/s offered-rate run used `max_workers`
/// 1,024 with `claim_batch_size` 512).
///
/// Everything else as [portable] `build_client`: `poll_interval` 50 ms and
/// awa's defaults (deadline rescue on with `deadline_duration` 300 s,
/// heartbeat 30 s, one claimer, priority aging 60 s). [bench-test] sets
/// `deadline_duration` 0, which turns deadline rescue off and takes the
/// receipt-plane short path; the published cross-system figures keep it on
/// (its Phase A.5 measured the rescue's cost at 1-8 %), and so does this
/// driver, like the 30 s leases of the other systems.
fn queue_config(cfg: &Cfg) -> QueueConfig {
    let mut q = QueueConfig {
        max_workers: (cfg.workers * cfg.batch) as u32,
        poll_interval: POLL_INTERVAL,
        ..QueueConfig::default()
    };
    if cfg.batch > 1 {
        q.claim_batch_size = cfg.batch;
    }
    q
}

fn describe_queue(q: &QueueConfig) -> String {
    format!(
        "max_workers={} claim_batch_size={} poll_interval={}ms deadline_duration={}s claimers={}",
        q.max_workers,
        q.claim_batch_size,
        q.poll_interval.as_millis(),
        q.deadline_duration.as_secs(),
        q.claimers
    )
}

#[derive(Default)]
struct Seen {
    first: OnceLock<Instant>,
    handled: AtomicU64,
    recording: AtomicBool,
    latencies_us: Mutex<Vec<f64>>,
    /// (handler wall ms, pickup latency µs) of each job, for the timeline.
    events: Mutex<Vec<(f64, f64)>>,
}

/// The runtime: [portable] `build_client` (queue storage with its rotate
/// intervals 1,000 ms for queues and 50 ms for leases, run as a queue-storage
/// target) and a no-op handler registered the way awa's README does it
/// (`register::<Args, _, _>`).
fn build_client(pool: PgPool, cfg: &Cfg, seen: Arc<Seen>) -> Result<Client> {
    let ledger = if cfg.ledger {
        let opts: sqlx::postgres::PgConnectOptions = cfg.db.parse()?;
        Some(
            PgPoolOptions::new()
                .max_connections(4)
                .connect_lazy_with(opts.application_name(LEDGER_APP)),
        )
    } else {
        None
    };
    let client = Client::builder(pool)
        .queue(QUEUE, queue_config(cfg))
        .queue_storage(
            storage_config(),
            Duration::from_millis(1_000),
            Duration::from_millis(50),
        )
        .transition_role(TransitionWorkerRole::QueueStorageTarget)
        .register::<BenchJob, _, _>(move |args, _ctx| {
            let seen = seen.clone();
            let ledger = ledger.clone();
            async move {
                if let Some(l) = &ledger {
                    ledger_record(l, args.i).await?;
                }
                let t = now_ms();
                let _ = seen.first.set(Instant::now());
                seen.handled.fetch_add(1, Ordering::Relaxed);
                if seen.recording.load(Ordering::Relaxed) {
                    seen.latencies_us
                        .lock()
                        .unwrap()
                        .push((t - args.t) * 1000.0);
                    seen.events.lock().unwrap().push((t, (t - args.t) * 1000.0));
                }
                Ok(JobResult::Completed)
            }
        })
        .build()?;
    Ok(client)
}

async fn pool(url: &str, max: u32) -> Result<PgPool> {
    Ok(PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(60))
        .connect(url)
        .await?)
}

// ------------------------------------------------------------------ monitor

/// Counts completed jobs (`QueueStorage::queue_counts`, awa's exact count of
/// terminal jobs, the one its own drains poll) on a pool of one connection
/// of its own, and how often it did, so that its commits can be left out of
/// the window's.
struct Monitor {
    pool: PgPool,
    store: QueueStorage,
    calls: u64,
}

impl Monitor {
    async fn open(cfg: &Cfg) -> Result<Monitor> {
        Ok(Monitor {
            pool: PgPoolOptions::new()
                .max_connections(1)
                .connect(&cfg.db)
                .await?,
            store: QueueStorage::new(storage_config())?,
            calls: 0,
        })
    }

    async fn completed(&mut self) -> Result<i64> {
        // Retried for up to a minute: the faults scenario ends backends and
        // restarts the cluster under the drain (the pool reconnects).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.calls += 1;
            match self.store.queue_counts(&self.pool, QUEUE).await {
                Ok(c) => return Ok(c.terminal - BACKLOG_BASE.load(Ordering::Relaxed)),
                Err(e) if Instant::now() > deadline => return Err(e.into()),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    async fn close(self) {
        self.pool.close().await;
    }
}

/// What the monitor's calls commit: sqlx prepares each statement on a new
/// connection in a round trip of its own and looks up awa's types, so the
/// first call costs more than later ones. Measured, untimed, before the
/// window: a connection with one call, then one with 21; the difference is
/// 20 calls' worth. Each is measured twice and the smaller kept, since
/// autovacuum's own transactions on the freshly created tables count in the
/// same counter. Returns (commits of a connection with one call, commits of
/// each further call).
async fn calibrate_monitor(cfg: &Cfg) -> Result<(i64, f64)> {
    let once = |calls: u64| {
        let cfg = cfg.clone();
        async move {
            let c0 = read_counters(&cfg).await?.0;
            let mut m = Monitor::open(&cfg).await?;
            for _ in 0..calls {
                m.completed().await?;
            }
            m.close().await;
            let c1 = read_counters(&cfg).await?.0;
            Result::Ok(c1 - c0)
        }
    };
    let one = once(1).await?.min(once(1).await?);
    let many = once(21).await?.min(once(21).await?);
    Ok((one, (many - one) as f64 / 20.0))
}

// ------------------------------------------------------------------ commits and WAL

fn db_name(url: &str) -> String {
    let tail = url.rsplit('/').next().unwrap_or_default();
    tail.split('?').next().unwrap_or_default().to_string()
}

/// The bench database's commits and the cluster's WAL position, read from
/// `admin_db` once no client backend is connected to the bench database
/// (each backend flushes its statistics when it exits; see driver.mjs). A
/// connection still there after 5 s is ended, which flushes its statistics.
async fn read_counters(cfg: &Cfg) -> Result<(i64, i64)> {
    let admin_url = cfg.admin_db.as_deref().ok_or("no admin_db")?;
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(admin_url)
        .await?;
    let name = db_name(&cfg.db);
    let start = Instant::now();
    let mut terminated = false;
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND application_name <> $2",
        )
        .bind(&name)
        .bind(HOLDER_APP)
        .fetch_one(&admin)
        .await?;
        if n == 0 {
            break;
        }
        if start.elapsed() > Duration::from_secs(15) {
            return Err(format!("{n} client backend(s) still connected to {name}").into());
        }
        if !terminated && start.elapsed() > Duration::from_secs(5) {
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND application_name <> $2",
            )
            .bind(&name)
            .bind(HOLDER_APP)
            .execute(&admin)
            .await?;
            log(&format!(
                "ended {n} lingering connection(s) of a closed client"
            ));
            terminated = true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut conn = admin.acquire().await?;
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *conn)
        .await?;
    let row: (i64, i64) = sqlx::query_as(
        "SELECT xact_commit::bigint, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint FROM pg_stat_database WHERE datname = $1",
    )
    .bind(&name)
    .fetch_one(&mut *conn)
    .await?;
    drop(conn);
    admin.close().await;
    Ok(row)
}

async fn autovacuum_runs(cfg: &Cfg) -> Result<i64> {
    let p = pool(&cfg.db, 1).await?;
    let n: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint FROM pg_stat_user_tables",
    )
    .fetch_one(&p)
    .await?;
    p.close().await;
    Ok(n)
}

// ------------------------------------------------------------------ setup (untimed)

/// awa's schema (`migrations::run`), then its queue-storage engine
/// (`QueueStorage::install`, which also makes it the active backend), as
/// [portable] `prepare_queue_storage` does on its fresh database; for the
/// drain, the jobs (`enqueue_params_copy` in chunks of 1,000), ANALYZE and
/// CHECKPOINT. Every connection is closed at the end.
async fn setup(cfg: &Cfg) -> Result<()> {
    let p = pool(&cfg.db, 4).await?;
    migrations::run(&p).await?;
    let store = QueueStorage::new(storage_config())?;
    store.install(&p).await?;
    log("migrated, queue storage installed");
    if cfg.ledger {
        sqlx::query(LEDGER_SQL).execute(&p).await?;
    }
    if let Some(mix) = cfg.backlog {
        fill_backlog(cfg, &p, &store, mix).await?;
    }
    if cfg.scenario == "drain" {
        let mut done = 0;
        while done < cfg.jobs {
            let n = PREENQUEUE_CHUNK.min(cfg.jobs - done);
            store
                .enqueue_params_copy(&p, &params(done as u64, n, cfg.payload_bytes)?)
                .await?;
            done += n;
        }
        sqlx::query("ANALYZE").execute(&p).await?;
        if let Err(e) = sqlx::query("CHECKPOINT").execute(&p).await {
            log(&format!("CHECKPOINT skipped: {e}"));
        }
        let counts = store.queue_counts(&p, QUEUE).await?;
        let base = BACKLOG_BASE.load(Ordering::Relaxed);
        if counts.terminal != base || counts.available != cfg.jobs as i64 {
            return Err(format!(
                "expected {} available and 0 done before the drain, found {counts:?}",
                cfg.jobs
            )
            .into());
        }
        log(&format!("{} jobs enqueued", cfg.jobs));
    }
    p.close().await;
    Ok(())
}

/// The backlog through awa's own API, 1,000 jobs a call: `enqueue_params_copy`
/// into another queue (no worker runs it); with `run_at` a year ahead; and
/// the dead part enqueued and then ended with `cancel_jobs_by_ids` (state
/// cancelled: failing a job for good needs it running), its ids read from
/// awa's `awa.jobs` view. Then VACUUM ANALYZE and CHECKPOINT.
async fn fill_backlog(
    cfg: &Cfg,
    p: &PgPool,
    store: &QueueStorage,
    (ready, scheduled, dead): (usize, usize, usize),
) -> Result<()> {
    let t0 = Instant::now();
    let mut i = 0u64;
    let mut chunks = |n: usize| {
        let mut out = Vec::new();
        let mut done = 0;
        while done < n {
            let k = PREENQUEUE_CHUNK.min(n - done);
            out.push((i, k));
            i += k as u64;
            done += k;
        }
        out
    };
    let year = sqlx::types::chrono::DateTime::from_timestamp(
        (now_ms() / 1000.0) as i64 + 365 * 86_400,
        0,
    )
    .ok_or("a year from now is out of range")?;
    let batch = |first: u64, k: usize, o: InsertOpts| -> Result<Vec<InsertParams>> {
        (first..first + k as u64)
            .map(|i| params_with(&job(i, cfg.payload_bytes), o.clone()).map_err(Into::into))
            .collect()
    };
    for (first, k) in chunks(dead) {
        store.enqueue_params_copy(p, &batch(first, k, opts())?).await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM awa.jobs WHERE queue = $1 AND state = 'available'",
        )
        .bind(QUEUE)
        .fetch_all(p)
        .await?;
        store.cancel_jobs_by_ids(p, &ids).await?;
    }
    for (first, k) in chunks(scheduled) {
        let o = InsertOpts {
            run_at: Some(year),
            ..opts()
        };
        store.enqueue_params_copy(p, &batch(first, k, o)?).await?;
    }
    for (first, k) in chunks(ready) {
        let o = InsertOpts {
            queue: "backlog_other".into(),
            ..opts()
        };
        store.enqueue_params_copy(p, &batch(first, k, o)?).await?;
    }
    sqlx::query("VACUUM ANALYZE").execute(p).await?;
    if let Err(e) = sqlx::query("CHECKPOINT").execute(p).await {
        log(&format!("CHECKPOINT skipped: {e}"));
    }
    let base = store.queue_counts(p, QUEUE).await?.terminal;
    BACKLOG_BASE.store(base, Ordering::Relaxed);
    log(&format!(
        "backlog of {} filled in {:.1} s ({base} terminal)",
        ready + scheduled + dead,
        t0.elapsed().as_secs_f64()
    ));
    Ok(())
}

// ------------------------------------------------------------------ scenarios

struct Outcome {
    jobs: u64,
    seconds: f64,
    latency_us: Option<Value>,
    backlog_end: Option<i64>,
    /// Jobs settled in the window, for the cost per job.
    settled: u64,
    extra: Value,
}

/// B > 1: one producer, `QueueStorage::enqueue_params_copy` with B jobs per
/// call: awa's README, "For high-volume queue-storage producers, use the
/// direct queue-storage COPY path: ... Rust
/// `QueueStorage::enqueue_params_copy()`", the path [portable]'s producer
/// takes by default. B = 1: W producers, each `awa::insert_with` one job per
/// call (awa's README quick start; it routes to queue storage through
/// `awa.insert_job_compat`). Only the pool is needed: the README, "If you
/// only need to enqueue jobs from Rust, depend on `awa-model`".
async fn scenario_enqueue(cfg: &Cfg, p: &PgPool) -> Result<Outcome> {
    let store = Arc::new(QueueStorage::new(storage_config())?);
    let start = Instant::now();
    if cfg.batch > 1 {
        let mut done = 0;
        while done < cfg.jobs {
            let n = cfg.batch.min(cfg.jobs - done);
            store
                .enqueue_params_copy(p, &params(done as u64, n, cfg.payload_bytes)?)
                .await?;
            done += n;
        }
    } else {
        let next = Arc::new(AtomicU64::new(0));
        let mut producers = tokio::task::JoinSet::new();
        for _ in 0..cfg.workers {
            let (next, p, cfg) = (next.clone(), p.clone(), cfg.clone());
            producers.spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= cfg.jobs as u64 {
                        return Result::Ok(());
                    }
                    insert_with(&p, &job(i, cfg.payload_bytes), opts()).await?;
                }
            });
        }
        while let Some(r) = producers.join_next().await {
            r??;
        }
    }
    Ok(Outcome {
        jobs: cfg.jobs as u64,
        seconds: start.elapsed().as_secs_f64(),
        latency_us: None,
        backlog_end: None,
        settled: cfg.jobs as u64,
        extra: json!({}),
    })
}

/// The timer runs from the first handler call until awa counts every job
/// terminal (`queue_counts`, polled every 50 ms, as [portable]
/// `wait_for_completion`), capped at S seconds when S > 0.
async fn scenario_drain(
    cfg: &Cfg,
    client: &Client,
    seen: &Seen,
    m: &mut Monitor,
) -> Result<Outcome> {
    client.start().await?;
    let start = loop {
        if let Some(t) = seen.first.get() {
            break *t;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let cap = if cfg.seconds > 0.0 {
        Duration::from_secs_f64(cfg.seconds)
    } else {
        Duration::MAX
    };
    let (completed, end) = loop {
        let left = cap.saturating_sub(start.elapsed());
        tokio::time::sleep(POLL.min(left)).await;
        let n = m.completed().await?;
        let end = Instant::now();
        if n >= cfg.jobs as i64 || end - start >= cap {
            break (n, end);
        }
    };
    log("drained");
    client.shutdown(Duration::from_secs(5)).await;
    Ok(Outcome {
        jobs: completed as u64,
        seconds: (end - start).as_secs_f64(),
        latency_us: None,
        backlog_end: Some(cfg.jobs as i64 - completed),
        settled: 0,
        extra: json!({
            "enqueued": cfg.jobs,
            "handler_jobs": seen.handled.load(Ordering::Relaxed),
            "capped": completed < cfg.jobs as i64,
        }),
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let idx = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx].round()
}

/// A pacing loop enqueues at R jobs/s for S seconds: every 10 ms the jobs
/// that came due go out in one `enqueue_params_copy` call, at most 4 calls
/// in flight (the harness's rule for every system). Pickup latency is
/// handler start minus the enqueue time in the job.
async fn scenario_steady(
    cfg: &Cfg,
    client: &Client,
    p: &PgPool,
    seen: &Seen,
    m: &mut Monitor,
) -> Result<Outcome> {
    seen.recording.store(true, Ordering::Relaxed);
    client.start().await?;
    let store = Arc::new(QueueStorage::new(storage_config())?);
    let target = due_by(cfg, cfg.seconds).round() as u64;
    let dur = Duration::from_secs_f64(cfg.seconds);
    let acked = Arc::new(AtomicU64::new(0));
    let inflight = Arc::new(AtomicU64::new(0));
    let mut pending = tokio::task::JoinSet::new();
    let mut sent = 0u64;
    let t0 = Instant::now();
    let t0_ms = now_ms();
    let mut enq_per_s: Vec<u64> = Vec::new();
    let mut tick = 1u32;
    loop {
        while let Some(r) = pending.try_join_next() {
            r??;
        }
        let elapsed = t0.elapsed();
        let due = target.min(due_by(cfg, elapsed.as_secs_f64()).floor() as u64);
        if due > sent && (inflight.load(Ordering::Relaxed) as usize) < MAX_INFLIGHT_INSERTS {
            let n = (due - sent) as usize;
            let i = ((now_ms() - t0_ms) / 1000.0).max(0.0) as usize;
            if enq_per_s.len() <= i {
                enq_per_s.resize(i + 1, 0);
            }
            enq_per_s[i] += n as u64;
            let batch = params(sent, n, cfg.payload_bytes)?;
            sent += n as u64;
            inflight.fetch_add(1, Ordering::Relaxed);
            let (store, p, acked, inflight) =
                (store.clone(), p.clone(), acked.clone(), inflight.clone());
            pending.spawn(async move {
                let r = store.enqueue_params_copy(&p, &batch).await;
                inflight.fetch_sub(1, Ordering::Relaxed);
                r?;
                acked.fetch_add(n as u64, Ordering::Relaxed);
                Result::Ok(())
            });
        }
        if elapsed >= dur && sent >= target {
            break;
        }
        let next = t0 + TICK * tick;
        tick += 1;
        tokio::time::sleep_until(next.into()).await;
    }
    while let Some(r) = pending.join_next().await {
        r??;
    }
    let producer_secs = t0.elapsed().as_secs_f64();
    let acked = acked.load(Ordering::Relaxed);
    let completed = m.completed().await?;
    seen.recording.store(false, Ordering::Relaxed);
    client.shutdown(Duration::from_secs(5)).await;
    let mut lat = std::mem::take(&mut *seen.latencies_us.lock().unwrap());
    lat.sort_by(f64::total_cmp);
    let events = std::mem::take(&mut *seen.events.lock().unwrap());
    let timeline = cfg.timeline.then(|| {
        let mut per_s: Vec<Vec<f64>> = vec![Vec::new(); enq_per_s.len()];
        for (t, us) in events {
            let i = ((t - t0_ms) / 1000.0).max(0.0) as usize;
            if per_s.len() <= i {
                per_s.resize(i + 1, Vec::new());
            }
            per_s[i].push(us);
        }
        enq_per_s.resize(per_s.len(), 0);
        for v in &mut per_s {
            v.sort_by(f64::total_cmp);
        }
        let pct = |v: &Vec<f64>, p: f64| (!v.is_empty()).then(|| percentile(v, p));
        json!({
            "t0_ms": t0_ms,
            "enqueued": enq_per_s,
            "done": per_s.iter().map(Vec::len).collect::<Vec<_>>(),
            "p50_us": per_s.iter().map(|v| pct(v, 0.5)).collect::<Vec<_>>(),
            "p99_us": per_s.iter().map(|v| pct(v, 0.99)).collect::<Vec<_>>(),
        })
    });
    Ok(Outcome {
        jobs: completed as u64,
        seconds: producer_secs,
        latency_us: (!lat.is_empty())
            .then(|| json!({"p50": percentile(&lat, 0.5), "p99": percentile(&lat, 0.99)})),
        backlog_end: Some(acked as i64 - completed),
        settled: 0,
        extra: json!({
            "enqueued": acked,
            "picked_up": lat.len(),
            "latency_max_us": lat.last().map(|v| v.round()),
            "timeline": timeline,
        }),
    })
}

// ------------------------------------------------------------------ main

fn awa_version() -> &'static str {
    // The version the lockfile resolved (Cargo.toml pins it with `=`).
    let lock = include_str!("../Cargo.lock");
    lock.split("[[package]]")
        .find(|p| p.contains("\nname = \"awa\"\n"))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .map(|v| v.trim_end_matches('"'))
        .unwrap_or("unknown")
}

fn settings(cfg: &Cfg) -> String {
    let base = format!(
        "awa {} (Rust runtime, queue storage); pool max={POOL_CONNECTIONS}; tokio multi-thread, 4 worker threads",
        awa_version()
    );
    let q = describe_queue(&queue_config(cfg));
    let run = "Client::builder().queue_storage(default config, queue rotate 1000ms, lease rotate 50ms).transition_role(QueueStorageTarget), no-op handler";
    match cfg.scenario.as_str() {
        "enqueue" if cfg.batch > 1 => format!("{base}; QueueStorage::enqueue_params_copy({} jobs) per call, 1 producer", cfg.batch),
        "enqueue" => format!("{base}; awa::insert_with() one job per call, {} concurrent producers", cfg.workers),
        "drain" => format!("{base}; {run}; {q}; pre-enqueue enqueue_params_copy x{PREENQUEUE_CHUNK} + ANALYZE + CHECKPOINT (untimed); done = queue_counts().terminal"),
        _ => format!("{base}; {run}; {q}; producer enqueue_params_copy() every {}ms at {}/s (<={MAX_INFLIGHT_INSERTS} calls in flight)", TICK.as_millis(), cfg.rate),
    }
}

async fn run(cfg: Cfg) -> Result<Value> {
    setup(&cfg).await?;
    let calibration = match cfg.admin_db {
        Some(_) if cfg.scenario != "enqueue" => Some(calibrate_monitor(&cfg).await?),
        _ => None,
    };

    // The measured window: a new pool and runtime (their start-up is in the
    // window), the scenario, shutdown, and a last count of the jobs done.
    let av0 = if cfg.admin_db.is_some() {
        autovacuum_runs(&cfg).await?
    } else {
        0
    };
    let c0 = match cfg.admin_db {
        Some(_) => Some(read_counters(&cfg).await?),
        None => None,
    };
    log("window open");
    let p = pool(&cfg.db, POOL_CONNECTIONS).await?;
    let mut monitor = match cfg.scenario.as_str() {
        "enqueue" => None,
        _ => Some(Monitor::open(&cfg).await?),
    };
    let seen = Arc::new(Seen::default());
    let mut out = match cfg.scenario.as_str() {
        "enqueue" => scenario_enqueue(&cfg, &p).await?,
        "drain" => {
            let client = build_client(p.clone(), &cfg, seen.clone())?;
            scenario_drain(&cfg, &client, &seen, monitor.as_mut().unwrap()).await?
        }
        _ => {
            let client = build_client(p.clone(), &cfg, seen.clone())?;
            scenario_steady(&cfg, &client, &p, &seen, monitor.as_mut().unwrap()).await?
        }
    };
    p.close().await;
    let mut monitor_commits = 0i64;
    if let Some(mut m) = monitor {
        out.settled = m.completed().await?.max(0) as u64;
        if let Some((first, each)) = calibration {
            monitor_commits = first + ((m.calls - 1) as f64 * each).round() as i64;
        }
        m.close().await;
    }
    log("closed");
    let cost = match c0 {
        Some((commits0, wal0)) => {
            let (commits1, wal1) = read_counters(&cfg).await?;
            let av1 = autovacuum_runs(&cfg).await?;
            Some(json!({
                "commits": commits1 - commits0 - monitor_commits,
                "wal_bytes": wal1 - wal0,
                "jobs": out.settled,
                "autovacuum": av1 - av0,
            }))
        }
        None => None,
    };
    let mut result = json!({
        "system": "awa",
        "scenario": cfg.scenario,
        "jobs": out.jobs,
        "seconds": out.seconds,
        "latency_us": out.latency_us,
        "backlog_end": out.backlog_end,
        "cost": cost,
        "settings": format!("{}; payload ~{}B JSON", settings(&cfg), cfg.payload_bytes),
    });
    if let (Some(r), Value::Object(extra)) = (result.as_object_mut(), out.extra) {
        r.extend(extra);
        if let Some((first, each)) = calibration {
            r.insert(
                "monitor_commits".into(),
                json!({"subtracted": monitor_commits, "first_call": first, "per_call": each}),
            );
        }
    }
    Ok(result)
}

// awa's own benchmarks and its portable adapter run on a multi-thread tokio
// runtime with 4 worker threads ([bench-test], [portable]).
#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    T0.get_or_init(Instant::now);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,sqlx::query=error")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let cfg = parse_args();
    let guard = if cfg.seconds > 0.0 {
        cfg.seconds + 120.0
    } else {
        300.0
    } + if cfg.backlog.is_some() { 7200.0 } else { 0.0 };
    let scenario = cfg.scenario.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs_f64(guard)).await;
        die(
            &format!("overall timeout: no result after {guard}s (awa {scenario})"),
            3,
        );
    });
    match run(cfg).await {
        Ok(result) => println!("{result}"),
        Err(e) => {
            let mut msg = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            die(&msg, 1)
        }
    }
}
