//! The README's example runs as written, against a real cluster.

use std::process::Command;

use aedb_queue_itests::{Cluster, SERVICE};

#[test]
fn the_quickstart_example_sends_its_three_emails() {
    let cluster = Cluster::shared();
    let out = Command::new(env!("CARGO"))
        .args([
            "run",
            "-q",
            "-p",
            "aedb_queue_client",
            "--example",
            "quickstart",
        ])
        .env("AEDB_QUEUE_DSN", cluster.dsn(SERVICE))
        .output()
        .expect("cargo run --example quickstart");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.matches("sending \"Welcome\" to ").count(),
        3,
        "{stdout}"
    );
    assert!(stdout.ends_with("sent 3\n"), "{stdout}");
    let left: i64 = cluster
        .connect()
        .query_one(
            "SELECT count(*) FROM aedb_queue.task WHERE queue = 'emails'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}
