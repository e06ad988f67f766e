//! Wake-ups: a queue configured with `notify => true` sends NOTIFY on channel
//! `aedb_queue` (payload: the queue name) when an enqueue commits, so workers
//! can LISTEN instead of polling.

use std::time::Duration;

use aedb_queue_itests::*;

/// Payloads of the notifications about `queues` that `listener` receives
/// within `wait` (tests run in parallel on one channel).
fn received(listener: &mut Client, queues: &[&str], wait: Duration) -> Vec<String> {
    use postgres::fallible_iterator::FallibleIterator;
    let mut payloads = Vec::new();
    let mut notifications = listener.notifications();
    let mut incoming = notifications.timeout_iter(wait);
    while let Some(n) = incoming.next().expect("notifications") {
        assert_eq!(n.channel(), "aedb_queue");
        if queues.contains(&n.payload()) {
            payloads.push(n.payload().to_string());
        }
    }
    payloads
}

fn configure_notify(c: &mut Client, queue: &str, on: bool) {
    c.query_one(
        "SELECT notify FROM aedb_queue.queue_configure($1::text, notify => $2)",
        &[&queue, &on],
    )
    .expect("queue_configure");
}

// PostgreSQL delivers NOTIFY at commit only, whatever the extension does,
// so no check made before a commit could fail; these check what the
// extension decides: whether, for which queue, and with which settings.

/// The sessions of a wake-up test: an admin, a worker that LISTENs, a
/// producer.
struct Sessions {
    admin: Client,
    listener: Client,
    producer: Client,
}

fn sessions(cluster: &Cluster) -> Sessions {
    let admin = cluster.connect_as(ADMIN);
    let mut listener = cluster.connect_as(WORKER);
    listener.batch_execute("LISTEN aedb_queue").unwrap();
    let producer = cluster.connect_as(PRODUCER);
    Sessions {
        admin,
        listener,
        producer,
    }
}

#[test]
fn an_enqueue_wakes_listeners_once_when_it_commits() {
    let cluster = Cluster::shared();
    let queue = unique_queue("wake");
    let quiet = unique_queue("quiet");
    let Sessions {
        mut admin,
        mut listener,
        mut producer,
    } = sessions(cluster);
    configure_notify(&mut admin, &queue, true);

    let mut tx = producer.transaction().unwrap();
    enqueue(&mut tx, &queue, &json!({"n": 1}));
    // A batch in the same transaction: still one wake-up for the queue.
    enqueue_batch(&mut tx, &queue, &[json!(2), json!(3)]);
    tx.commit().unwrap();
    assert_eq!(
        received(&mut listener, &[&queue], Duration::from_secs(5)),
        vec![queue.clone()]
    );

    // A rolled-back enqueue wakes nobody; a queue without notify stays quiet.
    let mut tx = producer.transaction().unwrap();
    enqueue(&mut tx, &queue, &json!({"n": 4}));
    tx.rollback().unwrap();
    enqueue(&mut producer, &quiet, &json!({"n": 5}));
    assert!(received(&mut listener, &[&queue, &quiet], Duration::from_millis(500)).is_empty());
}

/// An enqueue whose first attempt was rolled back to a savepoint, made
/// again in the same transaction, still wakes listeners at commit: nothing
/// of the rolled-back attempt (a "woken already" memory, say) stops it.
#[test]
fn an_enqueue_after_a_rolled_back_savepoint_wakes_listeners_at_commit() {
    let cluster = Cluster::shared();
    let queue = unique_queue("wake_sp");
    let Sessions {
        mut admin,
        mut listener,
        mut producer,
    } = sessions(cluster);
    configure_notify(&mut admin, &queue, true);

    let mut tx = producer.transaction().unwrap();
    let mut sp = tx.savepoint("s").unwrap();
    enqueue(&mut sp, &queue, &json!({"n": 1}));
    sp.rollback().unwrap();
    let kept = enqueue(&mut tx, &queue, &json!({"n": 2})).task_id;
    tx.commit().unwrap();
    assert_eq!(
        received(&mut listener, &[&queue], Duration::from_secs(5)),
        vec![queue.clone()]
    );
    let claimed = claim_one(&mut listener, &queue, "w", "30 seconds").expect("the kept task");
    assert_eq!(claimed.task_id, kept);
}

/// Turning notify on in another session reaches a producer that had already
/// enqueued into the queue with it off (its backend had read the setting):
/// its next enqueue wakes listeners; turning it off again silences it.
#[test]
fn a_notify_setting_changed_elsewhere_applies_to_the_next_enqueue() {
    let cluster = Cluster::shared();
    let queue = unique_queue("wake_late");
    let Sessions {
        mut admin,
        mut listener,
        mut producer,
    } = sessions(cluster);

    enqueue(&mut producer, &queue, &json!({"n": 1}));
    assert!(received(&mut listener, &[&queue], Duration::from_millis(300)).is_empty());
    configure_notify(&mut admin, &queue, true);
    enqueue(&mut producer, &queue, &json!({"n": 2}));
    assert_eq!(
        received(&mut listener, &[&queue], Duration::from_secs(5)),
        vec![queue.clone()],
        "notify turned on elsewhere"
    );
    configure_notify(&mut admin, &queue, false);
    enqueue(&mut producer, &queue, &json!({"n": 3}));
    assert!(
        received(&mut listener, &[&queue], Duration::from_millis(500)).is_empty(),
        "notify turned off elsewhere"
    );
}

#[test]
fn a_delayed_task_wakes_listeners_when_the_reaper_promotes_it() {
    let cluster = Cluster::shared();
    let queue = unique_queue("wake_timer");
    let Sessions {
        mut admin,
        mut listener,
        mut producer,
    } = sessions(cluster);
    configure_notify(&mut admin, &queue, true);

    let task = enqueue_with(
        &mut producer,
        &queue,
        Some(&json!({"timer": true})),
        &EnqueueOpts::default().delay("1 second"),
    );
    assert!(
        received(&mut listener, &[&queue], Duration::from_millis(300)).is_empty(),
        "a task that is not due yet woke listeners"
    );
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(reap(&mut admin, Some(&queue)).promoted, 1);
    assert_eq!(
        received(&mut listener, &[&queue], Duration::from_secs(5)),
        vec![queue.clone()]
    );
    let claimed = claim_one(&mut listener, &queue, "w", "30 seconds").expect("the timer is ready");
    assert_eq!(claimed.task_id, task.task_id);
}
