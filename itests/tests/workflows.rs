//! Durable workflows under faults: workers over TCP run workflows of five
//! steps (an effect, a sleep, an effect, an event wait, an effect) and
//! complete them; each effect is a ledger row written in the transaction
//! that records its step (`strict`), and the completion's row in the
//! completing one. A producer emits each workflow's event, some before the
//! wait and some during it. Mid-run the server crashes (`pg_ctl stop -m
//! immediate`, then a restart that replays WAL), or the primary is killed
//! and a synchronous standby promoted. The ledger shows every effect of
//! every workflow exactly once: no step ran twice to completion, none was
//! skipped, and every workflow completed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use aedb_queue_itests::standby::load::{connect_retrying, connection_lost};
use aedb_queue_itests::standby::{failover_dsn, Replication, Standby};
use aedb_queue_itests::*;

const QUEUE: &str = "workflows";
const LEDGER: &str = "workflow_ledger";
const WORKFLOWS: i64 = 60;
const WORKERS: usize = 4;
const LEASE: &str = "2 seconds";
/// The effects each workflow must leave once, in order.
const EFFECTS: [&str; 4] = ["charge", "pack", "ship", "done"];

enum Step {
    Effect(&'static str),
    Sleep(&'static str),
    Event(&'static str),
}

const PLAN: [Step; 5] = [
    Step::Effect("charge"),
    Step::Sleep("cool-off"),
    Step::Effect("pack"),
    Step::Event("packed"),
    Step::Effect("ship"),
];

fn key_of(n: i64) -> String {
    format!("order-{n}")
}

/// What one pass of a handler over a claimed workflow ended with.
enum Pass {
    Completed,
    Parked,
    LeaseLost,
}

/// Runs the claimed workflow from its recorded steps on; `Err` on a lost
/// connection or an unexpected error.
fn run_workflow(c: &mut Client, id: i64, token: i64, n: i64) -> Result<Pass, postgres::Error> {
    let recorded: Vec<String> = c
        .query("SELECT step FROM aedb_queue.queue_steps($1, $2)", &[&QUEUE, &id])?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for step in &PLAN {
        match step {
            Step::Effect(name) if recorded.iter().any(|r| r == name) => {}
            Step::Effect(name) => {
                let mut tx = c.transaction()?;
                tx.execute(
                    &format!("INSERT INTO {LEDGER} (task_id, step, token) VALUES ($1, $2, $3)"),
                    &[&id, name, &token],
                )?;
                match tx.query_one(
                    "SELECT aedb_queue.queue_step_record($1, $2, $3, $4, strict => true)::text",
                    &[&QUEUE, &id, &token, name],
                ) {
                    Err(e) if sqlstate(&e).as_deref() == Some("40002") => return Ok(Pass::LeaseLost),
                    other => other?,
                };
                tx.commit()?;
            }
            Step::Sleep(name) => {
                let row = c.query_one(
                    "SELECT outcome::text, waiting FROM aedb_queue.queue_sleep($1, $2, $3, $4,
                         duration => '300 milliseconds')",
                    &[&QUEUE, &id, &token, name],
                )?;
                match (row.get::<_, String>(0).as_str(), row.get::<_, bool>(1)) {
                    ("lease_lost", _) => return Ok(Pass::LeaseLost),
                    (_, true) => return Ok(Pass::Parked),
                    _ => {}
                }
            }
            Step::Event(name) => {
                let row = c.query_one(
                    "SELECT outcome::text, waiting, timed_out FROM aedb_queue.queue_await_event(
                         $1, $2, $3, $4, $5, timeout => '5 minutes')",
                    &[&QUEUE, &id, &token, name, &key_of(n)],
                )?;
                match (row.get::<_, String>(0).as_str(), row.get::<_, bool>(1)) {
                    ("lease_lost", _) => return Ok(Pass::LeaseLost),
                    (_, true) => return Ok(Pass::Parked),
                    _ => assert!(!row.get::<_, bool>(2), "workflow {n}'s event wait timed out"),
                }
            }
        }
    }
    let mut tx = c.transaction()?;
    tx.execute(
        &format!("INSERT INTO {LEDGER} (task_id, step, token) VALUES ($1, 'done', $2)"),
        &[&id, &token],
    )?;
    match tx.query_one(
        "SELECT aedb_queue.queue_complete($1, $2, $3, strict => true)::text",
        &[&QUEUE, &id, &token],
    ) {
        Err(e) if sqlstate(&e).as_deref() == Some("40002") => return Ok(Pass::LeaseLost),
        other => other?,
    };
    tx.commit()?;
    Ok(Pass::Completed)
}

#[derive(Default)]
struct Tally {
    passes: AtomicUsize,
    parked: AtomicUsize,
    lease_lost: AtomicUsize,
    reconnects: AtomicUsize,
}

fn work(dsn: &str, worker: usize, stop: &AtomicBool, tally: &Tally) {
    let owner = format!("wf-{worker}");
    let mut conn: Option<Client> = None;
    while !stop.load(Ordering::SeqCst) {
        let Some(c) = conn.as_mut() else {
            conn = connect_retrying(dsn, stop);
            continue;
        };
        let claimed = c.query_opt(
            "SELECT task_id, fencing_token, (payload->>'n')::int8
             FROM aedb_queue.queue_claim($1, $2, $3::text::interval)",
            &[&QUEUE, &owner, &LEASE],
        );
        let outcome = match claimed {
            Ok(Some(row)) => run_workflow(c, row.get(0), row.get(1), row.get(2)),
            Ok(None) => {
                thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(pass) => {
                tally.passes.fetch_add(1, Ordering::Relaxed);
                match pass {
                    Pass::Parked => tally.parked.fetch_add(1, Ordering::Relaxed),
                    Pass::LeaseLost => tally.lease_lost.fetch_add(1, Ordering::Relaxed),
                    Pass::Completed => 0,
                };
            }
            Err(e) if connection_lost(&e) => {
                tally.reconnects.fetch_add(1, Ordering::Relaxed);
                conn = None;
            }
            Err(e) => panic!("worker {worker}: {}", describe(&e)),
        }
    }
}

/// Emits workflow `n`'s event, on a new connection after a lost one (a
/// second emit of a key that did commit reports false: harmless).
fn emit_all(dsn: &str, from: i64, to: i64, pace: Duration, stop: &AtomicBool) {
    let mut conn: Option<Client> = None;
    let mut n = from;
    while n < to && !stop.load(Ordering::SeqCst) {
        let Some(c) = conn.as_mut() else {
            conn = connect_retrying(dsn, stop);
            continue;
        };
        match c.query_one(
            "SELECT aedb_queue.queue_emit($1, $2, jsonb_build_object('n', $3::int8))",
            &[&QUEUE, &key_of(n), &n],
        ) {
            Ok(_) => {
                n += 1;
                thread::sleep(pace);
            }
            Err(e) if connection_lost(&e) => conn = None,
            Err(e) => panic!("emit {n}: {}", describe(&e)),
        }
    }
}

/// Enqueues the workflows and the ledger; emits the first third of the
/// events before any worker runs (an event before its wait).
fn prepare(primary: &Cluster) {
    let mut su = primary.connect();
    su.batch_execute(&format!(
        "CREATE TABLE {LEDGER} (task_id bigint NOT NULL, step text NOT NULL, token bigint NOT NULL,
                                at timestamptz NOT NULL DEFAULT clock_timestamp());
         GRANT SELECT, INSERT ON {LEDGER} TO PUBLIC;"
    ))
    .unwrap();
    let mut p = primary.connect_as(PRODUCER);
    for n in 0..WORKFLOWS {
        enqueue_with(
            &mut p,
            QUEUE,
            Some(&json!({ "n": n })),
            &EnqueueOpts::default().max_attempts(100),
        );
    }
    for n in 0..WORKFLOWS / 3 {
        p.query_one(
            "SELECT aedb_queue.queue_emit($1, $2, jsonb_build_object('n', $3::int8))",
            &[&QUEUE, &key_of(n), &n],
        )
        .unwrap();
    }
}

/// Runs the workers and the late emits; `fault` runs after `before`, with
/// the load going on; then waits for every workflow to complete.
fn run(worker_dsn: &str, producer_dsn: &str, before: Duration, fault: impl FnOnce()) -> Tally {
    let tally = Tally::default();
    let stop = AtomicBool::new(false);
    let done = thread::scope(|s| {
        for w in 0..WORKERS {
            let (dsn, stop, tally) = (worker_dsn, &stop, &tally);
            s.spawn(move || work(dsn, w, stop, tally));
        }
        let stop_ref = &stop;
        s.spawn(move || {
            emit_all(producer_dsn, WORKFLOWS / 3, WORKFLOWS, Duration::from_millis(60), stop_ref)
        });
        thread::sleep(before);
        fault();
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut left = i64::MAX;
        while Instant::now() < deadline {
            if let Some(mut c) = connect_retrying(worker_dsn, &stop) {
                if let Ok(row) = c.query_one(
                    "SELECT coalesce(sum(waiting + scheduled + blocked + ready + in_flight + dead), 0)::int8
                     FROM aedb_queue.queue_overview(queue_name => $1)",
                    &[&QUEUE],
                ) {
                    left = row.get(0);
                }
            }
            if left == 0 {
                break;
            }
            thread::sleep(Duration::from_millis(200));
        }
        stop.store(true, Ordering::SeqCst);
        left == 0
    });
    assert!(done, "the workflows did not all complete within 90 s");
    tally
}

/// Every effect of every workflow exactly once; prints the tally.
fn assert_ledger(c: &mut Client, tally: &Tally, label: &str) {
    let mut seen: HashMap<(i64, String), i64> = HashMap::new();
    for row in c
        .query(&format!("SELECT task_id, step, count(*) FROM {LEDGER} GROUP BY 1, 2"), &[])
        .unwrap()
    {
        seen.insert((row.get(0), row.get(1)), row.get(2));
    }
    let tasks: Vec<i64> = c
        .query(&format!("SELECT DISTINCT task_id FROM {LEDGER} ORDER BY 1"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(tasks.len() as i64, WORKFLOWS, "{label}: workflows in the ledger");
    for id in &tasks {
        for effect in EFFECTS {
            let n = seen.get(&(*id, effect.to_string())).copied().unwrap_or(0);
            assert_eq!(n, 1, "{label}: task {id}'s {effect} ran {n} times");
        }
    }
    assert_eq!(seen.len(), tasks.len() * EFFECTS.len(), "{label}: unexpected steps");
    let left: i64 = c
        .query_one("SELECT count(*) FROM aedb_queue.task_step WHERE queue = $1", &[&QUEUE])
        .unwrap()
        .get(0);
    println!(
        "{label}: {WORKFLOWS} workflows, each effect once; {} passes ({} parked, {} lease lost), {} reconnects; {left} step rows left for the reaper",
        tally.passes.load(Ordering::Relaxed),
        tally.parked.load(Ordering::Relaxed),
        tally.lease_lost.load(Ordering::Relaxed),
        tally.reconnects.load(Ordering::Relaxed),
    );
}

#[test]
fn workflows_run_each_step_once_across_a_crash_and_restart() {
    let cluster = Cluster::start();
    prepare(&cluster);
    let (worker_dsn, producer_dsn) = (cluster.dsn(SERVICE), cluster.dsn(PRODUCER));
    let tally = run(&worker_dsn, &producer_dsn, Duration::from_secs(2), || {
        cluster.stop_immediate();
        thread::sleep(Duration::from_millis(300));
        cluster.start_again();
    });
    assert!(
        cluster.server_log().contains("database system was interrupted"),
        "the restart did not recover from a crash"
    );
    assert!(tally.reconnects.load(Ordering::Relaxed) > 0, "no worker saw the crash");
    assert_ledger(&mut cluster.connect(), &tally, "crash and restart");
}

#[test]
fn workflows_run_each_step_once_across_a_failover_to_a_synchronous_standby() {
    let primary = Cluster::start();
    prepare(&primary);
    let standby = Standby::of(&primary, Replication::Sync);
    let worker_dsn = failover_dsn(&primary, &standby, SERVICE);
    let producer_dsn = failover_dsn(&primary, &standby, PRODUCER);
    let tally = run(&worker_dsn, &producer_dsn, Duration::from_secs(2), || {
        primary.stop_immediate();
        standby.promote();
    });
    assert!(tally.reconnects.load(Ordering::Relaxed) > 0, "no worker saw the failover");
    assert_ledger(&mut standby.cluster.connect(), &tally, "failover");
}
