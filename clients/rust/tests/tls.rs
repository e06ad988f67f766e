//! TLS as libpq's sslmode says, against a cluster that takes TLS only
//! (itests `tls::TlsCluster`: hostssl lines, a server certificate for
//! "localhost" from a CA made by the test, a second CA it does not chain
//! to, a client certificate for `app_cert`), and one without TLS at all.
//! Each connection is made with the crate's `Settings`, as the client,
//! the worker runtime, the CLI and the dashboard make theirs.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use aedb_queue_client::{
    handler, Client, Done, EnqueueOptions, QueueOptions, Settings, Task, Worker,
};
use aedb_queue_itests::tls::{TlsCluster, CERT_USER};
use aedb_queue_itests::{Cluster, WORKER};

mod support;
use support::{chain, runtime};

fn cluster() -> &'static TlsCluster {
    static CLUSTER: OnceLock<TlsCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| TlsCluster::start(""))
}

/// Connects with `conninfo`; Ok(whether the session uses TLS, its role),
/// or the error of the settings or of the connection.
fn session(conninfo: &str) -> Result<(bool, String), String> {
    let settings = Settings::parse(conninfo).map_err(|e| chain(&e))?;
    runtime().block_on(async {
        let (client, connection) = settings.connect().await.map_err(|e| chain(&e))?;
        tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT ssl, current_user::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .map_err(|e| chain(&e))?;
        Ok((row.get(0), row.get(1)))
    })
}

#[track_caller]
fn refused(conninfo: &str, why: &str) {
    match session(conninfo) {
        Ok(s) => panic!("connected ({s:?}) with {conninfo}; expected a refusal: {why}"),
        Err(e) => assert!(e.contains(why), "{conninfo}: expected {why:?} in: {e}"),
    }
}

fn ca() -> String {
    cluster().certs.ca.display().to_string()
}

fn other_ca() -> String {
    cluster().certs.other_ca.display().to_string()
}

#[test]
fn disable_is_refused_by_the_hostssl_only_server() {
    let dsn = format!("{} sslmode=disable", cluster().dsn(WORKER));
    refused(&dsn, "no encryption");
}

#[test]
fn prefer_allow_require_and_the_default_connect_with_tls() {
    for mode in ["sslmode=prefer", "sslmode=allow", "sslmode=require", ""] {
        let dsn = format!("{} {mode}", cluster().dsn(WORKER));
        assert_eq!(session(&dsn), Ok((true, WORKER.to_string())), "{mode}");
    }
}

#[test]
fn verify_ca_checks_the_chain_and_not_the_name() {
    // 127.0.0.1 is not a name in the certificate: verify-ca does not look.
    let by_ip = cluster().dsn_to("host=127.0.0.1", WORKER);
    let dsn = format!("{by_ip} sslmode=verify-ca sslrootcert={}", ca());
    assert_eq!(session(&dsn), Ok((true, WORKER.to_string())));
    let dsn = format!("{by_ip} sslmode=verify-ca sslrootcert={}", other_ca());
    refused(&dsn, "UnknownIssuer");
}

#[test]
fn verify_full_checks_the_chain_and_the_host_name() {
    let dsn = format!(
        "{} sslmode=verify-full sslrootcert={}",
        cluster().dsn(WORKER),
        ca()
    );
    assert_eq!(session(&dsn), Ok((true, WORKER.to_string())));
    // The same as a URL, the TLS parameters percent-encoded.
    let url = format!(
        "postgresql://{WORKER}@localhost:{}/aedb_itests?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={}",
        cluster().port(),
        ca().replace('/', "%2F")
    );
    assert_eq!(session(&url), Ok((true, WORKER.to_string())));

    let by_ip = cluster().dsn_to("host=127.0.0.1", WORKER);
    refused(
        &format!("{by_ip} sslmode=verify-full sslrootcert={}", ca()),
        "not valid for name",
    );
    // A name the certificate does not hold, at the right address.
    let wrong = cluster().dsn_to("host=db.example hostaddr=127.0.0.1", WORKER);
    refused(
        &format!("{wrong} sslmode=verify-full sslrootcert={}", ca()),
        "not valid for name",
    );
    let dsn = format!(
        "{} sslmode=verify-full sslrootcert={}",
        cluster().dsn(WORKER),
        other_ca()
    );
    refused(&dsn, "UnknownIssuer");
}

#[test]
fn require_with_a_root_certificate_checks_the_chain() {
    let dsn = format!(
        "{} sslmode=require sslrootcert={}",
        cluster().dsn(WORKER),
        other_ca()
    );
    refused(&dsn, "UnknownIssuer");
    let dsn = format!(
        "{} sslmode=require sslrootcert={}",
        cluster().dsn(WORKER),
        ca()
    );
    assert_eq!(session(&dsn), Ok((true, WORKER.to_string())));
}

#[test]
fn verify_full_without_a_readable_root_certificate_is_an_error() {
    let dsn = format!(
        "{} sslmode=verify-full sslrootcert=/nonexistent/ca.crt",
        cluster().dsn(WORKER)
    );
    refused(&dsn, "/nonexistent/ca.crt");
    let dsn = format!("{} sslmode=verify_full", cluster().dsn(WORKER));
    refused(&dsn, "unknown value \"verify_full\"");
}

#[test]
fn the_client_certificate_authenticates_the_cert_user() {
    let c = &cluster().certs;
    let base = format!(
        "{} sslmode=verify-full sslrootcert={}",
        cluster().dsn(CERT_USER),
        ca()
    );
    let with_cert = format!(
        "{base} sslcert={} sslkey={}",
        c.client_cert.display(),
        c.client_key.display()
    );
    assert_eq!(session(&with_cert), Ok((true, CERT_USER.to_string())));
    refused(&base, "certificate");
    // A certificate with the CN app_cert from a CA the server does not trust.
    let forged = format!(
        "{base} sslcert={} sslkey={}",
        c.forged_cert.display(),
        c.forged_key.display()
    );
    refused(&forged, "UnknownCA");
}

/// The trap: a server without TLS must not get a plain session
/// from require or verify-*; prefer takes one, as libpq.
#[test]
fn require_and_verify_full_never_fall_back_to_a_server_without_tls() {
    let plain = Cluster::start();
    let dsn = plain.dsn(WORKER);
    refused(
        &format!("{dsn} sslmode=require"),
        "server does not support TLS",
    );
    let verify = format!("{dsn} sslmode=verify-full sslrootcert={}", ca());
    refused(&verify, "server does not support TLS");
    assert_eq!(
        session(&format!("{dsn} sslmode=prefer")),
        Ok((false, WORKER.to_string()))
    );
}

/// The producer client and the worker runtime over verify-full with the
/// client certificate: every session of app_cert (pool and LISTEN) uses
/// TLS, and the second round is claimed only because LISTEN heard its
/// NOTIFY (the poll interval is an hour).
#[test]
fn the_client_and_the_worker_runtime_work_over_verify_full() {
    let queue = "tls.drain";
    let tls = cluster();
    tls.connect()
        .batch_execute(&format!(
            "SELECT aedb_queue.queue_configure('{queue}', notify => true)"
        ))
        .unwrap();
    let c = &tls.certs;
    let dsn = format!(
        "{} sslmode=verify-full sslrootcert={} sslcert={} sslkey={}",
        tls.dsn(CERT_USER),
        ca(),
        c.client_cert.display(),
        c.client_key.display()
    );
    let rt = runtime();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<i64>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let worker = Worker::builder(&dsn)
        .unwrap()
        .queue(
            QueueOptions::new(queue)
                .concurrency(2)
                .poll_interval(Duration::from_secs(3600)),
            handler(move |task: Task<serde_json::Value>| {
                let done = done_tx.clone();
                async move {
                    let _ = done.send(task.id);
                    Ok(Done::new())
                }
            }),
        )
        .build()
        .unwrap();
    let run = rt.spawn(worker.run(async {
        let _ = stop_rx.await;
    }));
    let listening = "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
                     WHERE a.usename = 'app_cert' AND a.query = 'LISTEN aedb_queue' AND s.ssl";
    eventually("the LISTEN session over TLS", || {
        tls.connect()
            .query_one(listening, &[])
            .unwrap()
            .get::<_, i64>(0)
            == 1
    });
    let producer = rt.block_on(async { Client::connect(&dsn, 2) }).unwrap();
    for round in 0..2 {
        let ids: Vec<i64> = rt.block_on(async {
            let mut ids = Vec::new();
            for n in 0..3 {
                let e = producer
                    .enqueue(
                        queue,
                        &serde_json::json!({ "round": round, "n": n }),
                        &EnqueueOptions::default(),
                    )
                    .await
                    .unwrap();
                ids.push(e.task_id);
            }
            ids
        });
        let mut seen: Vec<i64> = rt.block_on(async {
            let mut seen = Vec::new();
            while seen.len() < ids.len() {
                let bound = tokio::time::timeout(Duration::from_secs(60), done_rx.recv());
                seen.push(
                    bound
                        .await
                        .expect("round not drained: no wake-up?")
                        .unwrap(),
                );
            }
            seen
        });
        seen.sort();
        assert_eq!(seen, ids, "round {round}");
    }
    let plain: i64 = tls
        .connect()
        .query_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.usename = 'app_cert' AND NOT s.ssl",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(plain, 0, "a session of app_cert without TLS");
    let _ = stop_tx.send(());
    let report = rt.block_on(run).unwrap().unwrap();
    assert_eq!(report.completed, 6, "{report:?}");
}

/// Polls `f` until it holds; fails after a generous bound (a hang guard,
/// not a timing assertion).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
