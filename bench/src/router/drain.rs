//! Drains: workers looping on queue_complete_and_claim through a router
//! with one shard, with three, and directly on one shard, the same number
//! of tasks pre-enqueued; each cluster's CPU over the drain.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

use super::cpu::{self, Snapshot};
use super::setup::{connect, preload, shard_admin};
use super::{Options, LEASE, ROLE, ROUTER_DB, ROUTER_ONE_DB, SHARDS, SHARD_DB};
use crate::db::Result;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Config {
    RouterOne,
    RouterThree,
    Direct,
}

impl Config {
    pub const ALL: [Config; 3] = [Config::RouterOne, Config::RouterThree, Config::Direct];

    pub fn label(self) -> &'static str {
        match self {
            Config::RouterOne => "router, 1 shard",
            Config::RouterThree => "router, 3 shards",
            Config::Direct => "direct on 1 shard (reference)",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Config::RouterOne => "r1",
            Config::RouterThree => "r3",
            Config::Direct => "d1",
        }
    }

    /// The shards holding this drain's tasks.
    pub fn shards(self) -> i32 {
        if self == Config::RouterThree {
            SHARDS
        } else {
            1
        }
    }
}

/// One drain: its rate, each cluster's CPU seconds and the completions per
/// shard in each tenth of a second.
pub struct Drain {
    pub config: Config,
    pub rep: usize,
    pub jobs: u64,
    pub seconds: f64,
    pub router_cpu: f64,
    /// Shards 1..=3, in order.
    pub shard_cpu: Vec<f64>,
    pub client_cpu: f64,
    /// Every CPU's busy time over the drain, all processes.
    pub machine_busy: f64,
    /// `[tenth of a second][shard - 1]` completions.
    pub timeline: Vec<Vec<u64>>,
}

impl Drain {
    pub fn rate(&self) -> f64 {
        self.jobs as f64 / self.seconds
    }

    pub fn shards_cpu(&self) -> f64 {
        self.shard_cpu.iter().sum()
    }

    /// CPU seconds per 1,000 jobs.
    pub fn per_k(&self, seconds: f64) -> f64 {
        seconds * 1000.0 / self.jobs as f64
    }

    /// The CPU the other processes on the machine used over the drain.
    pub fn others_cpu(&self) -> f64 {
        (self.machine_busy - self.router_cpu - self.shards_cpu() - self.client_cpu).max(0.0)
    }
}

pub async fn run(opts: &Options) -> Result<Vec<Drain>> {
    let mut out = Vec::new();
    for rep in 1..=opts.reps {
        // Each configuration first, second and last in turn.
        let mut order = Config::ALL;
        order.rotate_left((rep - 1) % Config::ALL.len());
        for config in order {
            let d = drain(opts, config, rep).await?;
            println!(
                "  {:<32} rep {rep}: {:>6.0} jobs/s; CPU s/1000 jobs: router {:.3}, shards {:.3} ({}), client {:.3}; others {:.1} s",
                config.label(),
                d.rate(),
                d.per_k(d.router_cpu),
                d.per_k(d.shards_cpu()),
                d.shard_cpu
                    .iter()
                    .map(|c| format!("{:.3}", d.per_k(*c)))
                    .collect::<Vec<_>>()
                    .join(" / "),
                d.per_k(d.client_cpu),
                d.others_cpu()
            );
            out.push(d);
        }
    }
    Ok(out)
}

/// The clusters' postmasters: the router, then shards 1..=3.
fn postmasters(opts: &Options) -> Result<(i32, Vec<i32>)> {
    let router = cpu::postmaster(&opts.shards_dir.join("router"))?;
    let shards = (1..=SHARDS)
        .map(|i| cpu::postmaster(&opts.shards_dir.join(format!("shard{i}"))))
        .collect::<Result<Vec<_>>>()?;
    Ok((router, shards))
}

async fn drain(opts: &Options, config: Config, rep: usize) -> Result<Drain> {
    let queue = format!("drain-{}-{rep}", config.tag());
    let per_shard = opts.tasks / config.shards() as usize;
    let jobs = per_shard * config.shards() as usize;
    let mut admins = Vec::new();
    for s in 1..=SHARDS {
        admins.push(shard_admin(opts, s).await?);
    }
    for a in admins.iter().take(config.shards() as usize) {
        preload(a, &queue, per_shard).await?;
    }
    // Every drain starts after a checkpoint, as the other drains of the bench.
    for a in &admins {
        a.batch_execute("CHECKPOINT").await?;
    }
    let router_admin = connect(opts, opts.port, "postgres", super::ADMIN).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (router_pm, shard_pms) = postmasters(opts)?;
    let (before, client_before) = (Snapshot::take(), cpu::own_seconds());
    let (port, db) = match config {
        Config::RouterOne => (opts.port, ROUTER_ONE_DB),
        Config::RouterThree => (opts.port, ROUTER_DB),
        Config::Direct => (opts.shard_port(1), SHARD_DB),
    };
    let barrier = Arc::new(Barrier::new(opts.workers + 1));
    let mut handles = Vec::new();
    for w in 0..opts.workers {
        let client = connect(opts, port, db, ROLE).await?;
        let (barrier, queue) = (barrier.clone(), queue.clone());
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            work(client, &queue, &format!("w{w}")).await
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut timeline: Vec<Vec<u64>> = Vec::new();
    let mut done = 0u64;
    for h in handles {
        for (sec, shard) in h.await?? {
            if timeline.len() <= sec {
                timeline.resize(sec + 1, vec![0; SHARDS as usize]);
            }
            timeline[sec][(shard - 1) as usize] += 1;
            done += 1;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    // The workers' connections are closed: wait for their backends (and the
    // ones PL/Proxy opened) to exit, so their CPU is in the postmasters'.
    settle(&router_admin, &admins).await?;
    let (after, client_after) = (Snapshot::take(), cpu::own_seconds());
    let left = left_over(&admins, &queue).await?;
    if done != jobs as u64 || left != 0 {
        return Err(
            format!("{queue}: {done} completed of {jobs}, {left} left on the shards").into(),
        );
    }
    Ok(Drain {
        config,
        rep,
        jobs: done,
        seconds,
        router_cpu: after.cluster_seconds(router_pm) - before.cluster_seconds(router_pm),
        shard_cpu: shard_pms
            .iter()
            .map(|&pm| after.cluster_seconds(pm) - before.cluster_seconds(pm))
            .collect(),
        client_cpu: client_after - client_before,
        machine_busy: cpu::busy_seconds(&before, &after),
        timeline,
    })
}

/// One worker: claim, then complete_and_claim while that returns a task,
/// then claim again, until a claim finds nothing. Returns, per completed
/// task, the tenth of a second of the drain it completed in and its shard.
async fn work(
    client: tokio_postgres::Client,
    queue: &str,
    owner: &str,
) -> Result<Vec<(usize, i64)>> {
    let claim =
        format!("SELECT task_id, fencing_token FROM aedb_queue.queue_claim($1, $2, {LEASE}, 1)");
    let cac = format!(
        "SELECT settled::text, task_id, fencing_token FROM aedb_queue.queue_complete_and_claim($1, $2, $3, $4, lease => {LEASE})"
    );
    let claim = client.prepare(&claim).await?;
    let cac = client.prepare(&cac).await?;
    let start = Instant::now();
    let mut completed = Vec::new();
    let mut held: Option<(i64, i64)> = None;
    loop {
        let (id, token) = match held {
            Some(h) => h,
            None => match client.query_opt(&claim, &[&queue, &owner]).await? {
                Some(r) => (r.get(0), r.get(1)),
                None => break,
            },
        };
        let row = client
            .query_one(&cac, &[&queue, &owner, &id, &token])
            .await?;
        let settled: Option<String> = row.get(0);
        if settled.as_deref() != Some("applied") {
            return Err(format!("{queue}: task {id} settled {settled:?}").into());
        }
        completed.push(((start.elapsed().as_millis() / 100) as usize, id >> 48));
        let next: Option<i64> = row.get(1);
        let next_token: Option<i64> = row.get(2);
        held = next.zip(next_token);
    }
    Ok(completed)
}

/// Waits (up to 10 s) until no backend of the bench's role is left on the
/// shards, then a little for the postmasters to reap them.
async fn settle(router: &tokio_postgres::Client, admins: &[tokio_postgres::Client]) -> Result<()> {
    let count = "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE usename = $1";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut n: i64 = router.query_one(count, &[&ROLE]).await?.get(0);
        for a in admins {
            n += a.query_one(count, &[&ROLE]).await?.get::<_, i64>(0);
        }
        if n == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{n} backends of {ROLE} still there 10 s after the drain").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

async fn left_over(admins: &[tokio_postgres::Client], queue: &str) -> Result<i64> {
    let mut left = 0;
    for a in admins {
        left += a
            .query_one(
                "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
                &[&queue],
            )
            .await?
            .get::<_, i64>(0);
    }
    Ok(left)
}
