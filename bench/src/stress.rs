//! The scenarios users fear, for every system the harness drives, in-process
//! or through a driver: a snapshot held for minutes during a steady run, and
//! a burst of ten times the steady rate. Both are one steady run with a
//! per-second timeline (`"timeline": true` in a driver's request); the
//! harness does the rest from outside, the same way for every system:
//!
//! - held snapshot: while the steady run goes on, the harness opens a
//!   REPEATABLE READ transaction on its own connection to the system's
//!   database (application_name `aedb-bench-hold`, which the windows'
//!   quiescence checks ignore), keeps it idle in transaction for the hold,
//!   and commits; it samples `n_dead_tup` of the database's tables (the
//!   system's) when it opens, before it commits and after the run. The
//!   phases (clean, held, after) are cut out of the timeline by the wall
//!   clock of the opening and the commit.
//! - burst: the producer runs at the base rate, at `rate` x factor for the
//!   burst, then at the base rate again; from the timeline: the time from
//!   the burst's end until every job enqueued by then was picked up, the
//!   peak backlog, and the pickup latency before, during and after.

use std::time::{Duration, Instant};

use crate::db::{Cluster, Result};
use crate::node;
use crate::scenarios::{self, Burst, Ctx, Measured, Timeline, HOLDER_APP};
use crate::systems::System;

/// Workers of the steady runs here, as in the steady scenario.
pub const WORKERS: usize = 4;

/// One steady run of any system, with its timeline.
pub async fn steady_timeline(
    cluster: &Cluster,
    system: System,
    rate: u64,
    seconds: u64,
    burst: Option<Burst>,
) -> Result<(Measured, Timeline)> {
    let m = if system.is_node() {
        let req = node::Request {
            workers: WORKERS,
            batch: 1,
            rate,
            seconds,
            timeline: true,
            burst,
            ..Default::default()
        };
        node::run(cluster, system, "steady", req).await?
    } else {
        let ctx = Ctx {
            cluster: cluster.clone(),
            system,
        };
        scenarios::steady_shaped(&ctx, rate, seconds, WORKERS, burst, true).await?
    };
    let t = m
        .timeline
        .clone()
        .ok_or("the driver returned no timeline (it predates the timeline protocol)")?;
    Ok((m, t))
}

/// A phase of a timeline: seconds [from, to) of the window.
#[derive(Clone, Copy, Debug, Default)]
pub struct Phase {
    /// Jobs picked up per second.
    pub rate: f64,
    /// Median of the per-second p50s, and the largest per-second p99.
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    /// Jobs enqueued and not yet picked up at the phase's end.
    pub backlog_end: i64,
}

pub fn phase(t: &Timeline, from: usize, to: usize) -> Phase {
    let to = to.min(t.done.len());
    if from >= to {
        return Phase::default();
    }
    let done: u64 = t.done[from..to].iter().sum();
    let mut p50s: Vec<f64> = t.p50_us[from..to].iter().flatten().copied().collect();
    p50s.sort_by(f64::total_cmp);
    let p99 = t.p99_us[from..to]
        .iter()
        .flatten()
        .copied()
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let enq: u64 = t.enqueued[..to].iter().sum();
    let picked: u64 = t.done[..to].iter().sum();
    Phase {
        rate: done as f64 / (to - from) as f64,
        p50_us: (!p50s.is_empty()).then(|| p50s[p50s.len() / 2]),
        p99_us: p99,
        backlog_end: enq as i64 - picked as i64,
    }
}

pub struct Held {
    pub clean: Phase,
    pub held: Phase,
    pub after: Phase,
    /// n_dead_tup of the system's tables: when the snapshot was taken, just
    /// before it was released, and after the run.
    pub dead_before: i64,
    pub dead_during: i64,
    pub dead_after: i64,
    /// Seconds the snapshot was actually held, and the age of its xmin
    /// (transactions) when released.
    pub held_seconds: f64,
    pub xmin_age: i64,
}

const DEAD_SQL: &str = "SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables";

async fn dead_tuples(cluster: &Cluster, db: &str) -> Result<i64> {
    let conn = cluster.connect(db).await?;
    // Statistics reach the shared counters lazily: wait out one flush.
    conn.batch("SELECT pg_stat_clear_snapshot()").await?;
    conn.scalar_i64(DEAD_SQL).await
}

/// The longest wait for a driver's producer to start: awa's runtime took
/// 35 s in a trial, well past the start-up allowance of the run's length.
const PRODUCER_WAIT: Duration = Duration::from_secs(120);

/// Waits until the steady run's producer is at work in `db` (half a second
/// with at least half of `rate` rows a second inserted into its tables,
/// from their statistics), or at most `wait`. Drivers start up for
/// very different times (a migration, a runtime's maintenance), so a fixed
/// delay opened some snapshots before a slow driver's window.
async fn window_opened(cluster: &Cluster, db: &str, rate: u64, wait: Duration) -> Result<()> {
    // Rows of the database's own tables: tup_inserted of pg_stat_database
    // also counts the catalog rows of a driver's migrations (awa's made it
    // look at work 25 s before its producer started). The connection can
    // be cut by the driver's fresh database (DROP ... WITH FORCE): then
    // connect again and start counting anew.
    let sql = "SELECT pg_stat_clear_snapshot(); SELECT coalesce(sum(n_tup_ins), 0)::bigint FROM pg_stat_user_tables";
    let deadline = Instant::now() + wait;
    let mut conn = None;
    let mut last: Option<(Instant, i64)> = None;
    while Instant::now() < deadline {
        if conn.is_none() {
            conn = cluster.connect(db).await.ok();
            if let Some(c) = &conn {
                if c.batch(&format!("SET application_name = '{HOLDER_APP}'")).await.is_err() {
                    conn = None;
                }
            }
            last = None;
        }
        if let Some(c) = &conn {
            match c.client.simple_query(sql).await {
                Ok(rows) => {
                    let n = rows.iter().find_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).and_then(|v| v.parse::<i64>().ok()),
                        _ => None,
                    });
                    let now = (Instant::now(), n.unwrap_or(0));
                    if let Some((at, before)) = last {
                        if producing(now.1 - before, now.0.duration_since(at), rate) {
                            return Ok(());
                        }
                    }
                    last = Some(now);
                }
                Err(_) => conn = None,
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// Whether `inserted` rows in `over` mean a producer at `rate` is running.
fn producing(inserted: i64, over: Duration, rate: u64) -> bool {
    over.as_secs_f64() > 0.0 && inserted as f64 / over.as_secs_f64() >= rate as f64 / 2.0
}

/// A steady run of `clean + hold + after` seconds (plus `slack`, the
/// driver's start-up allowance) at `rate`, with a snapshot held for `hold`
/// from `clean` after the producer is seen at work.
pub async fn held_snapshot(
    cluster: &Cluster,
    system: System,
    rate: u64,
    slack: Duration,
    clean: Duration,
    hold: Duration,
    after: Duration,
) -> Result<Held> {
    let db = system.db_name();
    let holder = {
        let cluster = cluster.clone();
        let db = db.clone();
        tokio::spawn(async move {
            window_opened(&cluster, &db, rate, PRODUCER_WAIT).await?;
            tokio::time::sleep(clean).await;
            let conn = cluster.connect(&db).await?;
            conn.batch(&format!("SET application_name = '{HOLDER_APP}'"))
                .await?;
            let dead_before = conn.scalar_i64(DEAD_SQL).await?;
            conn.batch("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class;")
                .await?;
            let opened_ms = crate::db::now_micros() as f64 / 1000.0;
            let started = Instant::now();
            tokio::time::sleep(hold).await;
            // Read from a second connection: the holder's own snapshot would
            // show the statistics frozen at its start.
            let dead_during = dead_tuples(&cluster, &db).await?;
            let xmin_age = cluster
                .connect(&db)
                .await?
                .scalar_i64(&format!(
                    "SELECT coalesce(max(age(backend_xmin)), 0)::bigint FROM pg_stat_activity WHERE application_name = '{HOLDER_APP}'"
                ))
                .await?;
            let closed_ms = crate::db::now_micros() as f64 / 1000.0;
            let held_seconds = started.elapsed().as_secs_f64();
            conn.batch("COMMIT").await?;
            drop(conn);
            Ok::<_, crate::db::BoxError>((
                opened_ms,
                closed_ms,
                dead_before,
                dead_during,
                held_seconds,
                xmin_age,
            ))
        })
    };
    let seconds = (slack + clean + hold + after).as_secs();
    let run = steady_timeline(cluster, system, rate, seconds, None).await;
    let hold_result = holder.await?;
    let (_, t) = run?;
    let (opened_ms, closed_ms, dead_before, dead_during, held_seconds, xmin_age) = hold_result?;
    let dead_after = dead_tuples(cluster, &db).await?;
    let at = |ms: f64| ((ms - t.t0_ms) / 1000.0).max(0.0);
    let (open_s, close_s) = (at(opened_ms), at(closed_ms));
    // Whole seconds inside each phase; the first second (start-up) is left out.
    let end = seconds as usize;
    if open_s < 2.0 {
        return Err(format!(
            "the window began {:.1} s after the snapshot was taken, leaving no clean phase (a longer start-up allowance is needed)",
            -((opened_ms - t.t0_ms) / 1000.0)
        )
        .into());
    }
    Ok(Held {
        clean: phase(&t, 1, open_s.floor() as usize),
        held: phase(&t, open_s.ceil() as usize, close_s.floor() as usize),
        after: phase(&t, close_s.ceil() as usize, end),
        dead_before,
        dead_during,
        dead_after,
        held_seconds,
        xmin_age,
    })
}

pub struct BurstResult {
    pub before: Phase,
    pub burst: Phase,
    /// From the burst's end until every job enqueued by then was picked up
    /// (None: not within the run).
    pub drain_seconds: Option<f64>,
    pub peak_backlog: i64,
    /// The largest per-second p99 pickup latency from the burst's start to
    /// the end of the run, and the median per-second p50 after the burst.
    pub p99_us: Option<f64>,
    pub after: Phase,
    pub enqueued: u64,
    pub picked_up: u64,
}

pub async fn burst(
    cluster: &Cluster,
    system: System,
    base: u64,
    burst: Burst,
    after: Duration,
) -> Result<BurstResult> {
    let seconds = burst.at + burst.seconds + after.as_secs();
    let (_, t) = steady_timeline(cluster, system, base, seconds, Some(burst)).await?;
    let end_of_burst = (burst.at + burst.seconds) as usize;
    let owed: u64 = t.enqueued[..end_of_burst.min(t.enqueued.len())]
        .iter()
        .sum();
    let mut cum = 0u64;
    let mut drain_seconds = None;
    let mut peak = 0i64;
    let mut enq = 0u64;
    for (i, (&d, &e)) in t.done.iter().zip(&t.enqueued).enumerate() {
        cum += d;
        enq += e;
        peak = peak.max(enq as i64 - cum as i64);
        if drain_seconds.is_none() && i + 1 >= end_of_burst && cum >= owed {
            drain_seconds = Some((i + 1 - end_of_burst) as f64);
        }
    }
    let from_burst = phase(&t, burst.at as usize, t.done.len());
    Ok(BurstResult {
        before: phase(&t, 1, burst.at as usize),
        burst: phase(&t, burst.at as usize, end_of_burst),
        drain_seconds,
        peak_backlog: peak,
        p99_us: from_burst.p99_us,
        after: phase(&t, end_of_burst, t.done.len()),
        enqueued: enq,
        picked_up: cum,
    })
}

// ------------------------------------------------------------------ faults

/// The faults of one drain: backend kills, then an immediate restart.
#[derive(Clone, Debug)]
pub struct Faults {
    pub jobs: usize,
    /// Jobs of a peer's faulted drain (its driver preloads them; the slow
    /// peers' smaller preload, `Plan::slow_drain_jobs`, caps it).
    pub peer_jobs: usize,
    pub workers: usize,
    /// Seconds into the drain of each round of pg_terminate_backend of
    /// the workers' backends.
    pub kills_at: Vec<f64>,
    /// Seconds into the drain of `pg_ctl restart -m immediate` (None: no restart).
    pub restart_at: Option<f64>,
    /// How long the drain may take in all (leases of 30 s must run out).
    pub deadline: Duration,
    /// The cluster's data directory and pg_ctl, for the restart.
    pub pg_data: String,
    pub pg_ctl: String,
}

pub struct FaultResult {
    pub enqueued: u64,
    /// Distinct ids in the ledger, ledger rows, and ids enqueued but never
    /// recorded (lost, or still queued when the deadline passed).
    pub distinct: u64,
    pub rows: u64,
    pub missing: u64,
    pub duplicates: u64,
    pub seconds: f64,
    pub kills: u64,
    pub restarted: bool,
    pub worker_errors: u64,
    /// Ids in the ledger at the first fault (the drain must not be over by then).
    pub at_first_fault: u64,
    /// The driver's failure, if it failed (the ledger is compared all the same).
    pub driver_error: Option<String>,
}

/// The systems whose fault drain the harness runs in-process: the worker
/// writes its jobs' ids to the ledger in the transaction that completes
/// them. PgQ's batches and pgmq's pop settle in the claim; the peers with
/// drivers run through `faults_driver` when their driver has the ledger flag.
pub fn faults_supported(system: System) -> bool {
    matches!(system, System::Aedb | System::Baseline | System::Pgmq)
}

const FAULT_APP: &str = "aedb-bench-faults";
const LEDGER_SQL: &str = "CREATE TABLE bench_ledger (job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())";

/// One worker that survives its connection: on any error it reconnects and
/// goes on. Claims one job per transaction, then in one transaction records
/// its id in the ledger and completes it.
async fn fault_worker(
    cluster: Cluster,
    system: System,
    w: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    errors: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use std::sync::atomic::Ordering;
    let owner = format!("f{w}");
    let db = system.db_name();
    while !stop.load(Ordering::Relaxed) {
        let mut conn = match cluster.connect(&db).await {
            Ok(c) => c,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let r: Result<()> = async {
            while !stop.load(Ordering::Relaxed) {
                let jobs =
                    crate::systems::claim(system, &mut conn, crate::systems::QUEUE, &owner, 1)
                        .await?;
                if jobs.is_empty() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
                conn.batch("BEGIN").await?;
                conn.execute(
                    "INSERT INTO bench_ledger (job_id) SELECT unnest($1::bigint[])",
                    &[&ids],
                )
                .await?;
                crate::systems::complete(system, &mut conn, crate::systems::QUEUE, &jobs, true)
                    .await?;
                conn.batch("COMMIT").await?;
            }
            Ok(())
        }
        .await;
        if r.is_err() {
            errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn restart_cluster(f: &Faults) -> Result<()> {
    let as_root = std::env::var("USER").map(|u| u == "root").unwrap_or(false)
        || std::process::Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false);
    let mut cmd = if as_root {
        let mut c = tokio::process::Command::new("runuser");
        c.args(["-u", "postgres", "--", &f.pg_ctl]);
        c
    } else {
        tokio::process::Command::new(&f.pg_ctl)
    };
    // The new postmaster outlives this process: it must inherit none of
    // our files, such as the lock a caller took with flock(1) around the
    // run (a restarted cluster held the test lock after a run ended).
    // CLOEXEC, not close: the spawn reports exec errors through a pipe.
    // SAFETY: only an async-signal-safe system call runs in the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as libc::c_int);
            Ok(())
        });
    }
    // The new postmaster logs to a file: it would otherwise hold our
    // pipe open, and the wait for pg_ctl's output would never end.
    let log = format!("{}/restart.log", f.pg_data);
    let out = cmd
        .args([
            "restart",
            "-m",
            "immediate",
            "-w",
            "-D",
            &f.pg_data,
            "-l",
            &log,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .await?;
    if !out.status.success() {
        return Err(format!(
            "pg_ctl restart failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// Preloads `jobs`, drains them with resilient workers that write a ledger,
/// kills their backends and restarts the cluster on schedule, waits until
/// every job is in the ledger or the deadline, and compares.
pub async fn faults(cluster: &Cluster, system: System, f: &Faults) -> Result<FaultResult> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let ctx = Ctx {
        cluster: cluster.clone(),
        system,
    };
    let mut conn = ctx.fresh().await?;
    conn.batch(LEDGER_SQL).await?;
    scenarios::preload(&ctx, &mut conn, crate::systems::QUEUE, f.jobs).await?;
    // The system's own ids, the ones the workers record.
    let ids_sql = match system {
        System::Aedb => "SELECT task_id FROM aedb_queue.task",
        System::Baseline => "SELECT id FROM jobs",
        _ => "SELECT msg_id FROM pgmq.q_q",
    };
    conn.batch(&format!(
        "CREATE TABLE bench_enqueued AS {ids_sql}; ALTER TABLE bench_enqueued RENAME COLUMN {} TO job_id",
        ids_sql.split_whitespace().nth(1).unwrap_or("id")
    ))
    .await?;
    drop(conn);
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..f.workers)
        .map(|w| {
            tokio::spawn(fault_worker(
                cluster.clone(),
                system,
                w,
                stop.clone(),
                errors.clone(),
            ))
        })
        .collect();
    let s = schedule(cluster, &system.db_name(), f, f.jobs as u64, || false).await?;
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.await;
    }
    let mut r = compare(cluster, &system.db_name(), s).await?;
    r.worker_errors = errors.load(Ordering::Relaxed);
    Ok(r)
}

/// What the schedule saw.
struct Scheduled {
    seconds: f64,
    kills: u64,
    restarted: bool,
    at_first_fault: u64,
}

/// Waits for the drain to begin (a first ledger row), then ends the
/// workers' backends and restarts the cluster on schedule, until every job
/// is in the ledger (once the faults are past), `finished` says so, or the
/// deadline.
async fn schedule(
    cluster: &Cluster,
    db: &str,
    f: &Faults,
    enqueued: u64,
    finished: impl Fn() -> bool,
) -> Result<Scheduled> {
    let count = || async {
        let c = cluster.connect(db).await?;
        c.batch(&format!("SET application_name = '{FAULT_APP}'"))
            .await?;
        c.scalar_i64("SELECT count(DISTINCT job_id)::bigint FROM bench_ledger")
            .await
    };
    let wait = Instant::now();
    loop {
        if count().await.is_ok_and(|n| n > 0) {
            break;
        }
        if finished() || wait.elapsed() > Duration::from_secs(300) {
            return Err("the drain never started (no ledger row)".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let start = Instant::now();
    let mut kills_left: Vec<f64> = f.kills_at.clone();
    kills_left.sort_by(f64::total_cmp);
    kills_left.reverse();
    let mut restart = f.restart_at;
    let (mut kills, mut restarted) = (0u64, false);
    let mut distinct = 0u64;
    let mut at_first_fault = None;
    while start.elapsed() < f.deadline && !finished() {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let t = start.elapsed().as_secs_f64();
        if kills_left.last().is_some_and(|&k| t >= k) {
            kills_left.pop();
            at_first_fault.get_or_insert(distinct);
            if let Ok(admin) = cluster.connect("postgres").await {
                let sql = format!("SELECT count(pg_terminate_backend(pid))::bigint FROM pg_stat_activity WHERE datname = '{db}' AND backend_type = 'client backend' AND application_name NOT IN ('{FAULT_APP}', '{HOLDER_APP}', 'bench-monitor', 'bench-ledger')");
                if let Ok(n) = admin.scalar_i64(&sql).await {
                    kills += n as u64;
                }
            }
        }
        if restart.is_some_and(|r| t >= r) {
            restart = None;
            at_first_fault.get_or_insert(distinct);
            restart_cluster(f).await?;
            restarted = true;
        }
        if let Ok(n) = count().await {
            distinct = n as u64;
        }
        if distinct >= enqueued && kills_left.is_empty() && restart.is_none() {
            break;
        }
    }
    Ok(Scheduled {
        seconds: start.elapsed().as_secs_f64(),
        kills,
        restarted,
        at_first_fault: at_first_fault.unwrap_or(distinct),
    })
}

/// The ledger against the ids enqueued (`bench_enqueued`).
async fn compare(cluster: &Cluster, db: &str, s: Scheduled) -> Result<FaultResult> {
    let c = cluster.connect(db).await?;
    let row = c
        .client
        .query_one(
            "SELECT (SELECT count(*) FROM bench_enqueued)::bigint, \
                    (SELECT count(DISTINCT job_id) FROM bench_ledger WHERE job_id IN (SELECT job_id FROM bench_enqueued))::bigint, \
                    (SELECT count(*) FROM bench_ledger)::bigint, \
                    (SELECT count(DISTINCT job_id) FROM bench_ledger)::bigint",
            &[],
        )
        .await?;
    let (enqueued, recorded, rows, distinct): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    Ok(FaultResult {
        enqueued: enqueued as u64,
        distinct: distinct as u64,
        rows: rows as u64,
        missing: (enqueued - recorded).max(0) as u64,
        duplicates: (rows - distinct).max(0) as u64,
        seconds: s.seconds,
        kills: s.kills,
        restarted: s.restarted,
        worker_errors: 0,
        at_first_fault: s.at_first_fault,
        driver_error: None,
    })
}

/// The same faults for a peer with a driver that has the ledger flag: its
/// drain of `jobs` preloaded jobs (payload "i" 0..jobs), each handler
/// recording "i" in the ledger.
pub async fn faults_driver(
    cluster: &Cluster,
    system: System,
    f: &Faults,
    jobs: usize,
) -> Result<FaultResult> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let finished = Arc::new(AtomicBool::new(false));
    let driver = {
        let (cluster, finished) = (cluster.clone(), finished.clone());
        let req = node::Request {
            jobs,
            workers: f.workers,
            batch: 1,
            seconds: f.deadline.as_secs(),
            ledger: true,
            ..Default::default()
        };
        tokio::spawn(async move {
            let r = node::run(&cluster, system, "drain", req).await;
            finished.store(true, Ordering::Relaxed);
            r.map_err(|e| e.to_string())
        })
    };
    let db = system.db_name();
    // node::run recreates the database: wait for the driver's ledger table.
    let s = schedule(cluster, &db, f, jobs as u64, || {
        finished.load(Ordering::Relaxed)
    })
    .await;
    let outcome = driver.await?;
    let s = s?;
    let c = cluster.connect(&db).await?;
    c.batch(&format!(
        "CREATE TABLE bench_enqueued AS SELECT generate_series(0, {}::bigint) AS job_id",
        jobs as i64 - 1
    ))
    .await?;
    drop(c);
    let mut r = compare(cluster, &db, s).await?;
    r.driver_error = outcome.err();
    Ok(r)
}

/// The peers whose driver implements the ledger flag.
pub fn ledger_driver(system: System) -> bool {
    system.is_node() && system != System::AwaPython
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(enq: &[u64], done: &[u64]) -> Timeline {
        Timeline {
            t0_ms: 0.0,
            enqueued: enq.to_vec(),
            done: done.to_vec(),
            p50_us: done.iter().map(|&d| (d > 0).then_some(d as f64)).collect(),
            p99_us: done
                .iter()
                .map(|&d| (d > 0).then_some(10.0 * d as f64))
                .collect(),
        }
    }

    #[test]
    fn a_burst_owes_its_extra_jobs_only_while_it_lasts() {
        let b = Burst {
            rate: 1_000,
            at: 2,
            seconds: 3,
        };
        assert_eq!(b.due(100, 1.0), 100.0);
        assert_eq!(b.due(100, 3.0), 300.0 + 900.0);
        assert_eq!(b.due(100, 10.0), 1_000.0 + 2_700.0);
        assert_eq!(Burst::default().due(100, 4.0), 400.0);
    }

    #[test]
    fn a_producer_is_seen_at_half_its_rate_or_more() {
        let s = Duration::from_millis(500);
        assert!(producing(250, s, 1_000));
        assert!(!producing(240, s, 1_000), "a migration's few rows are not the producer");
        assert!(!producing(5, Duration::ZERO, 1));
    }

    #[test]
    fn a_phase_is_its_whole_seconds() {
        let t = timeline(&[10, 10, 10, 10], &[5, 10, 12, 13]);
        let p = phase(&t, 1, 3);
        assert_eq!(p.rate, 11.0);
        assert_eq!(p.p99_us, Some(120.0));
        assert_eq!(p.backlog_end, 30 - 27);
        assert_eq!(phase(&t, 3, 2).rate, 0.0);
        assert_eq!(phase(&t, 3, 99).rate, 13.0);
    }
}
