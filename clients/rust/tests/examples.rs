//! The README's examples run as written, against a real cluster.

use std::process::Command;

use aedb_queue_itests::{Cluster, SERVICE};

/// Runs `cargo run --example name` against the shared cluster; its stdout,
/// after checking that it succeeded.
fn run_example(cluster: &Cluster, name: &str) -> String {
    let out = Command::new(env!("CARGO"))
        .args(["run", "-q", "-p", "aedb_queue_client", "--example", name])
        .env("AEDB_QUEUE_DSN", cluster.dsn(SERVICE))
        .output()
        .unwrap_or_else(|e| panic!("cargo run --example {name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Tasks still in the live table of these queues.
fn tasks_left(cluster: &Cluster, queues: &[&str]) -> i64 {
    cluster
        .connect()
        .query_one(
            "SELECT count(*) FROM aedb_queue.task WHERE queue = ANY($1)",
            &[&queues],
        )
        .unwrap()
        .get(0)
}

#[test]
fn the_quickstart_example_sends_its_three_emails() {
    let cluster = Cluster::shared();
    let stdout = run_example(&cluster, "quickstart");
    assert_eq!(
        stdout.matches("sending \"Welcome\" to ").count(),
        3,
        "{stdout}"
    );
    assert!(stdout.ends_with("sent 3\n"), "{stdout}");
    assert_eq!(tasks_left(&cluster, &["emails"]), 0);
}

/// The README's durable workflow runs as written: charged, parked in its
/// sleep, parked again until the warehouse's event, shipped once.
#[test]
fn the_workflow_example_ships_its_order_once() {
    let cluster = Cluster::shared();
    let stdout = run_example(&cluster, "workflow");
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
    assert_eq!(tasks_left(&cluster, &["orders"]), 0);
}

/// The children example runs as written: three pages counted by child
/// tasks, the report summing them once.
#[test]
fn the_fan_out_example_sums_its_children() {
    let cluster = Cluster::shared();
    let stdout = run_example(&cluster, "fan_out");
    assert_eq!(stdout, "3 pages, 6 words\ncompleted 4\n");
    assert_eq!(tasks_left(&cluster, &["reports", "pages"]), 0);
}
