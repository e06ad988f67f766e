//! The soak's outputs: samples.csv, one SVG per measure, and latest.md
//! with the target's checks (last window against the first after warm-up).

use std::fmt::Write as _;
use std::path::Path;

use super::load::{Latencies, Totals};
use super::sample::{ms, Sample, CSV_HEADER};
use super::svg::{chart, Series};
use super::Phases;
use crate::db::Result;

/// The bound: last window within this factor of the first.
const TARGET_RATIO: f64 = 1.2;

pub struct Run {
    pub phases: Phases,
    pub rate: u64,
    pub capacity: Option<f64>,
    pub workers: usize,
    pub sample_seconds: u64,
    pub started_at: String,
    pub load_before: String,
    pub load_after: String,
    /// The harness arguments that reproduce the run.
    pub command: String,
    pub totals: Totals,
}

fn within(samples: &[Sample], (a, b): (f64, f64)) -> Vec<&Sample> {
    samples
        .iter()
        .filter(|s| s.t > a && s.t <= b + 0.5)
        .collect()
}

fn merged(samples: &[&Sample]) -> Latencies {
    let mut all = Latencies::new();
    for s in samples {
        all.add(&s.latencies);
    }
    all
}

fn max_of(samples: &[&Sample], f: impl Fn(&Sample) -> f64) -> f64 {
    samples.iter().map(|s| f(s)).fold(0.0, f64::max)
}

fn mean_of(samples: &[&Sample], f: impl Fn(&Sample) -> f64) -> f64 {
    samples.iter().map(|s| f(s)).sum::<f64>() / samples.len().max(1) as f64
}

/// One measure of the first and the last window.
struct Row {
    name: &'static str,
    first: f64,
    last: f64,
    /// Checked against `TARGET_RATIO` (the others are shown for context).
    checked: Option<&'static str>,
}

impl Row {
    fn ratio(&self) -> f64 {
        if self.first > 0.0 {
            self.last / self.first
        } else {
            f64::NAN
        }
    }

    fn pass(&self) -> bool {
        self.ratio() <= TARGET_RATIO
    }
}

fn rows(first: &[&Sample], last: &[&Sample], seconds: f64) -> Vec<Row> {
    let (lf, ll) = (merged(first), merged(last));
    let quantile = |l: &Latencies, q: f64| ms(l.pickup.value_at_quantile(q));
    let row =
        |name: &'static str, f: &dyn Fn(&[&Sample]) -> f64, checked: Option<&'static str>| Row {
            name,
            first: f(first),
            last: f(last),
            checked,
        };
    let mb = 1e6;
    vec![
        Row {
            name: "pickup p50, ms",
            first: quantile(&lf, 0.5),
            last: quantile(&ll, 0.5),
            checked: None,
        },
        Row {
            name: "pickup p99, ms",
            first: quantile(&lf, 0.99),
            last: quantile(&ll, 0.99),
            checked: Some("p99 pickup latency"),
        },
        Row {
            name: "pickup max, ms",
            first: ms(lf.pickup.max()),
            last: ms(ll.pickup.max()),
            checked: None,
        },
        Row {
            name: "timer pickup p99 (after due), ms",
            first: ms(lf.timer_pickup.value_at_quantile(0.99)),
            last: ms(ll.timer_pickup.value_at_quantile(0.99)),
            checked: None,
        },
        Row {
            name: "end-to-end p50, ms",
            first: ms(lf.end_to_end.value_at_quantile(0.5)),
            last: ms(ll.end_to_end.value_at_quantile(0.5)),
            checked: None,
        },
        Row {
            name: "end-to-end p99, ms",
            first: ms(lf.end_to_end.value_at_quantile(0.99)),
            last: ms(ll.end_to_end.value_at_quantile(0.99)),
            checked: None,
        },
        row(
            "completed, tasks/s",
            &|w| {
                w.iter().map(|s| s.completed as f64).sum::<f64>()
                    / (w.len().max(1) as f64 * seconds)
            },
            None,
        ),
        row(
            "ready backlog, mean",
            &|w| mean_of(w, |s| s.ready as f64),
            None,
        ),
        row(
            "total size (tables + indexes + TOAST), max MB",
            &|w| max_of(w, |s| s.total_bytes as f64 / mb),
            Some("total size"),
        ),
        row(
            "indexes, max MB",
            &|w| max_of(w, |s| s.index_bytes as f64 / mb),
            None,
        ),
        row(
            "aedb_queue.task, max MB",
            &|w| max_of(w, |s| s.task_bytes as f64 / mb),
            None,
        ),
        row(
            "aedb_queue.completed_task, max MB",
            &|w| max_of(w, |s| s.kept_bytes as f64 / mb),
            None,
        ),
        row(
            "completed tasks kept, mean",
            &|w| mean_of(w, |s| s.kept as f64),
            None,
        ),
        row(
            "dead tuples, mean",
            &|w| mean_of(w, |s| s.dead_tuples as f64),
            None,
        ),
        row(
            "dead tuples, max",
            &|w| max_of(w, |s| s.dead_tuples as f64),
            None,
        ),
        row(
            "workers' backends CPU per completed task (idle polls included), ms",
            &|w| {
                w.iter().map(|s| s.cpu_ms).sum::<f64>()
                    / w.iter().map(|s| s.completed as f64).sum::<f64>().max(1.0)
            },
            None,
        ),
        row(
            "workers' backends RSS (sum), max MB",
            &|w| max_of(w, |s| s.rss_kb as f64 / 1e3),
            None,
        ),
        row(
            "workers' backends anonymous memory (sum), max MB",
            &|w| max_of(w, |s| s.anon_kb as f64 / 1e3),
            Some("backend memory (anonymous)"),
        ),
        row(
            "workers' memory contexts (sum), max MB",
            &|w| max_of(w, |s| s.context_bytes as f64 / mb),
            Some("backend memory (contexts)"),
        ),
    ]
}

fn fmt(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn write_csv(dir: &Path, samples: &[Sample]) -> Result<()> {
    let mut csv = String::from(CSV_HEADER);
    csv.push('\n');
    for s in samples {
        csv.push_str(&s.csv_row());
        csv.push('\n');
    }
    std::fs::write(dir.join("samples.csv"), csv)?;
    Ok(())
}

type Measure<'a> = (&'a str, &'a dyn Fn(&Sample) -> f64);

fn write_chart(
    dir: &Path,
    file: &str,
    title: &str,
    unit: &str,
    phases: &Phases,
    samples: &[Sample],
    measures: &[Measure],
) -> Result<()> {
    let series: Vec<Series> = measures
        .iter()
        .map(|(name, f)| Series {
            name,
            points: samples.iter().map(|s| (s.t, f(s))).collect(),
        })
        .collect();
    std::fs::write(dir.join(file), chart(title, unit, phases, &series))?;
    Ok(())
}

pub const CHARTS: [&str; 6] = [
    "latency.svg",
    "memory.svg",
    "size.svg",
    "dead_tuples.svg",
    "throughput.svg",
    "cpu.svg",
];

fn write_charts(dir: &Path, phases: &Phases, samples: &[Sample]) -> Result<()> {
    let mb = 1e6;
    write_chart(
        dir,
        CHARTS[0],
        "Pickup latency per sample",
        "ms",
        phases,
        samples,
        &[
            ("pickup p50", &|s| s.pickup_ms(0.5)),
            ("pickup p99", &|s| s.pickup_ms(0.99)),
            ("timer pickup p99", &|s| {
                ms(s.latencies.timer_pickup.value_at_quantile(0.99))
            }),
        ],
    )?;
    write_chart(
        dir,
        CHARTS[1],
        "Workers' server backends (sums)",
        "MB",
        phases,
        samples,
        &[
            ("RSS", &|s| s.rss_kb as f64 / 1e3),
            ("anonymous (RssAnon)", &|s| s.anon_kb as f64 / 1e3),
            ("memory contexts", &|s| s.context_bytes as f64 / mb),
        ],
    )?;
    write_chart(
        dir,
        CHARTS[2],
        "Extension's tables and indexes",
        "MB",
        phases,
        samples,
        &[
            ("total", &|s| s.total_bytes as f64 / mb),
            ("indexes", &|s| s.index_bytes as f64 / mb),
            ("task (with its indexes)", &|s| s.task_bytes as f64 / mb),
            ("completed_task (with its indexes)", &|s| {
                s.kept_bytes as f64 / mb
            }),
        ],
    )?;
    write_chart(
        dir,
        CHARTS[3],
        "Dead tuples (pg_stat_user_tables, aedb_queue)",
        "tuples",
        phases,
        samples,
        &[("dead tuples", &|s| s.dead_tuples as f64)],
    )?;
    write_chart(
        dir,
        CHARTS[4],
        "Throughput and backlog per sample",
        "tasks",
        phases,
        samples,
        &[
            ("completed per sample", &|s| s.completed as f64),
            ("ready at sample", &|s| s.ready as f64),
            ("scheduled at sample", &|s| s.scheduled as f64),
        ],
    )?;
    write_chart(
        dir,
        CHARTS[5],
        "Workers' backends' CPU time per completed task",
        "ms",
        phases,
        samples,
        &[("CPU per task", &|s| s.cpu_per_task())],
    )?;
    Ok(())
}

fn minutes(t: f64) -> String {
    format!("{:.1}", t / 60.0)
}

fn balance(md: &mut String, t: &Totals) {
    let _ = writeln!(md, "## Totals\n");
    let _ = writeln!(
        md,
        "Enqueued {} · claims {} · completed {} · failed (handler) {} · dropped unsettled {} · fenced out {} · call errors {}.  \n\
         `queue_reap()` promoted {} timers, reclaimed {} leases, dead-lettered {}; claims promote and reclaim inline too. Dead letters purged by the operator: {}.",
        t.enqueued, t.claimed, t.completed, t.failed, t.dropped, t.lease_lost, t.errors,
        t.reaped_promoted, t.reaped_reclaimed, t.reaped_dead, t.purged_dead
    );
    if let Some((enq, done, dead, reclaimed)) = t.counters {
        // Dead tasks stay live until the operator purges them.
        let left = enq - done - t.purged_dead as i64;
        let holds = enq == t.enqueued as i64 && done == t.completed as i64 && left == t.live_at_end;
        let _ = writeln!(
            md,
            "\n`queue_counters()`: enqueued {enq}, completed {done}, dead-lettered {dead}, reclaimed {reclaimed} (by claims inline and by `queue_reap()`). \
             Balance: enqueued − completed − purged dead letters = {left}; tasks live at the end (any state, dead included): {} ({}). Completed tasks kept at the end: {}.",
            t.live_at_end,
            if holds { "holds, and the counters equal the clients' counts" } else { "**does not hold**" },
            t.kept_at_end
        );
    }
}

pub fn write(dir: &Path, run: &Run, samples: &[Sample]) -> Result<()> {
    write_csv(dir, samples)?;
    write_charts(dir, &run.phases, samples)?;
    let p = &run.phases;
    let (first, last) = (within(samples, p.first), within(samples, p.last));
    let rows = rows(&first, &last, run.sample_seconds as f64);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Soak: {} minutes at a steady rate\n",
        minutes(p.total)
    );
    let _ = writeln!(
        md,
        "Started {} on a shared {}-core machine (1-minute load average {} at the start, {} at the end; whatever else ran beside it shares the cores), bench cluster as set up by `bench/run.sh` (aedb_queue preloaded, its in-server reaper off), everything under `nice -n 10`. `bash bench/run.sh {}` reproduces it.\n",
        run.started_at,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        run.load_before,
        run.load_after,
        run.command
    );
    let capacity = match run.capacity {
        Some(c) => format!("half the {c:.0} tasks/s these workers drained in a calibration just before (capped at {} for retention, see below)", super::MAX_DEFAULT_RATE),
        None => "set with `--soak-rate`".into(),
    };
    let _ = writeln!(
        md,
        "**Load.** One producer offers {} tasks/s ({capacity}) in 10 ms ticks: a batch of the tick's tasks ready at once (`queue_enqueue_batch`), one `queue_enqueue(delay => 1-30 s)` per timer. {} workers (one connection each, role `soak_worker`) claim one task at a time (`queue_claim`, lease 5 s) and poll every 5 ms when there is none. Out of every 100 tasks: 81 complete at once, 10 are timers, 5 fail their first attempt and complete after the backoff (1 s), 2 fail every attempt and are dead after 3 (backoff 1 s, 2 s), 2 are dropped by the worker at their first claim, without settling, and complete once their lease has expired and been reclaimed. The queue keeps completed tasks {} s (`keep_completed`). `queue_reap()` runs every second (as the in-server reaper does; again at once while a pass used its whole budget of 1000), as `soak_admin`, and an operator purges dead letters every minute (`queue_purge(queue, 'dead')`).\n",
        run.rate, run.workers, p.keep_completed()
    );
    let _ = writeln!(
        md,
        "**Measures**, sampled every {} s: pickup latency (claim returned − the moment the task became ready: its enqueue, or a timer's due time; first attempts only), end-to-end (completion committed − ready, every completed task: retries' backoff and expired leases included), the workers' server backends' VmRSS and RssAnon (`/proc/<pid>/status`, summed over the workers) and their memory contexts (each worker reads its own `pg_backend_memory_contexts` total: the view shows only the session's own), their CPU time (`/proc/<pid>/stat`, per completed task: rises if the work per task grows, stays put if the machine is only busier), `pg_total_relation_size` and `pg_indexes_size` of the extension's tables, their dead and live tuples and autovacuum runs (`pg_stat_user_tables`).\n",
        run.sample_seconds
    );
    let _ = writeln!(
        md,
        "**Windows.** Warm-up: minutes 0-{}. First: minutes {}-{}. Last: minutes {}-{}. Target: the last window's p99 pickup latency and total size within {TARGET_RATIO}× of the first's; memory flatness is checked with the same bound.\n",
        minutes(p.warm_up), minutes(p.first.0), minutes(p.first.1), minutes(p.last.0), minutes(p.last.1)
    );
    let _ = writeln!(md, "## Target\n\n| check | measure | first | last | last / first | verdict |\n|---|---|---|---|---|---|");
    for r in rows.iter().filter(|r| r.checked.is_some()) {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.2} | {} |",
            r.checked.unwrap(),
            r.name,
            fmt(r.first),
            fmt(r.last),
            r.ratio(),
            if r.pass() { "pass" } else { "**fail**" }
        );
    }
    let _ = writeln!(md, "\n## First and last window\n\n| measure | first | last | last / first |\n|---|---|---|---|");
    for r in &rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.2} |",
            r.name,
            fmt(r.first),
            fmt(r.last),
            r.ratio()
        );
    }
    md.push('\n');
    balance(&mut md, &run.totals);
    let _ = writeln!(md, "\n## Over time\n");
    for c in CHARTS {
        let _ = writeln!(md, "![{c}]({c})\n");
    }
    let _ = writeln!(md, "Raw samples: [samples.csv](samples.csv) (latencies and counts per sample window; sizes, states and memory at the sample).\n");
    let _ = writeln!(md, "## Notes\n\n{NOTES}");
    std::fs::write(dir.join("latest.md"), md)?;
    Ok(())
}

const NOTES: &str = "- The offered rate is capped at 800 tasks/s by default, below the 1000 kept completed tasks one `queue_reap()` pass deletes per queue, so the once-a-second reap keeps up without relying on its repeats (the in-server reaper, too, passes again at once while retention is behind: a96f41f).
- RSS includes the shared buffers a backend has touched (it grows as a backend reads more of them, without any leak); RssAnon and the memory contexts are the backend's own.
- Latencies are measured by the bench's clock against the payload's timestamps, on the same machine; a sample's percentiles cover the tasks of its window only.";
