//! queue_counters() over TCP, in a cluster that preloads aedb_queue:
//! producers and workers (login roles app_producer and app_worker) commit
//! and roll back concurrently, and every counter ends equal to the ledger
//! of what committed: enqueues, completions, failures, dead letters,
//! reclaimed leases, cancels. Rolled-back work counts nothing. A database
//! with more queues than the shared table holds counts the rest in its
//! overflow row. Speed (the hot-path cost) is measured in bench/, not here.

use aedb_queue_itests::*;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

const CONF: &str =
    "shared_preload_libraries = 'pg_cron,aedb_queue'\naedb_queue.reaper_interval = 0";
const PRODUCERS: usize = 4;
const WORKERS: usize = 4;
/// Transactions per producer; each enqueues 1-3 tasks, every fourth rolls back.
const ROUNDS: usize = 60;
/// A worker abandons every seventh task it claims (rolls back its
/// completion): the 1-second lease expires and a later claim reclaims it.
const LEASE: &str = "1 second";
const BOUND: Duration = Duration::from_secs(90);

fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start_with(CONF))
}

/// (enqueued, completed, failed, dead_lettered, reclaimed, cancelled) of `queue`.
type Counts = [i64; 6];

fn counters(c: &mut Client, queue: &str) -> Counts {
    let rows = c
        .query(
            "SELECT enqueued, completed, failed, dead_lettered, reclaimed, cancelled
             FROM aedb_queue.queue_counters() WHERE queue = $1",
            &[&queue],
        )
        .unwrap();
    assert!(rows.len() <= 1, "one row per queue");
    rows.first()
        .map(|r| std::array::from_fn(|i| r.get::<_, i64>(i)))
        .unwrap_or_default()
}

#[derive(Default)]
struct Ledger {
    enqueued: AtomicI64,
    completed: AtomicI64,
    failed: AtomicI64,
    abandoned: AtomicI64,
}

impl Ledger {
    fn enqueued(&self) -> i64 {
        self.enqueued.load(Ordering::SeqCst)
    }

    /// Committed completions and failures.
    fn settled(&self) -> i64 {
        self.completed.load(Ordering::SeqCst) + self.failed.load(Ordering::SeqCst)
    }
}

/// Producer `p`: tasks whose payload says "fail" are dead-lettered on their
/// one attempt; the others complete (10 attempts, enough for every abandon).
fn produce(queue: &str, p: usize, ledger: &Ledger) {
    let mut c = cluster().connect_as(PRODUCER);
    for round in 0..ROUNDS {
        let mut tx = c.transaction().unwrap();
        let n = 1 + (round + p) % 3;
        for i in 0..n {
            let fails = (round + i) % 5 == 0;
            tx.execute(
                "SELECT 1 FROM aedb_queue.queue_enqueue($1, $2, max_attempts => $3)",
                &[
                    &queue,
                    &json!({ "fail": fails }),
                    &(if fails { 1 } else { 10 }),
                ],
            )
            .unwrap();
        }
        if round % 4 == 3 {
            tx.rollback().unwrap();
        } else {
            tx.commit().unwrap();
            ledger.enqueued.fetch_add(n as i64, Ordering::Relaxed);
        }
    }
}

/// Claims one task at a time until, the producers finished, the ledger
/// holds a settle for every committed enqueue (an abandoned lease comes
/// back however late, no idle time is guessed); settles each in its own
/// transaction.
fn work(queue: &str, w: usize, ledger: &Ledger, producing: &AtomicI64) {
    let mut c = cluster().connect_as(WORKER);
    let until = Instant::now() + BOUND;
    let mut claimed = 0usize;
    while Instant::now() < until {
        let mut tx = c.transaction().unwrap();
        let Some(task) = claim_one(&mut tx, queue, &format!("w{w}"), LEASE) else {
            tx.rollback().unwrap();
            if producing.load(Ordering::SeqCst) == 0 && ledger.settled() >= ledger.enqueued() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
            continue;
        };
        tx.commit().unwrap();
        claimed += 1;
        let fails = task.payload.as_ref().and_then(|p| p["fail"].as_bool()) == Some(true);
        let mut tx = c.transaction().unwrap();
        let outcome = if fails {
            fail(&mut tx, queue, task.task_id, task.fencing_token, "refused")
        } else {
            complete(&mut tx, queue, task.task_id, task.fencing_token)
        };
        if !fails && claimed % 7 == 0 {
            tx.rollback().unwrap();
            ledger.abandoned.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        tx.commit().unwrap();
        assert!(
            matches!(outcome, Outcome::Applied),
            "task {}: {outcome:?}",
            task.task_id
        );
        let counter = if fails {
            &ledger.failed
        } else {
            &ledger.completed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
    panic!(
        "worker {w} hit the {BOUND:?} bound: {} settled of {} enqueued",
        ledger.settled(),
        ledger.enqueued()
    );
}

#[test]
fn counters_equal_the_ledger_of_committed_work() {
    let queue = unique_queue("counted");
    let mut su = cluster().connect();
    let before = counters(&mut su, &queue);
    assert_eq!(before, [0; 6], "a new queue starts with no counts");
    let ledger = Ledger::default();
    let producing = AtomicI64::new(PRODUCERS as i64);
    thread::scope(|s| {
        for p in 0..PRODUCERS {
            let (ledger, producing, queue) = (&ledger, &producing, &queue);
            s.spawn(move || {
                produce(queue, p, ledger);
                producing.fetch_sub(1, Ordering::SeqCst);
            });
        }
        for w in 0..WORKERS {
            let (ledger, producing, queue) = (&ledger, &producing, &queue);
            s.spawn(move || work(queue, w, ledger, producing));
        }
    });
    let left: i64 = first_column(
        &mut su,
        "SELECT count(*) FROM aedb_queue.task WHERE queue = $1 AND state <> 'dead'",
        &[&queue],
    )[0];
    assert_eq!(left, 0, "every committed task settled");
    let enqueued = ledger.enqueued.load(Ordering::Relaxed);
    let completed = ledger.completed.load(Ordering::Relaxed);
    let failed = ledger.failed.load(Ordering::Relaxed);
    let abandoned = ledger.abandoned.load(Ordering::Relaxed);
    assert!(abandoned > 0 && failed > 0, "the run exercised every path");
    assert_eq!(
        completed + failed,
        enqueued,
        "nothing lost, nothing settled twice"
    );
    // Each abandoned lease was taken back by a claim (inline reclaim) once.
    assert_eq!(
        counters(&mut su, &queue),
        [enqueued, completed, failed, failed, abandoned, 0],
        "counters = ledger (enqueued, completed, failed, dead_lettered, reclaimed, cancelled)"
    );
}

#[test]
fn cancels_and_batches_count_what_they_did() {
    let queue = unique_queue("batched");
    let mut producer = cluster().connect_as(PRODUCER);
    let mut admin = cluster().connect_as(ADMIN);
    let mut worker = cluster().connect_as(WORKER);
    let ids = enqueue_batch(&mut producer, &queue, &vec![json!({}); 10]);
    let claimed = claim(&mut worker, &queue, "w", "1 hour", 6);
    let (done_ids, tokens): (Vec<i64>, Vec<i64>) =
        claimed.iter().map(|t| (t.task_id, t.fencing_token)).unzip();
    // A batch settle with one stale token: five applied, one lease_lost.
    let mut stale = tokens.clone();
    stale[0] -= 1;
    let applied: i64 = first_column(
        &mut worker,
        "SELECT count(*) FILTER (WHERE outcome = 'applied')
         FROM aedb_queue.queue_complete_batch($1, $2, $3)",
        &[&queue, &done_ids, &stale],
    )[0];
    assert_eq!(applied, 5);
    for id in &ids[6..8] {
        let cancelled: bool = first_column(
            &mut admin,
            "SELECT aedb_queue.queue_cancel($1, $2)",
            &[&queue, id],
        )[0];
        assert!(cancelled);
    }
    let mut su = cluster().connect();
    assert_eq!(counters(&mut su, &queue), [10, 5, 0, 0, 0, 2]);
}

#[test]
fn queues_beyond_the_shared_table_count_in_the_overflow_row() {
    // Its own database, so the other tests' queues do not share its slots;
    // 1,000 queues exceed the table's 960 queue slots.
    let mut su = cluster().connect();
    su.batch_execute("CREATE DATABASE counters_overflow")
        .unwrap();
    let mut db = cluster().connect_to("counters_overflow", SUPERUSER);
    db.batch_execute("CREATE EXTENSION aedb_queue").unwrap();
    db.batch_execute(
        "SELECT count(aedb_queue.queue_enqueue('q' || lpad(i::text, 4, '0'), '{}'))
         FROM generate_series(1, 1000) i",
    )
    .unwrap();
    let rows = db
        .query(
            "SELECT count(*) FILTER (WHERE queue IS NOT NULL),
                    coalesce(sum(enqueued) FILTER (WHERE queue IS NULL), 0)::int8,
                    sum(enqueued)::int8
             FROM aedb_queue.queue_counters()",
            &[],
        )
        .unwrap();
    let (named, overflow, total): (i64, i64, i64) =
        (rows[0].get(0), rows[0].get(1), rows[0].get(2));
    assert_eq!(
        total, 1000,
        "every enqueue counted once, named or in overflow"
    );
    assert!(overflow > 0, "some queues found no slot");
    assert_eq!(
        named + overflow,
        1000,
        "each named queue has its one enqueue"
    );
    // A confined tenant's dashboard sees its own queue and no overflow row
    // (which sums other tenants' queues); an unconfined admin sees both.
    su.batch_execute(
        "DO $$ BEGIN
             IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ovf_tenant') THEN
                 CREATE ROLE ovf_tenant LOGIN;
             END IF;
         END $$;
         GRANT aedb_queue_admin TO ovf_tenant",
    )
    .unwrap();
    let own = first_column::<Option<String>>(
        &mut db,
        "SELECT queue FROM aedb_queue.queue_counters() WHERE queue IS NOT NULL ORDER BY queue LIMIT 1",
        &[],
    )
    .remove(0);
    db.execute(
        "SELECT aedb_queue.queue_grant($1, 'ovf_tenant', 'admin')",
        &[&own],
    )
    .unwrap();
    let visible = |user: &str| -> Vec<Option<String>> {
        let mut c = cluster().connect_to("counters_overflow", user);
        first_column(&mut c, "SELECT queue FROM aedb_queue.queue_counters()", &[])
    };
    assert_eq!(visible("ovf_tenant"), [own]);
    let admin_rows = visible(ADMIN);
    assert!(
        admin_rows.contains(&None),
        "the unconfined admin sees the overflow row"
    );
    assert_eq!(admin_rows.len() as i64, named + 1);
    // Other databases see none of it.
    assert_eq!(
        counters(&mut su, "q0001"),
        [0; 6],
        "a database sees only its own queues' counters"
    );
}
