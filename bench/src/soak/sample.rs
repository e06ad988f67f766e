//! One sample every few seconds: the window's latencies and counts, the
//! workers' server backends' memory (/proc/<pid>/status and their own
//! pg_backend_memory_contexts), the extension's table and index sizes,
//! dead tuples and the queue's states.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::load::{self, Latencies, Shared, Totals};
use crate::db::{Cluster, Conn, Result};

/// Long enough for every worker to have read its memory contexts after the
/// sampler asked (a claim and a settle take milliseconds).
const CONTEXT_WAIT: Duration = Duration::from_millis(300);

pub struct Sample {
    pub t: f64,
    pub latencies: Latencies,
    pub enqueued: u64,
    pub completed: u64,
    pub failed: u64,
    pub dropped: u64,
    pub ready: i64,
    pub scheduled: i64,
    pub in_flight: i64,
    pub dead: i64,
    pub kept: i64,
    /// Sums over the workers' backends, kB (VmRSS, RssAnon) and bytes.
    pub rss_kb: i64,
    pub anon_kb: i64,
    pub max_anon_kb: i64,
    pub context_bytes: i64,
    /// CPU time (user + system) of the workers' backends in the window, ms.
    pub cpu_ms: f64,
    pub total_bytes: i64,
    pub index_bytes: i64,
    pub task_bytes: i64,
    pub kept_bytes: i64,
    pub dead_tuples: i64,
    pub live_tuples: i64,
    pub autovacuums: i64,
}

/// The CSV columns, in `Sample::csv_row` order.
pub const CSV_HEADER: &str =
    "t_s,enqueued,completed,failed,dropped,ready,scheduled,in_flight,dead,completed_kept,\
pickup_p50_ms,pickup_p99_ms,pickup_max_ms,timer_pickup_p99_ms,end_to_end_p50_ms,end_to_end_p99_ms,\
workers_rss_kb,workers_anon_kb,max_worker_anon_kb,workers_context_bytes,workers_cpu_ms,\
total_bytes,index_bytes,task_bytes,completed_task_bytes,dead_tuples,live_tuples,autovacuums";

pub fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl Sample {
    pub fn pickup_ms(&self, q: f64) -> f64 {
        ms(self.latencies.pickup.value_at_quantile(q))
    }

    /// The workers' backends' CPU time per claim settled in the window.
    pub fn cpu_per_task(&self) -> f64 {
        self.cpu_ms / self.completed.max(1) as f64
    }

    pub fn csv_row(&self) -> String {
        let l = &self.latencies;
        format!(
            "{:.1},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{},{},{:.0},{},{},{},{},{},{},{}",
            self.t,
            self.enqueued,
            self.completed,
            self.failed,
            self.dropped,
            self.ready,
            self.scheduled,
            self.in_flight,
            self.dead,
            self.kept,
            self.pickup_ms(0.5),
            self.pickup_ms(0.99),
            ms(l.pickup.max()),
            ms(l.timer_pickup.value_at_quantile(0.99)),
            ms(l.end_to_end.value_at_quantile(0.5)),
            ms(l.end_to_end.value_at_quantile(0.99)),
            self.rss_kb,
            self.anon_kb,
            self.max_anon_kb,
            self.context_bytes,
            self.cpu_ms,
            self.total_bytes,
            self.index_bytes,
            self.task_bytes,
            self.kept_bytes,
            self.dead_tuples,
            self.live_tuples,
            self.autovacuums,
        )
    }

    /// The progress line printed as the soak runs.
    pub fn line(&self) -> String {
        format!(
            "  {:>6.0} s  done {:>5}  ready {:>5}  pickup p50 {:>6.2} p99 {:>7.2} ms  size {:>6.1} MB  dead tup {:>6}  anon {:>6} kB  ctx {:>5} kB  cpu {:>5.2} ms/task",
            self.t,
            self.completed,
            self.ready,
            self.pickup_ms(0.5),
            self.pickup_ms(0.99),
            self.total_bytes as f64 / 1e6,
            self.dead_tuples,
            self.anon_kb,
            self.context_bytes / 1024,
            self.cpu_per_task()
        )
    }
}

/// User + system CPU time of a process, ms (clock ticks of 10 ms, the
/// USER_HZ of Linux on every common architecture).
fn process_cpu_ms(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat(5); 12 and 13 here.
    (ticks(11) + ticks(12)) * 10.0
}

/// VmRSS and RssAnon of a process, kB.
fn process_memory(pid: i32) -> (i64, i64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("RssAnon:"))
}

pub struct Sampler {
    conn: Conn,
    pids: Vec<i32>,
    /// Counts at the previous sample, for the window's differences.
    last: (u64, u64, u64, u64),
    last_cpu_ms: f64,
    counters: bool,
}

const SIZES: &str = "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint,
        coalesce(sum(pg_indexes_size(c.oid)), 0)::bigint,
        pg_total_relation_size('aedb_queue.task'),
        pg_total_relation_size('aedb_queue.completed_task'),
        (SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = 'aedb_queue'),
        (SELECT coalesce(sum(n_live_tup), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = 'aedb_queue'),
        (SELECT coalesce(sum(autovacuum_count), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = 'aedb_queue')
    FROM pg_class c
    WHERE c.relnamespace = 'aedb_queue'::regnamespace AND c.relkind = 'r'";

const STATES: &str = "SELECT ready, scheduled, in_flight, dead, completed_kept
    FROM aedb_queue.queue_overview(1000000, $1)";

impl Sampler {
    pub async fn new(cluster: &Cluster, pids: Vec<i32>) -> Result<Sampler> {
        let conn = load::connect(cluster, load::ADMIN).await?;
        let counters = conn
            .client
            .query("SELECT 1 FROM aedb_queue.queue_counters()", &[])
            .await
            .is_ok();
        Ok(Sampler {
            conn,
            pids,
            last: (0, 0, 0, 0),
            last_cpu_ms: 0.0,
            counters,
        })
    }

    fn window_counts(&mut self, shared: &Shared) -> (u64, u64, u64, u64) {
        let c = &shared.counts;
        let now = (
            c.enqueued.load(Ordering::Relaxed),
            c.completed.load(Ordering::Relaxed),
            c.failed.load(Ordering::Relaxed),
            c.dropped.load(Ordering::Relaxed),
        );
        let last = std::mem::replace(&mut self.last, now);
        (
            now.0 - last.0,
            now.1 - last.1,
            now.2 - last.2,
            now.3 - last.3,
        )
    }

    pub async fn take(&mut self, shared: &Shared, t: f64) -> Result<Sample> {
        shared.epoch.fetch_add(1, Ordering::Relaxed);
        let latencies = shared.take_latencies();
        let (enqueued, completed, failed, dropped) = self.window_counts(shared);
        tokio::time::sleep(CONTEXT_WAIT).await;
        let memory: Vec<(i64, i64)> = self.pids.iter().map(|&p| process_memory(p)).collect();
        let cpu_now: f64 = self.pids.iter().map(|&p| process_cpu_ms(p)).sum();
        let cpu_ms = cpu_now - std::mem::replace(&mut self.last_cpu_ms, cpu_now);
        let context_bytes = shared
            .context_bytes
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum();
        let sizes = self.conn.client.query_one(SIZES, &[]).await?;
        let states = self.conn.query(STATES, &[&super::QUEUE]).await?;
        let state = |i: usize| states.first().map_or(0, |r| r.get::<_, i64>(i));
        Ok(Sample {
            t,
            latencies,
            enqueued,
            completed,
            failed,
            dropped,
            ready: state(0),
            scheduled: state(1),
            in_flight: state(2),
            dead: state(3),
            kept: state(4),
            rss_kb: memory.iter().map(|m| m.0).sum(),
            anon_kb: memory.iter().map(|m| m.1).sum(),
            max_anon_kb: memory.iter().map(|m| m.1).max().unwrap_or(0),
            context_bytes,
            cpu_ms,
            total_bytes: sizes.get(0),
            index_bytes: sizes.get(1),
            task_bytes: sizes.get(2),
            kept_bytes: sizes.get(3),
            dead_tuples: sizes.get(4),
            live_tuples: sizes.get(5),
            autovacuums: sizes.get(6),
        })
    }

    /// The server's own counts and what is left in the queue, for the
    /// report's balance.
    pub async fn finish(mut self, mut totals: Totals) -> Result<Totals> {
        if self.counters {
            let rows = self
                .conn
                .query(
                    "SELECT enqueued, completed, dead_lettered, reclaimed FROM aedb_queue.queue_counters() WHERE queue = $1",
                    &[&super::QUEUE],
                )
                .await?;
            totals.counters = rows
                .first()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)));
        }
        let row = self
            .conn
            .client
            .query_one(
                "SELECT waiting + scheduled + blocked + ready + in_flight + dead, completed_kept
                 FROM aedb_queue.queue_overview(1000000, $1)",
                &[&super::QUEUE],
            )
            .await?;
        totals.live_at_end = row.get(0);
        totals.kept_at_end = row.get(1);
        Ok(totals)
    }
}
