//! Many workers drain a queue that producers keep filling (one task per call
//! and in batches): every task is
//! handed out and completed exactly once (SKIP LOCKED exclusivity, no lost or
//! duplicated task), with each completion committed together with the
//! worker's own write.

use aedb_queue_itests::*;
use rand::Rng;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

const TOTAL: usize = 20_000;
/// Enqueued before the workers start, with `queue_enqueue_batch`.
const PRELOADED: usize = TOTAL / 2;
const BATCH: usize = 1_000;
const PRODUCERS: usize = 2;
const WORKERS: usize = 8;
/// A worker stops once producers are done and it has found nothing to claim
/// for this long.
const IDLE_STOP: Duration = Duration::from_millis(1_500);
/// Hard bound on the whole drain so the test always ends by itself.
const DRAIN_BOUND: Duration = Duration::from_secs(90);
/// Far longer than the test: no lease may expire, so a second hand-out of a
/// task can only be an exclusivity bug.
const LEASE: &str = "10 minutes";

#[derive(Default)]
struct WorkerReport {
    /// (task_id, payload, attempts) of every task this worker was handed.
    claimed: Vec<(i64, Option<Value>, i32)>,
    /// Completions that did not return 'applied'.
    not_applied: Vec<(i64, Outcome)>,
    hit_bound: bool,
}

fn work(
    cluster: &Cluster,
    queue: &str,
    ledger: &str,
    worker: i32,
    producers_done: &AtomicBool,
    bound: Instant,
) -> WorkerReport {
    let mut c = cluster.connect_as(WORKER);
    let owner = format!("worker-{worker}");
    let insert =
        format!("INSERT INTO {ledger} (task_id, worker, fencing_token) VALUES ($1, $2, $3)");
    let mut rng = rand::thread_rng();
    let mut report = WorkerReport::default();
    let mut idle_since: Option<Instant> = None;
    loop {
        if Instant::now() > bound {
            report.hit_bound = true;
            return report;
        }
        // Transaction 1: take a few tasks and commit the leases.
        let max = rng.gen_range(1..=3);
        let mut tx = c.transaction().expect("begin");
        let batch = claim(&mut tx, queue, &owner, LEASE, max);
        tx.commit().expect("commit claim");
        assert!(
            batch.len() <= max as usize,
            "claim(max => {max}) returned {}",
            batch.len()
        );

        if batch.is_empty() {
            if producers_done.load(Ordering::SeqCst) {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= IDLE_STOP {
                    return report;
                }
            }
            thread::sleep(Duration::from_millis(10));
            continue;
        }
        idle_since = None;

        // Transaction 2 per task: the worker's own write + the completion.
        for t in batch {
            report
                .claimed
                .push((t.task_id, t.payload.clone(), t.attempts));
            let mut tx = c.transaction().expect("begin");
            tx.execute(insert.as_str(), &[&t.task_id, &worker, &t.fencing_token])
                .expect("ledger insert");
            let outcome = complete(&mut tx, queue, t.task_id, t.fencing_token);
            tx.commit().expect("commit completion");
            if outcome != Outcome::Applied {
                report.not_applied.push((t.task_id, outcome));
            }
        }
    }
}

/// Enqueues `count` tasks on the cluster as the producer ([`produce_on`]).
fn produce(
    cluster: &Cluster,
    queue: &str,
    first: usize,
    count: usize,
    batched: bool,
) -> Vec<(i64, usize)> {
    produce_on(
        &mut cluster.connect_as(PRODUCER),
        queue,
        first,
        count,
        batched,
    )
}

#[test]
fn twenty_thousand_tasks_are_each_completed_exactly_once() {
    let cluster = Cluster::shared();
    let queue = unique_queue("drain");
    let ledger = format!("ledger_{queue}");
    // The superuser: set-up (the ledger table) and reading the ledger and
    // the task table at the end.
    let mut c = cluster.connect();
    let mut producer = cluster.connect_as(PRODUCER);
    let mut observer = cluster.connect_as(WORKER);
    // Deliberately no unique constraint: a duplicate completion must show up
    // as a duplicate row, not as an error that hides it.
    c.batch_execute(&format!(
        "CREATE TABLE {ledger} (task_id bigint NOT NULL, worker int NOT NULL, fencing_token bigint NOT NULL)"
    ))
    .unwrap();

    // id -> n of the payload {"n": n} it was enqueued with.
    let mut enqueued: HashMap<i64, usize> = HashMap::new();
    let mut ids_seen = 0usize;
    for start in (0..PRELOADED).step_by(BATCH) {
        let payloads: Vec<Value> = (start..start + BATCH).map(|n| json!({ "n": n })).collect();
        let ids = enqueue_batch(&mut producer, &queue, &payloads);
        assert_eq!(
            ids.len(),
            BATCH,
            "queue_enqueue_batch returned {} ids for {BATCH} payloads",
            ids.len()
        );
        for (i, id) in ids.into_iter().enumerate() {
            ids_seen += 1;
            enqueued.insert(id, start + i);
        }
    }

    let producers_done = AtomicBool::new(false);
    let bound = Instant::now() + DRAIN_BOUND;
    let started = Instant::now();
    let per_producer = (TOTAL - PRELOADED) / PRODUCERS;
    let (produced, reports) = thread::scope(|s| {
        let workers: Vec<_> = (0..WORKERS as i32)
            .map(|w| {
                let (queue, ledger, done) = (&queue, &ledger, &producers_done);
                s.spawn(move || work(cluster, queue, ledger, w, done, bound))
            })
            .collect();
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let queue = &queue;
                let first = PRELOADED + p * per_producer;
                s.spawn(move || produce(cluster, queue, first, per_producer, p % 2 == 1))
            })
            .collect();
        let produced: Vec<(i64, usize)> = producers
            .into_iter()
            .flat_map(|h| h.join().expect("producer panicked"))
            .collect();
        producers_done.store(true, Ordering::SeqCst);
        let reports: Vec<WorkerReport> = workers
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect();
        (produced, reports)
    });
    eprintln!("drain of {TOTAL} tasks took {:?}", started.elapsed());
    for (id, n) in produced {
        ids_seen += 1;
        enqueued.insert(id, n);
    }

    assert!(
        reports.iter().all(|r| !r.hit_bound),
        "the drain did not finish within {DRAIN_BOUND:?} (test bound, not a speed requirement)"
    );
    assert_eq!(ids_seen, TOTAL);
    assert_eq!(enqueued.len(), TOTAL, "enqueue returned duplicate task ids");

    // Every hand-out: a task enqueued here, with its own payload, handed out
    // once (attempts 1: no lease expired, so no reclaim could explain more).
    let mut claimed_count: HashMap<i64, usize> = HashMap::new();
    for r in &reports {
        for (id, payload, attempts) in &r.claimed {
            *claimed_count.entry(*id).or_default() += 1;
            let n = enqueued
                .get(id)
                .unwrap_or_else(|| panic!("claimed unknown task id {id}"));
            assert_eq!(
                payload,
                &Some(json!({ "n": n })),
                "task {id} carries another task's payload"
            );
            assert_eq!(
                *attempts, 1,
                "task {id} handed out with attempts {attempts}"
            );
        }
    }
    let twice: Vec<_> = claimed_count
        .iter()
        .filter(|(_, &k)| k > 1)
        .take(10)
        .collect();
    assert!(
        twice.is_empty(),
        "tasks handed out more than once (id, times): {twice:?}"
    );
    assert_eq!(claimed_count.len(), TOTAL, "not every task was handed out");

    let not_applied: Vec<_> = reports
        .iter()
        .flat_map(|r| r.not_applied.iter())
        .take(10)
        .collect();
    assert!(
        not_applied.is_empty(),
        "completions that were not applied: {not_applied:?}"
    );

    // The ledger: every task exactly once.
    let ledger_counts = ledger_counts(&mut c, &ledger);
    let dup: Vec<_> = ledger_counts
        .iter()
        .filter(|(_, &k)| k > 1)
        .take(10)
        .collect();
    assert!(dup.is_empty(), "ledger has duplicates (id, rows): {dup:?}");
    let total: i64 = ledger_counts.values().sum();
    assert_eq!(total, TOTAL as i64, "ledger row count");
    let in_ledger: HashSet<i64> = ledger_counts.keys().copied().collect();
    let all: HashSet<i64> = enqueued.keys().copied().collect();
    let missing: Vec<_> = all.difference(&in_ledger).take(10).collect();
    let extra: Vec<_> = in_ledger.difference(&all).take(10).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "ledger missing {missing:?}, unknown {extra:?}"
    );

    // Nothing is left behind in any state.
    let left = all_tasks(&mut observer, &queue);
    assert!(
        left.is_empty(),
        "{} tasks left in the queue, e.g. {:?}",
        left.len(),
        left.first()
    );
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM aedb_queue.tasks WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        n, 0,
        "aedb_queue.tasks still holds rows of the drained queue"
    );

    let per_worker: Vec<usize> = reports.iter().map(|r| r.claimed.len()).collect();
    eprintln!("tasks per worker: {per_worker:?}");
}
