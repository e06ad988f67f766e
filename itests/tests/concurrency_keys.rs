//! Concurrency keys under real concurrency: 1,200 tasks over 100 keys with
//! a limit of 2, drained by 8 workers over TCP that also fail tasks (retry
//! at once, which keeps the slot; retry later, which frees it) and abandon
//! leases (reclaimed by the claims, the slot kept meanwhile). A ledger
//! written in the claiming and the settling transactions, on the server's
//! clock, proves that no key ever had more than 2 tasks in flight, and
//! that every task completed exactly once.

use aedb_queue_itests::*;
use std::collections::HashMap;

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
    create_fault_ledger(&mut su, &ledger);
    su.batch_execute(&format!(
        "CREATE TABLE {ledger}_done (task_id bigint PRIMARY KEY); GRANT ALL ON {ledger}_done TO PUBLIC;"
    ))
    .unwrap();
    allow_attempts_for_faults(cluster, &queue);
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

    let done_insert = format!("INSERT INTO {ledger}_done VALUES ($1)");
    drain_with_faults(
        cluster,
        &queue,
        &ledger,
        WORKERS,
        total,
        &|id| key_of[&id].clone(),
        &|tx, id| {
            tx.execute(done_insert.as_str(), &[&id]).unwrap();
        },
    );

    // Every task completed exactly once (the primary key refuses a second).
    let completed: i64 = su
        .query_one(&format!("SELECT count(*) FROM {ledger}_done"), &[])
        .unwrap()
        .get(0);
    assert_eq!(completed as usize, total);
    for table in ["task", "concurrency_slot"] {
        let left: i64 = su
            .query_one(
                &format!("SELECT count(*) FROM aedb_queue.{table} WHERE queue = $1"),
                &[&queue],
            )
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "rows left in {table}");
    }

    let most = most_in_flight_per_key(&mut su, &ledger);
    assert_eq!(most.len(), KEYS);
    let over: Vec<&(String, i64)> = most.iter().filter(|(_, n)| *n > LIMIT).collect();
    assert!(
        over.is_empty(),
        "keys over their limit of {LIMIT}: {over:?}"
    );
    // The limit was reached, not merely respected by a slow drain.
    let at_limit = most.iter().filter(|(_, n)| *n == LIMIT).count();
    assert!(
        at_limit >= KEYS / 2,
        "only {at_limit} keys ever had {LIMIT} tasks in flight"
    );
    let (failed, abandoned) = faults_in(&mut su, &ledger);
    assert!(
        failed > 0 && abandoned > 0,
        "failed {failed}, abandoned {abandoned}"
    );
}
