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

/// The README's durable workflow runs as written: charged, parked in its
/// sleep, parked again until the warehouse's event, shipped once.
#[test]
fn the_workflow_example_ships_its_order_once() {
    let cluster = Cluster::shared();
    let out = Command::new(env!("CARGO"))
        .args([
            "run",
            "-q",
            "-p",
            "aedb_queue_client",
            "--example",
            "workflow",
        ])
        .env("AEDB_QUEUE_DSN", cluster.dsn(SERVICE))
        .output()
        .expect("cargo run --example workflow");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shipped: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("shipping"))
        .collect();
    assert_eq!(shipped.len(), 1, "{stdout}");
    assert!(
        shipped[0].starts_with("shipping 2 boxes, receipt r-"),
        "{stdout}"
    );
    assert!(stdout.ends_with("completed 1\n"), "{stdout}");
    let left: i64 = cluster
        .connect()
        .query_one(
            "SELECT count(*) FROM aedb_queue.task WHERE queue = 'orders'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

/// The children example runs as written: three pages counted by child
/// tasks, the report summing them once.
#[test]
fn the_fan_out_example_sums_its_children() {
    let cluster = Cluster::shared();
    let out = Command::new(env!("CARGO"))
        .args([
            "run",
            "-q",
            "-p",
            "aedb_queue_client",
            "--example",
            "fan_out",
        ])
        .env("AEDB_QUEUE_DSN", cluster.dsn(SERVICE))
        .output()
        .expect("cargo run --example fan_out");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, "3 pages, 6 words\ncompleted 4\n");
    let left: i64 = cluster
        .connect()
        .query_one(
            "SELECT count(*) FROM aedb_queue.task WHERE queue IN ('reports', 'pages')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}
