//! Durable workflows through the worker runtime, against a throw-away
//! cluster (the itests harness): steps recorded once and replayed on a later
//! claim, sleeps and event waits that park the task without counting the
//! attempt, emits, a strict step's effect rolled back with a lost lease,
//! children spawned once and waited for, and a workflow worker process
//! SIGKILLed at every point of its workflow (examples/workflow_crash.rs)
//! whose steps each happen exactly once. Producers connect as
//! `app_producer`, workers as `app_worker` (as `app_service` where they
//! spawn children); the superuser only sets up, steals leases and checks.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aedb_queue_client::{
    emit, handler, Child, ChildOutcome, Done, EnqueueOptions, Event, Handler, QueueOptions, Report,
    Task, TaskError, Worker,
};
use aedb_queue_itests::{json, Cluster, ADMIN, PRODUCER, SERVICE, SUPERUSER, WORKER};
use serde_json::Value;
use tokio_postgres::NoTls;

mod support;
use support::runtime;

fn enqueue(cluster: &Cluster, queue: &str, payload: Value) -> i64 {
    aedb_queue_itests::enqueue(&mut cluster.connect_as(PRODUCER), queue, &payload).task_id
}

/// Completed tasks of `queue` are kept an hour, to be checked.
fn keep_completed(cluster: &Cluster, queue: &str) {
    cluster
        .connect_as(ADMIN)
        .execute(
            "SELECT aedb_queue.queue_configure($1, keep_completed => '1 hour')",
            &[&queue],
        )
        .unwrap();
}

/// A task's state, attempts and owner (completed tasks too: kept ones).
#[derive(Debug)]
struct State {
    state: String,
    attempts: i32,
    owner: Option<String>,
}

fn state(cluster: &Cluster, queue: &str, id: i64) -> State {
    let row = cluster
        .connect()
        .query_one(
            "SELECT state::text, attempts, owner_id::text FROM aedb_queue.queue_get($1, $2)",
            &[&queue, &id],
        )
        .unwrap();
    State {
        state: row.get(0),
        attempts: row.get(1),
        owner: row.get(2),
    }
}

/// The task's recorded steps, in order.
fn steps(cluster: &Cluster, queue: &str, id: i64) -> Vec<(String, Option<Value>, i32)> {
    cluster
        .connect()
        .query(
            "SELECT step, result, attempt FROM aedb_queue.queue_steps($1, $2)",
            &[&queue, &id],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// A worker of `queue` (one handler, a 100 ms poll) run until `done` holds
/// or `bound` passes.
fn run_until(
    cluster: &Cluster,
    queue: &str,
    h: Arc<dyn Handler>,
    done: impl Fn() -> bool + Send + 'static,
    bound: Duration,
) -> Report {
    run_queues_until(cluster, WORKER, vec![(queue, h)], done, bound)
}

/// [`run_until`] with several queues (one slot each), connected as `role`.
fn run_queues_until(
    cluster: &Cluster,
    role: &str,
    queues: Vec<(&str, Arc<dyn Handler>)>,
    done: impl Fn() -> bool + Send + 'static,
    bound: Duration,
) -> Report {
    let mut builder = Worker::builder(&cluster.dsn(role)).unwrap();
    for (queue, h) in queues {
        let options = QueueOptions::new(queue)
            .concurrency(1)
            .poll_interval(Duration::from_millis(100));
        builder = builder.queue(options, h);
    }
    runtime()
        .block_on(builder.build().unwrap().run(async move {
            let start = Instant::now();
            while !done() && start.elapsed() < bound {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }))
        .unwrap()
}

/// A workflow's steps run once: the second claim (after a failed attempt)
/// gets each recorded step's result without running it, and runs on from
/// there; each step is recorded with the attempt that ran it.
#[test]
fn recorded_steps_do_not_run_again_on_a_second_claim() {
    let cluster = Cluster::shared();
    let queue = "wf.replay";
    keep_completed(cluster, queue);
    let id = enqueue(cluster, queue, json!({}));
    let ran: Arc<Mutex<Vec<String>>> = Arc::default();
    /// What each run saw: its attempt, a's and b's results, whether it failed.
    type Seen = Vec<(i32, String, u32, bool)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let (ran2, seen2) = (ran.clone(), seen.clone());
    let h = handler(move |task: Task<Value>| {
        let (ran, seen) = (ran2.clone(), seen2.clone());
        async move {
            let a: String = task
                .step("a", || async {
                    ran.lock().unwrap().push(format!("a@{}", task.attempts));
                    Ok(format!("a ran at attempt {}", task.attempts))
                })
                .await?;
            let b: u32 = task
                .step("b", || async {
                    ran.lock().unwrap().push(format!("b@{}", task.attempts));
                    Ok(7)
                })
                .await?;
            let first = task.attempts == 1;
            seen.lock().unwrap().push((task.attempts, a, b, first));
            if first {
                return Err(TaskError::retry_in(
                    "fails after its steps",
                    Duration::from_millis(1),
                ));
            }
            task.step("c", || async {
                ran.lock().unwrap().push(format!("c@{}", task.attempts));
                Ok(())
            })
            .await?;
            Ok(Done::new())
        }
    });
    let seen3 = seen.clone();
    let report = run_until(
        cluster,
        queue,
        h,
        move || seen3.lock().unwrap().len() >= 2,
        Duration::from_secs(30),
    );
    assert_eq!(
        *ran.lock().unwrap(),
        ["a@1", "b@1", "c@2"],
        "each step ran once"
    );
    let a = "a ran at attempt 1".to_string();
    assert_eq!(
        *seen.lock().unwrap(),
        [(1, a.clone(), 7, true), (2, a, 7, false)],
        "the second claim got the recorded results"
    );
    assert_eq!((report.completed, report.failed), (1, 1), "{report:?}");
    assert_eq!(state(cluster, queue, id).state, "completed");
    let recorded: Vec<(String, i32)> = steps(cluster, queue, id)
        .into_iter()
        .map(|(s, _, attempt)| (s, attempt))
        .collect();
    assert_eq!(
        recorded,
        [("a".into(), 1), ("b".into(), 1), ("c".into(), 2)]
    );
}

/// The log lines a `tracing` subscriber sees, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A sleep parks the task: the handler stops, nothing is settled, the
/// slot is free at once (a second task runs meanwhile on the one handler),
/// the attempt is not counted (the task has one); the task wakes after the
/// sleep and the handler runs on from there, its step replayed. The park
/// and the replay are logged.
#[test]
fn a_sleep_parks_without_counting_the_attempt_and_resumes() {
    let cluster = Cluster::shared();
    let queue = "wf.sleep";
    keep_completed(cluster, queue);
    let mut p = cluster.connect_as(PRODUCER);
    let sleeper = aedb_queue_itests::enqueue_with(
        &mut p,
        queue,
        Some(&json!({"sleep": true})),
        &aedb_queue_itests::EnqueueOpts::default().max_attempts(1),
    )
    .task_id;
    let other = enqueue(cluster, queue, json!({"sleep": false}));
    /// Task, attempt, what happened, when.
    type Events = Vec<(i64, i32, &'static str, Instant)>;
    let events: Arc<Mutex<Events>> = Arc::default();
    let ev = events.clone();
    let h = handler(move |task: Task<Value>| {
        let ev = ev.clone();
        async move {
            let log = |what| {
                ev.lock()
                    .unwrap()
                    .push((task.id, task.attempts, what, Instant::now()))
            };
            log("start");
            if task.payload["sleep"] == json!(true) {
                task.step("before", || async { Ok(1) }).await?;
                task.sleep("nap", Duration::from_secs(1)).await?;
                log("woke");
            }
            Ok(Done::new())
        }
    });

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // While one dispatcher is registered, tracing-core decides whether a
    // log line is enabled, for good, with the default of the thread that
    // reaches it first: another test's thread (no subscriber) reaching
    // "workflow step replayed" first silenced it here. With two registered,
    // it asks both.
    let _second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    // The current-thread runtime keeps every task on this thread, under the subscriber.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let worker = Worker::builder(&cluster.dsn(WORKER))
        .unwrap()
        .queue(
            QueueOptions::new(queue)
                .concurrency(1)
                .poll_interval(Duration::from_millis(100)),
            h,
        )
        .build()
        .unwrap();
    let ev = events.clone();
    let report = rt
        .block_on(worker.run(async move {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(30)
                && !ev.lock().unwrap().iter().any(|e| e.2 == "woke")
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }))
        .unwrap();
    let events = events.lock().unwrap().clone();
    let order: Vec<(i64, i32, &str)> = events.iter().map(|e| (e.0, e.1, e.2)).collect();
    assert_eq!(
        order,
        [
            (sleeper, 1, "start"),
            (other, 1, "start"),
            (sleeper, 1, "start"),
            (sleeper, 1, "woke"),
        ],
        "parked, the slot ran the other task, then the sleeper woke as attempt 1 again"
    );
    let slept = events[2].3 - events[0].3;
    assert!(slept >= Duration::from_millis(900), "woke after {slept:?}");
    assert_eq!((report.completed, report.parked), (2, 1), "{report:?}");
    let t = state(cluster, queue, sleeper);
    assert_eq!((t.state.as_str(), t.attempts), ("completed", 1));
    let nap = steps(cluster, queue, sleeper);
    assert_eq!(nap[1].0, "nap");
    assert!(nap[1].1.as_ref().unwrap()["until"].is_string(), "{nap:?}");

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let parked = logs
        .lines()
        .find(|l| l.contains("task parked: sleeping"))
        .unwrap_or_else(|| panic!("no park logged:\n{logs}"));
    for field in [
        format!("task_id={sleeper}"),
        "step=nap".into(),
        "until=".into(),
    ] {
        assert!(parked.contains(&field), "{field} in {parked}");
    }
    let replayed = logs
        .lines()
        .find(|l| l.contains("workflow step replayed"))
        .unwrap_or_else(|| panic!("no replay logged:\n{logs}"));
    assert!(replayed.contains("step=before"), "{replayed}");
}

/// An event emitted before the wait is not lost: the wait returns its
/// payload at once, without parking.
#[test]
fn an_event_emitted_before_the_wait_is_returned_at_once() {
    let cluster = Cluster::shared();
    let queue = "wf.early";
    let emitted = runtime().block_on(async {
        let (client, conn) = tokio_postgres::connect(&cluster.dsn(PRODUCER), NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        emit(&client, queue, "early/1", &json!({"n": 1}))
            .await
            .unwrap()
    });
    assert!(emitted);
    enqueue(cluster, queue, json!({}));
    let got: Arc<Mutex<Option<Event<Value>>>> = Arc::default();
    let got2 = got.clone();
    let h = handler(move |task: Task<Value>| {
        let got = got2.clone();
        async move {
            let e = task
                .wait_for_event("early", "early/1", Duration::from_secs(60))
                .await?;
            *got.lock().unwrap() = Some(e);
            Ok(Done::new())
        }
    });
    let got3 = got.clone();
    let report = run_until(
        cluster,
        queue,
        h,
        move || got3.lock().unwrap().is_some(),
        Duration::from_secs(30),
    );
    assert_eq!(
        got.lock().unwrap().clone(),
        Some(Event {
            payload: Some(json!({"n": 1})),
            timed_out: false
        })
    );
    assert_eq!(report.parked, 0, "{report:?}");
}

/// A wait with no event parks the task; an emit in the producer's own
/// transaction wakes it when it commits (long before the 60 s deadline),
/// and the wait returns the payload. A second emit of the key returns
/// false and changes nothing.
#[test]
fn an_emit_wakes_a_parked_waiter_and_a_second_emit_is_false() {
    let cluster = Cluster::shared();
    let queue = "wf.emit";
    let id = enqueue(cluster, queue, json!({}));
    let starts = Arc::new(AtomicU32::new(0));
    let got: Arc<Mutex<Option<Event<Value>>>> = Arc::default();
    let (starts2, got2) = (starts.clone(), got.clone());
    let h = handler(move |task: Task<Value>| {
        let (starts, got) = (starts2.clone(), got2.clone());
        async move {
            starts.fetch_add(1, Ordering::SeqCst);
            let e = task
                .wait_for_event("packed", "order-7/packed", Duration::from_secs(60))
                .await?;
            *got.lock().unwrap() = Some(e);
            Ok(Done::new())
        }
    });
    let worker = Worker::builder(&cluster.dsn(WORKER))
        .unwrap()
        .queue(
            QueueOptions::new(queue)
                .concurrency(1)
                .poll_interval(Duration::from_millis(100)),
            h,
        )
        .build()
        .unwrap();
    let (producer, superuser) = (cluster.dsn(PRODUCER), cluster.dsn(SUPERUSER));
    let got3 = got.clone();
    let (report, emits, woken_in) = runtime().block_on(async move {
        let run = tokio::spawn(worker.run(async move {
            let start = Instant::now();
            while got3.lock().unwrap().is_none() && start.elapsed() < Duration::from_secs(30) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
        let (su, conn) = tokio_postgres::connect(&superuser, NoTls).await.unwrap();
        tokio::spawn(conn);
        let start = Instant::now();
        // Until the task is parked on the key.
        loop {
            let row = su
                .query_one(
                    "SELECT EXISTS (SELECT FROM aedb_queue.event_wait WHERE task_id = $1),
                            (SELECT state::text FROM aedb_queue.task WHERE task_id = $1)",
                    &[&id],
                )
                .await
                .unwrap();
            if row.get::<_, bool>(0) && row.get::<_, String>(1) == "scheduled" {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "never parked");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (mut client, conn) = tokio_postgres::connect(&producer, NoTls).await.unwrap();
        tokio::spawn(conn);
        let tx = client.transaction().await.unwrap();
        let first = emit(&tx, queue, "order-7/packed", &json!({"boxes": 2}))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let emitted = Instant::now();
        let second = emit(&client, queue, "order-7/packed", &json!({"boxes": 3}))
            .await
            .unwrap();
        let report = run.await.unwrap().unwrap();
        (report, (first, second), emitted.elapsed())
    });
    assert_eq!(emits, (true, false));
    assert_eq!(
        got.lock().unwrap().clone(),
        Some(Event {
            payload: Some(json!({"boxes": 2})),
            timed_out: false
        }),
        "the first emit stands"
    );
    assert_eq!(starts.load(Ordering::SeqCst), 2);
    assert!(woken_in < Duration::from_secs(30), "{woken_in:?}");
    assert_eq!((report.parked, report.completed), (1, 1), "{report:?}");
}

/// A wait that no event ends parks until its deadline, then returns
/// `timed_out` with no payload.
#[test]
fn a_wait_past_its_deadline_times_out() {
    let cluster = Cluster::shared();
    let queue = "wf.timeout";
    enqueue(cluster, queue, json!({}));
    let got: Arc<Mutex<Option<Event<Value>>>> = Arc::default();
    let got2 = got.clone();
    let h = handler(move |task: Task<Value>| {
        let got = got2.clone();
        async move {
            let e = task
                .wait_for_event("reply", "never/1", Duration::from_secs(1))
                .await?;
            *got.lock().unwrap() = Some(e);
            Ok(Done::new())
        }
    });
    let got3 = got.clone();
    let start = Instant::now();
    let report = run_until(
        cluster,
        queue,
        h,
        move || got3.lock().unwrap().is_some(),
        Duration::from_secs(30),
    );
    assert_eq!(
        got.lock().unwrap().clone(),
        Some(Event {
            payload: None,
            timed_out: true
        })
    );
    assert!(start.elapsed() >= Duration::from_millis(900));
    assert_eq!((report.parked, report.completed), (1, 1), "{report:?}");
}

/// A step whose lease is lost while it runs: another worker reclaimed the
/// task (its lease expired by the superuser, then claimed, in one
/// transaction). Strict (`step_in`), the record raises 40002 and the
/// step's effect, written in the same transaction, rolls back; plain
/// (`step`), nothing is recorded. Either way the handler ends as a lost
/// lease and the runtime settles nothing: the thief keeps the task.
#[test]
fn a_step_records_nothing_when_the_lease_was_lost_and_a_strict_one_rolls_back_its_effect() {
    let cluster = Cluster::shared();
    cluster
        .connect()
        .batch_execute("CREATE TABLE wf_lost (task_id bigint, strict bool)")
        .unwrap();
    for strict in [true, false] {
        let queue = if strict {
            "wf.lost.strict"
        } else {
            "wf.lost.plain"
        };
        let id = enqueue(cluster, queue, json!({}));
        let written = Arc::new(AtomicBool::new(false));
        let stolen = Arc::new(AtomicBool::new(false));
        let ended: Arc<Mutex<Option<(bool, bool)>>> = Arc::default();
        let (w, s, e) = (written.clone(), stolen.clone(), ended.clone());
        let h = handler(move |task: Task<Value>| {
            let (written, stolen, ended) = (w.clone(), s.clone(), e.clone());
            async move {
                let id = task.id;
                let until_stolen = || async {
                    written.store(true, Ordering::SeqCst);
                    let start = Instant::now();
                    while !stolen.load(Ordering::SeqCst)
                        && start.elapsed() < Duration::from_secs(30)
                    {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                };
                let step = if strict {
                    task.step_in("pay", |tx| async move {
                        tx.execute("INSERT INTO wf_lost VALUES ($1, true)", &[&id])
                            .await?;
                        until_stolen().await;
                        Ok(())
                    })
                    .await
                } else {
                    task.step("pay", || async {
                        until_stolen().await;
                        Ok(())
                    })
                    .await
                };
                let e = step.as_ref().err();
                *ended.lock().unwrap() =
                    Some((e.is_some_and(TaskError::is_lease_lost), task.lease_lost()));
                step?;
                Ok(Done::new())
            }
        });
        let thief = {
            let written = written.clone();
            let stolen = stolen.clone();
            let queue = queue.to_string();
            std::thread::spawn(move || {
                let start = Instant::now();
                while !written.load(Ordering::SeqCst) {
                    assert!(
                        start.elapsed() < Duration::from_secs(30),
                        "the step never ran"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
                let mut c = cluster.connect();
                c.batch_execute("SET aedb_queue.claim_rescan_interval = 0")
                    .unwrap();
                let mut tx = c.transaction().unwrap();
                let n = tx
                    .execute(
                        "UPDATE aedb_queue.task SET lease_deadline = now() - interval '1 second'
                          WHERE task_id = $1 AND state = 'in_flight'",
                        &[&id],
                    )
                    .unwrap();
                assert_eq!(n, 1);
                let got = aedb_queue_itests::claim(&mut tx, &queue, "thief", "1 hour", 1);
                tx.commit().unwrap();
                stolen.store(true, Ordering::SeqCst);
                got.len()
            })
        };
        let e2 = ended.clone();
        let report = run_until(
            cluster,
            queue,
            h,
            move || e2.lock().unwrap().is_some(),
            Duration::from_secs(30),
        );
        assert_eq!(thief.join().unwrap(), 1, "the thief reclaimed it");
        assert_eq!(
            *ended.lock().unwrap(),
            Some((true, true)),
            "strict {strict}: the step ended as a lost lease"
        );
        assert_eq!(
            (report.lease_lost, report.completed, report.failed),
            (1, 0, 0),
            "strict {strict}: {report:?}"
        );
        let t = state(cluster, queue, id);
        assert_eq!(
            (t.state.as_str(), t.owner.as_deref()),
            ("in_flight", Some("thief")),
            "nothing settled"
        );
        assert!(steps(cluster, queue, id).is_empty(), "nothing recorded");
    }
    let rows: i64 = cluster
        .connect()
        .query_one("SELECT count(*) FROM wf_lost", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "the strict step's effect rolled back");
}

/// The tasks of `queue` still stored (live, dead, or completed and kept):
/// a ledger of its enqueues, while nothing is reaped.
fn tasks_in(cluster: &Cluster, queue: &str) -> i64 {
    cluster
        .connect()
        .query_one(
            "SELECT (SELECT count(*) FROM aedb_queue.task WHERE queue = $1)
                  + (SELECT count(*) FROM aedb_queue.completed_task WHERE queue = $1)",
            &[&queue],
        )
        .unwrap()
        .get(0)
}

/// The children's handler: the square of the payload's `n`.
fn squares() -> Arc<dyn Handler> {
    handler(|task: Task<Value>| async move {
        let n = task.payload["n"].as_u64().unwrap_or_default();
        Ok(Done::new().with_result(json!(n * n)))
    })
}

/// Polls until `done` holds (30 s at most).
fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A workflow fans out to five children in one step, drained by the same
/// worker the last one first (shorter delays), and resumes with their
/// results in the children's order. It is parked while they run, the
/// attempt not counted; its second run replays the spawn, so exactly five
/// children were ever enqueued.
#[test]
fn a_workflow_fans_out_to_children_and_resumes_with_their_results_in_order() {
    let cluster = Cluster::shared();
    let (parent, kids) = ("wf.fan", "wf.fan.kids");
    keep_completed(cluster, parent);
    keep_completed(cluster, kids);
    let id = enqueue(cluster, parent, json!({"n": 5}));
    let spawned: Arc<Mutex<Vec<Vec<i64>>>> = Arc::default();
    let got: Arc<Mutex<Option<Vec<ChildOutcome<u64>>>>> = Arc::default();
    let (spawned2, got2) = (spawned.clone(), got.clone());
    let h = handler(move |task: Task<Value>| {
        let (spawned, got) = (spawned2.clone(), got2.clone());
        async move {
            let n = task.payload["n"].as_u64().unwrap();
            let children = (1..=n).map(|i| {
                let delay = Duration::from_millis(100 * (n - i + 1));
                Child::new(kids, json!({ "n": i })).options(EnqueueOptions::new().delay(delay))
            });
            let ids = task.spawn_children("fan-out", children).await?;
            spawned.lock().unwrap().push(ids.clone());
            let outcomes: Vec<ChildOutcome<u64>> = task.wait_for_tasks("fan-in", &ids).await?;
            let sum: u64 = outcomes.iter().filter_map(ChildOutcome::result).sum();
            *got.lock().unwrap() = Some(outcomes);
            Ok(Done::new().with_result(json!({ "sum": sum })))
        }
    });
    let got3 = got.clone();
    let report = run_queues_until(
        cluster,
        SERVICE,
        vec![(parent, h), (kids, squares())],
        move || got3.lock().unwrap().is_some(),
        Duration::from_secs(30),
    );
    let spawned = spawned.lock().unwrap().clone();
    assert_eq!(
        spawned.len(),
        2,
        "spawned and parked, then resumed: {spawned:?}"
    );
    assert_eq!(
        spawned[0], spawned[1],
        "the second run got the recorded ids"
    );
    let expected: Vec<ChildOutcome<u64>> = spawned[0]
        .iter()
        .zip(1u64..)
        .map(|(&task_id, i)| ChildOutcome::Completed {
            task_id,
            result: i * i,
        })
        .collect();
    assert_eq!(got.lock().unwrap().clone(), Some(expected));
    assert_eq!(tasks_in(cluster, kids), 5, "each child enqueued once");
    assert_eq!((report.parked, report.completed), (1, 6), "{report:?}");
    let t = state(cluster, parent, id);
    assert_eq!((t.state.as_str(), t.attempts), ("completed", 1));
    let recorded: Vec<String> = steps(cluster, parent, id)
        .into_iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(recorded, ["fan-out", "fan-in"]);
}

/// A dead-lettered child is returned dead with its error, a cancelled one
/// missing. The workflow stays parked while any child is live (here one
/// delayed an hour, after the others ended), and the cancel of that last
/// one releases it.
#[test]
fn a_dead_child_is_returned_dead_and_a_cancelled_one_missing() {
    let cluster = Cluster::shared();
    let (parent, kids) = ("wf.dead", "wf.dead.kids");
    keep_completed(cluster, parent);
    let id = enqueue(cluster, parent, json!({}));
    let spawned: Arc<Mutex<Option<Vec<i64>>>> = Arc::default();
    let got: Arc<Mutex<Option<Vec<ChildOutcome<String>>>>> = Arc::default();
    let (spawned2, got2) = (spawned.clone(), got.clone());
    let h = handler(move |task: Task<Value>| {
        let (spawned, got) = (spawned2.clone(), got2.clone());
        async move {
            let later = EnqueueOptions::new().delay(Duration::from_secs(3600));
            let children = [
                Child::new(kids, "ok"),
                Child::new(kids, "die"),
                Child::new(kids, "ok").options(later),
            ];
            let ids = task.spawn_children("kids", children).await?;
            *spawned.lock().unwrap() = Some(ids.clone());
            *got.lock().unwrap() = Some(task.wait_for_tasks("wait", &ids).await?);
            Ok(Done::new())
        }
    });
    let kid = handler(|task: Task<String>| async move {
        if task.payload == "die" {
            return Err(TaskError::dead_letter("no such image"));
        }
        Ok(Done::new().with_result(json!("fine")))
    });
    let spawned3 = spawned.clone();
    let canceller = std::thread::spawn(move || {
        until("spawned", || spawned3.lock().unwrap().is_some());
        let ids = spawned3.lock().unwrap().clone().unwrap();
        until("the dead child and the parked parent", || {
            state(cluster, kids, ids[1]).state == "dead"
                && state(cluster, parent, id).state == "waiting"
        });
        std::thread::sleep(Duration::from_millis(300));
        let parked = state(cluster, parent, id).state;
        cluster
            .connect_as(ADMIN)
            .execute("SELECT aedb_queue.queue_cancel($1, $2)", &[&kids, &ids[2]])
            .unwrap();
        parked
    });
    let got3 = got.clone();
    let report = run_queues_until(
        cluster,
        SERVICE,
        vec![(parent, h), (kids, kid)],
        move || got3.lock().unwrap().is_some(),
        Duration::from_secs(30),
    );
    assert_eq!(
        canceller.join().unwrap(),
        "waiting",
        "parked while one is live"
    );
    let ids = spawned.lock().unwrap().clone().unwrap();
    assert_eq!(
        got.lock().unwrap().clone(),
        Some(vec![
            ChildOutcome::Completed {
                task_id: ids[0],
                result: "fine".to_string()
            },
            ChildOutcome::Dead {
                task_id: ids[1],
                error: Some("no such image".to_string())
            },
            ChildOutcome::Missing { task_id: ids[2] },
        ])
    );
    assert_eq!(
        (report.parked, report.completed, report.failed),
        (1, 2, 1),
        "{report:?}"
    );
    assert_eq!(state(cluster, parent, id).attempts, 1, "{report:?}");
}

/// A spawn commits with its record or not at all. A worker whose lease was
/// lost (its task reclaimed by another) before its spawn enqueues no child
/// and ends as a lost lease. The worker that gets the task next spawns the
/// children and fails after that; its next run gets the recorded ids: three
/// children in all, whose results the workflow reads.
#[test]
fn a_spawn_happens_once_through_a_lost_lease_and_a_retry() {
    let cluster = Cluster::shared();
    let (parent, kids) = ("wf.once", "wf.once.kids");
    keep_completed(cluster, kids);
    let id = aedb_queue_itests::enqueue_with(
        &mut cluster.connect_as(PRODUCER),
        parent,
        Some(&json!({})),
        &aedb_queue_itests::EnqueueOpts::default().max_attempts(10),
    )
    .task_id;
    let three = move || (1..=3).map(move |n| Child::new(kids, json!({ "n": n })));

    // The first worker: the task is stolen before its spawn.
    let (ready, stolen) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let lost: Arc<Mutex<Option<bool>>> = Arc::default();
    let (r, s, l) = (ready.clone(), stolen.clone(), lost.clone());
    let first = handler(move |task: Task<Value>| {
        let (ready, stolen, lost) = (r.clone(), s.clone(), l.clone());
        async move {
            ready.store(true, Ordering::SeqCst);
            while !stolen.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let spawned = task.spawn_children("kids", three()).await;
            *lost.lock().unwrap() = Some(spawned.as_ref().is_err_and(TaskError::is_lease_lost));
            spawned?;
            Ok(Done::new())
        }
    });
    let thief = std::thread::spawn(move || {
        until("the handler runs", || ready.load(Ordering::SeqCst));
        let mut c = cluster.connect();
        c.batch_execute("SET aedb_queue.claim_rescan_interval = 0")
            .unwrap();
        let mut tx = c.transaction().unwrap();
        expire_lease(&mut tx, id);
        let got = aedb_queue_itests::claim(&mut tx, parent, "thief", "1 hour", 1);
        tx.commit().unwrap();
        stolen.store(true, Ordering::SeqCst);
        got.len()
    });
    let l = lost.clone();
    let report = run_queues_until(
        cluster,
        SERVICE,
        vec![(parent, first)],
        move || l.lock().unwrap().is_some(),
        Duration::from_secs(30),
    );
    assert_eq!(thief.join().unwrap(), 1, "the thief reclaimed it");
    assert_eq!(
        *lost.lock().unwrap(),
        Some(true),
        "the spawn ended as a lost lease"
    );
    assert_eq!(report.lease_lost, 1, "{report:?}");
    assert_eq!(tasks_in(cluster, kids), 0, "no child left behind");
    assert!(steps(cluster, parent, id).is_empty(), "nothing recorded");

    // The thief's lease runs out; the next worker spawns, fails, runs again.
    expire_lease(&mut cluster.connect(), id);
    let runs: Arc<Mutex<Vec<Vec<i64>>>> = Arc::default();
    let got: Arc<Mutex<Option<Vec<ChildOutcome<u64>>>>> = Arc::default();
    let (runs2, got2) = (runs.clone(), got.clone());
    let next = handler(move |task: Task<Value>| {
        let (runs, got) = (runs2.clone(), got2.clone());
        async move {
            let ids = task.spawn_children("kids", three()).await?;
            let first = {
                let mut runs = runs.lock().unwrap();
                runs.push(ids.clone());
                runs.len() == 1
            };
            if first {
                let a_moment = Duration::from_millis(1);
                return Err(TaskError::retry_in("fails after its spawn", a_moment));
            }
            *got.lock().unwrap() = Some(task.wait_for_tasks("wait", &ids).await?);
            Ok(Done::new())
        }
    });
    let got3 = got.clone();
    run_queues_until(
        cluster,
        SERVICE,
        vec![(parent, next), (kids, squares())],
        move || got3.lock().unwrap().is_some(),
        Duration::from_secs(30),
    );
    let runs = runs.lock().unwrap().clone();
    assert!(
        runs.len() >= 2 && runs.iter().all(|r| *r == runs[0]),
        "{runs:?}"
    );
    assert_eq!(tasks_in(cluster, kids), 3, "each child enqueued once");
    let results: Vec<Option<u64>> = got
        .lock()
        .unwrap()
        .clone()
        .unwrap()
        .iter()
        .map(|o| o.result().copied())
        .collect();
    assert_eq!(results, [Some(1), Some(4), Some(9)]);
}

/// Expires the lease of the in-flight task `id`, as if it had run out.
fn expire_lease(c: &mut impl aedb_queue_itests::GenericClient, id: i64) {
    let n = c
        .execute(
            "UPDATE aedb_queue.task SET lease_deadline = now() - interval '1 second'
              WHERE task_id = $1 AND state = 'in_flight'",
            &[&id],
        )
        .unwrap();
    assert_eq!(n, 1, "task {id} in flight");
}

/// Where examples/workflow_crash.rs kills itself, in the order its
/// workflow reaches them.
const KILL_POINTS: &[&str] = &[
    "before:charge",
    "effect:charge",
    "committed:charge",
    "parked:cool-off",
    "before:invoice",
    "effect:invoice",
    "committed:invoice",
    "parked:packed",
    "event:packed",
    "before:ship",
    "effect:ship",
    "committed:ship",
];

/// Runs the crash worker until it exits, emitting the task's event once it
/// waits for it; its exit status, stdout and log.
fn drive(
    cluster: &Cluster,
    queue: &str,
    id: i64,
    kill_at: Option<&str>,
    log: &std::path::Path,
) -> (std::process::ExitStatus, String, String) {
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().unwrap();
    let example = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("workflow_crash");
    let mut command = Command::new(&example);
    command
        .env("AEDB_QUEUE_DSN", cluster.dsn(WORKER))
        .env("AEDB_QUEUE_NAME", queue)
        .env_remove("AEDB_KILL_AT")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap());
    if let Some(point) = kill_at {
        command.env("AEDB_KILL_AT", point);
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", example.display()));
    let mut su = cluster.connect();
    let mut producer = cluster.connect_as(PRODUCER);
    let key = format!("order-{id}/packed");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "{kill_at:?}: the worker did not exit:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        let waiting: bool = su
            .query_one(
                "SELECT EXISTS (SELECT FROM aedb_queue.event_wait WHERE task_id = $1)",
                &[&id],
            )
            .unwrap()
            .get(0);
        if waiting {
            producer
                .query_one(
                    "SELECT aedb_queue.queue_emit($1, $2, '{\"boxes\": 2}')",
                    &[&queue, &key],
                )
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    (status, out, std::fs::read_to_string(log).unwrap())
}

/// THE crash test: a workflow of three ledger steps (each row written in
/// the step's transaction with its record), a sleep and an event wait, its
/// worker process SIGKILLed at each point in turn: before each step's
/// effect, after the effect before its commit, right after each commit,
/// while parked in the sleep and in the wait, after the event arrived.
/// After each kill the lease is expired (as if it had run out) and a new
/// worker process, with no kill point, drives the task to completion (the
/// event emitted when it waits). Every time: each ledger row exactly once,
/// in order, every step recorded once, the task completed.
#[test]
fn a_workflow_killed_at_every_point_runs_each_step_exactly_once() {
    use std::os::unix::process::ExitStatusExt;
    let cluster = Cluster::shared();
    cluster
        .connect()
        .batch_execute(
            "CREATE TABLE wf_ledger (id bigserial PRIMARY KEY, task_id bigint NOT NULL, step text NOT NULL);
             GRANT USAGE ON SEQUENCE wf_ledger_id_seq TO app_worker;",
        )
        .unwrap();
    // Built beside this test binary; `cargo test` of the whole crate has
    // built it already, a single test target has not.
    let built = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "-q",
            "-p",
            "aedb_queue_client",
            "--example",
            "workflow_crash",
        ])
        .status()
        .expect("cargo build --example workflow_crash");
    assert!(built.success());
    let logs = std::env::temp_dir().join(format!("aedb-wf-crash-{}", std::process::id()));
    std::fs::create_dir_all(&logs).unwrap();
    let start = Instant::now();
    for (i, point) in KILL_POINTS.iter().enumerate() {
        let queue = format!("wf.crash.{i}");
        keep_completed(cluster, &queue);
        let id = enqueue(cluster, &queue, json!({"order": i}));

        let t0 = Instant::now();
        let (status, out, log) = drive(
            cluster,
            &queue,
            id,
            Some(point),
            &logs.join(format!("{i}-killed.log")),
        );
        assert_eq!(
            status.signal(),
            Some(9),
            "{point}: {status:?}\n{out}\n{log}"
        );
        assert_eq!(out, format!("killed at {point}\n"), "{point}:\n{log}");

        // The lease runs out (at once, here) and another worker reclaims it.
        cluster
            .connect()
            .execute(
                "UPDATE aedb_queue.task SET lease_deadline = now() - interval '1 second'
                  WHERE task_id = $1 AND state = 'in_flight'",
                &[&id],
            )
            .unwrap();
        let t1 = Instant::now();
        let (status, out, log) = drive(
            cluster,
            &queue,
            id,
            None,
            &logs.join(format!("{i}-resumed.log")),
        );
        assert!(status.success(), "{point}: {status:?}\n{out}\n{log}");

        let ledger: Vec<(String, i64)> = cluster
            .connect()
            .query(
                "SELECT step, count(*) FROM wf_ledger WHERE task_id = $1 GROUP BY step ORDER BY min(id)",
                &[&id],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(
            ledger,
            [
                ("charge".into(), 1),
                ("invoice".into(), 1),
                ("ship".into(), 1)
            ],
            "{point}: each effect exactly once, none skipped\n{log}"
        );
        let recorded: Vec<String> = steps(cluster, &queue, id)
            .into_iter()
            .map(|s| s.0)
            .collect();
        assert_eq!(
            recorded,
            ["charge", "cool-off", "invoice", "packed", "ship"],
            "{point}"
        );
        let t = state(cluster, &queue, id);
        assert_eq!(t.state, "completed", "{point}: {t:?}");
        let result: Option<Value> = cluster
            .connect()
            .query_one(
                "SELECT result FROM aedb_queue.queue_get($1, $2)",
                &[&queue, &id],
            )
            .unwrap()
            .get(0);
        assert_eq!(result, Some(json!({"boxes": 2})), "{point}");
        eprintln!(
            "{point}: killed after {:?}, resumed and completed in {:?}",
            t1 - t0,
            t1.elapsed()
        );
        // The resumed worker replayed what the killed one committed.
        if i >= KILL_POINTS
            .iter()
            .position(|p| *p == "committed:charge")
            .unwrap()
        {
            assert!(
                log.contains("workflow step replayed") && log.contains("step=charge"),
                "{point}: charge replayed\n{log}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&logs);
    eprintln!("{} kill points in {:?}", KILL_POINTS.len(), start.elapsed());
}
