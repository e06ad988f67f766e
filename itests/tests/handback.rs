//! Workers hand tasks back (`queue_fail` with `retry_in => 0`: ready again at
//! once) while other workers claim, so claims keep meeting tasks that were
//! claimed and handed back after the claim's snapshot was taken (the claim
//! then finds a newer version of the row than its snapshot shows). Every
//! task is completed exactly once, each attempt is handed to one worker
//! under a token of its own, and nothing is left behind.

use aedb_queue_itests::*;
use rand::Rng;
use std::collections::{HashMap, HashSet};
use std::thread;
use std::time::{Duration, Instant};

const TASKS: usize = 1_500;
const WORKERS: usize = 8;
/// Each task is handed back this many times before it is completed.
const HAND_BACKS: i32 = 2;
const LEASE: &str = "10 minutes";
/// Hard bound on the drain so the test always ends by itself.
const BOUND: Duration = Duration::from_secs(120);
/// A worker stops after finding nothing to claim for this long.
const IDLE_STOP: Duration = Duration::from_millis(1_500);

#[derive(Default)]
struct Report {
    /// (task_id, attempts, fencing_token) of every hand-out.
    handed_out: Vec<(i64, i32, i64)>,
    not_applied: Vec<(i64, i32, Outcome)>,
    hit_bound: bool,
}

fn work(cluster: &Cluster, queue: &str, ledger: &str, worker: i32, bound: Instant) -> Report {
    let mut c = cluster.connect_as(WORKER);
    let owner = format!("worker-{worker}");
    let insert = format!("INSERT INTO {ledger} (task_id, worker) VALUES ($1, $2)");
    let mut rng = rand::thread_rng();
    let mut report = Report::default();
    let mut idle_since: Option<Instant> = None;
    loop {
        if Instant::now() > bound {
            report.hit_bound = true;
            return report;
        }
        let batch = claim(&mut c, queue, &owner, LEASE, rng.gen_range(1..=4));
        if batch.is_empty() {
            if idle_since.get_or_insert_with(Instant::now).elapsed() >= IDLE_STOP {
                return report;
            }
            thread::sleep(Duration::from_millis(5));
            continue;
        }
        idle_since = None;
        for t in batch {
            report
                .handed_out
                .push((t.task_id, t.attempts, t.fencing_token));
            let outcome = if t.attempts <= HAND_BACKS {
                let back = FailOpts {
                    retry_in: Some("0".into()),
                    dead_letter: None,
                };
                fail_with(
                    &mut c,
                    queue,
                    t.task_id,
                    t.fencing_token,
                    "hand back",
                    &back,
                )
            } else {
                let mut tx = c.transaction().expect("begin");
                tx.execute(insert.as_str(), &[&t.task_id, &worker])
                    .expect("ledger insert");
                let outcome = complete(&mut tx, queue, t.task_id, t.fencing_token);
                tx.commit().expect("commit completion");
                outcome
            };
            if outcome != Outcome::Applied {
                report.not_applied.push((t.task_id, t.attempts, outcome));
            }
        }
    }
}

#[test]
fn tasks_handed_back_while_others_claim_are_each_completed_exactly_once() {
    let cluster = Cluster::shared();
    let queue = unique_queue("handback");
    let ledger = format!("ledger_{queue}");
    let mut c = cluster.connect();
    let mut producer = cluster.connect_as(PRODUCER);
    c.batch_execute(&format!(
        "CREATE TABLE {ledger} (task_id bigint NOT NULL, worker int NOT NULL)"
    ))
    .unwrap();
    let payloads: Vec<Value> = (0..TASKS).map(|n| json!({ "n": n })).collect();
    let ids: HashSet<i64> = enqueue_batch(&mut producer, &queue, &payloads)
        .into_iter()
        .collect();
    assert_eq!(ids.len(), TASKS);

    let bound = Instant::now() + BOUND;
    let reports: Vec<Report> = thread::scope(|s| {
        let handles: Vec<_> = (0..WORKERS as i32)
            .map(|w| {
                let (queue, ledger) = (&queue, &ledger);
                s.spawn(move || work(cluster, queue, ledger, w, bound))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect()
    });
    assert!(
        reports.iter().all(|r| !r.hit_bound),
        "the drain did not finish within {BOUND:?} (test bound, not a speed requirement)"
    );
    let not_applied: Vec<_> = reports
        .iter()
        .flat_map(|r| &r.not_applied)
        .take(10)
        .collect();
    assert!(
        not_applied.is_empty(),
        "settles not applied: {not_applied:?}"
    );

    // Each task: attempts 1, 2, 3, each handed out once, each under a token
    // higher than the one before.
    let mut per_task: HashMap<i64, Vec<(i32, i64)>> = HashMap::new();
    for r in &reports {
        for &(id, attempts, token) in &r.handed_out {
            assert!(ids.contains(&id), "handed out unknown task {id}");
            per_task.entry(id).or_default().push((attempts, token));
        }
    }
    assert_eq!(per_task.len(), TASKS, "not every task was handed out");
    for (id, mut outs) in per_task {
        outs.sort_unstable();
        let attempts: Vec<i32> = outs.iter().map(|o| o.0).collect();
        assert_eq!(
            attempts,
            (1..=HAND_BACKS + 1).collect::<Vec<_>>(),
            "task {id}: attempts handed out {outs:?}"
        );
        assert!(
            outs.windows(2).all(|w| w[0].1 < w[1].1),
            "task {id}: tokens not increasing {outs:?}"
        );
    }

    // The ledger: every task completed exactly once; nothing left.
    let completed = ledger_counts(&mut c, &ledger);
    let twice: Vec<_> = completed.iter().filter(|(_, &n)| n > 1).take(10).collect();
    assert!(twice.is_empty(), "completed more than once: {twice:?}");
    let done: HashSet<i64> = completed.keys().copied().collect();
    assert_eq!(done, ids, "the ledger's tasks are not the enqueued ones");
    let mut observer = cluster.connect_as(WORKER);
    let left = all_tasks(&mut observer, &queue);
    assert!(
        left.is_empty(),
        "{} tasks left, e.g. {:?}",
        left.len(),
        left.first()
    );
}
