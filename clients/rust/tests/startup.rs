//! The worker runtime's start: a wrong DSN fails `run` at once with a
//! clear error (wrong port, wrong password, missing database, missing
//! extension) instead of being retried forever; the start and every failed
//! attempt are logged (captured here from a `tracing` subscriber). That a
//! server restart after a first success is survived is
//! `runtime.rs`'s `the_runtime_carries_on_through_a_postgres_restart`.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use aedb_queue_client::{handler, Done, Error, QueueOptions, Task, TaskError, Worker};
use aedb_queue_itests::{json, Cluster, PRODUCER, WORKER};

const PASSWORD: &str = "right-horse-battery";

/// A cluster where role `app_pw` must give its password (scram-sha-256),
/// as a production role would; every other role is trusted.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let hba =
            std::env::temp_dir().join(format!("aedb_startup_hba_{}.conf", std::process::id()));
        std::fs::write(
            &hba,
            "local all all trust\n\
             host all app_pw 127.0.0.1/32 scram-sha-256\n\
             host all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        let cluster = Cluster::start_with(&format!("hba_file = '{}'\n", hba.display()));
        let mut su = cluster.connect();
        su.batch_execute(&format!(
            "CREATE ROLE app_pw LOGIN PASSWORD '{PASSWORD}' IN ROLE aedb_queue_worker"
        ))
        .unwrap();
        su.batch_execute("CREATE DATABASE no_extension").unwrap();
        cluster
    })
}

/// `run`'s error for a worker connecting with `dsn`; a bound on the wait
/// (a runtime that retries would hit it), not a timed assertion.
fn start_error(dsn: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in_runtime = rt.enter(); // the pool is made on it
    let worker = Worker::builder(dsn)
        .unwrap()
        .queue(
            QueueOptions::new("never"),
            handler(|_: Task<serde_json::Value>| async { Ok(Done::new()) }),
        )
        .build()
        .unwrap();
    let ran = rt.block_on(tokio::time::timeout(
        Duration::from_secs(60),
        worker.run(std::future::pending()),
    ));
    match ran.expect("a wrong DSN must fail the run, not be retried") {
        Err(e @ Error::Startup(_)) => e.to_string(),
        other => panic!("expected Error::Startup, got {other:?}"),
    }
}

#[test]
fn a_wrong_port_fails_at_start() {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port() // nothing listens once it is dropped
    };
    let error = start_error(&format!(
        "host=127.0.0.1 port={port} dbname=app user=app_worker"
    ));
    assert!(
        error.starts_with(&format!(
            "worker cannot start: cannot connect to host=127.0.0.1 port={port} dbname=app user=app_worker: "
        )),
        "{error}"
    );
}

#[test]
fn a_wrong_password_fails_at_start_and_is_never_shown() {
    let dsn = cluster().dsn("app_pw");
    let error = start_error(&format!("{dsn} password=wrong-guess"));
    assert!(
        error.contains("password authentication failed for user \"app_pw\""),
        "{error}"
    );
    assert!(!error.contains("wrong-guess"), "{error}");
}

#[test]
fn a_missing_database_or_extension_fails_at_start() {
    let at = |db: &str| {
        format!(
            "host=127.0.0.1 port={} user={WORKER} dbname={db}",
            cluster().port()
        )
    };
    let error = start_error(&at("no_such_db"));
    assert!(
        error.contains("database \"no_such_db\" does not exist"),
        "{error}"
    );
    let error = start_error(&at("no_extension"));
    assert!(
        error.contains("the aedb_queue extension is not installed in host=127.0.0.1"),
        "{error}"
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

#[test]
fn the_start_and_every_failed_attempt_are_logged() {
    let cluster = cluster();
    let queue = "startup.logged";
    cluster
        .connect()
        .execute(
            "SELECT aedb_queue.queue_configure($1, max_attempts => 2, backoff_base => '1 ms', backoff_max => '1 ms')",
            &[&queue],
        )
        .unwrap();
    let mut producer = cluster.connect_as(PRODUCER);
    let retried = aedb_queue_itests::enqueue_batch(&mut producer, queue, &[json!({})])[0];
    let dead = aedb_queue_itests::enqueue_batch(&mut producer, queue, &[json!({"dead": true})])[0];

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // The current-thread runtime keeps every task on this thread, under the subscriber.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in_runtime = rt.enter();
    let dsn = cluster.dsn(WORKER);
    let worker = Worker::builder(&format!("{dsn} password=not-needed-here"))
        .unwrap()
        .queue(
            QueueOptions::new(queue)
                .concurrency(3)
                .poll_interval(Duration::from_millis(100)),
            handler(|task: Task<serde_json::Value>| async move {
                if task.payload.get("dead").is_some() {
                    return Err(TaskError::dead_letter("no such address"));
                }
                Err(TaskError::retry(format!("boom {}", task.attempts)))
            }),
        )
        .build()
        .unwrap();
    let lines = captured.clone();
    let three_failures = async move {
        while String::from_utf8_lossy(&lines.0.lock().unwrap())
            .matches("task failed")
            .count()
            < 3
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    rt.block_on(tokio::time::timeout(
        Duration::from_secs(60),
        worker.run(three_failures),
    ))
    .expect("three failed attempts within the bound")
    .unwrap();
    let log = String::from_utf8_lossy(&captured.0.lock().unwrap()).to_string();
    let started = log
        .lines()
        .find(|l| l.contains("aedb_queue worker started"))
        .expect(&log);
    assert!(
        started.contains("queues=startup.logged (concurrency 3)"),
        "{started}"
    );
    assert!(
        started.contains(&format!(
            "database=host=127.0.0.1 port={} dbname=",
            cluster.port()
        )),
        "{started}"
    );
    assert!(
        !log.contains("not-needed-here"),
        "the password is never logged:\n{log}"
    );
    let failed = |id: i64, attempt: i32, error: &str, fate: &str| {
        let want = [
            format!("task failed; {fate}"),
            format!("task_id={id}"),
            format!("queue={queue}"),
            format!("attempt={attempt}"),
            format!("error={error}"),
        ];
        assert!(
            log.lines()
                .any(|l| want.iter().all(|w| l.contains(w.as_str()))),
            "no line with {want:?} in:\n{log}"
        );
    };
    failed(retried, 1, "boom 1", "will be retried");
    failed(retried, 2, "boom 2", "dead-lettered");
    failed(dead, 1, "no such address", "dead-lettered");
}
