//! `--only router`: the cost of going through the PL/Proxy
//! router (docs/scale-out.md). Needs the shard clusters and the router of
//! `scripts/shards.sh` (bench/run.sh starts them on ports of their own).
//!
//! 1. Per call: enqueue, claim, complete and complete_and_claim, through
//!    the router against the same call made directly on one shard by the
//!    same client, in interleaved rounds; latency medians and p99, the CPU
//!    of the router backend and of the shard backends per call (from
//!    /proc/<pid>/schedstat, so waiting for the other processes
//!    on the shared cores does not count), and the remote calls the router
//!    makes per call, counted by PostgreSQL's function statistics.
//! 2. Drain: 8 workers looping on queue_complete_and_claim through a router
//!    with 1 shard and with 3 (and directly on one shard, for reference),
//!    the same tasks pre-enqueued; jobs/s and each cluster's CPU per job.
//!
//! Writes `<out>/router/latest.md`.

mod calls;
mod cpu;
mod drain;
mod report;
mod setup;

use std::path::PathBuf;

use crate::db::Result;

/// The shard clusters of scripts/shards.sh: shard i on port `port + i`.
pub const SHARDS: i32 = 3;
pub const SHARD_DB: &str = "aedb_queue_shard";
/// The router database of scripts/shards.sh, with every shard registered.
pub const ROUTER_DB: &str = "aedb_router";
/// A second router database, made here, with shard 1 alone.
pub const ROUTER_ONE_DB: &str = "aedb_router_one";
/// The login role every measured call runs as (a member of the extension's
/// producer and worker roles on each shard; PL/Proxy connects as it).
pub const ROLE: &str = "bench_router";
pub const ADMIN: &str = "postgres";
/// Long enough that no lease taken here expires during the run (an
/// expired lease would make later claims reclaim it).
pub const LEASE: &str = "interval '1 hour'";

pub struct Options {
    pub host: String,
    /// The router's port; shard i listens on port + i.
    pub port: u16,
    /// AEDB_SHARDS_DIR of scripts/shards.sh: the clusters' postmaster.pid.
    pub shards_dir: PathBuf,
    /// Calls per cell of the per-call comparison.
    pub calls: usize,
    /// Interleaved rounds those calls are split into.
    pub rounds: usize,
    /// Tasks per drain.
    pub tasks: usize,
    pub workers: usize,
    /// Repetitions of each drain.
    pub reps: usize,
    pub out: PathBuf,
}

impl Options {
    pub fn url(&self, port: u16, db: &str, user: &str) -> String {
        format!("postgres://{user}@{}:{port}/{db}", self.host)
    }

    pub fn shard_port(&self, shard: i32) -> u16 {
        self.port + shard as u16
    }

    pub fn command(&self) -> String {
        format!(
            "--only router --router-calls {} --router-rounds {} --router-tasks {} --router-workers {} --router-reps {}",
            self.calls, self.rounds, self.tasks, self.workers, self.reps
        )
    }
}

pub async fn run(opts: Options) -> Result<()> {
    let dir = opts.out.join("router");
    std::fs::create_dir_all(&dir)?;
    let started_at = setup::utc_now(&opts).await?;
    let load_before = cpu::load_average();
    setup::prepare(&opts).await?;
    println!(
        "router: per call, {} calls per cell in {} rounds",
        opts.calls, opts.rounds
    );
    let per_call = calls::run(&opts).await?;
    let trips = calls::count_remote_calls(&opts).await?;
    println!(
        "router: drains of {} tasks, {} workers, {} repetitions",
        opts.tasks, opts.workers, opts.reps
    );
    let drains = drain::run(&opts).await?;
    let run = report::Run {
        started_at,
        load_before,
        load_after: cpu::load_average(),
        command: opts.command(),
        opts: &opts,
    };
    report::write(&dir, &run, &per_call, &trips, &drains)?;
    println!("router: wrote {}", dir.join("latest.md").display());
    Ok(())
}
