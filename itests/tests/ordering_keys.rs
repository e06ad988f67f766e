//! Ordering keys under real concurrency: 600 tasks over 60 keys, drained by
//! 8 workers over TCP that also fail tasks (retried at once or later: the
//! line waits for them) and abandon leases (reclaimed by the claims). A
//! ledger written in the claiming and the settling transactions, on the
//! server's clock, proves that no key ever had two tasks in flight, that
//! each key's tasks completed in enqueue order, each exactly once, and that
//! no task started before the one ahead of it had completed.

use aedb_queue_itests::*;
use std::collections::HashMap;

const KEYS: usize = 60;
const PER_KEY: usize = 10;
const WORKERS: usize = 8;

#[test]
fn each_key_runs_one_task_at_a_time_in_enqueue_order() {
    let cluster = Cluster::shared();
    let queue = unique_queue("ok");
    let ledger = format!("ok_ledger_{}", queue.replace('.', "_"));
    let mut su = cluster.connect();
    create_fault_ledger(&mut su, &ledger);
    su.batch_execute(&format!(
        "CREATE TABLE {ledger}_done (task_id bigint PRIMARY KEY, key text NOT NULL, seq int NOT NULL,
                                     done_at timestamptz NOT NULL);
         GRANT ALL ON {ledger}_done TO PUBLIC;"
    ))
    .unwrap();

    allow_attempts_for_faults(cluster, &queue);
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

    let done_insert = format!("INSERT INTO {ledger}_done VALUES ($1, $2, $3, clock_timestamp())");
    drain_with_faults(
        cluster,
        &queue,
        &ledger,
        WORKERS,
        total,
        &|id| key_of[&id].0.clone(),
        &|tx, id| {
            let (key, seq) = &key_of[&id];
            tx.execute(done_insert.as_str(), &[&id, key, seq]).unwrap();
        },
    );

    let completed: i64 = su
        .query_one(&format!("SELECT count(*) FROM {ledger}_done"), &[])
        .unwrap()
        .get(0);
    assert_eq!(completed as usize, total);
    for table in ["task", "ordering_slot"] {
        let left: i64 = su
            .query_one(
                &format!("SELECT count(*) FROM aedb_queue.{table} WHERE queue = $1"),
                &[&queue],
            )
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "rows left in {table}");
    }

    let overlapping: Vec<(String, i64)> = most_in_flight_per_key(&mut su, &ledger)
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    assert!(
        overlapping.is_empty(),
        "keys with two tasks in flight at once: {overlapping:?}"
    );
    // Completed in enqueue order, and none started before the one ahead of
    // it in its line completed.
    let count = |su: &mut Client, sql: String| -> i64 { su.query_one(&sql, &[]).unwrap().get(0) };
    let out_of_order = count(
        &mut su,
        format!(
            "SELECT count(*) FROM (
                 SELECT seq, lag(seq) OVER (PARTITION BY key ORDER BY done_at) AS before
                 FROM {ledger}_done) d
             WHERE before IS NOT NULL AND before <> seq - 1"
        ),
    );
    assert_eq!(out_of_order, 0, "tasks completed out of their line's order");
    let early = count(
        &mut su,
        format!(
            "SELECT count(*) FROM {ledger} l
             JOIN {ledger}_done me ON me.task_id = l.task_id
             JOIN {ledger}_done ahead ON ahead.key = me.key AND ahead.seq = me.seq - 1
             WHERE l.claimed_at < ahead.done_at"
        ),
    );
    assert_eq!(
        early, 0,
        "claims that started before the task ahead completed"
    );
    let (failed, abandoned) = faults_in(&mut su, &ledger);
    assert!(
        failed > 0 && abandoned > 0,
        "failed {failed}, abandoned {abandoned}"
    );
}
