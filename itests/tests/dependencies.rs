//! Task dependencies under concurrency: 60 children each wait for 4 of 40
//! parents (fan-in, parents in another queue). Eight workers over TCP
//! claim and complete parents and children at once, every fifth parent
//! completion rolled back and redone. Each child must be released exactly
//! once, only after all its parents completed (checked in the child's
//! claiming transaction through `queue_parents`), and completed exactly
//! once (a ledger written in the same transaction).

use aedb_queue_itests::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

const PARENTS: usize = 40;
const CHILDREN: usize = 60;
const FAN_IN: usize = 4;
const WORKERS: usize = 8;

#[test]
fn children_run_once_after_all_their_parents() {
    let cluster = Cluster::shared();
    let parents_q = unique_queue("dep_parents");
    let children_q = unique_queue("dep_children");
    let mut su = cluster.connect();
    su.batch_execute(&format!(
        "CREATE TABLE dep_ledger_{0} (child bigint NOT NULL, parents_done int NOT NULL);",
        children_q.replace('.', "_")
    ))
    .unwrap();
    let ledger = format!("dep_ledger_{}", children_q.replace('.', "_"));

    // The DAG, enqueued by a producer in one transaction.
    let mut producer = cluster.connect_as(PRODUCER);
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut tx = producer.transaction().unwrap();
    let parent_ids: Vec<i64> = (0..PARENTS)
        .map(|i| enqueue(&mut tx, &parents_q, &json!({ "parent": i })).task_id)
        .collect();
    let mut expected_parents = std::collections::HashMap::new();
    for i in 0..CHILDREN {
        let mine: Vec<i64> = parent_ids
            .choose_multiple(&mut rng, FAN_IN)
            .copied()
            .collect();
        let row = tx
            .query_one(
                "SELECT task_id FROM aedb_queue.queue_enqueue($1, $2, wait_for => $3)",
                &[&children_q, &json!({ "child": i }), &mine],
            )
            .unwrap_or_else(|e| panic!("enqueue child {i}: {}", describe(&e)));
        expected_parents.insert(row.get::<_, i64>(0), mine);
    }
    tx.commit().unwrap();

    let children_done = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    thread::scope(|s| {
        for w in 0..WORKERS {
            let (parents_q, children_q, ledger, done, expected) = (
                &parents_q,
                &children_q,
                &ledger,
                &children_done,
                &expected_parents,
            );
            s.spawn(move || {
                let mut c = cluster.connect_as(WORKER);
                let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64);
                let mut round = 0;
                while done.load(Ordering::SeqCst) < CHILDREN {
                    assert!(
                        Instant::now() < deadline,
                        "worker {w}: the drain did not finish"
                    );
                    round += 1;
                    // Children first when there are any, else parents.
                    let mut tx = c.transaction().unwrap();
                    if let Some(child) =
                        claim_one(&mut tx, children_q, &format!("w{w}"), "30 seconds")
                    {
                        let parents: Vec<(i64, String)> = tx
                            .query(
                                "SELECT task_id, state FROM aedb_queue.queue_parents($1, $2)",
                                &[children_q, &child.task_id],
                            )
                            .unwrap()
                            .iter()
                            .map(|r| (r.get(0), r.get(1)))
                            .collect();
                        let mut ids: Vec<i64> = parents.iter().map(|(id, _)| *id).collect();
                        ids.sort();
                        let mut want = expected[&child.task_id].clone();
                        want.sort();
                        assert_eq!(ids, want, "child {}: its parents", child.task_id);
                        let completed =
                            parents.iter().filter(|(_, s)| s == "completed").count() as i32;
                        tx.execute(
                            &format!("INSERT INTO {ledger} VALUES ($1, $2)"),
                            &[&child.task_id, &completed],
                        )
                        .unwrap();
                        let strict = CompleteOpts {
                            strict: true,
                            ..CompleteOpts::default()
                        };
                        let outcome = try_complete_with(
                            &mut tx,
                            children_q,
                            child.task_id,
                            child.fencing_token,
                            &strict,
                        );
                        assert!(
                            outcome.is_ok(),
                            "child {}: {:?}",
                            child.task_id,
                            outcome.err().map(|e| describe(&e))
                        );
                        tx.commit().unwrap();
                        done.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    let Some(parent) =
                        claim_one(&mut tx, parents_q, &format!("w{w}"), "30 seconds")
                    else {
                        tx.rollback().unwrap();
                        thread::sleep(Duration::from_millis(rng.gen_range(1..5)));
                        continue;
                    };
                    assert_eq!(
                        complete(&mut tx, parents_q, parent.task_id, parent.fencing_token),
                        Outcome::Applied
                    );
                    if round % 5 == 0 {
                        tx.rollback().unwrap(); // released nothing; the parent is claimed again
                    } else {
                        tx.commit().unwrap();
                    }
                }
            });
        }
    });

    let rows = su
        .query(
            &format!("SELECT child, count(*), min(parents_done) FROM {ledger} GROUP BY child"),
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), CHILDREN, "every child ran");
    for r in rows {
        let (child, runs, parents_done): (i64, i64, i32) = (r.get(0), r.get(1), r.get(2));
        assert_eq!(runs, 1, "child {child} ran {runs} times");
        assert_eq!(
            parents_done, FAN_IN as i32,
            "child {child} ran before all its parents completed"
        );
    }
    let left: i64 = first_column(
        &mut su,
        "SELECT count(*) FROM aedb_queue.task WHERE queue = ANY($1)",
        &[&vec![parents_q.clone(), children_q.clone()]],
    )[0];
    assert_eq!(left, 0, "every task completed");
}
