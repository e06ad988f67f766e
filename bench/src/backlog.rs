//! Scale of the backlog (issue 47): enqueue and claim cost, and the drain
//! rate, with a small backlog (10,000 tasks) and a large one (10,000,000 in a
//! full run) already waiting, and how each system's tables and indexes grow.
//!
//! The backlog is a mix (`Mix::of`): 80 % ready tasks on another queue (or
//! task kind) that the measured workers do not consume, 15 % scheduled a year
//! ahead and 5 % dead, both on the measured queue. Why the ready part is on
//! another queue: the measured drain must settle the same M fresh tasks at
//! both sizes. On the measured queue, a first-in-first-out claim would
//! settle M of the backlog's oldest tasks instead, and the large cell would
//! measure the first M tasks of a 10,000,000 drain, not the cost the waiting
//! tasks put on new work. Ready work of other queues sharing the table, and
//! timers and dead letters of the measured queue itself, is what a busy
//! deployment has waiting while its workers keep up. A system that keeps
//! each queue in a table of its own (pgmq, PgQ) then shows the benefit of
//! that design, which is the point of measuring it.
//!
//! Each cell starts from a fresh database: the system's schema, the backlog
//! filled with set-based SQL (the system's own functions called from
//! `generate_series`, or `INSERT ... SELECT` of the rows its API writes),
//! `VACUUM ANALYZE` and `CHECKPOINT`, the sizes; then `enqueue_jobs` single
//! enqueues from one connection (timed), then `drain_jobs` fresh ready tasks
//! preloaded in batches (untimed) and drained with `workers` workers, claim
//! then complete per job (timed until they and the enqueued ones are done).
//! The peers run in their own drivers, which take the fill as `backlog_sql`,
//! run it after their own schema install, untimed (`bench/peers/*`).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::db::{payload, Cluster, Conn, Result};
use crate::node;
use crate::report::{Results, Unit};
use crate::scenarios::{self, Ctx};
use crate::systems::{self, System, QUEUE};

/// The queue (or task kind) the ready part of the backlog sits on.
pub const OTHER_QUEUE: &str = "backlog_other";
/// Results table names.
pub const TABLE: &str = "backlog";

/// The backlog's composition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    /// Ready on `OTHER_QUEUE`.
    pub ready: usize,
    /// On the measured queue, due a year from now.
    pub scheduled: usize,
    /// On the measured queue, failed for good.
    pub dead: usize,
}

impl Mix {
    /// 80 % ready elsewhere, 15 % scheduled, 5 % dead; the parts add up to `n`.
    pub fn of(n: usize) -> Mix {
        let scheduled = n * 15 / 100;
        let dead = n * 5 / 100;
        Mix {
            ready: n - scheduled - dead,
            scheduled,
            dead,
        }
    }

    pub fn total(self) -> usize {
        self.ready + self.scheduled + self.dead
    }

    /// For a system with no scheduled or dead state: everything ready elsewhere.
    fn all_ready(self) -> Mix {
        Mix {
            ready: self.total(),
            scheduled: 0,
            dead: 0,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub small: usize,
    pub large: usize,
    pub enqueue_jobs: usize,
    pub drain_jobs: usize,
    pub workers: usize,
    pub window: Duration,
}

/// Column names, one per measurement and backlog size.
pub fn col(what: &str, n: usize) -> String {
    format!("{what} @{n}")
}
pub const ENQ: &str = "enqueue";
pub const DRAIN: &str = "drain";
pub const SIZE: &str = "size";
const INDEXES: &str = "indexes";
const FILL: &str = "fill s";

/// `large / small` as "0.93×" (below 0.1 with two significant digits,
/// "0.0034×": a collapse should not read as zero), or "–" when either is
/// missing or zero.
pub fn ratio(small: Option<f64>, large: Option<f64>) -> String {
    match (small, large) {
        (Some(s), Some(l)) if s > 0.0 && s.is_finite() && l.is_finite() => {
            let r = l / s;
            if r > 0.0 && r < 0.1 {
                let digits = (1 - r.log10().floor() as i32).max(2) as usize;
                format!("{r:.digits$}×")
            } else {
                format!("{r:.2}×")
            }
        }
        _ => "–".into(),
    }
}

/// Bytes per task of the growth between the two backlogs: what each extra
/// waiting task costs in tables and indexes.
pub fn bytes_per_task(small: (usize, Option<f64>), large: (usize, Option<f64>)) -> Option<f64> {
    match (small, large) {
        ((ns, Some(s)), (nl, Some(l))) if nl > ns => Some((l - s) / (nl - ns) as f64),
        _ => None,
    }
}

/// The systems this scenario measures: every queue, not the worker loops
/// (their enqueue and storage are their parents').
pub fn systems(all: &[System]) -> Vec<System> {
    all.iter().copied().filter(|s| !s.is_loop()).collect()
}

/// The cells of one system in the order they run: the small backlog before
/// and after the large one, so that the ratio compares the large cell with
/// the mean of two small ones bracketing it in time (single enqueues on
/// this shared machine vary by a factor of two or more from minute to minute).
pub fn order(o: &Options) -> [usize; 3] {
    [o.small, o.large, o.small]
}

/// Measures one system at both sizes, recording into `results`.
pub async fn run(cluster: &Cluster, system: System, o: &Options, results: &mut Results) {
    for n in order(o) {
        let started = Instant::now();
        let cell = if system.is_node() {
            peer_cell(cluster, system, n, o).await
        } else {
            rust_cell(cluster, system, n, o).await
        };
        let name = system.name();
        match cell {
            Ok(c) => {
                let mut line = format!("  {TABLE:<22} {name:<16} @{n:<9}");
                for (what, v) in [(ENQ, c.enqueue), (DRAIN, c.drain)] {
                    match v {
                        Ok(rate) => {
                            results.add(TABLE, name, &col(what, n), rate);
                            let _ = write!(line, " {what} {rate:>8.0}/s");
                        }
                        Err(e) => {
                            let note = format!("{TABLE} / {name} / {what} @{n}: failed: {e}");
                            println!("  {note}");
                            results.notes.push(note);
                        }
                    }
                }
                if let Some((total, idx)) = c.size {
                    results.add(TABLE, name, &col(SIZE, n), total as f64);
                    results.add(TABLE, name, &col(INDEXES, n), idx as f64);
                    let _ = write!(line, " {total} B ({idx} B indexes)");
                }
                results.add(TABLE, name, &col(FILL, n), c.fill_seconds);
                let _ = write!(
                    line,
                    " fill {:.0} s, cell {:.0} s",
                    c.fill_seconds,
                    started.elapsed().as_secs_f64()
                );
                println!("{line}");
            }
            Err(e) => {
                let note = format!("{TABLE} / {name} @{n}: not measured: {e}");
                println!("  {note}");
                results.notes.push(note);
            }
        }
    }
    // A 10,000,000-row database is gigabytes: not left behind.
    if let Ok(admin) = cluster.connect("postgres").await {
        let _ = admin
            .batch(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                system.db_name()
            ))
            .await;
    }
}

struct Cell {
    enqueue: Result<f64>,
    drain: Result<f64>,
    /// Tables with their indexes and TOAST, and the indexes alone, after the fill.
    size: Option<(i64, i64)>,
    fill_seconds: f64,
}

async fn sizes(conn: &Conn, system: System) -> Result<(i64, i64)> {
    let total = conn.scalar_i64(system.size_sql()).await?;
    let indexes = conn
        .scalar_i64(
            &system
                .size_sql()
                .replace("pg_total_relation_size", "pg_indexes_size"),
        )
        .await?;
    Ok((total, indexes))
}

/// The Rust-driven systems: fill, sizes, then the enqueue and the drain in
/// the same database.
async fn rust_cell(cluster: &Cluster, system: System, n: usize, o: &Options) -> Result<Cell> {
    let ctx = Ctx {
        cluster: cluster.clone(),
        system,
    };
    let mut conn = ctx.fresh().await?;
    let t = Instant::now();
    for sql in fill_sql(system, n)? {
        conn.batch(&sql).await?;
    }
    conn.batch("VACUUM ANALYZE").await?;
    scenarios::settle_storage(&conn).await?;
    let fill_seconds = t.elapsed().as_secs_f64();
    let size = Some(sizes(&conn, system).await?);
    let enqueue = single_enqueues(&ctx, o.enqueue_jobs).await;
    scenarios::preload(&ctx, &mut conn, QUEUE, o.drain_jobs).await?;
    drop(conn);
    let workers = if system == System::Pgq { 1 } else { o.workers };
    let target = (o.drain_jobs + o.enqueue_jobs * enqueue.is_ok() as usize) as u64;
    let drain = scenarios::drain_loaded(&ctx, target, workers, 1, o.window)
        .await
        .map(|m| m.rate());
    Ok(Cell {
        enqueue,
        drain,
        size,
        fill_seconds,
    })
}

/// `jobs` single enqueues, one call and one transaction each, from one
/// connection that made one rolled-back call first (as the enqueue cells).
async fn single_enqueues(ctx: &Ctx, jobs: usize) -> Result<f64> {
    let mut conn = ctx.connect().await?;
    conn.batch("BEGIN").await?;
    systems::enqueue_one(ctx.system, &mut conn, QUEUE, &payload()).await?;
    conn.batch("ROLLBACK").await?;
    let start = Instant::now();
    for _ in 0..jobs {
        let p: Value = payload();
        systems::enqueue_one(ctx.system, &mut conn, QUEUE, &p).await?;
    }
    Ok(jobs as f64 / start.elapsed().as_secs_f64())
}

/// How a peer's driver gets its backlog.
#[derive(Debug, PartialEq)]
enum PeerFill {
    /// Statements run by the driver after its schema install.
    Sql(Vec<String>),
    /// The peer's own bulk API, in the driver (`fillBacklog` in driver.mjs).
    Api(Mix),
}

fn peer_fill(system: System, n: usize) -> Result<PeerFill> {
    match system {
        System::PgBoss
        | System::Graphile
        | System::Procrastinate
        | System::PgQueuer
        | System::ObanPy
        | System::Awa
        | System::AwaPython
        | System::PgQue => Ok(PeerFill::Api(Mix::of(n))),
        _ => fill_sql(system, n).map(PeerFill::Sql),
    }
}

/// The peers in drivers of their own: each run (enqueue, then drain) fills
/// its own fresh database, so the fill runs twice.
async fn peer_cell(cluster: &Cluster, system: System, n: usize, o: &Options) -> Result<Cell> {
    let (backlog_sql, backlog) = match peer_fill(system, n)? {
        PeerFill::Sql(s) => (Some(&*Box::leak(s.join(";\n").into_boxed_str())), None),
        PeerFill::Api(m) => (None, Some((m.ready, m.scheduled, m.dead))),
    };
    let t = Instant::now();
    let enq_req = node::Request {
        jobs: o.enqueue_jobs,
        workers: 1,
        batch: 1,
        backlog_sql,
        backlog,
        ..Default::default()
    };
    let enq = node::run(cluster, system, "enqueue", enq_req).await;
    // The driver's whole run but the timed enqueues: its install, the fill,
    // the client's start-up and shutdown.
    let fill_seconds = t.elapsed().as_secs_f64() - enq.as_ref().map_or(0.0, |m| m.seconds);
    // The sizes after the enqueue run: the backlog and its enqueue_jobs
    // (the growth per task takes the difference of the two sizes).
    let size = match cluster.connect(&system.db_name()).await {
        Ok(conn) => sizes(&conn, system).await.ok(),
        Err(_) => None,
    };
    let (workers, batch) = match system {
        // A single consumer reads whole tick batches (as in the drains).
        System::PgQue => (1, 100),
        _ => (o.workers, 1),
    };
    let drain_req = node::Request {
        jobs: o.drain_jobs,
        workers,
        batch,
        seconds: o.window.as_secs(),
        backlog_sql,
        backlog,
        ..Default::default()
    };
    let drain = node::run(cluster, system, "drain", drain_req).await;
    Ok(Cell {
        enqueue: enq.map(|m| m.rate()),
        drain: drain.map(|m| m.rate()),
        size,
        fill_seconds,
    })
}

/// About 100 bytes of JSON, as `db::payload`: {"t": µs, "kind", "pad"}.
const PAYLOAD: &str = "jsonb_build_object('t', (extract(epoch from clock_timestamp()) * 1e6)::bigint, 'kind', 'bench', 'pad', repeat('x', 64))";

/// Rows per fill statement: each statement is its own transaction.
const CHUNK: usize = 100_000;

/// `stmt(k)` for chunks of at most `chunk` rows adding up to `n`.
pub fn chunked(n: usize, chunk: usize, stmt: impl Fn(usize) -> String) -> Vec<String> {
    let mut out = Vec::new();
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk);
        out.push(stmt(k));
        left -= k;
    }
    out
}

/// The statements that fill `system`'s backlog of `n` tasks, after its
/// schema is installed; an error says why a system cannot be filled.
pub fn fill_sql(system: System, n: usize) -> Result<Vec<String>> {
    let mix = Mix::of(n);
    let mut s = Vec::new();
    match system {
        // aedb_queue's own batch enqueue (batches of at most 10,000), the
        // scheduled tasks with its `delay`; dead tasks are tasks whose last
        // attempt failed: state dead, attempts = max_attempts, the error
        // recorded as queue_fail records it (last_error, errors).
        System::Aedb => {
            fn batch(q: &'static str, extra: &'static str) -> impl Fn(usize) -> String {
                move |k| {
                    format!("SELECT count(*) FROM aedb_queue.queue_enqueue_batch('{q}', ARRAY(SELECT {PAYLOAD} FROM generate_series(1, {k})){extra})")
                }
            }
            s.extend(chunked(mix.dead, 10_000, batch(QUEUE, "")));
            s.push(format!(
                "UPDATE aedb_queue.task SET state = 'dead', attempts = max_attempts, last_error = 'backlog: failed', \
                 errors = jsonb_build_array(jsonb_build_object('attempt', max_attempts, 'at', now(), 'error', 'backlog: failed')), \
                 updated_at = now() WHERE queue = '{QUEUE}' AND state = 'ready'"
            ));
            s.extend(chunked(
                mix.scheduled,
                10_000,
                batch(QUEUE, ", delay => '365 days'"),
            ));
            s.extend(chunked(mix.ready, 10_000, batch(OTHER_QUEUE, "")));
        }
        // The hand-written table: what its INSERT and its failure UPDATE write.
        System::Baseline => {
            s.extend(chunked(mix.dead, CHUNK, |k| format!(
                "INSERT INTO jobs (queue, payload, state, attempts) SELECT '{QUEUE}', {PAYLOAD}, 'dead', 1 FROM generate_series(1, {k})"
            )));
            s.extend(chunked(mix.scheduled, CHUNK, |k| format!(
                "INSERT INTO jobs (queue, payload, run_at) SELECT '{QUEUE}', {PAYLOAD}, now() + interval '365 days' FROM generate_series(1, {k})"
            )));
            s.extend(chunked(mix.ready, CHUNK, |k| format!(
                "INSERT INTO jobs (queue, payload) SELECT '{OTHER_QUEUE}', {PAYLOAD} FROM generate_series(1, {k})"
            )));
        }
        // pgmq: the other queue is a table of its own (pgmq.create); the
        // scheduled messages are send_batch with a delay (visible a year on);
        // dead letters are pgmq's archive (pgmq.archive moves a message to
        // the queue's a_ table; pgmq has no other terminal state).
        System::Pgmq => {
            s.push(format!("SELECT pgmq.create('{OTHER_QUEUE}')"));
            s.extend(chunked(mix.dead, CHUNK, |k| format!(
                "SELECT count(*) FROM pgmq.send_batch('{QUEUE}', ARRAY(SELECT {PAYLOAD} FROM generate_series(1, {k})))"
            )));
            s.push(format!(
                "SELECT count(*) FROM pgmq.archive('{QUEUE}', ARRAY(SELECT msg_id FROM pgmq.q_{QUEUE}))"
            ));
            s.extend(chunked(mix.scheduled, CHUNK, |k| format!(
                "SELECT count(*) FROM pgmq.send_batch('{QUEUE}', ARRAY(SELECT {PAYLOAD} FROM generate_series(1, {k})), 31536000)"
            )));
            s.extend(chunked(mix.ready, CHUNK, |k| format!(
                "SELECT count(*) FROM pgmq.send_batch('{OTHER_QUEUE}', ARRAY(SELECT {PAYLOAD} FROM generate_series(1, {k})))"
            )));
        }
        // PgQ has neither scheduled nor dead events (a log read by cursors):
        // the whole backlog is events of another queue, pgq.insert_event.
        System::Pgq => {
            let mix = mix.all_ready();
            s.push(format!("SELECT pgq.create_queue('{OTHER_QUEUE}')"));
            s.extend(chunked(mix.ready, CHUNK, |k| format!(
                "SELECT count(pgq.insert_event('{OTHER_QUEUE}', 'job', ({PAYLOAD})::text)) FROM generate_series(1, {k})"
            )));
            s.push("SELECT pgq.ticker()".into());
        }
        other => return peer_fill_sql(other, mix, &mut s).map(|()| s),
    }
    Ok(s)
}

/// The peers driven by drivers of their own: the rows their APIs write,
/// from their installed schemas (see `fill_method`).
fn peer_fill_sql(system: System, _mix: Mix, _s: &mut Vec<String>) -> Result<()> {
    Err(format!("{}: {}", system.name(), fill_method(system)).into())
}

/// How each system was filled, for the report.
pub fn fill_method(system: System) -> &'static str {
    match system {
        System::Aedb => "`queue_enqueue_batch` from `generate_series` (batches of 10,000; the scheduled part with `delay => '365 days'`); dead tasks: the enqueued rows set to `state = 'dead'`, `attempts = max_attempts` and the error in `last_error` and `errors`, as the last failed attempt leaves them.",
        System::Baseline => "`INSERT ... SELECT generate_series` into its `jobs` table (scheduled: `run_at` a year ahead; dead: `state = 'dead'`).",
        System::Pgmq => "`pgmq.send_batch` from `generate_series`: ready ones into a queue of their own (its own table), scheduled ones with a delay of a year; dead ones sent and then `pgmq.archive`d (pgmq's only terminal state).",
        System::Pgq => "`pgq.insert_event` from `generate_series` into a second queue: PgQ has no scheduled or dead events, so the whole backlog is another queue's events.",
        System::PgBoss => "its own API in the driver, 1,000 jobs a call (no set-based fill: pg-boss 12.38.1's `insert` computes a dozen columns from the queue's settings, `plans.js` `insertJobs`): `insert()` into a second queue; `insert()` with `startAfter` a year ahead; `insert()` with `retryLimit: 0`, `fetch()` and `fail()` for state `failed` (its dead state when the queue names no dead-letter queue). The fill runs in each of the two driver runs (enqueue, drain); its time includes the driver's install and start-up.",
        System::Graphile => "its own API in the driver, 1,000 jobs a call: `addJobs()` of a task identifier the workers do not have; `addJobs()` with `runAt` a year ahead; `addJobs()` then `permanentlyFailJobs()` (attempts = max_attempts, graphile-worker's dead jobs). The fill runs in each of the two driver runs; its time includes the driver's install and start-up.",
        System::Procrastinate => "its own API in the driver, 1,000 jobs a call: `batch_defer_async` of `task.configure(queue='backlog_other')`; of `task.configure(schedule_in={'days': 365})`; deferred then finished as failed by `job_manager.finish_job_by_id_async(status=FAILED)` (procrastinate 3.10.0's `procrastinate_finish_job_v1`, from `todo`: attempts 0 where a worker's failure leaves 1).",
        System::PgQueuer => "its own API in the driver, 1,000 jobs a call: `Queries.enqueue` with an entrypoint no worker registers; with `execute_after` a year; enqueued then `mark_job_as_cancelled` (PgQueuer 1.6.0 keeps no failed jobs in its queue table: they move to `pgqueuer_log`, which the size includes).",
        System::ObanPy => "its own API in the driver, 1,000 jobs a call: `enqueue_many` with `queue='backlog_other'`; with `scheduled_in` a year; enqueued then `cancel_many_jobs` (state `cancelled`: oban 0.7.0 has no call that discards, and `discarded` is what exhausted attempts leave).",
        System::Awa => "its own API in the Rust driver, 1,000 jobs a call: `QueueStorage::enqueue_params_copy` into another queue; with `InsertOpts::run_at` a year ahead; enqueued then `cancel_jobs_by_ids` (state cancelled: failing a job for good needs it running; ids from awa 0.6.9's `awa.jobs` view).",
        System::AwaPython => "its own Python SDK in `awa_driver.py` (awa-pg 0.6.9), 1,000 jobs a call: `enqueue_many_copy(queue='backlog_other')`; with `run_at` a year ahead; enqueued then `cancel()` one job at a time (state cancelled), ids from the `awa.jobs` view.",
        System::PgQue => "its Python client in `pgque_driver.py`: `send_batch` into a second queue with a subscriber, 1,000 events a call; PgQ's model has no scheduled or dead events, so the whole backlog is another queue's (not tried here: its schema is in no registry, see the peers' README).",
        _ => "not filled yet.",
    }
}

/// A fill's time; one over `FILL_LIMIT` is marked: such a system cannot be
/// filled to this size within a sane time here (the issue's "every peer that
/// can hold that many").
pub fn fill_cell(seconds: f64) -> String {
    if seconds > FILL_LIMIT {
        format!("{seconds:.0} s (**over {} min**)", FILL_LIMIT as u64 / 60)
    } else {
        format!("{seconds:.0} s")
    }
}
const FILL_LIMIT: f64 = 1_200.0;

fn count(n: usize) -> String {
    Unit::Count.format(n as f64)
}

/// The report's section.
pub fn section(r: &Results, systems: &[System], o: &Options) -> String {
    let names: Vec<&str> = systems.iter().map(|s| s.name()).collect();
    let get = |name: &str, what: &str, n: usize| {
        crate::report::median(r.values(TABLE, name, &col(what, n)))
    };
    let measured: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| {
            [o.small, o.large]
                .iter()
                .any(|&size| get(n, ENQ, size).is_some() || get(n, DRAIN, size).is_some())
        })
        .collect();
    let failed: Vec<&String> = r
        .notes
        .iter()
        .filter(|n| n.starts_with(&format!("{TABLE} / ")))
        .collect();
    if measured.is_empty() && failed.is_empty() {
        return String::new();
    }
    let (s, l) = (o.small, o.large);
    let large_mix = Mix::of(l);
    let mut out = format!(
        "## Scale of the backlog ({small} against {large} tasks waiting)\n\n\
         Each cell starts from a fresh database with a backlog of N tasks: 80 % ready on another queue (or task kind) the workers do not consume, 15 % on the measured queue scheduled a year ahead, 5 % dead on the measured queue (at N = {large}: {r} + {sc} + {d}); filled with set-based SQL (the systems the harness drives) or through the peer's own bulk API in its driver, 1,000 jobs a call (the peers in drivers of their own; how, below), then VACUUM ANALYZE and CHECKPOINT, not timed. \
         The ready part is on another queue so that both sizes drain the same fresh tasks: on the measured queue a first-in-first-out claim would settle the backlog's oldest tasks instead. \
         *enqueue*: {enq} single enqueues from one connection, one transaction each. *drain*: {drain} fresh ready tasks (and the enqueued ones) drained by {w} workers, claim then complete per job ({secs} s cap; PgQ and PgQue: one consumer reading tick batches). \
         Each system runs the small backlog, the large one, then the small one again: the small columns are the mean of the two (both in brackets), so the ratio compares cells that bracket the large one in time. \
         *size*: the system's tables with their indexes and TOAST after the fill (indexes alone in brackets); *B/task*: the growth of tables and indexes (indexes alone in brackets) from N = {small} to N = {large}, over the {grow} extra tasks.\n\n",
        small = count(s),
        large = count(l),
        r = count(large_mix.ready),
        sc = count(large_mix.scheduled),
        d = count(large_mix.dead),
        enq = count(o.enqueue_jobs),
        drain = count(o.drain_jobs),
        w = o.workers,
        secs = o.window.as_secs(),
        grow = count(l.saturating_sub(s)),
    );
    let (s_txt, l_txt) = (count(s), count(l));
    let _ = writeln!(
        out,
        "| system | enqueue/s @{s_txt} | enqueue/s @{l_txt} | ratio | drain/s @{s_txt} | drain/s @{l_txt} | ratio | size @{l_txt} | B/task | fill @{l_txt} |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    // The median, with every value in brackets when there are several.
    let rate = |name: &str, what: &str, n: usize| {
        let values = r.values(TABLE, name, &col(what, n));
        match crate::report::median(values) {
            None => "–".to_string(),
            Some(m) if values.len() > 1 => {
                let raw: Vec<String> = values.iter().map(|v| Unit::PerSecond.format(*v)).collect();
                format!("{} [{}]", Unit::PerSecond.format(m), raw.join(", "))
            }
            Some(m) => Unit::PerSecond.format(m),
        }
    };
    for name in &measured {
        let (es, el) = (get(name, ENQ, s), get(name, ENQ, l));
        let (ds, dl) = (get(name, DRAIN, s), get(name, DRAIN, l));
        let size = match (get(name, SIZE, l), get(name, INDEXES, l)) {
            (Some(t), Some(i)) => format!("{} ({})", Unit::Bytes.format(t), Unit::Bytes.format(i)),
            _ => "–".into(),
        };
        let per_task = match (
            bytes_per_task((s, get(name, SIZE, s)), (l, get(name, SIZE, l))),
            bytes_per_task((s, get(name, INDEXES, s)), (l, get(name, INDEXES, l))),
        ) {
            (Some(t), Some(i)) => format!("{t:.0} ({i:.0})"),
            (Some(t), None) => format!("{t:.0}"),
            _ => "–".to_string(),
        };
        let fill = get(name, FILL, l).map_or("–".to_string(), fill_cell);
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {} | {size} | {per_task} | {fill} |",
            rate(name, ENQ, s),
            rate(name, ENQ, l),
            ratio(es, el),
            rate(name, DRAIN, s),
            rate(name, DRAIN, l),
            ratio(ds, dl),
        );
    }
    let _ = writeln!(out, "\nHow each system was filled:\n");
    for (system, name) in systems.iter().zip(&names) {
        let _ = writeln!(out, "- {name}: {}", fill_method(*system));
    }
    if !failed.is_empty() {
        let _ = writeln!(out, "\nNot measured:\n");
        for note in failed {
            let _ = writeln!(out, "- {note}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_adds_up_and_is_80_15_5() {
        for n in [0, 1, 7, 99, 10_000, 200_000, 10_000_000, 10_000_003] {
            let m = Mix::of(n);
            assert_eq!(m.total(), n, "{n}");
        }
        assert_eq!(
            Mix::of(10_000_000),
            Mix {
                ready: 8_000_000,
                scheduled: 1_500_000,
                dead: 500_000
            }
        );
        assert_eq!(Mix::of(10_000).all_ready().ready, 10_000);
    }

    #[test]
    fn the_small_backlog_brackets_the_large_one() {
        let o = Options {
            small: 10,
            large: 1_000,
            enqueue_jobs: 1,
            drain_jobs: 1,
            workers: 1,
            window: Duration::from_secs(1),
        };
        assert_eq!(order(&o), [10, 1_000, 10]);
    }

    #[test]
    fn a_fill_over_twenty_minutes_is_marked() {
        assert_eq!(fill_cell(1_200.0), "1200 s");
        assert_eq!(fill_cell(1_500.4), "1500 s (**over 20 min**)");
    }

    #[test]
    fn chunks_cover_the_count_and_respect_the_limit() {
        let v = chunked(25_001, 10_000, |k| k.to_string());
        assert_eq!(v, ["10000", "10000", "5001"]);
        assert!(chunked(0, 10, |k| k.to_string()).is_empty());
    }

    #[test]
    fn ratio_is_large_over_small() {
        assert_eq!(ratio(Some(1000.0), Some(930.0)), "0.93×");
        assert_eq!(ratio(Some(2063.0), Some(7.0)), "0.0034×");
        assert_eq!(ratio(Some(1000.0), Some(50.0)), "0.050×");
        assert_eq!(ratio(Some(0.0), Some(930.0)), "–");
        assert_eq!(ratio(None, Some(930.0)), "–");
        assert_eq!(ratio(Some(10.0), None), "–");
    }

    #[test]
    fn bytes_per_task_is_the_growth_per_extra_task() {
        assert_eq!(
            bytes_per_task((10, Some(1_000.0)), (110, Some(21_000.0))),
            Some(200.0)
        );
        assert_eq!(bytes_per_task((10, None), (110, Some(1.0))), None);
        assert_eq!(bytes_per_task((10, Some(1.0)), (10, Some(1.0))), None);
    }

    #[test]
    fn every_rust_driven_system_fills_exactly_n_rows() {
        // Count the rows each statement asks generate_series for.
        for system in [System::Aedb, System::Baseline, System::Pgmq, System::Pgq] {
            let sql = fill_sql(system, 250_003).unwrap();
            let rows: usize = sql
                .iter()
                .filter_map(|s| s.split("generate_series(1, ").nth(1))
                .map(|t| t.split(')').next().unwrap().parse::<usize>().unwrap())
                .sum();
            assert_eq!(rows, 250_003, "{}", system.name());
        }
    }

    #[test]
    fn the_section_has_a_row_per_measured_system_with_ratios() {
        let o = Options {
            small: 100,
            large: 1_100,
            enqueue_jobs: 10,
            drain_jobs: 10,
            workers: 4,
            window: Duration::from_secs(5),
        };
        let mut r = Results::default();
        r.add(TABLE, "aedb_queue", &col(ENQ, 100), 1000.0);
        r.add(TABLE, "aedb_queue", &col(ENQ, 1_100), 900.0);
        // The small backlog's second cell, after the large one.
        r.add(TABLE, "aedb_queue", &col(ENQ, 100), 1500.0);
        r.add(TABLE, "aedb_queue", &col(DRAIN, 100), 2000.0);
        r.add(TABLE, "aedb_queue", &col(DRAIN, 1_100), 500.0);
        r.add(TABLE, "aedb_queue", &col(SIZE, 100), 100_000.0);
        r.add(TABLE, "aedb_queue", &col(SIZE, 1_100), 400_000.0);
        r.add(TABLE, "aedb_queue", &col(INDEXES, 1_100), 100_000.0);
        r.add(TABLE, "aedb_queue", &col(INDEXES, 100), 50_000.0);
        r.add(TABLE, "aedb_queue", &col(FILL, 1_100), 12.4);
        r.notes
            .push(format!("{TABLE} / pg-boss @1100: not measured: why"));
        let md = section(&r, &[System::Aedb, System::Baseline, System::PgBoss], &o);
        assert!(
            md.starts_with("## Scale of the backlog (100 against 1,100 tasks waiting)"),
            "{md}"
        );
        assert!(
            md.contains("| system | enqueue/s @100 | enqueue/s @1,100 | ratio |"),
            "{md}"
        );
        assert!(
            md.contains("| aedb_queue | 1,250 [1,000, 1,500] | 900 | 0.72× | 2,000 | 500 | 0.25× | 0.4 MB (0.1 MB) | 300 (50) | 12 s |"),
            "{md}"
        );
        // No measurements: no row.
        assert!(!md.contains("| baseline |"), "{md}");
        assert!(
            md.contains("- pg-boss @1100: not measured: why")
                || md.contains("- backlog / pg-boss @1100: not measured: why"),
            "{md}"
        );
        assert!(md.contains("- baseline: `INSERT"), "{md}");
        assert_eq!(section(&Results::default(), &[System::Aedb], &o), "");
    }
}
