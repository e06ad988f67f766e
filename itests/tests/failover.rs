//! Failover to a streaming standby under load (docs/failover.md).
//!
//! A primary and a standby made with `pg_basebackup -R`, on loopback; 2
//! producers and 4 workers connect with one libpq-style string naming both
//! (`target_session_attrs=read-write`) and reconnect with it whenever a
//! call fails on a lost connection. Mid-load the primary is killed
//! (`pg_ctl stop -m immediate`) and the standby promoted (`pg_ctl
//! promote`). Every acknowledgement is recorded on the client side (an
//! enqueue that returned, a completion whose commit returned), and every
//! completion writes a ledger row in its own strict transaction (no unique
//! constraint), so the ledger on the new primary shows what survived and
//! what ran twice.
//!
//! - Synchronous replication: every acknowledged enqueue is completed
//!   exactly once, every acknowledged completion is still there (same task,
//!   same token), the tasks in flight at the promotion are reclaimed after
//!   their lease and completed once, and old tokens still fence.
//! - Asynchronous replication (WAL sender stopped for 1.5 s before the
//!   kill, and without that stop): what was lost is measured and printed;
//!   asserted is only what must hold anyway: no task completed twice in the
//!   new primary's ledger, nothing stuck, and what old tokens do.
//!
//! Each run prints the recovery time: from the promoted standby accepting
//! writes to the workers completing at 80 % of their pre-fault rate.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, SystemTime};

use aedb_queue_itests::chaos::recovery::report;
use aedb_queue_itests::standby::load::*;
use aedb_queue_itests::standby::*;
use aedb_queue_itests::*;

const QUEUE: &str = "failover";
const LEDGER: &str = "failover_ledger";
const LEASE: &str = "2 seconds";
/// Enqueued before the load starts, so workers never wait for producers.
const BACKLOG: usize = 500;
/// Each producer's pause between enqueues: together a little more than
/// the workers complete on a busy machine, so they never wait for work.
const PACE: Duration = Duration::from_millis(10);
const PRODUCERS: usize = 2;
const WORKERS: usize = 4;
/// Load before the fault, from which the pre-fault rate is measured.
const BEFORE_FAULT: Duration = Duration::from_secs(3);
/// How long the load runs after the promotion, waiting for 80 % of the
/// rate (the timing report's figure, not asserted).
const AFTER_PROMOTION_MAX: f64 = 15.0;
/// How long the workers may take to complete anything on the new primary:
/// generous, only a failover that broke them misses it.
const RESUME_BOUND: f64 = 60.0;

/// What one run saw, for the checks and the printed figures.
struct Run {
    acks: Acks,
    fault_at: f64,
    killed_at: f64,
    promoted_at: f64,
    pre_fault_rate: f64,
    /// Seconds from the promotion to 80 % of the reachable rate, and that
    /// rate (`Acks::reachable_rate`).
    recovery: Option<(f64, f64)>,
    /// Seconds from the promotion to the first 1 s window with a completion.
    resumed: Option<f64>,
    /// Tasks in flight on the new primary right after the promotion:
    /// (task id, token, lease deadline).
    in_flight: Vec<(i64, i64, SystemTime)>,
    ledger: HashMap<String, Vec<Completion>>,
    timelines: (i64, i64),
    /// The new primary's clock right after the promotion: ledger rows
    /// written before it come from the old timeline.
    promoted_server: SystemTime,
}

/// What happens around the fault in the queue `zombie`, beside the load.
trait Scenario {
    /// On the primary, before the fault (and before the WAL sender stops).
    fn before_fault(&mut self, primary: &Cluster);
    /// On the primary, while the standby receives nothing (async only).
    fn during_stall(&mut self, _primary: &Cluster) {}
    /// On the new primary, after the promotion.
    fn after_promotion(&mut self, new_primary: &Cluster);
}

#[test]
fn synchronous_failover_loses_no_acknowledged_work_and_completes_nothing_twice() {
    let mut fencing = SyncFencing::default();
    let run = run_failover(Replication::Sync, None, &mut fencing);
    print_run("sync", &run);

    let enqueued = run.acks.enqueues();
    let completed = run.acks.completions();
    // Every acknowledged enqueue exists on the new primary: completed there
    // exactly once (the queue is drained, so it has no other place to be),
    // under the id it was acknowledged with.
    let mut lost = Vec::new();
    for ack in &enqueued {
        match run.ledger.get(&ack.key).map(Vec::as_slice) {
            Some([one]) => assert_eq!(one.task_id, ack.task_id, "{ack:?}"),
            Some(more) => panic!("{} completed {} times: {more:?}", ack.key, more.len()),
            None => lost.push(ack.clone()),
        }
    }
    assert!(lost.is_empty(), "acknowledged enqueues lost: {lost:?}");
    // Every acknowledged completion stayed: its ledger row, same task and
    // token, is the key's only one (the task was not run again).
    // (Acknowledged before the kill: the row is the old timeline's.)
    for ack in &completed {
        let rows = &run.ledger[&ack.key];
        assert_eq!(
            (rows.len(), rows[0].task_id, rows[0].token),
            (1, ack.task_id, ack.token),
            "acknowledged completion {ack:?} did not stay"
        );
        if ack.at < run.killed_at {
            assert!(
                rows[0].at < run.promoted_server,
                "{ack:?} was run again: {rows:?}"
            );
        }
    }
    assert_nothing_completed_twice(&run);
    // No key in the ledger that no producer asked for.
    let asked: HashSet<&str> = enqueued.iter().map(|a| a.key.as_str()).collect();
    for key in run.ledger.keys() {
        assert!(
            asked.contains(key.as_str()) || key.starts_with('p'),
            "unknown key {key}"
        );
    }
    // Tasks in flight at the promotion (their workers' connections died
    // with the primary) were reclaimed after their lease: completed once,
    // under a later token, after the lease ran out.
    assert!(
        !run.in_flight.is_empty(),
        "no task was in flight at the fault"
    );
    let by_id: HashMap<i64, &Completion> = run
        .ledger
        .values()
        .flatten()
        .map(|c| (c.task_id, c))
        .collect();
    for (id, token, deadline) in &run.in_flight {
        let done = by_id
            .get(id)
            .unwrap_or_else(|| panic!("task {id}, in flight at the promotion, never completed"));
        assert!(
            done.token > *token,
            "task {id} settled under its old token: {done:?}"
        );
        assert!(
            done.at >= *deadline,
            "task {id} reclaimed before its lease ran out"
        );
    }
    // Work enqueued on both sides of the failover was claimed by the
    // reconnected workers.
    let after: Vec<&Ack> = enqueued.iter().filter(|a| a.at > run.promoted_at).collect();
    assert!(
        !after.is_empty(),
        "nothing was enqueued after the promotion"
    );
    assert!(run.timelines.1 > run.timelines.0, "{:?}", run.timelines);
    fencing.check();
    assert!(
        run.resumed.is_some(),
        "the workers completed nothing on the new primary within {RESUME_BOUND} s"
    );
    report(
        "timing",
        "synchronous failover: back to 80 % of the pre-fault rate (target <= 15 s)",
        "the promotion",
        &run.recovery
            .map_or("not within 15 s".to_string(), |(r, rate)| {
                format!("{r:.2} s (of {rate:.0}/s)")
            }),
    );
}

#[test]
fn asynchronous_failover_with_a_stalled_standby_loses_a_measured_window() {
    let mut fencing = AsyncFencing::default();
    let stall = Duration::from_millis(1500);
    let run = run_failover(Replication::Async, Some(stall), &mut fencing);
    let window = print_run("async, WAL sender stopped 1.5 s", &run);
    assert_nothing_completed_twice(&run);
    // The stall is long enough that acknowledged work is lost, and the
    // loss lies within the stall: nothing acknowledged well before the WAL
    // sender stopped is missing (it may lag its WAL by a few ms).
    assert!(
        window.lost_enqueues > 0,
        "nothing lost: the stall did not work"
    );
    assert!(
        window.first_lost_at.unwrap() >= run.fault_at - 0.05,
        "an enqueue acknowledged before the stall was lost"
    );
    fencing.check();
}

#[test]
fn asynchronous_failover_without_a_stall_loses_at_most_what_was_in_transit() {
    let mut nothing = NoScenario;
    let run = run_failover(Replication::Async, None, &mut nothing);
    print_run("async", &run);
    assert_nothing_completed_twice(&run);
}

/// Each key at most once in the ledger: a task is never completed twice,
/// whatever was lost (a completion that survived has its ledger row with
/// it, and the task is gone, so it cannot run again).
fn assert_nothing_completed_twice(run: &Run) {
    let twice: Vec<_> = run
        .ledger
        .iter()
        .filter(|(_, rows)| rows.len() > 1)
        .collect();
    assert!(twice.is_empty(), "completed twice: {twice:?}");
}

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

fn run_failover(mode: Replication, stall: Option<Duration>, scenario: &mut dyn Scenario) -> Run {
    // One run at a time: two clusters under load at once on a small machine
    // would measure each other.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let primary = Cluster::start();
    create_ledger(&mut primary.connect(), LEDGER);
    let acks = Acks::default();
    enqueue_backlog(&primary, &acks);
    let standby = Standby::of(&primary, mode);
    let old_timeline = timeline(&mut primary.connect());
    let producer_dsn = failover_dsn(&primary, &standby, PRODUCER);
    let worker_dsn = failover_dsn(&primary, &standby, SERVICE);
    let (stop_producers, stop_workers) = (AtomicBool::new(false), AtomicBool::new(false));

    let mut marks = (0.0, 0.0, 0.0);
    let mut in_flight = Vec::new();
    let mut killed_before = SystemTime::UNIX_EPOCH;
    let mut promoted_server = SystemTime::UNIX_EPOCH;
    let (mut recovery, mut resumed) = (None, None);
    thread::scope(|s| {
        // Stops the load however this closure ends: a panic here must not
        // leave the scope waiting for threads that never stop.
        let _stop = StopOnDrop(&[&stop_producers, &stop_workers]);
        for p in 0..PRODUCERS {
            let (dsn, acks, stop) = (&producer_dsn, &acks, &stop_producers);
            s.spawn(move || produce(dsn, QUEUE, p, PACE, acks, stop));
        }
        for w in 0..WORKERS {
            let (dsn, acks, stop) = (&worker_dsn, &acks, &stop_workers);
            s.spawn(move || work(dsn, w, acks, stop));
        }
        scenario.before_fault(&primary);
        thread::sleep(BEFORE_FAULT);
        abandon_one(&primary, &acks);
        let mut fault_at = acks.now();
        if let Some(stall) = stall {
            standby.wait_replayed(&primary);
            let sender = standby.wal_sender_pid(&primary);
            signal_process(sender, "STOP");
            fault_at = acks.now();
            scenario.during_stall(&primary);
            thread::sleep(stall.saturating_sub(Duration::from_secs_f64(acks.now() - fault_at)));
            killed_before = server_now(&mut primary.connect());
            crash_with_sender_stopped(&primary, sender);
        } else {
            killed_before = server_now(&mut primary.connect());
            primary.stop_immediate();
        }
        let killed_at = acks.now();
        standby.promote();
        let promoted_at = acks.now();
        promoted_server = server_now(&mut standby.cluster.connect());
        in_flight = tasks_in_flight(&standby.cluster, killed_before);
        scenario.after_promotion(&standby.cluster);
        marks = (fault_at, killed_at, promoted_at);
        (resumed, recovery) = wait_for_recovery(&acks, fault_at, promoted_at);
        stop_producers.store(true, Ordering::SeqCst);
        let drained = wait_empty(
            &mut standby.cluster.connect(),
            QUEUE,
            Duration::from_secs(60),
        );
        stop_workers.store(true, Ordering::SeqCst);
        assert!(drained, "the queue was not drained on the new primary");
    });
    let (fault_at, killed_at, promoted_at) = marks;
    let pre_fault_rate = acks.rate(fault_at - 2.0, fault_at);
    let mut su = standby.cluster.connect();
    assert!(
        wait_empty(&mut su, "zombie", Duration::from_secs(1)),
        "the zombie scenario left tasks behind"
    );
    let ledger = ledger_by_key(&mut su, LEDGER);
    let timelines = (old_timeline, standby.timeline());
    Run {
        acks,
        fault_at,
        killed_at,
        promoted_at,
        pre_fault_rate,
        recovery,
        resumed,
        in_flight,
        ledger,
        timelines,
        promoted_server,
    }
}

struct StopOnDrop<'a>(&'a [&'a AtomicBool]);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0
            .iter()
            .for_each(|flag| flag.store(true, Ordering::SeqCst));
    }
}

/// `BACKLOG` tasks in batches, keys `b-<i>` in their payloads.
fn enqueue_backlog(primary: &Cluster, acks: &Acks) {
    let mut p = primary.connect_as(PRODUCER);
    let payloads: Vec<Value> = (0..BACKLOG)
        .map(|i| json!({ "key": format!("b-{i}") }))
        .collect();
    for chunk in payloads.chunks(1000) {
        let ids = enqueue_batch(&mut p, QUEUE, chunk);
        for (payload, id) in chunk.iter().zip(ids) {
            acks.enqueued(payload["key"].as_str().unwrap(), id);
        }
    }
}

/// A task claimed just before the fault by a worker that dies with the
/// primary (it never settles), so at least one task is in flight then; its
/// lease outlasts the stall and the promotion. Enqueued first at a high
/// priority, since the workers may have emptied the queue.
fn abandon_one(primary: &Cluster, acks: &Acks) {
    let (mut p, mut c) = (primary.connect_as(PRODUCER), primary.connect_as(WORKER));
    for i in 0..20 {
        let key = format!("a-{i}");
        let opts = EnqueueOpts::default().priority(100);
        let id = enqueue_with(&mut p, QUEUE, Some(&json!({ "key": key })), &opts).task_id;
        acks.enqueued(&key, id);
        if claim_one(&mut c, QUEUE, "abandoned", "5 seconds").is_some() {
            return;
        }
    }
    panic!("the workers took every task meant to be abandoned");
}

/// `pg_ctl stop -m immediate` while the WAL sender is stopped: the
/// postmaster's SIGQUIT waits in the stopped sender, so it is killed
/// outright (it has sent nothing since it was stopped, and sends nothing
/// now).
fn crash_with_sender_stopped(primary: &Cluster, sender: i32) {
    primary.expect_backend_deaths();
    thread::scope(|s| {
        let stopping = s.spawn(|| primary.stop_immediate());
        thread::sleep(Duration::from_millis(100));
        // (Gone already only if it was not stopped after all.)
        try_signal_process(sender, "KILL");
        stopping.join().unwrap();
    });
}

/// Lets the load run until the workers complete on the new primary (at
/// most `RESUME_BOUND`) and have been back at 80 % of the pre-fault rate
/// for a moment, or `AFTER_PROMOTION_MAX` passed. Returns when they first
/// completed, and the recovery time with the rate it was measured against.
fn wait_for_recovery(
    acks: &Acks,
    fault_at: f64,
    promoted_at: f64,
) -> (Option<f64>, Option<(f64, f64)>) {
    // At least 2 s of load on the new primary, for its enqueue rate.
    thread::sleep(Duration::from_secs(2));
    let mut recovery = None;
    loop {
        let now = acks.now();
        let resumed = acks.recovered_after(promoted_at, now, 1.0, 1.0);
        if recovery.is_none() && now < promoted_at + AFTER_PROMOTION_MAX {
            let rate = acks.reachable_rate(fault_at, promoted_at);
            if let Some(r) = acks.recovered_after(promoted_at, now, rate, 0.8) {
                if now > promoted_at + r + 1.5 {
                    recovery = Some((r, rate));
                }
            }
        }
        let measured = recovery.is_some() || now >= promoted_at + AFTER_PROMOTION_MAX;
        if (resumed.is_some() && measured) || now >= promoted_at + RESUME_BOUND {
            return (resumed, recovery);
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// The tasks in flight on the new primary under a claim made on the old
/// one (before `killed_before`, on the server's clock): workers that
/// reconnected may have claimed others already.
fn tasks_in_flight(cluster: &Cluster, killed_before: SystemTime) -> Vec<(i64, i64, SystemTime)> {
    cluster
        .connect()
        .query(
            "SELECT task_id, fencing_token, lease_deadline FROM aedb_queue.task
             WHERE queue = $1 AND state = 'in_flight' AND updated_at < $2",
            &[&QUEUE, &killed_before],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

// ---------------------------------------------------------------------------
// Workers
// ---------------------------------------------------------------------------

/// A worker until `stop`: claims one task at a time and completes it (see
/// [`work_one`]); on a lost connection it drops the task it held (its
/// lease will expire and another claim will reclaim it) and reconnects.
fn work(dsn: &str, worker: usize, acks: &Acks, stop: &AtomicBool) {
    let owner = format!("w{worker}");
    let mut conn: Option<Client> = None;
    while !stop.load(Ordering::SeqCst) {
        let Some(c) = conn.as_mut() else {
            conn = connect_retrying(dsn, stop);
            continue;
        };
        match work_one(c, &owner, acks) {
            Ok(true) => {}
            Ok(false) => thread::sleep(Duration::from_millis(5)),
            Err(e) if connection_lost(&e) => conn = None,
            Err(e) if sqlstate(&e).as_deref() == Some("40002") => {
                acks.lease_lost.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => panic!("worker {worker}: {}", describe(&e)),
        }
    }
}

/// Claims a task (autocommit), works 1 ms, then writes its ledger row and
/// completes it strictly in one transaction. False when nothing was due.
fn work_one(c: &mut Client, owner: &str, acks: &Acks) -> Result<bool, postgres::Error> {
    let Some(row) = c.query_opt(
        "SELECT task_id::int8, fencing_token::int8, attempts::int4, payload->>'key'
         FROM aedb_queue.queue_claim($1::text, $2::text, $3::text::interval)",
        &[&QUEUE, &owner, &LEASE],
    )?
    else {
        return Ok(false);
    };
    let (id, token, attempts, key): (i64, i64, i32, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    thread::sleep(Duration::from_millis(1));
    let mut tx = c.transaction()?;
    tx.execute(
        &format!("INSERT INTO {LEDGER} (key, task_id, token, worker, attempts) VALUES ($1, $2, $3, $4, $5)"),
        &[&key, &id, &token, &owner, &attempts],
    )?;
    tx.query_one(
        "SELECT aedb_queue.queue_complete($1::text, $2::int8, $3::int8, strict => true)::text",
        &[&QUEUE, &id, &token],
    )?;
    match tx.commit() {
        Ok(()) => acks.completed(&key, id, token),
        Err(e) => {
            if connection_lost(&e) {
                acks.unsure_completions.fetch_add(1, Ordering::Relaxed);
            }
            return Err(e);
        }
    }
    Ok(true)
}

// ---------------------------------------------------------------------------
// Fencing across the failover, in the queue `zombie`
// ---------------------------------------------------------------------------

struct NoScenario;

impl Scenario for NoScenario {
    fn before_fault(&mut self, _: &Cluster) {}
    fn after_promotion(&mut self, _: &Cluster) {}
}

/// Claims made before a synchronous failover hold on the new primary: a
/// lease still running is still its holder's (it completes after
/// reconnecting), a lease that ran out is reclaimed under a new token and
/// the old holder is fenced out.
#[derive(Default)]
struct SyncFencing {
    /// (task id, the zombie's token) of the lease that still runs and of
    /// the one that runs out.
    kept: (i64, i64),
    lapsed: (i64, i64),
    outcomes: Vec<(&'static str, Outcome)>,
    new_token: i64,
}

impl Scenario for SyncFencing {
    fn before_fault(&mut self, primary: &Cluster) {
        let mut p = primary.connect_as(PRODUCER);
        enqueue(&mut p, "zombie", &json!("kept"));
        enqueue(&mut p, "zombie", &json!("lapsed"));
        let mut z = primary.connect_as(WORKER);
        let kept = claim_one(&mut z, "zombie", "zombie", "1 minute").unwrap();
        let lapsed = claim_one(&mut z, "zombie", "zombie", "1 second").unwrap();
        self.kept = (kept.task_id, kept.fencing_token);
        self.lapsed = (lapsed.task_id, lapsed.fencing_token);
    }

    fn after_promotion(&mut self, new_primary: &Cluster) {
        let mut b = new_primary.connect_as(WORKER);
        let mut z = new_primary.connect_as(WORKER);
        // The lapsed lease ran out long ago (1 s, and BEFORE_FAULT passed);
        // the kept one still runs, so only the lapsed task is handed out.
        let taken = claim(&mut b, "zombie", "b", "1 minute", 2);
        assert_eq!(
            taken.iter().map(|t| t.task_id).collect::<Vec<_>>(),
            vec![self.lapsed.0],
            "only the lapsed lease is reclaimed"
        );
        self.new_token = taken[0].fencing_token;
        let (kept, lapsed) = (self.kept, self.lapsed);
        self.outcomes = vec![
            (
                "zombie completes its kept lease",
                complete(&mut z, "zombie", kept.0, kept.1),
            ),
            (
                "zombie completes its lapsed lease",
                complete(&mut z, "zombie", lapsed.0, lapsed.1),
            ),
            (
                "b completes the reclaimed task",
                complete(&mut b, "zombie", lapsed.0, self.new_token),
            ),
        ];
    }
}

impl SyncFencing {
    fn check(&self) {
        println!(
            "failover[sync] fencing: tokens before {:?}, reclaimed under {}; {:?}",
            (self.kept.1, self.lapsed.1),
            self.new_token,
            self.outcomes
        );
        assert!(self.new_token > self.lapsed.1);
        let outcomes: Vec<Outcome> = self.outcomes.iter().map(|o| o.1).collect();
        assert_eq!(
            outcomes,
            vec![Outcome::Applied, Outcome::LeaseLost, Outcome::Applied],
            "{:?}",
            self.outcomes
        );
    }
}

/// What old tokens do after an asynchronous failover that lost the claims
/// they came from: a zombie claims two tasks while the standby receives
/// nothing, and completes one of them (acknowledged, then lost). On the new
/// primary both are ready again; another worker claims them, and the
/// zombie tries to settle the one it still holds with its old token.
#[derive(Default)]
struct AsyncFencing {
    /// The zombie's claims on the lost timeline: (task id, token).
    held: (i64, i64),
    done: (i64, i64),
    /// The states on the new primary, and the new claims' tokens.
    states_after: Vec<(String, i32)>,
    new_tokens: HashMap<i64, i64>,
    zombie_outcome: Option<Outcome>,
    new_holder_outcome: Option<Outcome>,
}

impl Scenario for AsyncFencing {
    fn before_fault(&mut self, primary: &Cluster) {
        let mut p = primary.connect_as(PRODUCER);
        enqueue(&mut p, "zombie", &json!("held"));
        enqueue(&mut p, "zombie", &json!("done"));
    }

    fn during_stall(&mut self, primary: &Cluster) {
        let mut z = primary.connect_as(WORKER);
        let held = claim_one(&mut z, "zombie", "zombie", "1 second").unwrap();
        let done = claim_one(&mut z, "zombie", "zombie", "1 minute").unwrap();
        assert_eq!(
            complete(&mut z, "zombie", done.task_id, done.fencing_token),
            Outcome::Applied
        );
        self.held = (held.task_id, held.fencing_token);
        self.done = (done.task_id, done.fencing_token);
    }

    fn after_promotion(&mut self, new_primary: &Cluster) {
        let mut b = new_primary.connect_as(WORKER);
        for id in [self.held.0, self.done.0] {
            let t = get(&mut b, "zombie", id).expect("the task is back on the new primary");
            self.states_after.push((t.state, t.attempts));
        }
        let taken = claim(&mut b, "zombie", "b", "1 minute", 2);
        self.new_tokens = taken.iter().map(|t| (t.task_id, t.fencing_token)).collect();
        let mut z = new_primary.connect_as(WORKER);
        self.zombie_outcome = Some(complete(&mut z, "zombie", self.held.0, self.held.1));
        let new = self.new_tokens[&self.held.0];
        self.new_holder_outcome = Some(complete(&mut b, "zombie", self.held.0, new));
        let redo = self.new_tokens[&self.done.0];
        assert_eq!(
            complete(&mut b, "zombie", self.done.0, redo),
            Outcome::Applied
        );
    }
}

impl AsyncFencing {
    fn check(&self) {
        println!(
            "failover[async] fencing: zombie's tokens on the lost timeline held {:?} done {:?}; \
             on the new primary (state, attempts) {:?}, new tokens {:?}; zombie settles: {:?}, \
             new holder settles: {:?}",
            self.held,
            self.done,
            self.states_after,
            self.new_tokens,
            self.zombie_outcome,
            self.new_holder_outcome
        );
        // Both lost claims, and the lost completion, are undone: the tasks
        // are ready with no attempt spent, and are run again.
        assert_eq!(
            self.states_after,
            vec![("ready".to_string(), 0), ("ready".to_string(), 0)]
        );
        // The new timeline's claims hand out tokens above every token of the
        // lost one (fence::token_floor): the zombie's token names no lease
        // on the new primary, so it is fenced out and the new holder's
        // settlement applies. (Counting on from the replicated token, the
        // new claim got the zombie's token again, the zombie's completion
        // applied and the new holder was fenced out of its own lease.)
        let new = self.new_tokens[&self.held.0];
        assert!(new >= 1 << 32, "a claim on timeline 2 hands out {new}");
        assert!(new > self.held.1 && self.new_tokens[&self.done.0] > self.done.1);
        assert_eq!(self.zombie_outcome, Some(Outcome::LeaseLost));
        assert_eq!(self.new_holder_outcome, Some(Outcome::Applied));
    }
}

// ---------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------

/// What an asynchronous failover lost.
struct Window {
    lost_enqueues: usize,
    first_lost_at: Option<f64>,
}

/// Prints the run's figures (times in seconds from the fault) and returns
/// the loss.
fn print_run(label: &str, run: &Run) -> Window {
    let enqueued = run.acks.enqueues();
    let completed = run.acks.completions();
    let lost: Vec<&Ack> = enqueued
        .iter()
        .filter(|a| !run.ledger.contains_key(&a.key))
        .collect();
    // A completion survived if its ledger row is one of the old timeline's:
    // the same key and token alone could be a re-run's if tokens repeated
    // after a loss (they did before fence::token_floor, see AsyncFencing).
    let survived: HashSet<(&str, i64)> = run
        .ledger
        .iter()
        .flat_map(|(k, rows)| {
            rows.iter()
                .filter(|r| r.at < run.promoted_server)
                .map(move |r| (k.as_str(), r.token))
        })
        .collect();
    let lost_completions: Vec<&Ack> = completed
        .iter()
        .filter(|a| a.at < run.killed_at && !survived.contains(&(a.key.as_str(), a.token)))
        .collect();
    let rerun = lost_completions
        .iter()
        .filter(|a| run.ledger.contains_key(&a.key))
        .count();
    let lost_ids: HashSet<i64> = lost.iter().map(|a| a.task_id).collect();
    let reused = run
        .ledger
        .values()
        .flatten()
        .filter(|c| lost_ids.contains(&c.task_id))
        .count();
    let span = |acks: &[&Ack]| {
        let first = acks.iter().map(|a| a.at).fold(f64::INFINITY, f64::min);
        let last = acks.iter().map(|a| a.at).fold(f64::NEG_INFINITY, f64::max);
        if acks.is_empty() {
            "-".to_string()
        } else {
            format!(
                "{:+.3} s to {:+.3} s",
                first - run.fault_at,
                last - run.fault_at
            )
        }
    };
    let in_fault = |acks: &[Ack]| {
        acks.iter()
            .filter(|a| a.at >= run.fault_at && a.at < run.killed_at)
            .count()
    };
    println!(
        "failover[{label}]: timelines {:?}; killed {:.2} s after the fault, promoted {:.2} s after the kill; \
         acknowledged: {} enqueues ({} between the fault and the kill), {} completions ({}); \
         unsure (connection lost before the answer): {} enqueues, {} completions; lease_lost {}; \
         in flight at promotion {}; \
         LOST: {} acknowledged enqueues (acknowledged {}), {} acknowledged completions (acknowledged {}; {} of them run again); \
         lost task ids handed out again for other tasks: {}; \
         pre-fault rate {:.0}/s; first completion {} after promotion, back to 80 % of that rate (1 s window) {}",
        run.timelines,
        run.killed_at - run.fault_at,
        run.promoted_at - run.killed_at,
        enqueued.len(),
        in_fault(&enqueued),
        completed.len(),
        in_fault(&completed),
        run.acks.unsure_enqueues.load(Ordering::Relaxed),
        run.acks.unsure_completions.load(Ordering::Relaxed),
        run.acks.lease_lost.load(Ordering::Relaxed),
        run.in_flight.len(),
        lost.len(),
        span(&lost),
        lost_completions.len(),
        span(&lost_completions),
        rerun,
        reused,
        run.pre_fault_rate,
        run.acks
            .first_completion_after(run.promoted_at)
            .map_or("never".to_string(), |r| format!("{r:.3} s")),
        run.recovery.map_or("not within the run".to_string(), |(r, rate)| format!(
            "{r:.2} s after promotion (of {rate:.0}/s: the pre-fault rate, or the producers' after the promotion if lower)"
        )),
    );
    Window {
        lost_enqueues: lost.len(),
        first_lost_at: lost.iter().map(|a| a.at).reduce(f64::min),
    }
}
