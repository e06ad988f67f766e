//! The one-commit worker loop: eight workers drain a queue with
//! `queue_complete_and_claim(strict => true)`, each job's ledger write in
//! the transaction that completes it and claims the next. Some workers
//! stall past their lease until another worker has taken the task over;
//! their strict call must then abort whole (ledger write and claim), and
//! every task must still land in the ledger exactly once.

use aedb_queue_itests::*;
use std::collections::{HashMap, HashSet};
use std::thread;
use std::time::{Duration, Instant};

const TOTAL: usize = 8_000;
const BATCH: usize = 1_000;
const WORKERS: i32 = 8;
/// Workers 0..STALLERS stall once each, the others keep working meanwhile.
const STALLERS: i32 = 4;
/// Short, so that a stalled worker's lease runs out while it waits.
const LEASE: &str = "2 seconds";
const IDLE_STOP: Duration = Duration::from_millis(1_500);
/// Hard bounds, so the test always ends by itself.
const DRAIN_BOUND: Duration = Duration::from_secs(120);
const TAKEOVER_BOUND: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Report {
    /// (task_id, fencing_token) of every completion this worker committed.
    completed: Vec<(i64, i64)>,
    /// Tasks whose strict settle raised 40002 and rolled back.
    fenced: Vec<i64>,
    /// The task this worker stalled on, with its token then.
    stalled: Option<(i64, i64)>,
    /// In-flight tasks leased to this worker right after a 40002 rollback.
    leaked_claims: Vec<i64>,
    hit_bound: bool,
}

/// Waits until someone else holds `task` under a newer token (or it is gone).
fn wait_for_takeover(observer: &mut postgres::Client, queue: &str, task: (i64, i64)) {
    let since = Instant::now();
    loop {
        match get(observer, queue, task.0) {
            Some(t) if t.fencing_token.unwrap_or(0) <= task.1 => {}
            _ => return,
        }
        assert!(
            since.elapsed() < TAKEOVER_BOUND,
            "task {} was not reclaimed within {TAKEOVER_BOUND:?} of its lease",
            task.0
        );
        thread::sleep(Duration::from_millis(50));
    }
}

fn work(cluster: &Cluster, queue: &str, ledger: &str, worker: i32, bound: Instant) -> Report {
    let mut c = cluster.connect_as(WORKER);
    let mut observer = cluster.connect_as(WORKER);
    let owner = format!("loop-worker-{worker}");
    let insert =
        format!("INSERT INTO {ledger} (task_id, worker, fencing_token) VALUES ($1, $2, $3)");
    let stall_at = (worker < STALLERS).then_some(20 + 30 * worker as usize);
    let mut report = Report::default();
    let mut held: Option<Claimed> = None;
    let mut handled = 0usize;
    let mut idle_since: Option<Instant> = None;
    loop {
        if Instant::now() > bound {
            report.hit_bound = true;
            return report;
        }
        let next = match held.take() {
            // Nothing held: the loop starts (again) with a plain claim.
            None => claim(&mut c, queue, &owner, LEASE, 1),
            Some(t) => {
                handled += 1;
                if Some(handled) == stall_at {
                    report.stalled = Some((t.task_id, t.fencing_token));
                    wait_for_takeover(&mut observer, queue, (t.task_id, t.fencing_token));
                }
                let mut tx = c.transaction().expect("begin");
                tx.execute(insert.as_str(), &[&t.task_id, &worker, &t.fencing_token])
                    .expect("ledger insert");
                let held = (t.task_id, t.fencing_token);
                match try_complete_and_claim(&mut tx, queue, &owner, held, LEASE, 1, true) {
                    Ok((Outcome::Applied, claimed)) => {
                        tx.commit().expect("commit");
                        report.completed.push(held);
                        claimed
                    }
                    Ok((Outcome::LeaseLost, _)) => panic!("strict returned lease_lost"),
                    Err(e) if sqlstate(&e).as_deref() == Some("40002") => {
                        tx.rollback().expect("rollback");
                        report.fenced.push(t.task_id);
                        let mine: Vec<i64> = list(&mut observer, queue, Some("in_flight"), 1000)
                            .into_iter()
                            .filter(|t| t.owner_id.as_deref() == Some(owner.as_str()))
                            .map(|t| t.task_id)
                            .collect();
                        report.leaked_claims.extend(mine);
                        Vec::new()
                    }
                    Err(e) => panic!("queue_complete_and_claim: {}", describe(&e)),
                }
            }
        };
        assert!(next.len() <= 1, "max => 1 returned {} tasks", next.len());
        held = next.into_iter().next();
        if held.is_some() {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= IDLE_STOP {
            return report;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_one_commit_loop_completes_every_task_exactly_once_and_fences_stalled_workers() {
    let cluster = Cluster::shared();
    let queue = unique_queue("loop");
    let ledger = format!("ledger_{queue}");
    let mut c = cluster.connect();
    let mut producer = cluster.connect_as(PRODUCER);
    // No unique constraint: a duplicate completion must show up as a row.
    c.batch_execute(&format!(
        "CREATE TABLE {ledger} (task_id bigint NOT NULL, worker int NOT NULL, fencing_token bigint NOT NULL)"
    ))
    .unwrap();
    let mut enqueued: HashSet<i64> = HashSet::new();
    for start in (0..TOTAL).step_by(BATCH) {
        let payloads: Vec<Value> = (start..start + BATCH).map(|n| json!({ "n": n })).collect();
        enqueued.extend(enqueue_batch(&mut producer, &queue, &payloads));
    }
    assert_eq!(enqueued.len(), TOTAL);

    let bound = Instant::now() + DRAIN_BOUND;
    let started = Instant::now();
    let reports: Vec<Report> = thread::scope(|s| {
        let handles: Vec<_> = (0..WORKERS)
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
    eprintln!(
        "one-commit drain of {TOTAL} tasks took {:?}",
        started.elapsed()
    );
    assert!(
        reports.iter().all(|r| !r.hit_bound),
        "the drain did not finish within {DRAIN_BOUND:?} (test bound, not a speed requirement)"
    );

    // Every task completed once, by one committed call, and nothing left.
    let mut completed: HashMap<i64, usize> = HashMap::new();
    for (id, _) in reports.iter().flat_map(|r| &r.completed) {
        *completed.entry(*id).or_default() += 1;
    }
    let twice: Vec<_> = completed.iter().filter(|(_, &n)| n > 1).take(10).collect();
    assert!(twice.is_empty(), "completed twice (id, times): {twice:?}");
    let unknown: Vec<_> = completed
        .keys()
        .filter(|id| !enqueued.contains(id))
        .take(10)
        .collect();
    assert!(unknown.is_empty(), "completed unknown tasks {unknown:?}");
    assert_eq!(completed.len(), TOTAL, "not every task was completed");
    assert!(
        all_tasks(&mut c, &queue).is_empty(),
        "tasks left in the queue"
    );

    // The ledger agrees: exactly the committed completions, each once.
    let rows = c
        .query(&format!("SELECT task_id, fencing_token FROM {ledger}"), &[])
        .unwrap();
    let mut ledger_rows: Vec<(i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let mut committed: Vec<(i64, i64)> = reports.iter().flat_map(|r| r.completed.clone()).collect();
    ledger_rows.sort_unstable();
    committed.sort_unstable();
    assert_eq!(ledger_rows.len(), TOTAL, "ledger rows");
    assert_eq!(
        ledger_rows, committed,
        "the ledger is not the committed completions"
    );

    // Every stalled worker was fenced out, lost its ledger write, leaked no
    // claim, and the task was completed by its new holder under a newer token.
    let fenced: HashSet<i64> = reports.iter().flat_map(|r| r.fenced.clone()).collect();
    let stalls: Vec<(i64, i64)> = reports.iter().filter_map(|r| r.stalled).collect();
    assert_eq!(stalls.len(), STALLERS as usize, "every staller stalled");
    for (id, token) in &stalls {
        assert!(
            fenced.contains(id),
            "stalled task {id}: strict settle was not fenced out"
        );
        let (_, final_token) = ledger_rows.iter().find(|(t, _)| t == id).unwrap();
        assert!(
            final_token > token,
            "task {id} completed under token {final_token} <= {token}"
        );
    }
    let leaked: Vec<i64> = reports
        .iter()
        .flat_map(|r| r.leaked_claims.clone())
        .collect();
    assert!(
        leaked.is_empty(),
        "claims survived a 40002 rollback: {leaked:?}"
    );
}
