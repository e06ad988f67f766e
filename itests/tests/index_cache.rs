//! Each backend keeps the task table's indexes (their `IndexInfo`, with
//! predicates compiled) between enqueues, and drops them when the table's
//! definition changes. Producers that keep their sessions open enqueue
//! while an administrator builds a new index with `CREATE INDEX
//! CONCURRENTLY` and drops another: every row must be in every index the
//! table has, which amcheck verifies from the heap (`heapallindexed`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use aedb_queue_itests::*;
use serde_json::json;

#[test]
fn enqueues_fill_an_index_created_concurrently_while_their_sessions_stay_open() {
    let cluster = Cluster::shared();
    let queue = unique_queue("idx");
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..4)
        .map(|p| {
            let mut c = cluster.connect_as(PRODUCER);
            let queue = queue.clone();
            let stop = stop.clone();
            thread::spawn(move || {
                let mut ids = Vec::new();
                let mut n = 0;
                // Bounded: at most 20,000 enqueues per producer.
                while !stop.load(Ordering::Relaxed) && n < 20_000 {
                    let delay = if n % 3 == 0 { "1 hour" } else { "0" };
                    let e = enqueue_with(
                        &mut c,
                        &queue,
                        Some(&json!({"p": p, "n": n})),
                        &EnqueueOpts::default().delay(delay),
                    );
                    ids.push(e.task_id);
                    n += 1;
                }
                ids
            })
        })
        .collect();

    let mut admin = cluster.connect();
    thread::sleep(Duration::from_millis(500));
    // A partial index with an expression, as ours are, built while the
    // producers write; then one of the extension's own dropped and rebuilt.
    admin
        .batch_execute(
            "CREATE INDEX CONCURRENTLY task_test_due_idx ON aedb_queue.task (queue, (-priority))
             WHERE state = 'scheduled'",
        )
        .expect("create index concurrently");
    thread::sleep(Duration::from_millis(500));
    admin
        .batch_execute("DROP INDEX CONCURRENTLY aedb_queue.task_dead_idx")
        .expect("drop an index");
    admin
        .batch_execute(
            "CREATE INDEX CONCURRENTLY task_dead_idx ON aedb_queue.task (queue, task_id)
             WHERE state = 'dead'",
        )
        .expect("recreate it");
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let ids: Vec<i64> = producers
        .into_iter()
        .flat_map(|p| p.join().expect("producer"))
        .collect();

    let tasks: i64 = admin
        .query_one(
            "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(tasks, ids.len() as i64, "every enqueue committed one task");
    let later: i64 = admin
        .query_one(
            "SELECT count(*) FROM aedb_queue.task WHERE queue = $1 AND state = 'scheduled'",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert!(
        later > 0,
        "some tasks went to the new partial index's state"
    );
    admin
        .batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        .unwrap();
    let indexes: Vec<String> = first_column(
        &mut admin,
        "SELECT indexrelid::regclass::text FROM pg_catalog.pg_index
         WHERE indrelid = 'aedb_queue.task'::regclass ORDER BY 1",
        &[],
    );
    assert!(
        indexes.iter().any(|i| i.ends_with("task_test_due_idx")),
        "{indexes:?}"
    );
    for index in &indexes {
        admin
            .query_one(
                "SELECT bt_index_check($1::text::regclass, true)::text",
                &[index],
            )
            .unwrap_or_else(|e| panic!("{index}: {}", describe(&e)));
    }
    // And through the new index: exactly the scheduled tasks of the queue.
    admin
        .batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
        .unwrap();
    let through_index: i64 = admin
        .query_one(
            "SELECT count(*) FROM aedb_queue.task WHERE queue = $1 AND state = 'scheduled' AND -priority <= 0",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(through_index, later);
    admin
        .batch_execute("DROP INDEX aedb_queue.task_test_due_idx")
        .unwrap();
}

/// An enqueue opens and locks only the indexes its rows can enter: the
/// partial indexes of other states are refuted by the rows' constant state
/// (and NULL lease, and NULL waiting_on: weak refutation, since a row
/// enters a partial index only where its predicate is true), so they are
/// neither read nor locked. Seen from the
/// producer's own transaction in `pg_locks`.
#[test]
fn an_enqueue_locks_only_the_indexes_its_rows_can_enter() {
    let cluster = Cluster::shared();
    let queue = unique_queue("locks");
    let mut c = cluster.connect_as(PRODUCER);
    // The first write of a session reads every index's definition.
    enqueue_with(&mut c, &queue, None, &EnqueueOpts::default());
    let locked = |c: &mut postgres::Client, call: &str| -> Vec<String> {
        let mut tx = c.transaction().unwrap();
        tx.batch_execute(call).unwrap();
        let rows = tx
            .query(
                "SELECT c.relname::text FROM pg_catalog.pg_locks l
                 JOIN pg_catalog.pg_class c ON c.oid = l.relation
                 WHERE l.pid = pg_catalog.pg_backend_pid() AND l.locktype = 'relation'
                   AND c.relnamespace = 'aedb_queue'::regnamespace AND c.relkind = 'i'
                   AND c.relname::text LIKE 'task%'
                 ORDER BY 1",
                &[],
            )
            .unwrap();
        tx.commit().unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    };
    let ready = locked(
        &mut c,
        &format!("SELECT aedb_queue.queue_enqueue('{queue}', '{{}}')"),
    );
    assert_eq!(ready, ["task_pkey", "task_ready_idx"]);
    let later = locked(
        &mut c,
        &format!("SELECT aedb_queue.queue_enqueue('{queue}', '{{}}', delay => '1 hour')"),
    );
    assert_eq!(later, ["task_pkey", "task_scheduled_idx"]);
    let batch = locked(
        &mut c,
        &format!("SELECT count(*) FROM aedb_queue.queue_enqueue_batch('{queue}', ARRAY['{{}}'::jsonb, '{{}}'])"),
    );
    assert_eq!(batch, ["task_pkey", "task_ready_idx"]);
    // A child of a live parent enters the index of waiting and blocked
    // tasks. (Marking its parent is an UPDATE through the executor, which
    // locks every index.)
    let parent = enqueue_with(&mut c, &queue, None, &EnqueueOpts::default()).task_id;
    let child = locked(
        &mut c,
        &format!("SELECT aedb_queue.queue_enqueue('{queue}', '{{}}', wait_for => ARRAY[{parent}])"),
    );
    assert!(child.iter().any(|i| i == "task_blocked_idx"), "{child:?}");
}
