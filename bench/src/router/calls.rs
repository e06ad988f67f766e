//! Per call: the same call through the router and directly on shard 1, by
//! the same client, in rounds that rotate which path goes first. A third
//! path, direct with the statement sent unprepared, shows what the shard's
//! side of a router call costs for being parsed and planned every time (as
//! PL/Proxy sends it).

use std::time::Instant;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::cpu::{process_ns, processes_ns};
use super::setup::{connect, preclaim, preload, shard_admin};
use super::{Options, ADMIN, LEASE, ROLE, ROUTER_DB, SHARDS, SHARD_DB};
use crate::db::{payload, Result};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Enqueue,
    /// Claim (max 1) while every shard has work.
    Claim,
    /// Claim (max 1) while shard 1 alone has work.
    ClaimOne,
    Complete,
    CompleteAndClaim,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Enqueue,
        Kind::Claim,
        Kind::ClaimOne,
        Kind::Complete,
        Kind::CompleteAndClaim,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Kind::Enqueue => "`queue_enqueue` (no key: spread)",
            Kind::Claim => "`queue_claim` max 1, every shard has work",
            Kind::ClaimOne => "`queue_claim` max 1, shard 1 alone has work",
            Kind::Complete => "`queue_complete`",
            Kind::CompleteAndClaim => "`queue_complete_and_claim` (held task's shard has work)",
        }
    }

    fn queue(self) -> &'static str {
        match self {
            Kind::Enqueue => "rt-enqueue",
            Kind::Claim => "rt-claim",
            Kind::ClaimOne => "rt-claim-one",
            Kind::Complete => "rt-complete",
            Kind::CompleteAndClaim => "rt-cac",
        }
    }

    fn index(self) -> usize {
        Kind::ALL.iter().position(|k| *k == self).unwrap()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Path {
    Direct,
    Router,
    /// Direct, the statement parsed and planned on every call.
    Unprepared,
}

/// One call kind by one path: every call's latency and the backends' CPU.
#[derive(Default)]
pub struct Cell {
    pub latencies_us: Vec<f64>,
    /// Median latency of each round, for the paired ratio.
    pub round_medians_us: Vec<f64>,
    /// The router backend's CPU (router path only), ns.
    pub router_ns: u64,
    /// The shard backends' CPU serving these calls, ns.
    pub shard_ns: u64,
}

impl Cell {
    pub fn calls(&self) -> usize {
        self.latencies_us.len()
    }
}

pub struct PerCall {
    pub kind: Kind,
    pub direct: Cell,
    pub router: Cell,
    pub unprepared: Cell,
}

impl PerCall {
    fn cell(&mut self, path: Path) -> &mut Cell {
        match path {
            Path::Direct => &mut self.direct,
            Path::Router => &mut self.router,
            Path::Unprepared => &mut self.unprepared,
        }
    }
}

/// Where each path's next call comes from: the leases the completes settle
/// and the task each complete_and_claim loop holds.
struct Work {
    complete: Vec<(i64, i64)>,
    held: Option<(i64, i64)>,
}

/// The measured statements.
#[derive(Clone, Copy)]
enum Sql {
    Enqueue,
    Claim,
    Complete,
    CompleteAndClaim,
}

impl Sql {
    const ALL: [Sql; 4] = [
        Sql::Enqueue,
        Sql::Claim,
        Sql::Complete,
        Sql::CompleteAndClaim,
    ];

    fn text(self) -> String {
        match self {
            Sql::Enqueue => "SELECT task_id FROM aedb_queue.queue_enqueue($1, $2)".into(),
            Sql::Claim => claim_sql(),
            Sql::Complete => "SELECT aedb_queue.queue_complete($1, $2, $3)::text".into(),
            Sql::CompleteAndClaim => cac_sql(),
        }
    }
}

/// A connection that makes the measured calls, its backend's pid, and its
/// statements prepared once (as clients do) unless the path says not to.
struct Caller {
    client: Client,
    path: Path,
    backend: i32,
    work: [Work; 5],
    prepared: Vec<Statement>,
}

const WARM_UP: usize = 20;
const MARGIN: usize = 100;

fn claim_sql() -> String {
    format!("SELECT task_id, fencing_token FROM aedb_queue.queue_claim($1, 'bench', {LEASE}, 1)")
}

fn cac_sql() -> String {
    format!(
        "SELECT settled::text, task_id, fencing_token FROM aedb_queue.queue_complete_and_claim($1, 'bench', $2, $3, lease => {LEASE})"
    )
}

impl Caller {
    async fn new(client: Client, path: Path, complete: Vec<(i64, i64)>) -> Result<Caller> {
        let mut prepared = Vec::new();
        if path != Path::Unprepared {
            for s in Sql::ALL {
                prepared.push(client.prepare(&s.text()).await?);
            }
        }
        Ok(Caller {
            backend: client
                .query_one("SELECT pg_backend_pid()", &[])
                .await?
                .get(0),
            client,
            path,
            work: std::array::from_fn(|i| Work {
                complete: if Kind::ALL[i] == Kind::Complete {
                    complete.clone()
                } else {
                    Vec::new()
                },
                held: None,
            }),
            prepared,
        })
    }

    async fn query(&self, sql: Sql, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        Ok(match self.prepared.get(sql as usize) {
            Some(stmt) => self.client.query(stmt, params).await?,
            None => self.client.query(&sql.text(), params).await?,
        })
    }

    async fn query_one(&self, sql: Sql, params: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        let mut rows = self.query(sql, params).await?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            n => Err(format!("{}: {n} rows, one expected", sql.text()).into()),
        }
    }

    /// One call of `kind`; an error when it did not do what it should
    /// (no task to claim, a settle that did not apply).
    async fn call(&mut self, kind: Kind) -> Result<()> {
        let q = kind.queue();
        let idx = kind.index();
        match kind {
            Kind::Enqueue => {
                self.query_one(Sql::Enqueue, &[&q, &payload()]).await?;
            }
            Kind::Claim | Kind::ClaimOne => {
                self.query_one(Sql::Claim, &[&q]).await?;
            }
            Kind::Complete => {
                let (id, token) = self.work[idx]
                    .complete
                    .pop()
                    .ok_or_else(|| format!("{q}: no lease left to complete"))?;
                let row = self.query_one(Sql::Complete, &[&q, &id, &token]).await?;
                applied(q, row.get(0))?;
            }
            Kind::CompleteAndClaim => {
                let (id, token) = match self.work[idx].held {
                    Some(h) => h,
                    None => {
                        let r = self.query_one(Sql::Claim, &[&q]).await?;
                        (r.get(0), r.get(1))
                    }
                };
                let row = self
                    .query_one(Sql::CompleteAndClaim, &[&q, &id, &token])
                    .await?;
                applied(q, row.get(0))?;
                let next: Option<i64> = row.get(1);
                let next_token: Option<i64> = row.get(2);
                self.work[idx].held = next.zip(next_token);
                if self.work[idx].held.is_none() {
                    return Err(format!("{q}: complete_and_claim found no next task").into());
                }
            }
        }
        Ok(())
    }
}

fn applied(queue: &str, outcome: Option<String>) -> Result<()> {
    match outcome.as_deref() {
        Some("applied") => Ok(()),
        other => Err(format!("{queue}: a settle returned {other:?}").into()),
    }
}

/// The shards' backends of the bench's role that are none of `direct` (the
/// direct callers' own): the ones PL/Proxy opened for the router.
async fn proxied_backends(admins: &[Client], direct: &[i32]) -> Result<Vec<i32>> {
    let mut pids = Vec::new();
    for a in admins {
        let rows = a
            .query(
                "SELECT pid FROM pg_catalog.pg_stat_activity
                  WHERE usename = $1 AND datname = current_database() AND pid <> ALL ($2)",
                &[&ROLE, &direct],
            )
            .await?;
        pids.extend(rows.iter().map(|r| r.get::<_, i32>(0)));
    }
    Ok(pids)
}

/// Leases for the completes: each direct path's on shard 1, the router's
/// on every shard, taken in turn as spread enqueues would place them.
struct Leases {
    direct: Vec<(i64, i64)>,
    unprepared: Vec<(i64, i64)>,
    router: Vec<(i64, i64)>,
}

/// Tasks for every path and kind, enqueued (and for the completes leased)
/// directly on the shards, so that no call runs short. Shard 1 serves both
/// direct paths and its share of the router's.
async fn load(admins: &[Client], calls: usize) -> Result<Leases> {
    let each = calls + WARM_UP;
    let all = 3 * each + MARGIN;
    let third = calls / SHARDS as usize + WARM_UP + MARGIN;
    for (i, a) in admins.iter().enumerate() {
        let first = i == 0;
        preload(
            a,
            Kind::Claim.queue(),
            if first { 2 * each + third } else { third },
        )
        .await?;
        if first {
            preload(a, Kind::ClaimOne.queue(), all).await?;
        }
        // Each path's loop stays on the shard it starts on while that has work.
        preload(a, Kind::CompleteAndClaim.queue(), all).await?;
    }
    let mut router_by_shard = Vec::new();
    let (mut direct, mut unprepared) = (Vec::new(), Vec::new());
    for (i, a) in admins.iter().enumerate() {
        let mine = if i == 0 { 2 * each } else { 0 } + third;
        preload(a, Kind::Complete.queue(), mine).await?;
        let mut held = preclaim(a, Kind::Complete.queue(), mine).await?;
        if i == 0 {
            direct = held.split_off(held.len() - each);
            unprepared = held.split_off(held.len() - each);
        }
        router_by_shard.push(held);
    }
    let mut router = Vec::new();
    while router_by_shard.iter().any(|h| !h.is_empty()) {
        for h in router_by_shard.iter_mut() {
            router.extend(h.pop());
        }
    }
    // Calls pop from the end.
    router.reverse();
    Ok(Leases {
        direct,
        unprepared,
        router,
    })
}

pub async fn run(opts: &Options) -> Result<Vec<PerCall>> {
    let mut admins = Vec::new();
    for s in 1..=SHARDS {
        admins.push(shard_admin(opts, s).await?);
    }
    // Every round makes the same number of calls of each kind.
    let per_round = opts.calls.div_ceil(opts.rounds);
    let leases = load(&admins, per_round * opts.rounds).await?;
    let shard1 = || connect(opts, opts.shard_port(1), SHARD_DB, ROLE);
    let mut callers = [
        Caller::new(shard1().await?, Path::Direct, leases.direct).await?,
        Caller::new(
            connect(opts, opts.port, ROUTER_DB, ROLE).await?,
            Path::Router,
            leases.router,
        )
        .await?,
        Caller::new(shard1().await?, Path::Unprepared, leases.unprepared).await?,
    ];
    let direct: Vec<i32> = callers
        .iter()
        .filter(|c| c.path != Path::Router)
        .map(|c| c.backend)
        .collect();
    // Warm-up: connections from the router to every shard, plans cached.
    for c in callers.iter_mut() {
        for kind in Kind::ALL {
            for _ in 0..WARM_UP {
                c.call(kind).await?;
            }
        }
    }
    let mut cells: Vec<PerCall> = Kind::ALL
        .iter()
        .map(|&kind| PerCall {
            kind,
            direct: Cell::default(),
            router: Cell::default(),
            unprepared: Cell::default(),
        })
        .collect();
    for round in 0..opts.rounds {
        for (k, kind) in Kind::ALL.iter().enumerate() {
            let mut order = [0, 1, 2];
            order.rotate_left((round + k) % 3);
            for i in order {
                let caller = &mut callers[i];
                let cell = cells[k].cell(caller.path);
                block(caller, *kind, per_round, cell, &admins, &direct).await?;
            }
        }
    }
    Ok(cells)
}

/// `n` calls, timed one by one, with the CPU of the backends involved.
async fn block(
    caller: &mut Caller,
    kind: Kind,
    n: usize,
    cell: &mut Cell,
    admins: &[Client],
    direct: &[i32],
) -> Result<()> {
    let shard_pids = match caller.path {
        Path::Router => proxied_backends(admins, direct).await?,
        _ => vec![caller.backend],
    };
    let own_before = process_ns(caller.backend);
    let shards_before = processes_ns(&shard_pids);
    let mut round = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        caller.call(kind).await?;
        round.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let shards_after = processes_ns(&shard_pids);
    if caller.path == Path::Router {
        cell.router_ns += process_ns(caller.backend).saturating_sub(own_before);
        // A shard backend PL/Proxy opened during the block (after an error)
        // would be missing from the sum: none may appear.
        let now = proxied_backends(admins, direct).await?;
        if now.iter().any(|p| !shard_pids.contains(p)) {
            return Err("the router opened a new connection to a shard during a block".into());
        }
    }
    cell.shard_ns += shards_after.saturating_sub(shards_before);
    cell.round_medians_us.push(median(&mut round.clone()));
    cell.latencies_us.extend(round);
    Ok(())
}

pub fn median(v: &mut [f64]) -> f64 {
    percentile(v, 0.5)
}

pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

/// Remote calls the router made for one kind of call: mean, least, most.
pub struct Trips {
    pub case: &'static str,
    pub calls: usize,
    pub mean: f64,
    pub min: i64,
    pub max: i64,
}

/// The PL/Proxy functions called so far in this transaction: each is one
/// remote call (one statement, one transaction, on its shard).
const REMOTE_CALLS: &str = "SELECT coalesce(sum(f.calls), 0)::bigint
      FROM pg_catalog.pg_stat_xact_user_functions f
      JOIN pg_catalog.pg_proc p ON p.oid = f.funcid
      JOIN pg_catalog.pg_language l ON l.oid = p.prolang
     WHERE l.lanname = 'plproxy'";

struct Counter {
    client: Client,
}

impl Counter {
    async fn now(&self) -> Result<i64> {
        Ok(self.client.query_one(REMOTE_CALLS, &[]).await?.get(0))
    }

    /// Runs `sql` `n` times, counting the remote calls of each.
    async fn count(
        &self,
        case: &'static str,
        n: usize,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Trips> {
        let mut each = Vec::with_capacity(n);
        for _ in 0..n {
            let before = self.now().await?;
            self.client.query(sql, params).await?;
            each.push(self.now().await? - before);
        }
        Ok(trips(case, &each))
    }
}

fn trips(case: &'static str, each: &[i64]) -> Trips {
    Trips {
        case,
        calls: each.len(),
        mean: each.iter().sum::<i64>() as f64 / each.len().max(1) as f64,
        min: each.iter().copied().min().unwrap_or(0),
        max: each.iter().copied().max().unwrap_or(0),
    }
}

/// Remote calls per router call, from PostgreSQL's function statistics in
/// one transaction of a session of its own (track_functions = 'pl' there
/// only, so the timed calls above pay nothing for it). The remote calls
/// commit on their shards whatever that transaction does.
pub async fn count_remote_calls(opts: &Options) -> Result<Vec<Trips>> {
    const N: usize = 30;
    let mut admins = Vec::new();
    for s in 1..=SHARDS {
        admins.push(shard_admin(opts, s).await?);
    }
    for (i, a) in admins.iter().enumerate() {
        preload(a, "rc-claim", 2 * N).await?;
        preload(a, "rc-cac", 2 * N).await?;
        if i == 0 {
            preload(a, "rc-claim-one", 2 * N).await?;
        }
    }
    let client = connect(opts, opts.port, ROUTER_DB, ADMIN).await?;
    client
        .batch_execute("SET track_functions = 'pl'; BEGIN")
        .await?;
    let c = Counter { client };
    let claim = claim_sql();
    let mut out = vec![
        c.count(
            "`queue_enqueue`, no key",
            N,
            "SELECT aedb_queue.queue_enqueue('rc-enqueue')",
            &[],
        )
        .await?,
        c.count(
            "`queue_claim`, every shard has work",
            N,
            &claim,
            &[&"rc-claim"],
        )
        .await?,
        c.count(
            "`queue_claim`, shard 1 alone has work",
            N,
            &claim,
            &[&"rc-claim-one"],
        )
        .await?,
        c.count(
            "`queue_claim`, no shard has work",
            10,
            &claim,
            &[&"rc-empty"],
        )
        .await?,
    ];
    // Completes of leases taken through the router (counted apart).
    let mut held: Vec<(i64, i64)> = Vec::with_capacity(N);
    for _ in 0..N {
        let r = c.client.query_one(&claim, &[&"rc-claim"]).await?;
        held.push((r.get(0), r.get(1)));
    }
    let mut each = Vec::new();
    for (id, token) in &held {
        let before = c.now().await?;
        c.client
            .query_one(
                "SELECT aedb_queue.queue_complete('rc-claim', $1, $2)",
                &[id, token],
            )
            .await?;
        each.push(c.now().await? - before);
    }
    out.push(trips("`queue_complete`", &each));
    out.push(
        cac_trips(
            &c,
            "rc-cac",
            N,
            "`queue_complete_and_claim`, held task's shard has work",
        )
        .await?,
    );
    out.push(cac_away(&c, &admins).await?);
    c.client.batch_execute("COMMIT").await?;
    Ok(out)
}

/// complete_and_claim loops while the held task's shard has more.
async fn cac_trips(c: &Counter, queue: &str, n: usize, case: &'static str) -> Result<Trips> {
    let r = c.client.query_one(&claim_sql(), &[&queue]).await?;
    let mut held: (i64, i64) = (r.get(0), r.get(1));
    let mut each = Vec::new();
    for _ in 0..n {
        let before = c.now().await?;
        let row = c
            .client
            .query_one(&cac_sql(), &[&queue, &held.0, &held.1])
            .await?;
        each.push(c.now().await? - before);
        held = (row.get(1), row.get(2));
    }
    Ok(trips(case, &each))
}

/// complete_and_claim of the last task of shard 1 while shard 3 alone has
/// more: the settle and an empty claim there, then the rotation.
async fn cac_away(c: &Counter, admins: &[Client]) -> Result<Trips> {
    let mut each = Vec::new();
    for i in 0..5 {
        let queue = format!("rc-away-{i}");
        preload(&admins[0], &queue, 1).await?;
        preload(&admins[SHARDS as usize - 1], &queue, 3).await?;
        let held = preclaim(&admins[0], &queue, 1).await?[0];
        let before = c.now().await?;
        let row = c
            .client
            .query_one(&cac_sql(), &[&queue, &held.0, &held.1])
            .await?;
        each.push(c.now().await? - before);
        let next: Option<i64> = row.get(1);
        if next.map(|id| id >> 48) != Some(SHARDS as i64) {
            return Err(format!(
                "{queue}: complete_and_claim should have claimed on shard {SHARDS}, got {next:?}"
            )
            .into());
        }
    }
    Ok(trips(
        "`queue_complete_and_claim`, held task's shard empty, shard 3 alone has work",
        &each,
    ))
}
