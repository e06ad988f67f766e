//! Ordering keys under real concurrency: 600 tasks over 60 keys, drained by
//! 8 workers over TCP that also fail tasks (retried at once or later: the
//! line waits for them) and abandon leases (reclaimed by the claims). A
//! ledger written in the claiming and the settling transactions, on the
//! server's clock, proves that no key ever had two tasks in flight, that
//! each key's tasks completed in enqueue order, each exactly once, and that
//! no task started before the one ahead of it had completed.

use aedb_queue_itests::*;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

const KEYS: usize = 60;
const PER_KEY: usize = 10;
const WORKERS: usize = 8;

#[test]
fn each_key_runs_one_task_at_a_time_in_enqueue_order() {
    let cluster = Cluster::shared();
    let queue = unique_queue("ok");
    let ledger = format!("ok_ledger_{}", queue.replace('.', "_"));
    let mut su = cluster.connect();
    su.batch_execute(&format!(
        "CREATE TABLE {ledger} (task_id bigint NOT NULL, key text NOT NULL, claimed_at timestamptz NOT NULL,
                               ended_at timestamptz, how text);
         CREATE TABLE {ledger}_done (task_id bigint PRIMARY KEY, key text NOT NULL, seq int NOT NULL,
                                     done_at timestamptz NOT NULL);
         GRANT ALL ON {ledger}, {ledger}_done TO PUBLIC;"
    ))
    .unwrap();
    // Enqueued one task at a time, the keys interleaved, in several
    // producers' transactions, so each key's line is its enqueue order.
    let mut producer = cluster.connect_as(PRODUCER);
    let mut key_of = HashMap::new();
    for i in 0..PER_KEY {
        let mut tx = producer.transaction().unwrap();
        for k in 0..KEYS {
            let key = format!("key-{k}");
            let row = tx
                .query_one(
                    "SELECT task_id FROM aedb_queue.queue_enqueue($1, $2, ordering_key => $3)",
                    &[&queue, &json!({ "key": k, "i": i }), &key],
                )
                .unwrap_or_else(|e| panic!("enqueue key {k}: {}", describe(&e)));
            key_of.insert(row.get::<_, i64>(0), (key, i as i32));
        }
        tx.commit().unwrap();
    }
    let total = KEYS * PER_KEY;
    assert_eq!(key_of.len(), total);

    let done = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs(120);
    thread::scope(|s| {
        for w in 0..WORKERS {
            let (queue, ledger, done, key_of) = (&queue, &ledger, &done, &key_of);
            s.spawn(move || {
                let mut c = cluster.connect_as(WORKER);
                let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64 + 100);
                while done.load(Ordering::SeqCst) < total {
                    assert!(Instant::now() < deadline, "worker {w}: the drain did not finish");
                    let mut tx = c.transaction().unwrap();
                    let Some(task) = claim_one(&mut tx, queue, &format!("w{w}"), "300 milliseconds")
                    else {
                        // A claim that comes up short reclaims expired leases itself.
                        tx.rollback().unwrap();
                        thread::sleep(Duration::from_millis(rng.gen_range(1..4)));
                        continue;
                    };
                    tx.execute(
                        &format!("INSERT INTO {ledger} VALUES ($1, $2, clock_timestamp(), NULL, NULL)"),
                        &[&task.task_id, &key_of[&task.task_id].0],
                    )
                    .unwrap();
                    tx.commit().unwrap();
                    thread::sleep(Duration::from_micros(rng.gen_range(0..2000)));
                    let roll = rng.gen_range(0..100);
                    if roll < 3 {
                        continue; // abandoned: the lease expires, a claim reclaims it
                    }
                    let mut tx = c.transaction().unwrap();
                    let how = if roll < 8 {
                        let opts = FailOpts {
                            retry_in: Some(if roll < 5 { "0" } else { "20 milliseconds" }.into()),
                            ..FailOpts::default()
                        };
                        fail_with(&mut tx, queue, task.task_id, task.fencing_token, "flaky", &opts)
                    } else {
                        complete(&mut tx, queue, task.task_id, task.fencing_token)
                    };
                    if how != Outcome::Applied {
                        tx.rollback().unwrap(); // its lease expired first: reclaimed
                        continue;
                    }
                    let label = if roll < 8 { "failed" } else { "completed" };
                    tx.execute(
                        &format!(
                            "UPDATE {ledger} SET ended_at = clock_timestamp(), how = $2
                             WHERE ctid = (SELECT ctid FROM {ledger} WHERE task_id = $1
                                           ORDER BY claimed_at DESC LIMIT 1)"
                        ),
                        &[&task.task_id, &label],
                    )
                    .unwrap();
                    if label == "completed" {
                        let (key, seq) = &key_of[&task.task_id];
                        tx.execute(
                            &format!("INSERT INTO {ledger}_done VALUES ($1, $2, $3, clock_timestamp())"),
                            &[&task.task_id, key, seq],
                        )
                        .unwrap();
                    }
                    tx.commit().unwrap();
                    if label == "completed" {
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
    });

    // Every task completed exactly once (the primary key refuses a second).
    let completed: i64 = su
        .query_one(&format!("SELECT count(*) FROM {ledger}_done"), &[])
        .unwrap()
        .get(0);
    assert_eq!(completed as usize, total);
    let left: i64 = su
        .query_one("SELECT count(*) FROM aedb_queue.task WHERE queue = $1", &[&queue])
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "tasks left");
    let slots: i64 = su
        .query_one(
            "SELECT count(*) FROM aedb_queue.concurrency_slot WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(slots, 0, "key rows left with no slot taken");
    let lines: i64 = su
        .query_one(
            "SELECT count(*) FROM aedb_queue.ordering_slot WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(lines, 0, "lines left with a head");

    // The most tasks of one key in flight at any instant: an abandoned
    // claim counts until the task's next claim, so the count can only be
    // too high, never too low.
    let rows = su
        .query(
            &format!(
                "WITH spans AS (
                     SELECT key, claimed_at AS from_t,
                            coalesce(ended_at, lead(claimed_at) OVER (PARTITION BY task_id ORDER BY claimed_at)) AS to_t
                     FROM {ledger}),
                 events AS (
                     SELECT key, from_t AS t, 1 AS d FROM spans
                     UNION ALL SELECT key, to_t, -1 FROM spans WHERE to_t IS NOT NULL),
                 running AS (
                     SELECT key, sum(d) OVER (PARTITION BY key ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS n
                     FROM events)
                 SELECT key FROM running GROUP BY key HAVING max(n) > 1"
            ),
            &[],
        )
        .unwrap();
    let overlapping: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert!(overlapping.is_empty(), "keys with two tasks in flight at once: {overlapping:?}");
    // Completed in enqueue order, and none started before the one ahead of
    // it in its line completed.
    let out_of_order: i64 = su
        .query_one(
            &format!(
                "SELECT count(*) FROM (
                     SELECT seq, lag(seq) OVER (PARTITION BY key ORDER BY done_at) AS before
                     FROM {ledger}_done) d
                 WHERE before IS NOT NULL AND before <> seq - 1"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(out_of_order, 0, "tasks completed out of their line's order");
    let early: i64 = su
        .query_one(
            &format!(
                "SELECT count(*) FROM {ledger} l
                 JOIN {ledger}_done me ON me.task_id = l.task_id
                 JOIN {ledger}_done ahead ON ahead.key = me.key AND ahead.seq = me.seq - 1
                 WHERE l.claimed_at < ahead.done_at"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(early, 0, "claims that started before the task ahead completed");
    let (failed, abandoned): (i64, i64) = {
        let r = su
            .query_one(
                &format!(
                    "SELECT count(*) FILTER (WHERE how = 'failed'), count(*) FILTER (WHERE ended_at IS NULL)
                     FROM {ledger}"
                ),
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(failed > 0 && abandoned > 0, "failed {failed}, abandoned {abandoned}");
}
