//! Idempotency keys: concurrent enqueues with one key create one task, every
//! caller learns its id, and the key outlives the task.

use aedb_queue_itests::*;
use std::sync::Barrier;
use std::thread;

const SESSIONS: usize = 8;
const ROUNDS: usize = 12;

struct Attempt {
    session: usize,
    result: Enqueued,
    committed: bool,
}

#[test]
fn concurrent_enqueues_with_one_key_create_one_task() {
    let cluster = Cluster::shared();
    let queue = unique_queue("idem");
    let mut sessions: Vec<Client> = (0..SESSIONS)
        .map(|_| cluster.connect_as(PRODUCER))
        .collect();
    let mut observer = cluster.connect_as(WORKER);

    for round in 0..ROUNDS {
        let key = format!("order-{round}");
        // Every third round, the even sessions roll back: a key taken by a
        // transaction that rolls back must not stick, and must not leak its
        // id to those who commit.
        let some_roll_back = round % 3 == 2;
        let barrier = Barrier::new(SESSIONS);
        let attempts: Vec<Attempt> = thread::scope(|s| {
            let handles: Vec<_> = sessions
                .iter_mut()
                .enumerate()
                .map(|(session, c)| {
                    let (queue, key, barrier) = (&queue, &key, &barrier);
                    s.spawn(move || {
                        let mut tx = c.transaction().unwrap();
                        // All transactions are open before anyone enqueues, so
                        // the enqueues really race (each sees no committed key).
                        barrier.wait();
                        let payload = json!({ "session": session, "round": round });
                        let result = try_enqueue_with(
                            &mut tx,
                            queue,
                            Some(&payload),
                            &EnqueueOpts::default().key(key),
                        )
                        .unwrap_or_else(|e| {
                            panic!("round {round} session {session}: {}", describe(&e))
                        });
                        let committed = !(some_roll_back && session % 2 == 0);
                        if committed {
                            tx.commit().unwrap();
                        } else {
                            tx.rollback().unwrap();
                        }
                        Attempt {
                            session,
                            result,
                            committed,
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("session panicked"))
                .collect()
        });

        let committed: Vec<&Attempt> = attempts.iter().filter(|a| a.committed).collect();
        let id = committed[0].result.task_id;
        let ids: Vec<i64> = committed.iter().map(|a| a.result.task_id).collect();
        assert!(
            ids.iter().all(|&i| i == id),
            "round {round}: committed callers got different ids {ids:?}"
        );
        let winners: Vec<usize> = committed
            .iter()
            .filter(|a| !a.result.deduplicated)
            .map(|a| a.session)
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: callers with deduplicated = false: {winners:?}"
        );
        if !some_roll_back {
            assert_eq!(committed.len(), SESSIONS);
        }

        // The one task is the winner's: the others' payloads were not applied.
        let task = get(&mut observer, &queue, id)
            .unwrap_or_else(|| panic!("round {round}: task {id} missing"));
        assert_eq!(
            task.payload,
            Some(json!({ "session": winners[0], "round": round }))
        );
        let tasks = all_tasks(&mut observer, &queue);
        assert_eq!(
            tasks.len(),
            round + 1,
            "round {round}: tasks in queue: {tasks:?}"
        );
    }
}

#[test]
fn the_key_outlives_the_completed_task_and_is_scoped_to_its_queue() {
    let cluster = Cluster::shared();
    let queue = unique_queue("idem_done");
    let other_queue = unique_queue("idem_other");
    let key = EnqueueOpts::default().key("invoice-42");
    let mut p = cluster.connect_as(PRODUCER);
    let mut w = cluster.connect_as(WORKER);

    let first = enqueue_with(&mut p, &queue, Some(&json!({ "v": 1 })), &key);
    assert!(!first.deduplicated);
    // While the task is pending.
    let pending = enqueue_with(&mut p, &queue, Some(&json!({ "v": 2 })), &key);
    assert_eq!(
        pending,
        Enqueued {
            task_id: first.task_id,
            deduplicated: true
        }
    );

    let t = claim_one(&mut w, &queue, "w", "1 minute").expect("claim");
    assert_eq!(t.task_id, first.task_id);
    assert_eq!(t.payload, Some(json!({ "v": 1 })));
    assert_eq!(
        complete(&mut w, &queue, t.task_id, t.fencing_token),
        Outcome::Applied
    );
    assert!(get(&mut w, &queue, first.task_id).is_none());

    // After completion: still deduplicated, and nothing is enqueued.
    let after = enqueue_with(&mut p, &queue, Some(&json!({ "v": 3 })), &key);
    assert_eq!(
        after,
        Enqueued {
            task_id: first.task_id,
            deduplicated: true
        }
    );
    assert!(
        all_tasks(&mut w, &queue).is_empty(),
        "a deduplicated enqueue created a task"
    );
    assert!(claim_one(&mut w, &queue, "w", "1 minute").is_none());

    // The same key in another queue is another task.
    let elsewhere = enqueue_with(&mut p, &other_queue, Some(&json!({ "v": 4 })), &key);
    assert!(!elsewhere.deduplicated, "key leaked across queues");
    assert_ne!(elsewhere.task_id, first.task_id);
    let again = enqueue_with(&mut p, &other_queue, Some(&json!({ "v": 5 })), &key);
    assert_eq!(
        again,
        Enqueued {
            task_id: elsewhere.task_id,
            deduplicated: true
        }
    );
    assert_eq!(all_tasks(&mut w, &other_queue).len(), 1);
}
