//! The outbox guarantee: enqueues and follow-ups commit or roll back with the
//! caller's transaction, and nobody else sees them before the commit.

use aedb_queue_itests::*;

#[test]
fn enqueue_commits_or_rolls_back_with_the_callers_transaction() {
    let cluster = Cluster::shared();
    let queue = unique_queue("outbox");
    let orders = format!("orders_{queue}");
    // The application's own table (set-up: created by the superuser, used
    // by the application roles).
    cluster
        .connect()
        .batch_execute(&format!("CREATE TABLE {orders} (id int PRIMARY KEY)"))
        .unwrap();
    let mut app = cluster.connect_as(PRODUCER);
    let mut worker = cluster.connect_as(WORKER);
    let insert_order = format!("INSERT INTO {orders} VALUES ($1)");
    let count_orders = format!("SELECT count(*) FROM {orders}");

    // Rolled back: neither the order nor the task exists afterwards.
    let mut tx = app.transaction().unwrap();
    tx.execute(insert_order.as_str(), &[&1i32]).unwrap();
    let rolled_back = enqueue(&mut tx, &queue, &json!({ "order": 1 })).task_id;
    // Uncommitted: invisible to and unclaimable by another session.
    assert!(
        get(&mut worker, &queue, rolled_back).is_none(),
        "uncommitted task visible to others"
    );
    assert!(
        claim_one(&mut worker, &queue, "w", "30 seconds").is_none(),
        "uncommitted task claimed"
    );
    tx.rollback().unwrap();

    assert!(
        get(&mut worker, &queue, rolled_back).is_none(),
        "rolled-back task exists"
    );
    assert!(
        all_tasks(&mut worker, &queue).is_empty(),
        "rolled-back enqueue left a task"
    );
    assert!(
        claim_one(&mut worker, &queue, "w", "30 seconds").is_none(),
        "rolled-back task claimed"
    );
    let n: i64 = worker.query_one(count_orders.as_str(), &[]).unwrap().get(0);
    assert_eq!(n, 0);

    // Committed: both exist, and the task is claimable with its payload.
    let mut tx = app.transaction().unwrap();
    tx.execute(insert_order.as_str(), &[&2i32]).unwrap();
    let kept = enqueue(&mut tx, &queue, &json!({ "order": 2 })).task_id;
    tx.commit().unwrap();
    assert_ne!(kept, rolled_back);

    let got =
        claim_one(&mut worker, &queue, "w", "30 seconds").expect("committed task not claimable");
    assert_eq!(got.task_id, kept);
    assert_eq!(got.payload, Some(json!({ "order": 2 })));
    assert_eq!(got.attempts, 1);
    let n: i64 = worker.query_one(count_orders.as_str(), &[]).unwrap().get(0);
    assert_eq!(n, 1);
    assert_eq!(
        complete(&mut worker, &queue, kept, got.fencing_token),
        Outcome::Applied
    );
    assert!(all_tasks(&mut worker, &queue).is_empty());
}

#[test]
fn follow_ups_are_enqueued_if_and_only_if_the_completion_commits() {
    let cluster = Cluster::shared();
    let step1 = unique_queue("wf_step1");
    let step2 = unique_queue("wf_step2"); // delayed follow-up
    let fan = unique_queue("wf_fan"); // immediate follow-ups
    let fan_key = format!("fan-key-{step1}");
    let mut producer = cluster.connect_as(PRODUCER);
    // Completes with follow-ups: works the task and enqueues the next steps
    // in one transaction, so it is a producer and a worker.
    let mut c = cluster.connect_as(SERVICE);
    let mut observer = cluster.connect_as(WORKER);

    let id = enqueue(&mut producer, &step1, &json!({ "step": 1 })).task_id;
    let held = claim_one(&mut c, &step1, "wf-worker", "5 minutes").expect("claim step 1");
    assert_eq!(held.task_id, id);
    let before = get(&mut c, &step1, id).unwrap();

    let follow_ups = json!([
        { "queue": step2, "payload": { "step": 2 }, "delay": "5 minutes", "priority": 7, "max_attempts": 2 },
        { "queue": fan, "payload": { "fan": 1 }, "priority": 3, "idempotency_key": fan_key },
        { "queue": fan, "payload": { "fan": 2 } },
    ]);
    let opts = CompleteOpts {
        result: Some(json!({ "ok": true })),
        follow_ups: Some(follow_ups),
        strict: false,
    };

    // Rolled back: the original is still in flight, no follow-up exists.
    let mut tx = c.transaction().unwrap();
    let o = try_complete_with(&mut tx, &step1, id, held.fencing_token, &opts)
        .unwrap_or_else(|e| panic!("complete with follow_ups: {}", describe(&e)));
    assert_eq!(o, Outcome::Applied);
    assert!(
        get(&mut tx, &step1, id).is_none(),
        "completed task still visible in its transaction"
    );
    assert_eq!(
        all_tasks(&mut tx, &step2).len(),
        1,
        "follow-up not visible in its transaction"
    );
    assert_eq!(
        all_tasks(&mut tx, &fan).len(),
        2,
        "follow-ups not visible in their transaction"
    );
    // Not visible to other sessions before commit.
    assert!(
        all_tasks(&mut observer, &step2).is_empty(),
        "uncommitted follow-up visible"
    );
    assert_eq!(get(&mut observer, &step1, id).as_ref(), Some(&before));
    tx.rollback().unwrap();

    assert_eq!(
        get(&mut c, &step1, id).as_ref(),
        Some(&before),
        "rollback did not restore the task"
    );
    assert_eq!(before.state, "in_flight");
    assert_eq!(before.fencing_token, Some(held.fencing_token));
    assert_eq!(before.owner_id.as_deref(), Some("wf-worker"));
    assert!(
        all_tasks(&mut c, &step2).is_empty(),
        "rolled-back follow-up exists"
    );
    assert!(
        all_tasks(&mut c, &fan).is_empty(),
        "rolled-back follow-ups exist"
    );

    // Committed: the original is gone, the follow-ups exist as specified.
    let mut tx = c.transaction().unwrap();
    let tx_now = server_now(&mut tx);
    let o = try_complete_with(&mut tx, &step1, id, held.fencing_token, &opts)
        .unwrap_or_else(|e| panic!("complete with follow_ups: {}", describe(&e)));
    assert_eq!(o, Outcome::Applied);
    tx.commit().unwrap();

    assert!(
        get(&mut observer, &step1, id).is_none(),
        "completed task still exists"
    );
    let next = all_tasks(&mut observer, &step2);
    assert_eq!(next.len(), 1, "delayed follow-up: {next:?}");
    let next = &next[0];
    assert_eq!(next.payload, Some(json!({ "step": 2 })));
    assert_eq!(next.state, "scheduled");
    assert_eq!(next.priority, 7);
    assert_eq!(next.max_attempts, Some(2));
    assert_eq!(next.attempts, 0);
    let delay = secs_between(next.not_before, tx_now);
    assert!(
        (299.0..=302.0).contains(&delay),
        "follow-up delay is {delay} s, expected 300"
    );
    assert!(
        claim_one(&mut observer, &step2, "w", "30 seconds").is_none(),
        "delayed follow-up claimable"
    );

    let fans = all_tasks(&mut observer, &fan);
    assert_eq!(fans.len(), 2, "fan-out follow-ups: {fans:?}");
    assert!(
        fans.iter().all(|t| t.state == "ready"),
        "fan-out states: {fans:?}"
    );
    // Order of service: priority 3 before priority 0.
    let served = claim(&mut observer, &fan, "w", "30 seconds", 5);
    let payloads: Vec<_> = served.iter().map(|t| t.payload.clone()).collect();
    assert_eq!(
        payloads,
        vec![Some(json!({ "fan": 1 })), Some(json!({ "fan": 2 }))]
    );
    assert_eq!(served[0].priority, 3);

    // The follow-up's idempotency key was registered in its queue.
    let again = enqueue_with(
        &mut producer,
        &fan,
        Some(&json!({ "fan": "again" })),
        &EnqueueOpts::default().key(&fan_key),
    );
    assert_eq!(
        again,
        Enqueued {
            task_id: served[0].task_id,
            deduplicated: true
        }
    );
    assert_eq!(all_tasks(&mut observer, &fan).len(), 2);

    // A repeated completion is fenced out and enqueues no follow-ups again.
    let o = try_complete_with(&mut c, &step1, id, held.fencing_token, &opts)
        .unwrap_or_else(|e| panic!("repeated complete: {}", describe(&e)));
    assert_eq!(o, Outcome::LeaseLost);
    assert_eq!(
        all_tasks(&mut observer, &step2).len(),
        1,
        "a fenced-out complete enqueued follow-ups"
    );
    assert_eq!(
        all_tasks(&mut observer, &fan).len(),
        2,
        "a fenced-out complete enqueued follow-ups"
    );
}

/// A queue's registry row (which `queue_reap()` of all queues walks) rolls
/// back with the enqueue that created it, and the next enqueue creates it
/// again: the backend's cached "registered" is dropped with the rollback,
/// both for one enqueue and for a batch.
#[test]
fn a_rolled_back_registration_is_made_again_by_the_next_enqueue() {
    let cluster = Cluster::shared();
    let mut app = cluster.connect_as(PRODUCER);
    // Reads the registry table itself, which no application role can.
    let mut other = cluster.connect();
    let registered = |c: &mut Client, queue: &str| -> i64 {
        c.query_one(
            "SELECT count(*) FROM aedb_queue.queue WHERE name = $1",
            &[&queue],
        )
        .unwrap()
        .get(0)
    };
    for batched in [false, true] {
        let queue = unique_queue("registry");
        let enqueue_one = |c: &mut postgres::Transaction<'_>| {
            if batched {
                enqueue_batch(c, &queue, &[json!({ "n": 1 })]);
            } else {
                enqueue(c, &queue, &json!({ "n": 1 }));
            }
        };
        // Two enqueues in one transaction: the second reads the settings
        // after the first registered the queue, so it skips registering.
        let mut tx = app.transaction().unwrap();
        enqueue_one(&mut tx);
        enqueue_one(&mut tx);
        tx.rollback().unwrap();
        assert_eq!(registered(&mut other, &queue), 0, "batched: {batched}");

        let mut tx = app.transaction().unwrap();
        enqueue_one(&mut tx);
        tx.commit().unwrap();
        assert_eq!(
            registered(&mut other, &queue),
            1,
            "the queue was not registered again after a rollback (batched: {batched})"
        );
    }
}
