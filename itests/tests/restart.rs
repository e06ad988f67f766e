//! Durability: after a crash (`pg_ctl stop -m immediate`, so the restart
//! replays WAL) every committed task is back exactly as it was, fencing
//! tokens still fence, idempotency keys still deduplicate, and uncommitted
//! work is gone.

use aedb_queue_itests::*;
use std::collections::HashSet;
use std::time::Duration;

#[test]
fn tasks_leases_and_keys_survive_a_crash() {
    // Its own cluster: crashing the shared one would break parallel tests.
    let cluster = Cluster::start();
    let mut p = cluster.connect_as(PRODUCER);
    let mut c = cluster.connect_as(WORKER);
    let q = |s: &str| unique_queue(&format!("crash_{s}"));
    let (q_sched, q_ready, q_flight, q_dead, q_key, q_uncommitted) = (
        q("scheduled"),
        q("ready"),
        q("in_flight"),
        q("dead"),
        q("key"),
        q("uncommitted"),
    );

    let scheduled = enqueue_with(
        &mut p,
        &q_sched,
        Some(&json!("far future")),
        &EnqueueOpts::default().delay("30 days"),
    )
    .task_id;
    let ready = enqueue_with(
        &mut p,
        &q_ready,
        Some(&json!("ready")),
        &EnqueueOpts::default().priority(5),
    )
    .task_id;

    // In flight under its second token: the first lease expired, so there is
    // an old token that must stay fenced after the restart.
    let in_flight = enqueue(&mut p, &q_flight, &json!("in flight")).task_id;
    let old = claim_one(&mut c, &q_flight, "worker-old", "300 milliseconds").unwrap();
    sleep_until_server_time(&mut c, old.lease_deadline, Duration::from_millis(300));
    let holder = claim_one(&mut c, &q_flight, "worker-new", "1 hour").expect("reclaim");
    assert_eq!(holder.task_id, in_flight);
    assert!(holder.fencing_token > old.fencing_token);
    let o = heartbeat(
        &mut c,
        &q_flight,
        in_flight,
        holder.fencing_token,
        "1 hour",
        Some(&json!({ "chunk": 7 })),
    );
    assert_eq!(o, Outcome::Applied);

    let dead = enqueue_with(
        &mut p,
        &q_dead,
        Some(&json!("dead")),
        &EnqueueOpts::default().max_attempts(1),
    )
    .task_id;
    let d = claim_one(&mut c, &q_dead, "w", "1 minute").unwrap();
    assert_eq!(
        fail(
            &mut c,
            &q_dead,
            dead,
            d.fencing_token,
            "fatal: disk on fire"
        ),
        Outcome::Applied
    );

    let key = EnqueueOpts::default().key("payment-7");
    let keyed = enqueue_with(&mut p, &q_key, Some(&json!("keyed")), &key).task_id;
    let k = claim_one(&mut c, &q_key, "w", "1 minute").unwrap();
    assert_eq!(
        complete(&mut c, &q_key, keyed, k.fencing_token),
        Outcome::Applied
    );

    let queues = [&q_sched, &q_ready, &q_flight, &q_dead, &q_key];
    let before: Vec<Vec<Task>> = queues.iter().map(|q| all_tasks(&mut c, q)).collect();
    let states: Vec<Vec<&str>> = before
        .iter()
        .map(|ts| ts.iter().map(|t| t.state.as_str()).collect())
        .collect();
    assert_eq!(
        states,
        vec![
            vec!["scheduled"],
            vec!["ready"],
            vec!["in_flight"],
            vec!["dead"],
            vec![]
        ]
    );

    // Work in progress at the moment of the crash: never committed.
    let mut open = cluster.connect_as(PRODUCER);
    let mut tx = open.transaction().unwrap();
    let uncommitted = enqueue(&mut tx, &q_uncommitted, &json!("never committed")).task_id;

    cluster.stop_immediate();
    drop(tx);
    drop(open);
    cluster.start_again();
    assert!(
        cluster.server_log().contains("not properly shut down"),
        "the restart did not go through crash recovery:\n{}",
        cluster.server_log()
    );

    let mut p = cluster.connect_as(PRODUCER);
    let mut c = cluster.connect_as(WORKER);
    // Every task exactly as before, field by field (state, attempts, token,
    // owner, lease, payload, progress, last_error, timestamps).
    let after: Vec<Vec<Task>> = queues.iter().map(|q| all_tasks(&mut c, q)).collect();
    for (q, (b, a)) in queues.iter().zip(before.iter().zip(&after)) {
        assert_eq!(b, a, "queue {q} changed across the crash");
    }
    assert!(
        all_tasks(&mut c, &q_uncommitted).is_empty(),
        "uncommitted enqueue survived the crash"
    );
    assert!(get(&mut c, &q_uncommitted, uncommitted).is_none());
    let flight = get(&mut c, &q_flight, in_flight).unwrap();
    assert_eq!(flight.progress, Some(json!({ "chunk": 7 })));
    assert_eq!(flight.fencing_token, Some(holder.fencing_token));

    // Fencing still holds: the old token is refused, the holder's applies.
    assert_eq!(
        complete(&mut c, &q_flight, in_flight, old.fencing_token),
        Outcome::LeaseLost
    );
    assert_eq!(get(&mut c, &q_flight, in_flight).as_ref(), Some(&flight));
    assert_eq!(
        complete(&mut c, &q_flight, in_flight, holder.fencing_token),
        Outcome::Applied
    );
    assert!(get(&mut c, &q_flight, in_flight).is_none());

    // The key still deduplicates.
    let again = enqueue_with(&mut p, &q_key, Some(&json!("again")), &key);
    assert_eq!(
        again,
        Enqueued {
            task_id: keyed,
            deduplicated: true
        }
    );
    assert!(all_tasks(&mut c, &q_key).is_empty());

    // The queues keep working: the ready task is served, the scheduled one
    // is not due, the dead one stays dead, and new ids are never reused.
    let r = claim_one(&mut c, &q_ready, "w", "1 minute").expect("ready task after restart");
    assert_eq!((r.task_id, r.attempts, r.priority), (ready, 1, 5));
    assert!(claim_one(&mut c, &q_sched, "w", "1 minute").is_none());
    assert!(claim_one(&mut c, &q_dead, "w", "1 minute").is_none());
    let fresh = enqueue(&mut p, &q_ready, &json!("fresh")).task_id;
    let known: HashSet<i64> = [scheduled, ready, in_flight, dead, keyed, uncommitted].into();
    assert!(
        !known.contains(&fresh),
        "task id {fresh} reused after the crash"
    );
}
