//! Fencing: a worker whose lease expired (a "zombie") or whose task was
//! cancelled can no longer complete, fail or heartbeat it, and its own writes
//! can be made to commit only if its fence holds (`strict => true`).

use aedb_queue_itests::*;
use std::time::Duration;

/// The SQLSTATE `queue_complete(strict => true)` raises on a lost lease.
const LEASE_LOST_SQLSTATE: &str = "40002";

/// The worker's own table (set-up as the superuser; the worker roles can
/// write and read it).
fn create_ledger(cluster: &Cluster, queue: &str) -> String {
    let ledger = format!("ledger_{queue}");
    cluster
        .connect()
        .batch_execute(&format!(
            "CREATE TABLE {ledger} (task_id bigint NOT NULL, worker text NOT NULL)"
        ))
        .unwrap();
    ledger
}

/// In one transaction: the worker's own write, then a strict completion.
/// Commits only if the completion was applied; returns what it returned.
fn record_and_complete_strictly(
    c: &mut Client,
    ledger: &str,
    queue: &str,
    task_id: i64,
    token: i64,
    worker: &str,
) -> Result<Outcome, postgres::Error> {
    let mut tx = c.transaction().unwrap();
    tx.execute(
        format!("INSERT INTO {ledger} VALUES ($1, $2)").as_str(),
        &[&task_id, &worker],
    )
    .unwrap();
    let opts = CompleteOpts {
        strict: true,
        ..Default::default()
    };
    let r = try_complete_with(&mut tx, queue, task_id, token, &opts);
    if r.is_ok() {
        tx.commit().unwrap();
    } // else: dropping `tx` rolls back (the transaction is aborted anyway)
    r
}

fn ledger_rows(c: &mut Client, ledger: &str, worker: &str) -> i64 {
    c.query_one(
        format!("SELECT count(*) FROM {ledger} WHERE worker = $1").as_str(),
        &[&worker],
    )
    .unwrap()
    .get(0)
}

fn expect_strict_lease_lost(r: Result<Outcome, postgres::Error>, what: &str) {
    match r {
        Ok(o) => panic!(
            "{what}: strict complete returned {o:?} instead of raising {LEASE_LOST_SQLSTATE}"
        ),
        Err(e) => assert_eq!(
            sqlstate(&e).as_deref(),
            Some(LEASE_LOST_SQLSTATE),
            "{what}: strict complete raised {}",
            describe(&e)
        ),
    }
}

#[test]
fn a_leased_task_is_not_handed_to_another_claimer() {
    let cluster = Cluster::shared();
    let queue = unique_queue("exclusive");
    let mut producer = cluster.connect_as(PRODUCER);
    let (mut a, mut b) = (cluster.connect_as(WORKER), cluster.connect_as(WORKER));
    let first = enqueue(&mut producer, &queue, &json!({ "n": 1 })).task_id;
    let second = enqueue(&mut producer, &queue, &json!({ "n": 2 })).task_id;

    let got_a = claim(&mut a, &queue, "worker-a", "5 minutes", 1);
    assert_eq!(
        got_a.iter().map(|t| t.task_id).collect::<Vec<_>>(),
        vec![first],
        "FIFO claim"
    );
    let got_b = claim(&mut b, &queue, "worker-b", "5 minutes", 5);
    assert_eq!(
        got_b.iter().map(|t| t.task_id).collect::<Vec<_>>(),
        vec![second]
    );
    assert!(
        claim(&mut b, &queue, "worker-c", "5 minutes", 5).is_empty(),
        "leased tasks handed out again"
    );

    assert_eq!(
        complete(&mut a, &queue, first, got_a[0].fencing_token),
        Outcome::Applied
    );
    assert_eq!(
        complete(&mut b, &queue, second, got_b[0].fencing_token),
        Outcome::Applied
    );
    assert!(all_tasks(&mut a, &queue).is_empty());
}

#[test]
fn a_zombie_worker_is_fenced_out() {
    let cluster = Cluster::shared();
    let queue = unique_queue("zombie");
    let mut producer = cluster.connect_as(PRODUCER);
    let (mut a, mut b) = (cluster.connect_as(WORKER), cluster.connect_as(WORKER));
    let ledger = create_ledger(cluster, &queue);
    let id = enqueue(&mut producer, &queue, &json!({ "job": "zombie" })).task_id;

    // A takes the task with a short lease and then stalls past it.
    let ta = claim_one(&mut a, &queue, "worker-a", "300 milliseconds").expect("A claims");
    assert_eq!((ta.task_id, ta.attempts), (id, 1));
    sleep_until_server_time(&mut a, ta.lease_deadline, Duration::from_millis(300));

    // B's claim reclaims the expired lease and gets the task under a new token.
    let tb = claim_one(&mut b, &queue, "worker-b", "5 minutes").expect("B claims the expired task");
    assert_eq!(tb.task_id, id);
    assert_eq!(tb.attempts, 2);
    assert!(
        tb.fencing_token > ta.fencing_token,
        "token {} !> {}",
        tb.fencing_token,
        ta.fencing_token
    );
    let held = get(&mut b, &queue, id).expect("task exists");
    assert_eq!(held.state, "in_flight");
    assert_eq!(held.owner_id.as_deref(), Some("worker-b"));
    assert_eq!(held.fencing_token, Some(tb.fencing_token));
    assert_eq!(held.attempts, 2);

    // Every fenced call of A is refused and changes nothing at all.
    assert_eq!(
        complete(&mut a, &queue, id, ta.fencing_token),
        Outcome::LeaseLost
    );
    assert_eq!(
        get(&mut b, &queue, id).as_ref(),
        Some(&held),
        "A's complete changed the task"
    );
    assert_eq!(
        fail(&mut a, &queue, id, ta.fencing_token, "zombie error"),
        Outcome::LeaseLost
    );
    assert_eq!(
        get(&mut b, &queue, id).as_ref(),
        Some(&held),
        "A's fail changed the task"
    );
    let o = heartbeat(
        &mut a,
        &queue,
        id,
        ta.fencing_token,
        "1 hour",
        Some(&json!({ "zombie": true })),
    );
    assert_eq!(o, Outcome::LeaseLost);
    assert_eq!(
        get(&mut b, &queue, id).as_ref(),
        Some(&held),
        "A's heartbeat changed the task"
    );

    // A's own write commits only if its fence holds: strict raises 40002 and
    // the ledger row of A rolls back with it.
    let r = record_and_complete_strictly(&mut a, &ledger, &queue, id, ta.fencing_token, "worker-a");
    expect_strict_lease_lost(r, "zombie A");
    assert_eq!(
        ledger_rows(&mut b, &ledger, "worker-a"),
        0,
        "A's write committed without the fence"
    );
    assert_eq!(
        get(&mut b, &queue, id).as_ref(),
        Some(&held),
        "A's strict complete changed the task"
    );
    // The session is usable again after the failed transaction.
    assert!(get(&mut a, &queue, id).is_some());

    // The real holder: heartbeat extends its lease and records progress.
    let o = heartbeat(
        &mut b,
        &queue,
        id,
        tb.fencing_token,
        "10 minutes",
        Some(&json!({ "step": 1 })),
    );
    assert_eq!(o, Outcome::Applied);
    let beat = get(&mut b, &queue, id).unwrap();
    assert!(
        beat.lease_deadline > held.lease_deadline,
        "heartbeat did not extend the lease"
    );
    assert_eq!(beat.progress, Some(json!({ "step": 1 })));
    assert_eq!(
        beat.fencing_token,
        Some(tb.fencing_token),
        "heartbeat must not change the token"
    );

    // B's strict completion applies and its write commits.
    let r = record_and_complete_strictly(&mut b, &ledger, &queue, id, tb.fencing_token, "worker-b");
    match r {
        Ok(o) => assert_eq!(o, Outcome::Applied),
        Err(e) => panic!("B's strict complete failed: {}", describe(&e)),
    }
    assert_eq!(ledger_rows(&mut a, &ledger, "worker-b"), 1);
    assert_eq!(ledger_rows(&mut a, &ledger, "worker-a"), 0);
    assert!(
        get(&mut a, &queue, id).is_none(),
        "completed task still exists"
    );

    // Once completed, both tokens are spent.
    assert_eq!(
        complete(&mut a, &queue, id, ta.fencing_token),
        Outcome::LeaseLost
    );
    assert_eq!(
        complete(&mut b, &queue, id, tb.fencing_token),
        Outcome::LeaseLost
    );
    assert_eq!(
        fail(&mut b, &queue, id, tb.fencing_token, "late"),
        Outcome::LeaseLost
    );
    assert!(
        all_tasks(&mut a, &queue).is_empty(),
        "a fenced call resurrected the task"
    );
}

#[test]
fn cancel_fences_out_the_holder() {
    let cluster = Cluster::shared();
    let queue = unique_queue("cancel");
    let mut producer = cluster.connect_as(PRODUCER);
    let (mut worker, mut admin) = (cluster.connect_as(WORKER), cluster.connect_as(ADMIN));
    let ledger = create_ledger(cluster, &queue);
    let id = enqueue(&mut producer, &queue, &json!({ "job": "cancelled" })).task_id;
    let t = claim_one(&mut worker, &queue, "worker", "5 minutes").expect("claim");

    assert!(
        cancel(&mut admin, &queue, id),
        "cancel of an in-flight task"
    );
    assert!(
        get(&mut admin, &queue, id).is_none(),
        "cancelled task still exists"
    );

    assert_eq!(
        heartbeat(&mut worker, &queue, id, t.fencing_token, "1 minute", None),
        Outcome::LeaseLost
    );
    assert_eq!(
        complete(&mut worker, &queue, id, t.fencing_token),
        Outcome::LeaseLost
    );
    assert_eq!(
        fail(&mut worker, &queue, id, t.fencing_token, "after cancel"),
        Outcome::LeaseLost
    );
    let r =
        record_and_complete_strictly(&mut worker, &ledger, &queue, id, t.fencing_token, "worker");
    expect_strict_lease_lost(r, "after cancel");
    assert_eq!(ledger_rows(&mut admin, &ledger, "worker"), 0);
    assert!(
        all_tasks(&mut admin, &queue).is_empty(),
        "a fenced call resurrected the task"
    );
    assert!(claim_one(&mut worker, &queue, "other", "1 minute").is_none());
    assert!(
        !cancel(&mut admin, &queue, id),
        "second cancel reported a removal"
    );

    // Cancel removes a task in every other state too.
    let scheduled = enqueue_with(
        &mut producer,
        &queue,
        Some(&json!("s")),
        &EnqueueOpts::default().delay("1 hour"),
    )
    .task_id;
    let dead = enqueue_with(
        &mut producer,
        &queue,
        Some(&json!("d")),
        &EnqueueOpts::default().max_attempts(1),
    )
    .task_id;
    let d = claim_one(&mut worker, &queue, "w", "1 minute").expect("claim the dead-to-be task");
    assert_eq!(d.task_id, dead);
    assert_eq!(
        fail(&mut worker, &queue, dead, d.fencing_token, "fatal"),
        Outcome::Applied
    );
    let ready = enqueue(&mut producer, &queue, &json!("r")).task_id;
    let states: Vec<String> = all_tasks(&mut admin, &queue)
        .into_iter()
        .map(|t| t.state)
        .collect();
    assert_eq!(states, vec!["scheduled", "dead", "ready"]);
    for id in [scheduled, dead, ready] {
        assert!(cancel(&mut admin, &queue, id), "cancel of task {id}");
    }
    assert!(all_tasks(&mut admin, &queue).is_empty());
}
