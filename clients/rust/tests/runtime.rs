//! The worker runtime against a real cluster (the itests harness starts a
//! throw-away one per test binary). Producers connect as `app_producer`,
//! workers as `app_worker` or `app_service` (a worker whose handlers also
//! write the application's tables); the superuser only sets up and checks.
//!
//! Each test is a plain #[test]: set-up and checks use the harness's
//! blocking client, the runtime runs on a tokio runtime of its own between
//! them (a blocking client cannot be used inside an async context).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aedb_queue_client::{handler, Done, QueueOptions, Report, Task, TaskError, Worker};
use aedb_queue_itests::{json, Cluster, SERVICE, SUPERUSER, WORKER};
use tokio_postgres::NoTls;

mod support;
use support::runtime;

fn load(cluster: &Cluster, queue: &str, n: usize) -> Vec<i64> {
    let mut c = cluster.connect_as(aedb_queue_itests::PRODUCER);
    let payloads: Vec<_> = (0..n).map(|i| json!({ "n": i })).collect();
    let mut ids = Vec::new();
    for chunk in payloads.chunks(1000) {
        ids.extend(aedb_queue_itests::enqueue_batch(&mut c, queue, chunk));
    }
    ids
}

fn count(cluster: &Cluster, sql: &str) -> i64 {
    cluster.connect().query_one(sql, &[]).unwrap().get(0)
}

/// Resolves once `queue` holds no task (checked as the superuser), or
/// after `bound` (the test then fails on its own checks).
async fn until_empty(dsn: String, queue: &'static str, bound: Duration) {
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

/// 2,000 tasks, two worker processes' runtimes of 4 handlers each; every
/// handler records its task in a ledger inside its own transaction, which
/// commits with the completion (strict). The ledger's primary key refuses
/// a task done twice; its count shows none lost.
#[test]
fn two_runtimes_drain_exactly_once_through_the_handlers_transactions() {
    const N: usize = 2_000;
    let cluster = Cluster::shared();
    cluster
        .connect()
        .batch_execute(
            "CREATE TABLE rt_ledger (task_id bigint PRIMARY KEY, n int NOT NULL, worker int NOT NULL);
             GRANT INSERT, SELECT ON rt_ledger TO app_service;",
        )
        .unwrap();
    let ids = load(cluster, "rt.drain", N);
    let rt = runtime();
    let reports: Vec<Report> = rt.block_on(async {
        let runs = (0..2).map(|w| {
            let worker = Worker::builder(&cluster.dsn(SERVICE))
                .unwrap()
                .queue(
                    QueueOptions::new("rt.drain").concurrency(4),
                    handler(move |task: Task<serde_json::Value>| async move {
                        let tx = task.transaction().await.map_err(TaskError::retry)?;
                        tx.execute(
                            "INSERT INTO rt_ledger VALUES ($1, $2, $3)",
                            &[&task.id, &(task.payload["n"].as_i64().unwrap() as i32), &w],
                        )
                        .await?;
                        Ok(Done::new())
                    }),
                )
                .build()
                .unwrap();
            tokio::spawn(worker.run(until_empty(
                cluster.dsn(SUPERUSER),
                "rt.drain",
                Duration::from_secs(120),
            )))
        });
        let mut reports = Vec::new();
        for run in runs.collect::<Vec<_>>() {
            reports.push(run.await.unwrap().unwrap());
        }
        reports
    });
    let completed: u64 = reports.iter().map(|r| r.completed).sum();
    assert_eq!(completed, N as u64, "{reports:?}");
    assert!(
        reports.iter().all(|r| r.completed > 0),
        "both runtimes worked: {reports:?}"
    );
    assert_eq!(count(cluster, "SELECT count(*) FROM rt_ledger"), N as i64);
    assert_eq!(
        count(cluster, "SELECT count(DISTINCT n) FROM rt_ledger"),
        N as i64,
        "every payload once"
    );
    let first = ids[0];
    assert_eq!(
        count(
            cluster,
            &format!(
                "SELECT count(*) FROM rt_ledger WHERE task_id BETWEEN {first} AND {}",
                first + N as i64 - 1
            )
        ),
        N as i64
    );
    assert_eq!(
        count(
            cluster,
            "SELECT count(*) FROM aedb_queue.task WHERE queue = 'rt.drain'"
        ),
        0
    );
}

/// Shutdown mid-run: handlers that finish before the deadline complete,
/// the rest are handed back ready with their attempts not spent. Nothing
/// is left in flight, nothing lost.
#[test]
fn shutdown_completes_or_hands_back_every_task() {
    let cluster = Cluster::shared();
    let ids = load(cluster, "rt.stop", 12);
    let quick: HashSet<i64> = ids.iter().copied().step_by(3).collect();
    let quick = Arc::new(quick);
    let started = Arc::new(AtomicU32::new(0));
    let rt = runtime();
    let report = rt.block_on(async {
        let (quick, seen) = (quick.clone(), started.clone());
        let worker = Worker::builder(&cluster.dsn(WORKER))
            .unwrap()
            // Generous: a loaded machine may run a 100 ms handler late;
            // how fast shutdown is belongs to the bench, not here.
            .shutdown_timeout(Duration::from_secs(10))
            .queue(
                QueueOptions::new("rt.stop").concurrency(12),
                handler(move |task: Task<serde_json::Value>| {
                    let quick = quick.contains(&task.id);
                    seen.fetch_add(1, Ordering::SeqCst);
                    async move {
                        // Quick ones finish within the deadline, the others
                        // would run for ten minutes.
                        let work = if quick {
                            Duration::from_millis(100)
                        } else {
                            Duration::from_secs(600)
                        };
                        tokio::time::sleep(work).await;
                        Ok(Done::new())
                    }
                }),
            )
            .build()
            .unwrap();
        let seen = started.clone();
        worker
            .run(async move {
                while seen.load(Ordering::SeqCst) < 12 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .unwrap()
    });
    assert_eq!(report.completed, 4, "{report:?}");
    assert_eq!(report.released, 8, "{report:?}");
    let mut c = cluster.connect();
    for id in &ids {
        let task = aedb_queue_itests::get(&mut c, "rt.stop", *id);
        match task {
            None => assert!(quick.contains(id), "task {id} completed but was not quick"),
            Some(t) => {
                assert!(!quick.contains(id), "quick task {id} left behind: {t:?}");
                assert_eq!(t.state, "ready", "handed back: {t:?}");
                assert_eq!(t.attempts, 0, "the attempt was not spent: {t:?}");
            }
        }
    }
}

/// A worker process killed with SIGKILL (no shutdown, no hand-back)
/// leaves its tasks leased, kept alive by nothing once its heartbeats stop;
/// after the lease a runtime reclaims and completes every one, each as its
/// second attempt.
#[test]
fn a_killed_worker_process_s_tasks_are_reclaimed_after_their_lease() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let cluster = Cluster::shared();
    let ids = load(cluster, "rt.kill", 6);
    // Built beside this test binary (target/debug/examples/); `cargo test`
    // of the whole crate has built it already, a single test target has not.
    let built = Command::new(env!("CARGO"))
        .args([
            "build",
            "-q",
            "-p",
            "aedb_queue_client",
            "--example",
            "hold_tasks",
        ])
        .status()
        .expect("cargo build --example hold_tasks");
    assert!(built.success());
    let exe = std::env::current_exe().unwrap();
    let example = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("hold_tasks");
    let mut child = Command::new(&example)
        .env("AEDB_QUEUE_DSN", cluster.dsn(WORKER))
        .env("AEDB_QUEUE_NAME", "rt.kill")
        .env("AEDB_QUEUE_HOLD", "6")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", example.display()));
    let mut started = HashSet::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while started.len() < 6 {
        let line = lines.next().expect("the worker printed its tasks").unwrap();
        started.insert(
            line.strip_prefix("started ")
                .unwrap()
                .parse::<i64>()
                .unwrap(),
        );
    }
    // Past a heartbeat or two, then the process dies.
    std::thread::sleep(Duration::from_millis(1200));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(started, ids.iter().copied().collect::<HashSet<_>>());
    assert_eq!(
        count(
            cluster,
            "SELECT count(*) FROM aedb_queue.task WHERE queue = 'rt.kill' AND state = 'in_flight'"
        ),
        6
    );
    let done = Arc::new(Mutex::new(Vec::new()));
    let rt = runtime();
    let report = rt.block_on(async {
        let done = done.clone();
        Worker::builder(&cluster.dsn(WORKER))
            .unwrap()
            .queue(
                QueueOptions::new("rt.kill")
                    .concurrency(6)
                    .lease(Duration::from_secs(2))
                    .poll_interval(Duration::from_millis(200)),
                handler(move |task: Task<serde_json::Value>| {
                    done.lock().unwrap().push((task.id, task.attempts));
                    async { Ok(Done::new()) }
                }),
            )
            .build()
            .unwrap()
            .run(until_empty(
                cluster.dsn(SUPERUSER),
                "rt.kill",
                Duration::from_secs(60),
            ))
            .await
            .unwrap()
    });
    assert_eq!(report.completed, 6, "{report:?}");
    let mut done = done.lock().unwrap().clone();
    done.sort_unstable();
    let expected: Vec<(i64, i32)> = ids.iter().map(|&id| (id, 2)).collect();
    assert_eq!(done, expected, "each reclaimed once, as its second attempt");
}

/// A handler that runs three times its lease keeps the task: the
/// runtime's heartbeats extend the lease, so no other worker can reclaim
/// it meanwhile, and the completion applies. A thief tries to claim it
/// until it is gone, and must have tried while it was held past the lease
/// it was first claimed with. Lease and heartbeat leave a loaded machine
/// seconds of slack (a heartbeat may come 2.5 s late).
#[test]
fn heartbeats_keep_a_task_longer_than_its_lease() {
    const LEASE: Duration = Duration::from_secs(3);
    let cluster = Cluster::shared();
    let ids = load(cluster, "rt.long", 1);
    let rt = runtime();
    let stealer = std::thread::spawn(move || steal_until_gone(cluster, "rt.long"));
    let report = rt.block_on(async {
        Worker::builder(&cluster.dsn(WORKER))
            .unwrap()
            .queue(
                QueueOptions::new("rt.long")
                    .lease(LEASE)
                    .heartbeat(Duration::from_millis(500)),
                handler(|task: Task<serde_json::Value>| async move {
                    tokio::time::sleep(3 * LEASE).await;
                    assert!(!task.lease_lost());
                    Ok(Done::new())
                }),
            )
            .build()
            .unwrap()
            .run(until_empty(
                cluster.dsn(SUPERUSER),
                "rt.long",
                Duration::from_secs(60),
            ))
            .await
            .unwrap()
    });
    let (stolen, past_lease) = stealer.join().unwrap();
    assert_eq!(stolen, 0, "never reclaimable while heartbeating");
    assert!(past_lease > 0, "the thief never tried past the first lease");
    assert_eq!(
        report,
        Report {
            completed: 1,
            ..Report::default()
        }
    );
    assert!(aedb_queue_itests::get(&mut cluster.connect(), "rt.long", ids[0]).is_none());
}

/// Once the runtime holds `queue`'s one task, claims it every 100 ms until
/// it is no longer in flight (at most 60 s). Returns the tasks claimed and
/// the failed claims made after the deadline of the lease first seen (on
/// the server's clock) while the task was still held.
fn steal_until_gone(cluster: &'static Cluster, queue: &str) -> (usize, usize) {
    let mut c = cluster.connect_as(WORKER);
    c.batch_execute("SET aedb_queue.claim_rescan_interval = 0")
        .unwrap();
    let mut su = cluster.connect();
    let deadline = |su: &mut aedb_queue_itests::Client| -> Option<std::time::SystemTime> {
        su.query_opt(
            "SELECT lease_deadline FROM aedb_queue.task WHERE queue = $1 AND state = 'in_flight'",
            &[&queue],
        )
        .unwrap()
        .map(|r| r.get(0))
    };
    let start = Instant::now();
    let first = loop {
        if let Some(d) = deadline(&mut su) {
            break d;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never held");
        std::thread::sleep(Duration::from_millis(10));
    };
    let (mut stolen, mut past_lease) = (0, 0);
    while start.elapsed() < Duration::from_secs(60) {
        let late: bool = su
            .query_one("SELECT clock_timestamp() > $1", &[&first])
            .unwrap()
            .get(0);
        let got = aedb_queue_itests::claim(&mut c, queue, "thief", "1 second", 1).len();
        stolen += got;
        match deadline(&mut su) {
            Some(_) if late && got == 0 => past_lease += 1,
            Some(_) => {}
            None => break,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (stolen, past_lease)
}

/// An idle runtime with a 600 s poll picks up a task enqueued into a
/// notifying queue within 60 s (generous for a loaded machine, far short of
/// the poll): the LISTEN wake-up, not the poll, started it.
#[test]
fn a_notify_wakes_an_idle_runtime_long_before_its_poll() {
    let cluster = Cluster::shared();
    let mut admin = cluster.connect_as(aedb_queue_itests::ADMIN);
    admin
        .execute(
            "SELECT aedb_queue.queue_configure('rt.wake', notify => true)",
            &[],
        )
        .unwrap();
    let picked = Arc::new(Mutex::new(None::<Instant>));
    let enqueued = Arc::new(Mutex::new(None::<Instant>));
    let rt = runtime();
    let producer = {
        let enqueued = enqueued.clone();
        std::thread::spawn(move || {
            // Let the runtime claim once (nothing) and start listening.
            std::thread::sleep(Duration::from_millis(1500));
            let mut c = cluster.connect_as(aedb_queue_itests::PRODUCER);
            aedb_queue_itests::enqueue(&mut c, "rt.wake", &json!({}));
            *enqueued.lock().unwrap() = Some(Instant::now());
        })
    };
    rt.block_on(async {
        let picked2 = picked.clone();
        Worker::builder(&cluster.dsn(WORKER))
            .unwrap()
            .queue(
                QueueOptions::new("rt.wake").poll_interval(Duration::from_secs(600)),
                handler(move |_t: Task<serde_json::Value>| {
                    *picked2.lock().unwrap() = Some(Instant::now());
                    async { Ok(Done::new()) }
                }),
            )
            .build()
            .unwrap()
            .run(async {
                let start = Instant::now();
                while picked.lock().unwrap().is_none() && start.elapsed() < Duration::from_secs(90)
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .unwrap()
    });
    producer.join().unwrap();
    let (enqueued, picked) = (
        enqueued.lock().unwrap().unwrap(),
        picked.lock().unwrap().expect("picked up"),
    );
    let waited = picked.saturating_duration_since(enqueued);
    assert!(
        waited < Duration::from_secs(60),
        "woken after {waited:?}, the poll is 600 s"
    );
}

/// Typed payloads, a handler's error (retried with the queue's backoff),
/// `TaskError::dead_letter`, a panic (fails the task with its message), a
/// payload that does not decode (dead at once), and a result kept with
/// the completed task plus a follow-up enqueued with it.
#[test]
fn outcomes_of_handlers_reach_the_task() {
    #[derive(serde::Deserialize)]
    struct Job {
        kind: String,
    }
    let cluster = Cluster::shared();
    let mut admin = cluster.connect_as(aedb_queue_itests::ADMIN);
    admin
        .execute(
            "SELECT aedb_queue.queue_configure('rt.kinds', keep_completed => '1 hour')",
            &[],
        )
        .unwrap();
    let mut p = cluster.connect_as(aedb_queue_itests::PRODUCER);
    let mut id = |payload| aedb_queue_itests::enqueue(&mut p, "rt.kinds", &payload).task_id;
    let ok = id(json!({"kind": "ok"}));
    let retry = id(json!({"kind": "retry"}));
    let dead = id(json!({"kind": "dead"}));
    let panic = id(json!({"kind": "panic"}));
    let garbled = id(json!({"nokind": 1}));
    let rt = runtime();
    let report = rt.block_on(async {
        Worker::builder(&cluster.dsn(SERVICE))
            .unwrap()
            .queue(
                QueueOptions::new("rt.kinds").concurrency(2),
                handler(|task: Task<Job>| async move {
                    match task.payload.kind.as_str() {
                        "ok" => Ok(Done::new()
                            .with_result(json!({"sent": true}))
                            .follow_up("rt.after", json!({"after": task.id}))),
                        "retry" => Err(std::io::Error::other("smtp timeout").into()),
                        "dead" => Err(TaskError::dead_letter("bad address")),
                        _ => panic!("handler bug"),
                    }
                }),
            )
            .build()
            .unwrap()
            .run(async {
                // Until every task has settled once (the retry waits 1 s).
                tokio::time::sleep(Duration::from_millis(1500)).await;
            })
            .await
            .unwrap()
    });
    assert_eq!(report.completed, 1, "{report:?}");
    assert!(report.failed >= 4, "{report:?}");
    let mut c = cluster.connect();
    let kept = c
        .query_one(
            "SELECT state, result FROM aedb_queue.queue_get('rt.kinds', $1)",
            &[&ok],
        )
        .unwrap();
    assert_eq!(kept.get::<_, String>(0), "completed");
    assert_eq!(
        kept.get::<_, Option<serde_json::Value>>(1),
        Some(json!({"sent": true}))
    );
    let mut task = |id| aedb_queue_itests::get(&mut c, "rt.kinds", id).unwrap();
    let r = task(retry);
    assert_eq!(
        (r.state.as_str(), r.last_error.as_deref()),
        ("scheduled", Some("smtp timeout"))
    );
    let d = task(dead);
    assert_eq!(
        (d.state.as_str(), d.last_error.as_deref()),
        ("dead", Some("bad address"))
    );
    let pn = task(panic);
    assert_eq!(
        pn.last_error.as_deref(),
        Some("the handler panicked: handler bug")
    );
    let g = task(garbled);
    assert_eq!(g.state, "dead");
    assert!(g
        .last_error
        .unwrap()
        .starts_with("the payload does not decode: missing field `kind`"));
    assert_eq!(
        count(cluster, &format!("SELECT count(*) FROM aedb_queue.task WHERE queue = 'rt.after' AND payload = '{{\"after\": {ok}}}'")),
        1,
        "the follow-up was enqueued with the completion"
    );
}

/// A handler whose lease is lost while it runs (expired and reclaimed by
/// another worker) has its result dropped: the transaction it wrote in
/// rolls back, the report counts the loss, the new holder keeps the task.
#[test]
fn a_lost_lease_drops_the_result_and_rolls_back_the_handlers_writes() {
    let cluster = Cluster::shared();
    cluster
        .connect()
        .batch_execute(
            "CREATE TABLE rt_lost (task_id bigint); GRANT INSERT ON rt_lost TO app_service;",
        )
        .unwrap();
    let ids = load(cluster, "rt.lost", 1);
    let id = ids[0];
    let rt = runtime();
    let finished = Arc::new(AtomicU32::new(0));
    let thief = std::thread::spawn(move || {
        // Once the runtime holds it: expire the lease and reclaim it in one
        // transaction, so no heartbeat can extend the lease in between.
        let mut c = cluster.connect();
        c.batch_execute("SET aedb_queue.claim_rescan_interval = 0")
            .unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            let mut tx = c.transaction().unwrap();
            let n = tx
                .execute(
                    "UPDATE aedb_queue.task SET lease_deadline = now() - interval '1 second'
                      WHERE task_id = $1 AND state = 'in_flight' AND owner_id <> 'thief'",
                    &[&id],
                )
                .unwrap();
            if n == 1 {
                let got = aedb_queue_itests::claim(&mut tx, "rt.lost", "thief", "1 hour", 1);
                tx.commit().unwrap();
                return got;
            }
            tx.rollback().unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        Vec::new()
    });
    let report = rt.block_on(async {
        let finished2 = finished.clone();
        Worker::builder(&cluster.dsn(SERVICE))
            .unwrap()
            .queue(
                QueueOptions::new("rt.lost")
                    .lease(Duration::from_secs(3))
                    .heartbeat(Duration::from_millis(200)),
                handler(move |task: Task<serde_json::Value>| {
                    let finished = finished2.clone();
                    async move {
                        {
                            let tx = task.transaction().await.map_err(TaskError::retry)?;
                            tx.execute("INSERT INTO rt_lost VALUES ($1)", &[&task.id])
                                .await?;
                        }
                        // Until the thief took it and a heartbeat noticed
                        // (however late a loaded machine runs them).
                        let start = Instant::now();
                        while !task.lease_lost() && start.elapsed() < Duration::from_secs(60) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        finished.fetch_add(1, Ordering::SeqCst);
                        Ok(Done::new())
                    }
                }),
            )
            .build()
            .unwrap()
            .run(async move {
                while finished.load(Ordering::SeqCst) == 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .unwrap()
    });
    let stolen = thief.join().unwrap();
    assert_eq!(stolen.len(), 1, "the thief reclaimed it");
    assert_eq!(report.lease_lost, 1, "{report:?}");
    assert_eq!(report.completed, 0, "{report:?}");
    assert_eq!(
        count(cluster, "SELECT count(*) FROM rt_lost"),
        0,
        "the handler's write rolled back"
    );
    let t = aedb_queue_itests::get(&mut cluster.connect(), "rt.lost", id).unwrap();
    assert_eq!(
        (t.state.as_str(), t.owner_id.as_deref()),
        ("in_flight", Some("thief"))
    );
}

/// Postgres crashes and recovers mid-run (its own cluster: the others'
/// tests keep theirs). The runtime reconnects (claims, settles, LISTEN)
/// and every task is done exactly once: the ledger writes commit with the
/// completions, and tasks whose completion the crash took are reclaimed
/// after their (short) lease.
#[test]
fn the_runtime_carries_on_through_a_postgres_restart() {
    const N: usize = 600;
    let cluster = Cluster::start();
    cluster
        .connect()
        .batch_execute(
            "CREATE TABLE rt_restart (task_id bigint PRIMARY KEY);
             GRANT INSERT ON rt_restart TO app_service;",
        )
        .unwrap();
    load(&cluster, "rt.restart", N);
    let cluster = Arc::new(cluster);
    let crasher = {
        let cluster = cluster.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            // Once about a sixth is done: crash, stay down a moment, start.
            while count(&cluster, "SELECT count(*) FROM rt_restart") < (N / 6) as i64 {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "no progress before the crash"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            cluster.stop_immediate();
            std::thread::sleep(Duration::from_millis(500));
            cluster.start_again();
        })
    };
    let rt = runtime();
    let report = rt.block_on(async {
        Worker::builder(&cluster.dsn(SERVICE))
            .unwrap()
            .queue(
                QueueOptions::new("rt.restart")
                    .concurrency(4)
                    .lease(Duration::from_secs(2))
                    .poll_interval(Duration::from_millis(200)),
                handler(|task: Task<serde_json::Value>| async move {
                    let tx = task.transaction().await.map_err(TaskError::retry)?;
                    tx.execute("INSERT INTO rt_restart VALUES ($1)", &[&task.id])
                        .await?;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ok(Done::new())
                }),
            )
            .build()
            .unwrap()
            .run(async {
                // The superuser's check reconnects too.
                let start = Instant::now();
                loop {
                    if let Ok((client, conn)) =
                        tokio_postgres::connect(&cluster.dsn(SUPERUSER), NoTls).await
                    {
                        tokio::spawn(conn);
                        if let Ok(row) = client
                            .query_one(
                                "SELECT count(*) FROM aedb_queue.task WHERE queue = 'rt.restart'",
                                &[],
                            )
                            .await
                        {
                            if row.get::<_, i64>(0) == 0 {
                                return;
                            }
                        }
                    }
                    if start.elapsed() > Duration::from_secs(120) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
            .await
            .unwrap()
    });
    crasher.join().unwrap();
    assert!(
        cluster
            .server_log()
            .contains("database system was not properly shut down"),
        "the server really crashed and recovered"
    );
    assert_eq!(
        count(&cluster, "SELECT count(*) FROM rt_restart"),
        N as i64,
        "{report:?}"
    );
    assert_eq!(
        count(
            &cluster,
            "SELECT count(*) FROM aedb_queue.task WHERE queue = 'rt.restart'"
        ),
        0
    );
}

/// The outbox: a task enqueued in the caller's transaction exists if and
/// only if that transaction commits; batch enqueues return ids in order;
/// an idempotency key dedups; bad arguments are named.
#[test]
fn producers_enqueue_in_their_own_transactions() {
    use aedb_queue_client::{enqueue, enqueue_batch, Client, EnqueueOptions};
    let cluster = Cluster::shared();
    let rt = runtime();
    let dsn = cluster.dsn(aedb_queue_itests::PRODUCER);
    let (rolled_back, committed, batch, first, again, refused) = rt.block_on(async {
        let (mut client, conn) = tokio_postgres::connect(&dsn, NoTls).await.unwrap();
        tokio::spawn(conn);
        let tx = client.transaction().await.unwrap();
        let gone = enqueue(
            &tx,
            "rt.outbox",
            &json!({"order": 1}),
            &EnqueueOptions::new(),
        )
        .await
        .unwrap();
        tx.rollback().await.unwrap();
        let tx = client.transaction().await.unwrap();
        let kept = enqueue(
            &tx,
            "rt.outbox",
            &json!({"order": 2}),
            &EnqueueOptions::new().priority(5),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let batch = enqueue_batch(
            &client,
            "rt.outbox",
            &[json!({"b": 1}), json!({"b": 2})],
            &EnqueueOptions::new().delay(Duration::from_secs(60)),
        )
        .await
        .unwrap();
        let pooled = Client::connect(&dsn, 2).unwrap();
        let key = EnqueueOptions::new().idempotency_key("receipt-7");
        let first = pooled
            .enqueue("rt.outbox", &json!({"r": 7}), &key)
            .await
            .unwrap();
        let again = pooled
            .enqueue("rt.outbox", &json!({"r": 7}), &key)
            .await
            .unwrap();
        let refused = pooled
            .enqueue_batch("rt.outbox", &[json!({})], &key)
            .await
            .unwrap_err()
            .to_string();
        (gone, kept, batch, first, again, refused)
    });
    let mut c = cluster.connect();
    assert!(
        aedb_queue_itests::get(&mut c, "rt.outbox", rolled_back.task_id).is_none(),
        "rolled back: no task"
    );
    let kept = aedb_queue_itests::get(&mut c, "rt.outbox", committed.task_id).expect("committed");
    assert_eq!((kept.state.as_str(), kept.priority), ("ready", 5));
    assert_eq!(batch.len(), 2);
    assert!(batch[0] < batch[1], "ids in payload order");
    for id in &batch {
        assert_eq!(
            aedb_queue_itests::get(&mut c, "rt.outbox", *id)
                .unwrap()
                .state,
            "scheduled"
        );
    }
    assert!(!first.deduplicated);
    assert_eq!((again.task_id, again.deduplicated), (first.task_id, true));
    assert_eq!(
        refused,
        "invalid argument \"idempotency_key\": is for single enqueues only"
    );
}
