//! `router/latest.md`: the per-call comparison, the remote calls per call,
//! the drains and what their CPU says.

use std::fmt::Write as _;
use std::path::Path;

use super::calls::{median, percentile, Cell, PerCall, Trips};
use super::drain::{Config, Drain};
use super::{Options, SHARDS};
use crate::db::Result;

pub struct Run<'a> {
    pub started_at: String,
    pub load_before: String,
    pub load_after: String,
    pub command: String,
    pub opts: &'a Options,
}

fn us(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} ms", v / 1000.0)
    } else {
        format!("{v:.0} µs")
    }
}

fn p50(c: &Cell) -> f64 {
    median(&mut c.latencies_us.clone())
}

fn p99(c: &Cell) -> f64 {
    percentile(&mut c.latencies_us.clone(), 0.99)
}

/// The median over rounds of router / direct, each round's two blocks run
/// back to back.
fn paired(pc: &PerCall) -> f64 {
    let mut r: Vec<f64> = pc
        .router
        .round_medians_us
        .iter()
        .zip(&pc.direct.round_medians_us)
        .map(|(r, d)| r / d)
        .collect();
    median(&mut r)
}

fn cpu_us(ns: u64, calls: usize) -> f64 {
    ns as f64 / 1000.0 / calls.max(1) as f64
}

fn per_call(md: &mut String, cells: &[PerCall], trips: &[Trips]) {
    let calls = cells.first().map_or(0, |c| c.direct.calls());
    let _ = writeln!(
        md,
        "## Per call: through the router against direct on shard 1\n\n\
         {calls} calls of each kind by each path, one client connection per path (the bench's role, \
         prepared statements), in rounds that alternate which path goes first. Latency is the client's, \
         call sent to rows read.\n"
    );
    md.push_str("| call | direct p50 | router p50 | ratio p50 (paired by round) | direct p99 | router p99 | ratio p99 |\n|---|---|---|---|---|---|---|\n");
    for c in cells {
        let (dp, rp, d9, r9) = (
            p50(&c.direct),
            p50(&c.router),
            p99(&c.direct),
            p99(&c.router),
        );
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.2}× ({:.2}×) | {} | {} | {:.2}× |",
            c.kind.label(),
            us(dp),
            us(rp),
            rp / dp,
            paired(c),
            us(d9),
            us(r9),
            r9 / d9
        );
    }
    md.push_str(
        "\nCPU per call, from `/proc/<pid>/schedstat` of the backends themselves (time on a CPU, \
         so not the time spent waiting for the other processes on the two shared cores): the direct \
         caller's backend on shard 1; through the router, the router backend and the shard backends \
         PL/Proxy opened for it.\n\n",
    );
    md.push_str("| call | direct: shard backend | router: router backend | router: shard backends | shard CPU, router / direct | all server CPU, router / direct |\n|---|---|---|---|---|---|\n");
    for c in cells {
        let n = c.direct.calls();
        let d = cpu_us(c.direct.shard_ns, n);
        let rr = cpu_us(c.router.router_ns, c.router.calls());
        let rs = cpu_us(c.router.shard_ns, c.router.calls());
        let _ = writeln!(
            md,
            "| {} | {d:.0} µs | {rr:.0} µs | {rs:.0} µs | {:.2}× | {:.2}× |",
            c.kind.label(),
            rs / d,
            (rr + rs) / d
        );
    }
    md.push_str(
        "\nRemote calls the router makes per call (each one statement and one transaction on its shard), \
         counted from PostgreSQL's function statistics (`pg_stat_xact_user_functions` of the PL/Proxy \
         functions, `track_functions = 'pl'` in a session of its own, not the timed one):\n\n",
    );
    md.push_str(
        "| call | calls | remote calls per call: mean | least | most |\n|---|---|---|---|---|\n",
    );
    for t in trips {
        let _ = writeln!(
            md,
            "| {} | {} | {:.2} | {} | {} |",
            t.case, t.calls, t.mean, t.min, t.max
        );
    }
}

fn med(mut v: Vec<f64>) -> f64 {
    median(&mut v)
}

fn of(drains: &[Drain], config: Config) -> Vec<&Drain> {
    drains.iter().filter(|d| d.config == config).collect()
}

/// The median over repetitions of `f` for one configuration.
fn med_of(drains: &[Drain], config: Config, f: impl Fn(&Drain) -> f64) -> f64 {
    med(of(drains, config).into_iter().map(f).collect())
}

fn drains_md(md: &mut String, drains: &[Drain], opts: &Options) {
    let _ = writeln!(
        md,
        "## Drain: {} workers through the router, 1 shard against 3\n\n\
         {} tasks pre-enqueued directly on the shards (all on shard 1, or a third on each of the 3), a \
         checkpoint, then {} workers (one connection each, the bench's role) claim, then loop on \
         `queue_complete_and_claim` (max 1) until a claim finds nothing. `router, 1 shard` is a router \
         database with shard 1 alone registered; `router, 3 shards` the one of `scripts/shards.sh` \
         with all three; `direct` the same workers connected to shard 1 itself. Every configuration \
         runs {} times, in rotating order. The clock runs from the workers' start (connected) to the \
         last one's end.\n",
        opts.workers, opts.tasks, opts.workers, opts.reps
    );
    let base = med_of(drains, Config::RouterOne, Drain::rate);
    md.push_str("| configuration | jobs/s, each repetition | median | ratio to router, 1 shard |\n|---|---|---|---|\n");
    for config in Config::ALL {
        let each: Vec<String> = of(drains, config)
            .iter()
            .map(|d| format!("{:.0}", d.rate()))
            .collect();
        let m = med_of(drains, config, Drain::rate);
        let _ = writeln!(
            md,
            "| {} | {} | {m:.0} | {:.2}× |",
            config.label(),
            each.join(", "),
            m / base
        );
    }
    md.push_str(
        "\nCPU seconds per 1,000 jobs (medians over the repetitions), from `/proc/<pid>/stat` \
         (utime + stime) of each cluster's postmaster and its children, before the workers connect \
         and after their backends (and those PL/Proxy opened) have exited, so backends that exited \
         count through the postmaster's cutime and cstime; 10 ms ticks. Client: this bench process. \
         Others: every CPU's busy time over the drain (`/proc/stat`) less all of these, i.e. \
         other processes' work on the same cores.\n\n",
    );
    md.push_str("| configuration | router | shard 1 | shard 2 | shard 3 | shards | client | ours in all | others, s over the drain |\n|---|---|---|---|---|---|---|---|---|\n");
    for config in Config::ALL {
        let k = |f: &dyn Fn(&Drain) -> f64| med_of(drains, config, |d| d.per_k(f(d)));
        let shard = |i: usize| k(&move |d: &Drain| d.shard_cpu[i]);
        let all = k(&|d| d.router_cpu + d.shards_cpu() + d.client_cpu);
        let _ = writeln!(
            md,
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {all:.3} | {:.1} |",
            config.label(),
            k(&|d| d.router_cpu),
            shard(0),
            shard(1),
            shard(2),
            k(&|d| d.shards_cpu()),
            k(&|d| d.client_cpu),
            med_of(drains, config, Drain::others_cpu)
        );
    }
    spread(md, drains);
    findings(md, drains);
}

/// How the 3-shard drains used their shards over time.
fn spread(md: &mut String, drains: &[Drain]) {
    md.push_str(
        "\nHow the 3-shard drains went over the shards: the tenths of a second of the drain in which \
         tasks of 1, 2 or 3 shards completed, and when (seconds into the drain) each shard's first and \
         last task completed.\n\n",
    );
    md.push_str("| repetition | tenths of a second with 1 / 2 / 3 shards completing | shard 1 | shard 2 | shard 3 |\n|---|---|---|---|---|\n");
    for d in of(drains, Config::RouterThree) {
        let mut by = [0usize; 4];
        for sec in &d.timeline {
            by[sec.iter().filter(|&&n| n > 0).count()] += 1;
        }
        let span = |s: usize| {
            let first = d.timeline.iter().position(|sec| sec[s] > 0);
            let last = d.timeline.iter().rposition(|sec| sec[s] > 0);
            match (first, last) {
                (Some(a), Some(b)) => {
                    format!("{:.1}-{:.1} s", a as f64 / 10.0, (b + 1) as f64 / 10.0)
                }
                _ => "none".into(),
            }
        };
        let _ = writeln!(
            md,
            "| {} | {} / {} / {} | {} | {} | {} |",
            d.rep,
            by[1],
            by[2],
            by[3],
            span(0),
            span(1),
            span(2)
        );
    }
}

/// The figures' reading, computed from them.
fn findings(md: &mut String, drains: &[Drain]) {
    let k = |c: Config, f: &dyn Fn(&Drain) -> f64| med_of(drains, c, |d| d.per_k(f(d)));
    let (r3, r1, d1) = (Config::RouterThree, Config::RouterOne, Config::Direct);
    let router = k(r3, &|d| d.router_cpu);
    let shards = k(r3, &|d| d.shards_cpu());
    let direct_shard = k(d1, &|d| d.shards_cpu());
    let all3 = k(r3, &|d| d.router_cpu + d.shards_cpu() + d.client_cpu);
    let all1 = k(r1, &|d| d.router_cpu + d.shards_cpu() + d.client_cpu);
    let rate = |c: Config| med_of(drains, c, Drain::rate);
    let _ = writeln!(
        md,
        "\n### What the drain figures say\n\n\
         - Per job, through the router with 3 shards: the router cluster spends {router:.3} CPU-s per \
         1,000 jobs and the shards {shards:.3} (direct on one shard: {direct_shard:.3}), so the router's \
         CPU is {:.2}× the shards'. One router core keeps about {:.1} shard cores of this work busy.\n\
         - 3 shards against 1: {:.2}× the jobs/s; all the CPU of the run per job (router + shards + \
         client) {all3:.3} against {all1:.3} CPU-s per 1,000. On {} cores, at that CPU per job, \
         no configuration can exceed about {:.0} jobs/s ({} cores / CPU per job) however many shards \
         there are, and the other processes on the machine took some of those cores.\n\
         - Through the router with 1 shard against direct on it: {:.2}× the jobs/s.",
        router / shards,
        shards / router,
        rate(r3) / rate(r1),
        cores(),
        cores() as f64 * 1000.0 / all3,
        cores(),
        rate(r1) / rate(d1),
    );
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub fn write(
    dir: &Path,
    run: &Run,
    cells: &[PerCall],
    trips: &[Trips],
    drains: &[Drain],
) -> Result<()> {
    let o = run.opts;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# The router: overhead per call and scale-out\n\n\
         Run {started}, `bash bench/run.sh {cmd}`. Machine: {cores} cores, which the 3 shards, the \
         router, the client and anything else running share (load average {lb} before, {la} \
         after, the run's own load included), so latencies and jobs/s are noisy; the paired ratios (same client, rounds interleaved) \
         and the CPU per call and per job (the processes' own CPU time) are the steadier figures.\n\n\
         Set-up: `scripts/shards.sh start --shards {SHARDS} --fresh` with `AEDB_SHARDS_DIR={dir}` and \
         `AEDB_SHARDS_PORT={port}`: {SHARDS} shard clusters (ports {p1}-{pn}, database \
         `aedb_queue_shard`, the extension, `queue_shard_assign(i)`) and a router cluster (port {port}, \
         database `aedb_router`: `plproxy`, `aedb_queue_router`, every shard registered), all PostgreSQL \
         15 with default settings on 127.0.0.1, all on the same cores. Calls run as `bench_router`, a \
         login role that is a member of `aedb_queue_producer` and `aedb_queue_worker` on each shard \
         (PL/Proxy connects to the shards as it). Leases are an hour, so none expires during the run.\n",
        started = run.started_at,
        cmd = run.command,
        cores = cores(),
        lb = run.load_before,
        la = run.load_after,
        dir = o.shards_dir.display(),
        port = o.port,
        p1 = o.shard_port(1),
        pn = o.shard_port(SHARDS),
    );
    per_call(&mut md, cells, trips);
    md.push('\n');
    drains_md(&mut md, drains, o);
    std::fs::write(dir.join("latest.md"), md)?;
    Ok(())
}
