//! Time-driven semantics: delays, retry backoff (doubling, clamped), dead
//! letters, lease expiry, the reaper, and the bound on the timers a claim
//! promotes inline. Every check compares server
//! timestamps with each other, with margins of hundreds of milliseconds; none
//! measures speed.

use aedb_queue_itests::*;
use std::time::{Duration, SystemTime};

/// Claims from `queue` in a transaction whose start time is still at least
/// `GUARD` before `not_before`, and asserts it gets nothing. On a machine so
/// stalled that the claim came too late to prove anything, it says so and
/// skips the check instead of failing.
fn assert_not_claimable_yet(c: &mut Client, queue: &str, not_before: SystemTime, what: &str) {
    const GUARD: f64 = 0.2;
    let mut tx = c.transaction().unwrap();
    let now = server_now(&mut tx); // = the transaction's now()
    let got = claim(&mut tx, queue, "too-early", "30 seconds", 10);
    tx.commit().unwrap();
    let early_by = secs_between(not_before, now);
    if early_by > GUARD {
        assert!(
            got.is_empty(),
            "{what}: claimed {early_by:.2} s before not_before: {got:?}"
        );
    } else {
        assert!(
            got.is_empty(),
            "{what}: the machine stalled; the early claim ran only {early_by:.2} s before not_before \
             and got the task, so the rest of this test cannot run (not a queue bug)"
        );
        eprintln!("{what}: claim ran only {early_by:.2} s before not_before");
    }
}

/// Runs `queue_fail` in its own transaction and returns the outcome and the
/// transaction's now(), the reference point of the backoff.
fn fail_at(
    c: &mut Client,
    queue: &str,
    id: i64,
    token: i64,
    error: &str,
    opts: &FailOpts,
) -> (Outcome, SystemTime) {
    let mut tx = c.transaction().unwrap();
    let now = server_now(&mut tx);
    let o = fail_with(&mut tx, queue, id, token, error, opts);
    tx.commit().unwrap();
    (o, now)
}

fn assert_delay(actual: f64, expected: f64, what: &str) {
    // Lower bound: the backoff starts at the fail (now() or a bit later).
    // Upper bound: generous for a stalled machine, still below the next step
    // of the schedule that a bug would produce (e.g. 2 s unclamped vs 1.5 s).
    assert!(
        actual >= expected - 0.05 && actual <= expected + 0.4,
        "{what}: not_before is {actual:.3} s after the fail, expected {expected} s"
    );
}

#[test]
fn a_delayed_task_is_not_claimable_before_its_delay() {
    let cluster = Cluster::shared();
    let queue = unique_queue("delay");
    let mut p = cluster.connect_as(PRODUCER);
    let mut c = cluster.connect_as(WORKER);

    let id = enqueue_with(
        &mut p,
        &queue,
        Some(&json!("later")),
        &EnqueueOpts::default().delay("2 seconds"),
    )
    .task_id;
    let t = get(&mut c, &queue, id).unwrap();
    assert_eq!(t.state, "scheduled");
    let delay = secs_between(t.not_before, t.created_at);
    assert!(
        (1.95..=2.5).contains(&delay),
        "not_before is {delay:.3} s after created_at, expected 2"
    );

    assert_not_claimable_yet(&mut c, &queue, t.not_before, "right after enqueue");
    std::thread::sleep(Duration::from_secs(1));
    assert_not_claimable_yet(&mut c, &queue, t.not_before, "after ~1 s");
    assert_eq!(get(&mut c, &queue, id).unwrap().state, "scheduled");

    sleep_until_server_time(&mut c, t.not_before, Duration::from_millis(500));
    let got = claim_one(&mut c, &queue, "w", "30 seconds").expect("due task not claimable");
    assert_eq!(got.task_id, id);
    assert_eq!(got.attempts, 1);
    assert_eq!(
        complete(&mut c, &queue, id, got.fencing_token),
        Outcome::Applied
    );
}

#[test]
fn failures_back_off_exponentially_clamped_then_dead_letter() {
    let cluster = Cluster::shared();
    let queue = unique_queue("backoff");
    let mut p = cluster.connect_as(PRODUCER);
    let mut c = cluster.connect_as(WORKER);
    let opts = EnqueueOpts::default()
        .max_attempts(3)
        .backoff("1 second", "1.5 seconds");
    let id = enqueue_with(&mut p, &queue, Some(&json!("flaky")), &opts).task_id;

    // base * 2^(attempts-1): 1 s, then 2 s clamped to 1.5 s.
    let expected_delays = [1.0, 1.5];
    for attempt in 1..=3 {
        let t = claim_one(&mut c, &queue, "w", "30 seconds")
            .unwrap_or_else(|| panic!("attempt {attempt}: task not claimable"));
        assert_eq!((t.task_id, t.attempts), (id, attempt));
        let error = format!("boom {attempt}");
        let (o, failed_at) = fail_at(
            &mut c,
            &queue,
            id,
            t.fencing_token,
            &error,
            &FailOpts::default(),
        );
        assert_eq!(o, Outcome::Applied);

        let task = get(&mut c, &queue, id).expect("failed task must still exist");
        assert_eq!(task.attempts, attempt);
        assert_eq!(task.last_error.as_deref(), Some(error.as_str()));
        if attempt < 3 {
            assert_eq!(task.state, "scheduled", "attempt {attempt}");
            let expected = expected_delays[attempt as usize - 1];
            assert_delay(
                secs_between(task.not_before, failed_at),
                expected,
                &format!("failure {attempt}"),
            );
            assert_not_claimable_yet(
                &mut c,
                &queue,
                task.not_before,
                &format!("backoff {attempt}"),
            );
            sleep_until_server_time(&mut c, task.not_before, Duration::from_millis(300));
        } else {
            assert_eq!(task.state, "dead", "attempts exhausted");
        }
    }
    assert!(
        claim_one(&mut c, &queue, "w", "30 seconds").is_none(),
        "a dead task was claimed"
    );
    assert_eq!(list(&mut c, &queue, Some("dead"), 10).len(), 1);
}

#[test]
fn retry_in_overrides_the_backoff_and_dead_letter_is_immediate() {
    let cluster = Cluster::shared();
    let mut p = cluster.connect_as(PRODUCER);
    let mut c = cluster.connect_as(WORKER);

    // Default backoff: 1 s after the first failure.
    let q_default = unique_queue("retry_default");
    let id = enqueue(&mut p, &q_default, &json!("d")).task_id;
    let t = claim_one(&mut c, &q_default, "w", "30 seconds").unwrap();
    let (o, at) = fail_at(
        &mut c,
        &q_default,
        id,
        t.fencing_token,
        "e",
        &FailOpts::default(),
    );
    assert_eq!(o, Outcome::Applied);
    let task = get(&mut c, &q_default, id).unwrap();
    assert_eq!(task.state, "scheduled");
    assert_delay(secs_between(task.not_before, at), 1.0, "default backoff");

    // retry_in replaces the computed backoff.
    let q_retry = unique_queue("retry_in");
    let id = enqueue(&mut p, &q_retry, &json!("r")).task_id;
    let t = claim_one(&mut c, &q_retry, "w", "30 seconds").unwrap();
    let opts = FailOpts {
        retry_in: Some("10 minutes".into()),
        ..Default::default()
    };
    let (o, at) = fail_at(&mut c, &q_retry, id, t.fencing_token, "rate limited", &opts);
    assert_eq!(o, Outcome::Applied);
    let task = get(&mut c, &q_retry, id).unwrap();
    assert_eq!(task.state, "scheduled");
    assert_eq!(task.attempts, 1);
    assert_delay(secs_between(task.not_before, at), 600.0, "retry_in");
    assert!(claim_one(&mut c, &q_retry, "w", "30 seconds").is_none());

    // dead_letter => true: dead at once, attempts left or not.
    let q_poison = unique_queue("poison");
    let id = enqueue(&mut p, &q_poison, &json!("p")).task_id;
    let t = claim_one(&mut c, &q_poison, "w", "30 seconds").unwrap();
    let opts = FailOpts {
        dead_letter: Some(true),
        ..Default::default()
    };
    let (o, _) = fail_at(
        &mut c,
        &q_poison,
        id,
        t.fencing_token,
        "poison message",
        &opts,
    );
    assert_eq!(o, Outcome::Applied);
    let task = get(&mut c, &q_poison, id).unwrap();
    assert_eq!(task.state, "dead");
    assert_eq!(task.attempts, 1);
    assert_eq!(task.last_error.as_deref(), Some("poison message"));
    assert!(claim_one(&mut c, &q_poison, "w", "30 seconds").is_none());
}

#[test]
fn an_expired_lease_is_reclaimed_at_once_and_dies_on_the_last_attempt() {
    let cluster = Cluster::shared();
    let queue = unique_queue("expiry");
    let mut p = cluster.connect_as(PRODUCER);
    let (mut c, mut other) = (cluster.connect_as(WORKER), cluster.connect_as(WORKER));
    // A long failure backoff: if reclaiming applied it, the re-claim below
    // would find nothing.
    let opts = EnqueueOpts::default()
        .max_attempts(2)
        .backoff("1 minute", "1 minute");
    let id = enqueue_with(&mut p, &queue, Some(&json!("crashy")), &opts).task_id;

    let first = claim_one(&mut c, &queue, "w1", "300 milliseconds").unwrap();
    assert_eq!(first.attempts, 1);
    sleep_until_server_time(&mut c, first.lease_deadline, Duration::from_millis(300));

    let second = claim_one(&mut other, &queue, "w2", "300 milliseconds")
        .expect("an expired lease must be claimable again at once, without backoff");
    assert_eq!(second.task_id, id);
    assert_eq!(second.attempts, 2);
    assert!(second.fencing_token > first.fencing_token);
    assert_eq!(
        complete(&mut c, &queue, id, first.fencing_token),
        Outcome::LeaseLost
    );
    sleep_until_server_time(&mut c, second.lease_deadline, Duration::from_millis(300));

    // The last attempt's lease expired: the next claim dead-letters it.
    assert!(
        claim_one(&mut c, &queue, "w3", "30 seconds").is_none(),
        "claimed beyond max_attempts"
    );
    let task = get(&mut c, &queue, id).unwrap();
    assert_eq!(task.state, "dead");
    assert_eq!(task.attempts, 2);
    assert_eq!(
        complete(&mut other, &queue, id, second.fencing_token),
        Outcome::LeaseLost
    );
    assert_eq!(get(&mut c, &queue, id).unwrap().state, "dead");
}

#[test]
fn reap_promotes_due_timers_and_reclaims_expired_leases() {
    let cluster = Cluster::shared();
    let queue = unique_queue("reap");
    let mut p = cluster.connect_as(PRODUCER);
    let mut c = cluster.connect_as(WORKER);
    let mut admin = cluster.connect_as(ADMIN);

    let lost = enqueue(&mut p, &queue, &json!("lost")).task_id;
    let last = enqueue_with(
        &mut p,
        &queue,
        Some(&json!("last")),
        &EnqueueOpts::default().max_attempts(1),
    )
    .task_id;
    let leased = claim(&mut c, &queue, "vanished", "2 seconds", 2);
    assert_eq!(
        leased.iter().map(|t| t.task_id).collect::<Vec<_>>(),
        vec![lost, last]
    );
    let timer = enqueue_with(
        &mut p,
        &queue,
        Some(&json!("timer")),
        &EnqueueOpts::default().delay("2 seconds"),
    )
    .task_id;
    let timer_due = get(&mut c, &queue, timer).unwrap().not_before;

    // Nothing is due yet.
    assert_eq!(
        reap(&mut admin, Some(&queue)),
        Reaped::default(),
        "reaped before anything was due"
    );
    let latest = leased
        .iter()
        .map(|t| t.lease_deadline)
        .chain([timer_due])
        .max()
        .unwrap();
    sleep_until_server_time(&mut c, latest, Duration::from_millis(500));

    let r = reap(&mut admin, Some(&queue));
    assert_eq!(
        r,
        Reaped {
            promoted: 1,
            reclaimed: 1,
            dead_lettered: 1,
            fired: 0
        }
    );
    let t = get(&mut c, &queue, timer).unwrap();
    assert_eq!(
        (t.state.as_str(), t.attempts),
        ("ready", 0),
        "promoted timer"
    );
    let t = get(&mut c, &queue, lost).unwrap();
    assert_eq!(
        (t.state.as_str(), t.attempts),
        ("ready", 1),
        "reclaimed task (no backoff, attempts kept)"
    );
    let t = get(&mut c, &queue, last).unwrap();
    assert_eq!(
        (t.state.as_str(), t.attempts),
        ("dead", 1),
        "expired on its last attempt"
    );

    // Idempotent: a second pass finds nothing.
    assert_eq!(reap(&mut admin, Some(&queue)), Reaped::default());
    // Both ready tasks are served; the reclaimed one on its second attempt.
    let mut served: Vec<(i64, i32)> = claim(&mut c, &queue, "w", "30 seconds", 5)
        .iter()
        .map(|t| (t.task_id, t.attempts))
        .collect();
    served.sort();
    assert_eq!(served, vec![(lost, 2), (timer, 1)]);

    // The all-queues form reaches this queue too: give it an expired lease
    // (the reclaimed task's, backdated) and a due timer (backdated). Other
    // tests' queues may add to the counts, never take from them.
    let mut su = cluster.connect();
    let timer2 = enqueue_with(
        &mut p,
        &queue,
        Some(&json!("timer2")),
        &EnqueueOpts::default().delay("1 hour"),
    )
    .task_id;
    su.execute(
        "UPDATE aedb_queue.task SET lease_deadline = now() - interval '1 minute' \
         WHERE task_id = $1",
        &[&lost],
    )
    .unwrap();
    su.execute(
        "UPDATE aedb_queue.task SET not_before = now() - interval '1 minute' \
         WHERE task_id = $1",
        &[&timer2],
    )
    .unwrap();
    let all = reap(&mut admin, None);
    assert!(
        all.promoted >= 1 && all.reclaimed >= 1,
        "the all-queues reap missed this queue's due timer or expired lease: {all:?}"
    );
    for (id, attempts) in [(lost, 2), (timer2, 0)] {
        let t = get(&mut c, &queue, id).unwrap();
        assert_eq!(
            (t.state.as_str(), t.attempts),
            ("ready", attempts),
            "task {id}"
        );
    }
}

#[test]
fn heartbeat_extends_the_lease_and_its_progress_reaches_the_next_claimer() {
    let cluster = Cluster::shared();
    let queue = unique_queue("heartbeat");
    let mut p = cluster.connect_as(PRODUCER);
    let (mut c, mut other) = (cluster.connect_as(WORKER), cluster.connect_as(WORKER));
    let id = enqueue(&mut p, &queue, &json!("long job")).task_id;

    let t = claim_one(&mut c, &queue, "w1", "1 second").unwrap();
    assert_eq!(t.progress, None);
    let o = heartbeat(
        &mut c,
        &queue,
        id,
        t.fencing_token,
        "3 seconds",
        Some(&json!({ "done": 3 })),
    );
    assert_eq!(o, Outcome::Applied);
    let beat = get(&mut c, &queue, id).unwrap();
    let new_deadline = beat
        .lease_deadline
        .expect("in-flight task has a lease deadline");
    assert!(
        secs_between(new_deadline, t.lease_deadline) > 1.5,
        "heartbeat did not extend the lease: {:?} -> {:?}",
        t.lease_deadline,
        new_deadline
    );
    assert_eq!(beat.progress, Some(json!({ "done": 3 })));

    // Past the original deadline, within the extended one: still held.
    sleep_until_server_time(&mut c, t.lease_deadline, Duration::from_millis(300));
    assert_not_claimable_yet(&mut other, &queue, new_deadline, "extended lease");

    // The worker vanishes: the next claimer gets the checkpoint.
    sleep_until_server_time(&mut c, new_deadline, Duration::from_millis(300));
    let next = claim_one(&mut other, &queue, "w2", "30 seconds").expect("reclaim after expiry");
    assert_eq!(next.task_id, id);
    assert_eq!(next.attempts, 2);
    assert_eq!(next.progress, Some(json!({ "done": 3 })));
    assert_eq!(
        heartbeat(&mut c, &queue, id, t.fencing_token, "1 minute", None),
        Outcome::LeaseLost
    );
    assert_eq!(
        complete(&mut other, &queue, id, next.fencing_token),
        Outcome::Applied
    );
}

/// `(state, count)` of every task of `queue`, read from the table itself.
fn state_counts(su: &mut Client, queue: &str) -> Vec<(String, i64)> {
    su.query(
        "SELECT state::text, count(*) FROM aedb_queue.task WHERE queue = $1 \
         GROUP BY 1 ORDER BY 1",
        &[&queue],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Ids of the tasks of `queue` that are no longer scheduled, in id order.
fn promoted_ids(su: &mut Client, queue: &str) -> Vec<i64> {
    su.query(
        "SELECT task_id FROM aedb_queue.task WHERE queue = $1 AND state <> 'scheduled' \
         ORDER BY task_id",
        &[&queue],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn counts(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(s, n)| (s.to_string(), *n)).collect()
}

/// A claim promotes at most max(`max`, 1000) due timers before serving,
/// earliest due first (docs/sql.md "Semantics", Claim): with 2,500 timers due at
/// once, `max => 1` promotes 1,000, the next claim of the same session the
/// next 1,000, and `queue_reap` the last 500; `max => 1500` promotes 1,500.
#[test]
fn a_claim_promotes_at_most_max_or_1000_due_timers() {
    const GROUP: usize = 500;
    const GROUPS: usize = 5;
    let cluster = Cluster::shared();
    let mut su = cluster.connect();
    let mut p = cluster.connect_as(PRODUCER);
    let mut w = cluster.connect_as(WORKER);
    let mut admin = cluster.connect_as(ADMIN);
    let one = unique_queue("inline_bound");
    let many = unique_queue("inline_bound_max");

    // Five batches of 500 per queue, each statement with its own due time,
    // the later batches due first (1.0 s to 2.0 s): the earliest-due are
    // not the lowest ids.
    let delays = [
        "2 seconds",
        "1.75 seconds",
        "1.5 seconds",
        "1.25 seconds",
        "1 second",
    ];
    for queue in [&one, &many] {
        for (g, delay) in delays.iter().enumerate() {
            let payloads: Vec<Value> = (0..GROUP).map(|i| json!({ "g": g, "i": i })).collect();
            let ids: Vec<i64> = p
                .query(
                    "SELECT aedb_queue.queue_enqueue_batch($1::text, $2::jsonb[], \
                     delay => $3::text::interval)",
                    &[queue, &payloads, delay],
                )
                .unwrap_or_else(|e| panic!("queue_enqueue_batch: {}", describe(&e)))
                .iter()
                .map(|r| r.get(0))
                .collect();
            assert_eq!(ids.len(), GROUP);
        }
    }
    // The timers of each queue by due time: five groups of 500 (one per
    // statement), earliest first.
    let by_due = |su: &mut Client, queue: &str| -> Vec<Vec<i64>> {
        su.query(
            "SELECT array_agg(task_id ORDER BY task_id) FROM aedb_queue.task \
             WHERE queue = $1 GROUP BY not_before ORDER BY not_before",
            &[&queue],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    let groups_one = by_due(&mut su, &one);
    let groups_many = by_due(&mut su, &many);
    for groups in [&groups_one, &groups_many] {
        assert_eq!(
            groups.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![GROUP; GROUPS],
            "timers by due time"
        );
    }
    let first_due = |groups: &[Vec<i64>], n: usize| -> Vec<i64> {
        let mut ids: Vec<i64> = groups[..n].concat();
        ids.sort();
        ids
    };
    assert_eq!(state_counts(&mut su, &one), counts(&[("scheduled", 2500)]));

    let due: SystemTime = su
        .query_one(
            "SELECT max(not_before) FROM aedb_queue.task WHERE queue = ANY($1::text[])",
            &[&vec![one.clone(), many.clone()]],
        )
        .unwrap()
        .get(0);
    sleep_until_server_time(&mut su, due, Duration::from_millis(300));
    assert_eq!(
        state_counts(&mut su, &one),
        counts(&[("scheduled", 2500)]),
        "nothing promotes timers but claims and reaps"
    );

    // First claim: 1,000 promoted (the two earliest-due groups), one served.
    let got = claim(&mut w, &one, "w", "30 seconds", 1);
    assert_eq!(
        got.len(),
        1,
        "claimed {got:?}; states {:?}",
        state_counts(&mut su, &one)
    );
    assert_eq!(
        state_counts(&mut su, &one),
        counts(&[("in_flight", 1), ("ready", 999), ("scheduled", 1500)]),
        "after the first claim"
    );
    let promoted = promoted_ids(&mut su, &one);
    assert_eq!(
        promoted,
        first_due(&groups_one, 2),
        "the earliest-due 1,000"
    );
    assert_eq!(
        got[0].task_id, promoted[0],
        "served in id order once promoted"
    );

    // Second claim, same session: the next 1,000.
    let got = claim(&mut w, &one, "w", "30 seconds", 1);
    assert_eq!(
        got.len(),
        1,
        "claimed {got:?}; states {:?}",
        state_counts(&mut su, &one)
    );
    assert_eq!(
        state_counts(&mut su, &one),
        counts(&[("in_flight", 2), ("ready", 1998), ("scheduled", 500)]),
        "after the second claim"
    );
    assert_eq!(promoted_ids(&mut su, &one), first_due(&groups_one, 4));

    // The reaper takes the rest.
    assert_eq!(
        reap(&mut admin, Some(&one)),
        Reaped {
            promoted: 500,
            reclaimed: 0,
            dead_lettered: 0,
            fired: 0
        }
    );
    assert_eq!(
        state_counts(&mut su, &one),
        counts(&[("in_flight", 2), ("ready", 2498)])
    );

    // max above 1,000: max timers promoted, and all of them served.
    let got = claim(&mut w, &many, "w", "30 seconds", 1500);
    assert_eq!(got.len(), 1500);
    assert_eq!(
        state_counts(&mut su, &many),
        counts(&[("in_flight", 1500), ("scheduled", 1000)]),
        "after a claim with max => 1500"
    );
    assert_eq!(promoted_ids(&mut su, &many), first_due(&groups_many, 3));
}
