//! The worker runtime and the producer client behind PgBouncer 1.18 in
//! transaction mode (the itests harness's pooler: 2 server connections per
//! login role, far fewer than the runtime's pooled connections).
//! `transaction_pooler(true)` sends every statement unnamed; LISTEN runs
//! on a direct connection of its own (`listen_conninfo`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aedb_queue_client::{
    handler, Client, Done, EnqueueOptions, QueueOptions, Task, TaskError, Worker,
};
use aedb_queue_itests::pgbouncer::{PgBouncer, PoolerConfig};
use aedb_queue_itests::{json, ledger_counts, Cluster, ADMIN, PRODUCER, SERVICE, SUPERUSER};
use tokio_postgres::types::Type;
use tokio_postgres::NoTls;

mod support;
use support::runtime;

/// Resolves once `queue` holds no task (read directly as the superuser).
async fn until_empty(dsn: String, queue: String, bound: Duration) {
    let (client, connection) = tokio_postgres::connect(&dsn, NoTls).await.unwrap();
    tokio::spawn(connection);
    let start = Instant::now();
    while start.elapsed() < bound {
        let left: i64 = client
            .query_one(
                "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
                &[&queue],
            )
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// 600 tasks enqueued through the pooler (single and batches) and drained
/// by two runtimes of 4 handlers each through it: every other handler writes
/// the ledger in its own transaction (strict completion in it), the rest
/// complete plainly, a few fail once first. The ledger holds each task once.
#[test]
fn runtimes_behind_the_pooler_drain_exactly_once() {
    const N: usize = 600;
    let cluster = Cluster::shared();
    let pooler = PgBouncer::start(cluster, &PoolerConfig::new(2));
    let queue = aedb_queue_itests::unique_queue("rt_pooled");
    let ledger = format!("ledger_{queue}");
    cluster
        .connect()
        .batch_execute(&format!(
            "CREATE TABLE {ledger} (task_id bigint NOT NULL, backend int NOT NULL);
             GRANT INSERT, SELECT ON {ledger} TO app_service;"
        ))
        .unwrap();
    let rt = runtime();
    let ids: Vec<i64> = rt.block_on(async {
        let producer = Client::connect(&pooler.dsn(PRODUCER), 4)
            .unwrap()
            .transaction_pooler(true);
        let mut ids = Vec::new();
        for i in 0..N / 2 {
            let e = producer
                .enqueue(&queue, &json!({ "n": i }), &EnqueueOptions::new())
                .await;
            ids.push(
                e.unwrap_or_else(|e| panic!("enqueue through the pooler: {e}"))
                    .task_id,
            );
        }
        let payloads: Vec<_> = (N / 2..N).map(|i| json!({ "n": i })).collect();
        for chunk in payloads.chunks(50) {
            ids.extend(
                producer
                    .enqueue_batch(&queue, chunk, &EnqueueOptions::new())
                    .await
                    .unwrap(),
            );
        }
        ids
    });
    assert_eq!(ids.len(), N);

    let failed_once = Arc::new(AtomicU32::new(0));
    let reports = rt.block_on(async {
        let runs: Vec<_> = (0..2)
            .map(|w| {
                let (ledger, failed_once) = (ledger.clone(), failed_once.clone());
                let work = handler(move |task: Task<serde_json::Value>| {
                    let (ledger, failed_once) = (ledger.clone(), failed_once.clone());
                    async move {
                        if task.id % 50 == 0 && task.attempts == 1 {
                            failed_once.fetch_add(1, Ordering::SeqCst);
                            return Err(TaskError::retry_in("first try", Duration::ZERO));
                        }
                        if task.id % 2 == 0 {
                            let tx = task.transaction().await.map_err(TaskError::retry)?;
                            let sql = format!("INSERT INTO {ledger} VALUES ($1, pg_backend_pid())");
                            tx.execute_typed(sql.as_str(), &[(&task.id, Type::INT8)])
                                .await?;
                        }
                        Ok(Done::new())
                    }
                });
                let worker = Worker::builder(&pooler.dsn(SERVICE))
                    .unwrap()
                    .transaction_pooler(true)
                    .listen(false)
                    .owner_id(format!("pooled-{w}"))
                    .queue(
                        QueueOptions::new(queue.clone())
                            .concurrency(4)
                            .poll_interval(Duration::from_millis(100)),
                        work,
                    )
                    .build()
                    .unwrap();
                tokio::spawn(worker.run(until_empty(
                    cluster.dsn(SUPERUSER),
                    queue.clone(),
                    Duration::from_secs(90),
                )))
            })
            .collect();
        let mut reports = Vec::new();
        for run in runs {
            reports.push(run.await.unwrap().unwrap());
        }
        reports
    });
    let completed: u64 = reports.iter().map(|r| r.completed).sum();
    let failed: u64 = reports.iter().map(|r| r.failed).sum();
    let lost: u64 = reports.iter().map(|r| r.lease_lost).sum();
    assert_eq!(
        (completed, lost),
        (N as u64, 0),
        "{reports:?}\n--- pgbouncer log ---\n{}",
        pooler.log()
    );
    assert_eq!(
        failed,
        failed_once.load(Ordering::SeqCst) as u64,
        "{reports:?}"
    );
    assert!(failed > 0, "some tasks failed once");

    // The handlers' transactions: each even task once, on the pool's backends.
    let mut su = cluster.connect();
    let counts = ledger_counts(&mut su, &ledger);
    let even: Vec<i64> = ids.iter().copied().filter(|id| id % 2 == 0).collect();
    assert_eq!(counts.len(), even.len(), "a ledger row per even task");
    assert!(
        even.iter().all(|id| counts.get(id) == Some(&1)),
        "each once: {counts:?}"
    );
    let backends: i64 = su
        .query_one(
            &format!("SELECT count(DISTINCT backend) FROM {ledger}"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        backends, 2,
        "the handlers' transactions ran on both server connections"
    );
    let left: i64 = su
        .query_one(
            "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

/// Claims go through the pooler, LISTEN straight to PostgreSQL: an enqueue
/// committed through the pooler wakes the idle runtime long before its
/// 30 s poll.
#[test]
fn a_notify_on_the_direct_connection_wakes_a_runtime_behind_the_pooler() {
    const POLL: Duration = Duration::from_secs(30);
    let cluster = Cluster::shared();
    let pooler = PgBouncer::start(cluster, &PoolerConfig::new(2));
    let queue = aedb_queue_itests::unique_queue("rt_pooled_wake");
    cluster
        .connect_as(ADMIN)
        .query_typed(
            "SELECT aedb_queue.queue_configure($1::text, notify => true)",
            &[(&queue, Type::TEXT)],
        )
        .unwrap();
    let handled = Arc::new(AtomicU32::new(0));
    let rt = runtime();
    let (report, woken) = rt.block_on(async {
        let seen = handled.clone();
        let worker = Worker::builder(&pooler.dsn(SERVICE))
            .unwrap()
            .transaction_pooler(true)
            .listen_conninfo(cluster.dsn(SERVICE))
            .queue(
                QueueOptions::new(queue.clone())
                    .concurrency(2)
                    .poll_interval(POLL),
                handler(move |_task: Task<serde_json::Value>| {
                    seen.fetch_add(1, Ordering::SeqCst);
                    async { Ok(Done::new()) }
                }),
            )
            .build()
            .unwrap();
        let (seen, dsn, queue) = (handled.clone(), pooler.dsn(PRODUCER), queue.clone());
        let woken = Arc::new(std::sync::Mutex::new(None));
        let woken_at = woken.clone();
        let report = worker
            .run(async move {
                // The runtime's first claim finds nothing, then it waits on
                // LISTEN (or the poll).
                tokio::time::sleep(Duration::from_millis(1_000)).await;
                let producer = Client::connect(&dsn, 1).unwrap().transaction_pooler(true);
                producer
                    .enqueue(&queue, &json!("wake"), &EnqueueOptions::new())
                    .await
                    .unwrap();
                let enqueued = Instant::now();
                while seen.load(Ordering::SeqCst) == 0 && enqueued.elapsed() < POLL * 2 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                *woken_at.lock().unwrap() = Some(enqueued.elapsed());
            })
            .await
            .unwrap();
        let woken = woken.lock().unwrap().take();
        (report, woken)
    });
    let woken = woken.unwrap();
    eprintln!("handled {woken:?} after the enqueue committed (poll interval {POLL:?})");
    assert_eq!(report.completed, 1, "{report:?}");
    assert!(
        woken < POLL / 3,
        "not woken by the NOTIFY: handled after {woken:?}"
    );
}

/// Behind a transaction pooler LISTEN cannot share the pooled connections:
/// the builder asks for a direct one rather than losing wake-ups silently.
#[test]
fn a_transaction_pooler_without_a_listen_connection_is_refused() {
    let noop = handler(|_task: Task<serde_json::Value>| async { Ok(Done::new()) });
    let build = |listen: bool| {
        Worker::builder("host=127.0.0.1 port=1 user=u dbname=d")
            .unwrap()
            .transaction_pooler(true)
            .listen(listen)
            .queue(QueueOptions::new("q"), noop.clone())
            .build()
    };
    let err = build(true).err().expect("refused").to_string();
    assert!(err.contains("listen_conninfo"), "{err}");
    assert!(
        build(false).is_ok(),
        "polling only needs no LISTEN connection"
    );
}
