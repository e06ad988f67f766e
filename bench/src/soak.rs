//! `--only soak`: a long run at a steady offered rate well below
//! saturation, with retries, timers, dead letters, abandoned leases reaped
//! and completed tasks kept for a window, sampled every few seconds: the
//! workers' backend memory, the extension's table and index sizes, dead
//! tuples, pickup and end-to-end latency. Writes `<out>/soak/latest.md`,
//! `samples.csv` and one SVG chart per measure (`<out>/soak/trial/` with
//! `--trial`), and checks the target: the last third's p99 pickup
//! latency and total size within 1.2x of the first third after warm-up.

mod load;
mod report;
mod sample;
mod svg;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::{Cluster, Result};
use load::{Shared, Soak};
use sample::Sample;

pub const DB: &str = "aedb_soak";
pub const QUEUE: &str = "soak";
const CALIBRATION_QUEUE: &str = "soak-calibration";
const CALIBRATION_TASKS: usize = 30_000;
const CALIBRATION_WINDOW: Duration = Duration::from_secs(8);
/// The offered rate as a share of the calibrated drain rate.
const LOAD_SHARE: f64 = 0.5;
/// Kept completed tasks are deleted by `queue_reap` at most 1000 per queue
/// per pass (its `max`), one pass a second: above this the kept table
/// would grow for a reason that is not the soak's subject.
const MAX_DEFAULT_RATE: u64 = 800;

pub struct Options {
    pub cluster: Cluster,
    pub minutes: f64,
    pub sample_seconds: u64,
    pub workers: usize,
    /// Offered tasks/s; None: half the calibrated drain rate.
    pub rate: Option<u64>,
    pub out: PathBuf,
}

/// The run's phases, in seconds from the start of the load: warm-up, then
/// the first and the last thirds compared by the target.
#[derive(Clone, Copy)]
pub struct Phases {
    pub total: f64,
    pub warm_up: f64,
    pub first: (f64, f64),
    pub last: (f64, f64),
}

impl Phases {
    /// 30 minutes: 5 of warm-up, then minutes 5-15 against 20-30.
    pub fn of(total: f64) -> Phases {
        let (warm_up, third) = (total / 6.0, total / 3.0);
        Phases {
            total,
            warm_up,
            first: (warm_up, warm_up + third),
            last: (total - third, total),
        }
    }

    /// How long completed tasks are kept: long enough to matter, short
    /// enough that the kept table is full well before warm-up ends.
    pub fn keep_completed(&self) -> u64 {
        ((self.warm_up / 2.0) as u64).clamp(10, 120)
    }
}

pub async fn run(opts: Options) -> Result<()> {
    let phases = Phases::of(opts.minutes * 60.0);
    let dir = opts.out.clone();
    std::fs::create_dir_all(&dir)?;
    let started_at = load::utc_now(&opts.cluster).await?;
    let load_before = load_average();
    load::setup(&opts.cluster, phases.keep_completed()).await?;
    let capacity = match opts.rate {
        Some(_) => None,
        None => Some(calibrate(&opts).await?),
    };
    let rate = opts.rate.unwrap_or_else(|| {
        let half = capacity.unwrap_or(0.0) * LOAD_SHARE;
        ((half / 10.0).round() as u64 * 10).clamp(50, MAX_DEFAULT_RATE)
    });
    println!(
        "soak: {} workers, {rate} tasks/s offered for {:.1} min, samples every {} s, completed tasks kept {} s",
        opts.workers,
        opts.minutes,
        opts.sample_seconds,
        phases.keep_completed()
    );
    let samples = soak(&opts, rate, phases).await?;
    let run = report::Run {
        phases,
        rate,
        capacity,
        workers: opts.workers,
        sample_seconds: opts.sample_seconds,
        started_at,
        load_before,
        load_after: load_average(),
        command: command(&opts),
        totals: samples.1,
    };
    report::write(&dir, &run, &samples.0)?;
    println!("soak: wrote {}", dir.join("latest.md").display());
    Ok(())
}

/// The drain rate of the soak's workers on plain tasks that complete at
/// once, over a short window: what the offered rate is a share of.
async fn calibrate(opts: &Options) -> Result<f64> {
    let mut producer = load::connect(&opts.cluster, load::PRODUCER).await?;
    load::preload(&mut producer, CALIBRATION_QUEUE, CALIBRATION_TASKS).await?;
    let shared = Arc::new(Shared::new(opts.workers));
    let workers = load::start_workers(&opts.cluster, CALIBRATION_QUEUE, &shared).await?;
    let start = Instant::now();
    while start.elapsed() < CALIBRATION_WINDOW
        && shared.counts.completed.load(Ordering::Relaxed) < CALIBRATION_TASKS as u64
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate =
        shared.counts.completed.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    shared.stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await??;
    }
    load::clear_calibration(&opts.cluster, CALIBRATION_QUEUE).await?;
    println!(
        "soak: calibration: {rate:.0} tasks/s drained by {} workers",
        opts.workers
    );
    Ok(rate)
}

/// The load itself, sampled until the time is up; then every task stops.
async fn soak(opts: &Options, rate: u64, phases: Phases) -> Result<(Vec<Sample>, load::Totals)> {
    let soak = Soak::start(&opts.cluster, QUEUE, rate, opts.workers).await?;
    let mut sampler = sample::Sampler::new(&opts.cluster, soak.pids.clone()).await?;
    let start = Instant::now();
    let every = Duration::from_secs(opts.sample_seconds);
    let mut samples = Vec::new();
    let mut next = every;
    while start.elapsed().as_secs_f64() < phases.total {
        let wait = next.saturating_sub(start.elapsed());
        tokio::time::sleep(wait).await;
        if soak.check().is_err() {
            // The stopped task's own error, not just that it stopped.
            soak.stop().await?;
            return Err("soak: a task stopped early".into());
        }
        let s = sampler
            .take(&soak.shared, start.elapsed().as_secs_f64())
            .await?;
        println!("{}", s.line());
        samples.push(s);
        next += every;
    }
    let totals = soak.stop().await?;
    let totals = sampler.finish(totals).await?;
    Ok((samples, totals))
}

fn command(opts: &Options) -> String {
    let mut c = format!("--only soak --minutes {}", opts.minutes);
    if let Some(rate) = opts.rate {
        c += &format!(" --soak-rate {rate}");
    }
    if opts.workers != 4 {
        c += &format!(" --soak-workers {}", opts.workers);
    }
    c
}

/// The 1-minute load average from /proc/loadavg ("?" elsewhere).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into())
}
