//! The built `aedb-queue` over TLS: libpq's PGSSLMODE / PGSSLROOTCERT (and
//! sslmode in --dsn) are honoured, never silently dropped (the issue's
//! trap: `PGSSLMODE=require` connected in plain text), and the dashboard
//! serves over a verify-full database connection. The cluster takes TLS
//! only (itests `tls::TlsCluster`).

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use aedb_queue_itests::tls::TlsCluster;
use aedb_queue_itests::{enqueue, json, unique_queue, Cluster, ADMIN, PRODUCER};
use support::*;

fn cluster() -> &'static TlsCluster {
    static CLUSTER: OnceLock<TlsCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| TlsCluster::start(""))
}

/// The binary as app_admin, at "localhost" (the certificate's name) on
/// 127.0.0.1, with PGSSLMODE and PGSSLROOTCERT as given.
fn cli_env(mode: &str, root: &std::path::Path) -> Command {
    let mut cmd = command(&cluster().cluster);
    cmd.env("PGHOST", "localhost")
        .env("PGHOSTADDR", "127.0.0.1")
        .env("PGSSLMODE", mode)
        .env("PGSSLROOTCERT", root);
    cmd
}

fn seeded_queue(name: &str) -> String {
    let q = unique_queue(name);
    // Set-up as the superuser over the socket; the producer role enqueues.
    let mut su = cluster().connect();
    su.batch_execute(&format!("SET ROLE {PRODUCER}")).unwrap();
    enqueue(&mut su, &q, &json!({"n": 1}));
    q
}

#[test]
fn pgsslmode_and_pgsslrootcert_are_honoured_by_the_cli() {
    let certs = &cluster().certs;
    let q = seeded_queue("cli_tls");
    let mut cmd = cli_env("verify-full", &certs.ca);
    cmd.args(["stats", &q, "--json"]);
    assert_eq!(run_command(cmd, "").ok().json()["ready"], json!(1));

    let mut cmd = cli_env("verify-full", &certs.other_ca);
    cmd.args(["stats", &q]);
    let untrusted = run_command(cmd, "");
    assert_eq!(untrusted.code, 1, "{untrusted:#?}");
    assert!(untrusted.stderr.contains("UnknownIssuer"), "{untrusted:#?}");

    // A name the certificate does not hold: verify-full refuses it.
    let mut cmd = cli_env("verify-full", &certs.ca);
    cmd.env("PGHOST", "127.0.0.1").args(["stats", &q]);
    let wrong = run_command(cmd, "");
    assert_eq!(wrong.code, 1, "{wrong:#?}");
    assert!(wrong.stderr.contains("not valid for name"), "{wrong:#?}");

    // --dsn's sslmode wins over PGSSLMODE.
    let dsn = format!("{} sslmode=disable", cluster().dsn(ADMIN));
    let mut cmd = cli_env("verify-full", &certs.ca);
    cmd.args(["--dsn", &dsn, "stats", &q]);
    let plain = run_command(cmd, "");
    assert_eq!(plain.code, 1, "{plain:#?}");
    assert!(plain.stderr.contains("no encryption"), "{plain:#?}");

    let mut cmd = cli_env("verify_full", &certs.ca);
    cmd.args(["stats", &q]);
    let unknown = run_command(cmd, "");
    assert_eq!(unknown.code, 1, "{unknown:#?}");
    assert!(
        unknown.stderr.contains("unknown value \"verify_full\""),
        "{unknown:#?}"
    );
}

#[test]
fn pgsslmode_require_never_falls_back_to_a_server_without_tls() {
    let plain = Cluster::start();
    let mut cmd = command(&plain);
    cmd.env("PGSSLMODE", "require").args(["stats"]);
    let refused = run_command(cmd, "");
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(
        refused.stderr.contains("server does not support TLS"),
        "{refused:#?}"
    );
}

/// GET `path` from the dashboard at `addr`: status and body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the dashboard");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read the response");
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status");
    (status, text)
}

#[test]
fn the_dashboard_serves_over_a_verify_full_connection() {
    let q = seeded_queue("serve_tls");
    let dsn = format!(
        "{} sslmode=verify-full sslrootcert={}",
        cluster().dsn(ADMIN),
        cluster().certs.ca.display()
    );
    let mut server = spawn(
        &cluster().cluster,
        &[
            "--dsn",
            &dsn,
            "serve",
            "--no-login",
            "--listen",
            "127.0.0.1:0",
            "--max-age",
            "0",
        ],
    );
    let line = server.stdout_line("listening on", |l| l.starts_with("listening on http://"));
    let addr = line
        .trim_start_matches("listening on http://")
        .trim()
        .to_string();
    let (status, body) = get(&addr, "/healthz");
    assert_eq!(status, 200, "{body}");
    let (status, body) = get(&addr, "/");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&q), "the overview shows {q}: {body}");
    let row = cluster()
        .connect()
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name = 'aedb_itests' AND a.usename = $1",
            &[&ADMIN],
        )
        .unwrap();
    let (tls, plain): (i64, i64) = (row.get(0), row.get(1));
    assert!(
        tls > 0 && plain == 0,
        "dashboard sessions: {tls} with TLS, {plain} without"
    );
}
