//! The worker runtime through a failover to a synchronous standby
//! (docs/failover.md): two runtimes of 4 handlers connect with one string
//! naming the primary and the standby (`target_session_attrs=read-write`),
//! producers enqueue through it with idempotency keys; mid-load the
//! primary is killed (`pg_ctl stop -m immediate`) and the standby promoted.
//! The runtimes reconnect by themselves (new pooled connections, so new
//! backends with their own scan positions, caches and prepared statements).
//! Every handler writes a ledger row in its own transaction, committed
//! with the strict completion.
//!
//! Checked on the new primary: every acknowledged enqueue completed exactly
//! once (including those enqueued before and after the promotion), every
//! ledger row visible on the primary just before the kill is still there
//! and was not written again, the handlers completed work on the new
//! primary within [`RESUME_BOUND`] of the promotion, and the runtimes
//! drained the queue. Reported, not asserted (a loaded machine can halve the
//! rate by itself; bench/timing.sh collects it): the recovery time, from the
//! promoted standby accepting writes to the handlers completing at 80 % of
//! their pre-fault rate.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aedb_queue_client::{handler, Done, QueueOptions, Report, Task, TaskError, Worker};
use aedb_queue_itests::chaos::recovery::report_in;
use aedb_queue_itests::standby::load::{create_ledger, ledger_by_key, produce, wait_empty, Acks};
use aedb_queue_itests::standby::{failover_dsn, Replication, Standby};
use aedb_queue_itests::{enqueue_batch, json, server_now, Cluster, Value, PRODUCER, SERVICE};

const QUEUE: &str = "rt.failover";
const LEDGER: &str = "rt_failover_ledger";
const BACKLOG: usize = 500;
/// How long after the promotion the handlers may take to complete anything
/// on the new primary: generous, only a failover that broke them misses it.
const RESUME_BOUND: Duration = Duration::from_secs(60);

#[test]
fn the_runtime_reconnects_to_the_promoted_standby_and_loses_nothing() {
    let primary = Cluster::start();
    create_ledger(&mut primary.connect(), LEDGER);
    let acks = Acks::default();
    enqueue_backlog(&primary, &acks);
    let standby = Standby::of(&primary, Replication::Sync);
    let producer_dsn = failover_dsn(&primary, &standby, PRODUCER);
    let worker_dsn = failover_dsn(&primary, &standby, SERVICE);
    let stop_producers = AtomicBool::new(false);
    let drained = Arc::new(tokio::sync::Notify::new());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let worker = runtime_worker(&worker_dsn, w);
            let drained = drained.clone();
            rt.spawn(async move { worker.run(async move { drained.notified().await }).await })
        })
        .collect();

    let mut marks = None;
    std::thread::scope(|s| {
        for p in 0..2 {
            let (dsn, acks, stop) = (&producer_dsn, &acks, &stop_producers);
            s.spawn(move || produce(dsn, QUEUE, p, Duration::from_millis(10), acks, stop));
        }
        let _stop = StopOnDrop(&stop_producers);
        std::thread::sleep(Duration::from_secs(3));
        let mut su = primary.connect();
        let before_kill = ledger_by_key(&mut su, LEDGER);
        let killed_server = server_now(&mut su);
        drop(su);
        primary.stop_immediate();
        standby.promote();
        let promoted_server = server_now(&mut standby.cluster.connect());
        let promoted_at = acks.now();
        // Let the load run on the new primary, then drain.
        while acks.now() < promoted_at + 6.0 {
            std::thread::sleep(Duration::from_millis(100));
        }
        stop_producers.store(true, Ordering::SeqCst);
        let empty = wait_empty(
            &mut standby.cluster.connect(),
            QUEUE,
            Duration::from_secs(60),
        );
        assert!(
            empty,
            "the runtimes did not drain the queue on the new primary"
        );
        marks = Some((before_kill, killed_server, promoted_server, promoted_at));
    });
    drained.notify_waiters();
    let reports: Vec<Report> = rt.block_on(async {
        let mut reports = Vec::new();
        for w in workers {
            reports.push(w.await.unwrap().unwrap());
        }
        reports
    });
    let (before_kill, killed_server, promoted_server, promoted_at) = marks.unwrap();
    let ledger = ledger_by_key(&mut standby.cluster.connect(), LEDGER);

    let enqueued = acks.enqueues();
    for ack in &enqueued {
        match ledger.get(&ack.key).map(Vec::as_slice) {
            Some([one]) => assert_eq!(one.task_id, ack.task_id, "{ack:?}"),
            Some(more) => panic!("{} completed {} times: {more:?}", ack.key, more.len()),
            None => panic!("acknowledged enqueue lost: {ack:?}"),
        }
    }
    let twice: Vec<_> = ledger.iter().filter(|(_, rows)| rows.len() > 1).collect();
    assert!(twice.is_empty(), "completed twice: {twice:?}");
    // Committed (visible) on the primary before the kill: still there, the
    // same row, not written again on the new primary.
    for (key, rows) in &before_kill {
        assert_eq!(
            ledger.get(key),
            Some(rows),
            "completion of {key} did not stay"
        );
    }
    let after = enqueued.iter().filter(|a| a.at > promoted_at).count();
    assert!(after > 0, "nothing was enqueued after the promotion");

    let times: Vec<SystemTime> = ledger.values().flatten().map(|c| c.at).collect();
    let pre = per_second(
        &times,
        killed_server - Duration::from_secs(2),
        Duration::from_secs(2),
    );
    // The rate the handlers can be back at: the pre-fault one, unless the
    // producers enqueued less than that after the promotion (before the
    // fault the handlers may have been eating the backlog).
    let demand = acks.enqueue_rate(promoted_at, promoted_at + 6.0);
    let recovery = recovered(&times, promoted_server, pre.min(demand) * 0.8);
    println!(
        "failover[runtime, sync]: {} acknowledged enqueues ({after} after the promotion), \
         {} completed before the kill, {} in all; reports {reports:?}; unsure enqueues {}; \
         pre-fault rate {pre:.0}/s, enqueues after the promotion {demand:.0}/s; \
         back to 80 % of the lower (1 s window) {}",
        enqueued.len(),
        before_kill.len(),
        times.len(),
        acks.unsure_enqueues.load(Ordering::Relaxed),
        recovery.map_or("not within the run".into(), |r| format!(
            "{r:.2} s after promotion"
        )),
    );
    let completed: u64 = reports.iter().map(|r| r.completed).sum();
    assert!(completed as usize <= times.len(), "{reports:?}");
    let resumed = times.iter().filter(|t| **t >= promoted_server).min();
    assert!(
        resumed.is_some_and(|t| *t <= promoted_server + RESUME_BOUND),
        "the runtimes completed nothing on the new primary within {RESUME_BOUND:?} \
         (first: {resumed:?}, promoted {promoted_server:?})"
    );
    report_in(
        "failover (runtime)",
        "timing",
        "runtime failover: back to 80 % of the pre-fault rate (target <= 15 s)",
        "the promotion",
        &recovery.map_or("not within the run".to_string(), |r| {
            format!("{r:.2} s (of {:.0}/s)", pre.min(demand))
        }),
    );
}

/// A runtime of 4 handlers; each writes the task's ledger row in its own
/// transaction (committed with the strict completion). Short lease and
/// poll, so tasks in flight at the fault come back soon.
fn runtime_worker(dsn: &str, w: usize) -> Worker {
    Worker::builder(dsn)
        .unwrap()
        .owner_id(format!("rt{w}"))
        .listen(false)
        .queue(
            QueueOptions::new(QUEUE)
                .concurrency(4)
                .lease(Duration::from_secs(2))
                .poll_interval(Duration::from_millis(100)),
            handler(move |task: Task<Value>| async move {
                let key = task.payload["key"].as_str().unwrap_or_default().to_string();
                let tx = task.transaction().await.map_err(TaskError::retry)?;
                tx.execute(
                    &format!(
                        "INSERT INTO {LEDGER} (key, task_id, token, worker, attempts) \
                         VALUES ($1, $2, $3, $4, $5)"
                    ),
                    &[
                        &key,
                        &task.id,
                        &task.fencing_token,
                        &format!("rt{w}"),
                        &task.attempts,
                    ],
                )
                .await?;
                Ok(Done::new())
            }),
        )
        .build()
        .unwrap()
}

fn enqueue_backlog(primary: &Cluster, acks: &Acks) {
    let mut p = primary.connect_as(PRODUCER);
    let payloads: Vec<Value> = (0..BACKLOG)
        .map(|i| json!({ "key": format!("b-{i}") }))
        .collect();
    let ids = enqueue_batch(&mut p, QUEUE, &payloads);
    for (payload, id) in payloads.iter().zip(ids) {
        acks.enqueued(payload["key"].as_str().unwrap(), id);
    }
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Completions per second in `[from, from + span)`.
fn per_second(times: &[SystemTime], from: SystemTime, span: Duration) -> f64 {
    let n = times
        .iter()
        .filter(|t| **t >= from && **t < from + span)
        .count();
    n as f64 / span.as_secs_f64()
}

/// Seconds from `since` to the start of the first 1 s window (50 ms steps)
/// with at least `rate` completions per second.
fn recovered(times: &[SystemTime], since: SystemTime, rate: f64) -> Option<f64> {
    let last = times.iter().max()?;
    let mut from = since;
    while from + Duration::from_secs(1) <= *last {
        if per_second(times, from, Duration::from_secs(1)) >= rate {
            return Some(from.duration_since(since).unwrap().as_secs_f64());
        }
        from += Duration::from_millis(50);
    }
    None
}
