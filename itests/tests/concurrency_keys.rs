//! Concurrency keys under real concurrency: 1,200 tasks over 100 keys with
//! a limit of 2, drained by 8 workers over TCP that also fail tasks (retry
//! at once, which keeps the slot; retry later, which frees it) and abandon
//! leases (reclaimed by the claims, the slot kept meanwhile). A ledger
//! written in the claiming and the settling transactions, on the server's
//! clock, proves that no key ever had more than 2 tasks in flight, and
//! that every task completed exactly once.

use aedb_queue_itests::*;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

const KEYS: usize = 100;
const PER_KEY: usize = 12;
const LIMIT: i64 = 2;
const WORKERS: usize = 8;

#[test]
fn no_key_ever_has_more_in_flight_than_its_limit() {
    let cluster = Cluster::shared();
    let queue = unique_queue("ck");
    let ledger = format!("ck_ledger_{}", queue.replace('.', "_"));
    let mut su = cluster.connect();
    su.batch_execute(&format!(
        "CREATE TABLE {ledger} (task_id bigint NOT NULL, key text NOT NULL, claimed_at timestamptz NOT NULL,
                               ended_at timestamptz, how text);
         CREATE TABLE {ledger}_done (task_id bigint PRIMARY KEY);
         GRANT ALL ON {ledger}, {ledger}_done TO PUBLIC;"
    ))
    .unwrap();
    let mut admin = cluster.connect_as(ADMIN);
    admin
        .execute(
            "SELECT aedb_queue.queue_configure($1, concurrency_limit => $2::int4)",
            &[&queue, &(LIMIT as i32)],
        )
        .unwrap();

    // Enqueued key by key in batches, so each key's tasks queue up behind
    // its two slots.
    let mut producer = cluster.connect_as(PRODUCER);
    let mut key_of = HashMap::new();
    for k in 0..KEYS {
        let key = format!("key-{k}");
        let payloads: Vec<Value> = (0..PER_KEY).map(|i| json!({ "key": k, "i": i })).collect();
        let rows = producer
            .query(
                "SELECT * FROM aedb_queue.queue_enqueue_batch($1, $2::jsonb[], concurrency_key => $3)",
                &[&queue, &payloads, &key],
            )
            .unwrap_or_else(|e| panic!("enqueue key {k}: {}", describe(&e)));
        for row in rows {
            key_of.insert(row.get::<_, i64>(0), key.clone());
        }
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
                        &[&task.task_id, &key_of[&task.task_id]],
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
                        tx.execute(&format!("INSERT INTO {ledger}_done VALUES ($1)"), &[&task.task_id])
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

    // The most tasks of one key in flight at any instant: an abandoned
    // claim counts until the task's next claim (it held the slot until
    // then: in flight, then reclaimed to ready), so the count can only be
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
                 SELECT key, max(n)::int8 FROM running GROUP BY key"
            ),
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), KEYS);
    let most: Vec<i64> = rows.iter().map(|r| r.get::<_, i64>(1)).collect();
    let over: Vec<(String, i64)> = rows
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
        .filter(|(_, n)| *n > LIMIT)
        .collect();
    assert!(over.is_empty(), "keys over their limit of {LIMIT}: {over:?}");
    // The limit was reached, not merely respected by a slow drain.
    let at_limit = most.iter().filter(|&&n| n == LIMIT).count();
    assert!(at_limit >= KEYS / 2, "only {at_limit} keys ever had {LIMIT} tasks in flight");
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
