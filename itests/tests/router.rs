//! The queue API through the PL/Proxy router over three shards
//! (docs/scale-out.md; harness `src/shards.rs`), as the application roles,
//! over TCP on loopback:
//!
//! - every call on a task goes to the shard its id names, and changes
//!   nothing on the others (each shard's rows compared before and after);
//! - 8 workers drain 3,000 tasks through the router: each completed exactly
//!   once (in-memory ledger of every hand-out and settle, and each shard's
//!   kept completions), every shard took a share, nothing left;
//! - the same drain with one shard killed (`pg_ctl stop -m immediate`) and
//!   restarted 3 s later: the others go on meanwhile, the down shard's
//!   settles answer 08006, and at the end nothing is lost and no
//!   acknowledged completion is repeated;
//! - a down shard: keyed enqueues to it fail with 08006, unkeyed ones go
//!   elsewhere, claims pass it over, reads leave it out with a WARNING,
//!   operator calls report it in its row; all of it works again after the
//!   restart.

use std::collections::{HashMap, HashSet};
use std::thread;
use std::time::{Duration, Instant};

use aedb_queue_itests::shards::calls::*;
use aedb_queue_itests::shards::drain::{self, kept_completions, Plan, Settle, Settled};
use aedb_queue_itests::shards::{shard_of, Shards};
use aedb_queue_itests::*;

const SHARDS: usize = 3;
/// Long enough that no lease runs out by itself in the routing tests.
const LONG_LEASE: &str = "5 minutes";

/// A shard key per shard, found by asking the router: keys enqueued into
/// `probe` (a queue of its own) until each shard has one.
fn key_per_shard(set: &Shards, producer: &mut Client, probe: &str) -> HashMap<i32, String> {
    let mut keys = HashMap::new();
    for k in 0..200 {
        let key = format!("key-{k}");
        let id = try_enqueue_keyed(producer, probe, &json!({ "probe": k }), Some(&key))
            .unwrap_or_else(|e| panic!("keyed enqueue: {}", describe(&e)));
        // The same key again: the same shard.
        let again = try_enqueue_keyed(producer, probe, &json!({ "probe": k }), Some(&key)).unwrap();
        assert_eq!(
            shard_of(again),
            shard_of(id),
            "key {key} went to two shards"
        );
        keys.entry(shard_of(id)).or_insert(key);
        if keys.len() == SHARDS {
            break;
        }
    }
    let mut numbers: Vec<i32> = keys.keys().copied().collect();
    numbers.sort();
    assert_eq!(numbers, set.numbers(), "200 keys did not reach every shard");
    keys
}

/// Asserts that the shards in `changed`, and only they, hold other rows of
/// `queues` than `before`.
fn assert_changed(set: &Shards, queues: &[&str], before: &[String], changed: &[i32], what: &str) {
    let after = set.snapshot(queues);
    for s in set.numbers() {
        let i = s as usize - 1;
        if changed.contains(&s) {
            assert_ne!(before[i], after[i], "{what}: nothing changed on shard {s}");
        } else {
            assert_eq!(
                before[i], after[i],
                "{what}: shard {s} changed, though no task of it was named"
            );
        }
    }
}

/// A claim per shard through the router (one session's turn takes each
/// shard once), each checked on its shard: in flight under the token the
/// router returned, nothing else changed anywhere. Ordered by shard.
fn claim_round(
    set: &Shards,
    worker: &mut Client,
    direct: &mut HashMap<i32, Client>,
    queues: &[&str],
) -> Vec<Claimed> {
    let mut round = Vec::new();
    for _ in 0..SHARDS {
        let before = set.snapshot(queues);
        let t = claim_one(worker, queues[0], "router-w", LONG_LEASE).expect("a ready task");
        let s = shard_of(t.task_id);
        assert_changed(set, queues, &before, &[s], "claim");
        let row = get(direct.get_mut(&s).unwrap(), queues[0], t.task_id)
            .expect("the claimed task on its shard");
        assert_eq!(
            (
                row.state.as_str(),
                row.owner_id.as_deref(),
                row.fencing_token
            ),
            ("in_flight", Some("router-w"), Some(t.fencing_token)),
            "task {} on shard {s} after the claim",
            t.task_id
        );
        round.push(t);
    }
    round.sort_by_key(|t| shard_of(t.task_id));
    let shards: Vec<i32> = round.iter().map(|t| shard_of(t.task_id)).collect();
    assert_eq!(
        shards,
        set.numbers(),
        "one session's claims did not take the shards in turn"
    );
    round
}

#[test]
fn every_call_goes_to_the_shard_its_task_id_names() {
    let set = Shards::start(SHARDS);
    let (q, next) = ("routed", "routed_next");
    let queues = [q, next];
    let mut producer = set.router(PRODUCER);
    let mut worker = set.router(WORKER);
    let mut service = set.router(SERVICE);
    let mut admin = set.router(ADMIN);
    let mut direct: HashMap<i32, Client> = set
        .numbers()
        .into_iter()
        .map(|s| (s, set.shard(s, WORKER)))
        .collect();
    let keys = key_per_shard(&set, &mut producer, "probe");

    // Enqueue by shard key: the key's shard only.
    for s in set.numbers() {
        for n in 0..8 {
            let before = set.snapshot(&queues);
            let payload = json!({ "shard": s, "n": n });
            let id = try_enqueue_keyed(&mut producer, q, &payload, Some(&keys[&s])).unwrap();
            assert_eq!(
                shard_of(id),
                s,
                "a task of key {} on another shard",
                keys[&s]
            );
            assert_changed(&set, &queues, &before, &[s], "enqueue");
            let row = get(direct.get_mut(&s).unwrap(), q, id).expect("the task on its shard");
            assert_eq!((row.state.as_str(), row.payload), ("ready", Some(payload)));
        }
    }

    // Heartbeat and get, on a task of each shard.
    for t in claim_round(&set, &mut worker, &mut direct, &queues) {
        let s = shard_of(t.task_id);
        let d = direct.get_mut(&s).unwrap();
        let before = set.snapshot(&queues);
        let progress = json!({ "half": s });
        assert_eq!(
            heartbeat(
                &mut worker,
                q,
                t.task_id,
                t.fencing_token,
                "10 minutes",
                Some(&progress)
            ),
            Outcome::Applied
        );
        assert_changed(&set, &queues, &before, &[s], "heartbeat");
        let row = get(d, q, t.task_id).unwrap();
        assert_eq!(row.progress, Some(progress));
        assert!(
            row.lease_deadline.unwrap() > t.lease_deadline,
            "heartbeat did not extend the lease"
        );
        assert_eq!(
            get(&mut worker, q, t.task_id),
            Some(row),
            "get through the router"
        );

        // Fail, and its errors.
        let before = set.snapshot(&queues);
        let error = format!("boom on {s}");
        let opts = FailOpts {
            retry_in: Some("0".into()),
            dead_letter: None,
        };
        assert_eq!(
            fail_with(&mut worker, q, t.task_id, t.fencing_token, &error, &opts),
            Outcome::Applied
        );
        assert_changed(&set, &queues, &before, &[s], "fail");
        let row = get(d, q, t.task_id).unwrap();
        assert_eq!(
            (row.state.as_str(), row.last_error.as_deref()),
            ("ready", Some(error.as_str()))
        );
        let routed = try_errors(&mut worker, q, t.task_id).unwrap();
        assert_eq!(
            routed,
            vec![(1, error.clone())],
            "errors through the router"
        );
        assert_eq!(routed, try_errors(d, q, t.task_id).unwrap());
    }

    // Release.
    for t in claim_round(&set, &mut worker, &mut direct, &queues) {
        let s = shard_of(t.task_id);
        let before = set.snapshot(&queues);
        assert_eq!(
            try_release(&mut worker, q, t.task_id, t.fencing_token).unwrap(),
            Outcome::Applied
        );
        assert_changed(&set, &queues, &before, &[s], "release");
        let row = get(direct.get_mut(&s).unwrap(), q, t.task_id).unwrap();
        assert_eq!((row.state.as_str(), row.owner_id), ("ready", None));
    }

    // Complete with a follow-up: the follow-up is made on the same shard.
    for t in claim_round(&set, &mut service, &mut direct, &queues) {
        let s = shard_of(t.task_id);
        let before = set.snapshot(&queues);
        let opts = CompleteOpts {
            result: Some(json!({ "done": s })),
            follow_ups: Some(json!([{ "queue": next, "payload": { "after": t.task_id } }])),
            strict: false,
        };
        assert_eq!(
            try_complete_with(&mut service, q, t.task_id, t.fencing_token, &opts).unwrap(),
            Outcome::Applied
        );
        assert_changed(&set, &queues, &before, &[s], "complete with follow-ups");
        let d = direct.get_mut(&s).unwrap();
        assert!(
            get(d, q, t.task_id).is_none(),
            "the completed task is still on shard {s}"
        );
        let made: Vec<Task> = all_tasks(d, next)
            .into_iter()
            .filter(|f| f.payload == Some(json!({ "after": t.task_id })))
            .collect();
        assert_eq!(
            made.len(),
            1,
            "the follow-up of task {} on shard {s}",
            t.task_id
        );
        assert_eq!(
            shard_of(made[0].task_id),
            s,
            "the follow-up's id names another shard"
        );
    }

    // Cancel (an admin's call).
    for t in claim_round(&set, &mut worker, &mut direct, &queues) {
        let s = shard_of(t.task_id);
        let before = set.snapshot(&queues);
        assert!(
            cancel(&mut admin, q, t.task_id),
            "cancel through the router"
        );
        assert_changed(&set, &queues, &before, &[s], "cancel");
        assert!(get(direct.get_mut(&s).unwrap(), q, t.task_id).is_none());
    }

    // A batch across the shards: each shard settles its own; strict across
    // shards is refused (22023) and changes nothing.
    let batch: Vec<(i64, i64)> = claim_round(&set, &mut worker, &mut direct, &queues)
        .iter()
        .map(|t| (t.task_id, t.fencing_token))
        .collect();
    let before = set.snapshot(&queues);
    let e = try_complete_batch(&mut worker, q, &batch, true).expect_err("strict across shards");
    assert_eq!(sqlstate(&e).as_deref(), Some("22023"), "{}", describe(&e));
    assert!(describe(&e).contains("strict"), "{}", describe(&e));
    assert_changed(&set, &queues, &before, &[], "a refused strict batch");
    let mut want: Vec<(i64, Outcome)> = batch.iter().map(|t| (t.0, Outcome::Applied)).collect();
    want.sort_by_key(|w| w.0);
    assert_eq!(
        try_complete_batch(&mut worker, q, &batch, false).unwrap(),
        want
    );
    assert_changed(
        &set,
        &queues,
        &before,
        &set.numbers(),
        "a batch across shards",
    );
    for (id, _) in &batch {
        assert!(
            get(direct.get_mut(&shard_of(*id)).unwrap(), q, *id).is_none(),
            "task {id} not completed"
        );
    }

    // Settle and claim: both on the held task's shard.
    for t in claim_round(&set, &mut worker, &mut direct, &queues) {
        let s = shard_of(t.task_id);
        let before = set.snapshot(&queues);
        let (settled, got) = try_complete_and_claim(
            &mut worker,
            q,
            "router-w",
            (t.task_id, t.fencing_token),
            LONG_LEASE,
            1,
            false,
        )
        .unwrap();
        assert_eq!((settled, got.len()), (Outcome::Applied, 1));
        assert_eq!(
            shard_of(got[0].task_id),
            s,
            "complete_and_claim claimed on another shard"
        );
        assert_changed(&set, &queues, &before, &[s], "complete_and_claim");
        let d = direct.get_mut(&s).unwrap();
        assert!(get(d, q, t.task_id).is_none());
        assert_eq!(
            get(d, q, got[0].task_id).unwrap().fencing_token,
            Some(got[0].fencing_token)
        );

        let held = &got[0];
        let before = set.snapshot(&queues);
        let error = format!("again on {s}");
        let (settled, again) = try_fail_and_claim(
            &mut worker,
            q,
            "router-w",
            (held.task_id, held.fencing_token),
            &error,
            LONG_LEASE,
            1,
        )
        .unwrap();
        assert_eq!((settled, again.len()), (Outcome::Applied, 1));
        assert_eq!(
            shard_of(again[0].task_id),
            s,
            "fail_and_claim claimed on another shard"
        );
        assert_changed(&set, &queues, &before, &[s], "fail_and_claim");
        assert_eq!(
            try_errors(d, q, held.task_id)
                .unwrap()
                .last()
                .map(|e| e.1.clone()),
            Some(error)
        );
        let row = get(d, q, again[0].task_id).unwrap();
        assert_eq!(
            (row.state.as_str(), row.fencing_token),
            ("in_flight", Some(again[0].fencing_token))
        );
    }

    // A held task's shard with nothing left to hand out: the claim half goes
    // on to another shard; the settle stays on the first.
    let lone = "routed_lone";
    let (a, b) = (set.numbers()[0], set.numbers()[1]);
    try_enqueue_keyed(&mut producer, lone, &json!({ "on": a }), Some(&keys[&a])).unwrap();
    try_enqueue_keyed(&mut producer, lone, &json!({ "on": b }), Some(&keys[&b])).unwrap();
    let t = claim_one(&mut worker, lone, "router-w", LONG_LEASE).unwrap();
    let before = set.snapshot(&[lone]);
    let (settled, got) = try_complete_and_claim(
        &mut worker,
        lone,
        "router-w",
        (t.task_id, t.fencing_token),
        LONG_LEASE,
        1,
        false,
    )
    .unwrap();
    assert_eq!((settled, got.len()), (Outcome::Applied, 1));
    assert_ne!(
        shard_of(got[0].task_id),
        shard_of(t.task_id),
        "the claim did not move on"
    );
    assert_changed(
        &set,
        &[lone],
        &before,
        &[a, b],
        "complete_and_claim with an empty shard",
    );
}

/// The drain's common checks: every enqueued task completed exactly once,
/// on the shard its id names, under the token of the completion the router
/// acknowledged (or, for a task whose only acknowledgement was lost with
/// its shard, of that uncertain completion), every shard took a share, and
/// no shard holds anything of the queue. Returns the uncertain tasks.
fn assert_each_completed_once(set: &Shards, queue: &str, run: &drain::Run) -> Vec<i64> {
    assert!(!run.hit_bound, "the drain did not end within its bound");
    let settles = run.ledger.settles();
    let mut applied: HashMap<i64, Vec<&Settle>> = HashMap::new();
    for s in settles.iter().filter(|s| s.result == Settled::Applied) {
        applied.entry(s.task_id).or_default().push(s);
    }
    let twice: Vec<_> = applied
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .take(5)
        .collect();
    assert!(
        twice.is_empty(),
        "completions acknowledged twice: {twice:?}"
    );

    let kept = kept_completions(set, queue);
    let mut lost = Vec::new();
    let mut uncertain = Vec::new();
    for id in run.enqueued.keys() {
        let Some(&(shard, token)) = kept.get(id) else {
            lost.push(*id);
            continue;
        };
        assert_eq!(shard, shard_of(*id), "task {id} completed on shard {shard}");
        match applied.get(id).map(Vec::as_slice) {
            Some([one]) => assert_eq!(
                one.token, token,
                "task {id}: the router acknowledged its completion under token {}, but it was completed under {token}",
                one.token
            ),
            _ => {
                assert!(
                    settles.iter().any(|s| s.task_id == *id
                        && s.token == token
                        && matches!(s.result, Settled::Unavailable(_))),
                    "task {id} completed under token {token} without any worker's completion with it"
                );
                uncertain.push(*id);
            }
        }
    }
    assert!(
        lost.is_empty(),
        "{} tasks lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let unknown: Vec<_> = kept
        .keys()
        .filter(|id| !run.enqueued.contains_key(id))
        .take(5)
        .collect();
    assert!(
        unknown.is_empty(),
        "completed tasks nobody enqueued: {unknown:?}"
    );

    for s in set.numbers() {
        assert_eq!(
            set.tasks_on(s, queue),
            0,
            "shard {s} still holds tasks of {queue}"
        );
        let share = kept.values().filter(|(k, _)| *k == s).count();
        assert!(share > 0, "shard {s} took no share of the work");
    }
    let shares: Vec<usize> = set
        .numbers()
        .iter()
        .map(|s| kept.values().filter(|(k, _)| k == s).count())
        .collect();
    eprintln!(
        "{queue}: {} tasks in {:?}, per shard {shares:?}",
        run.enqueued.len(),
        run.elapsed
    );
    uncertain
}

/// Kept completions and a generous attempt budget on every shard, set
/// through the router (an operator call: one row per shard).
fn configure(set: &Shards, queue: &str) {
    let rows = configure_everywhere(&mut set.router(ADMIN), queue, 50, "1 hour");
    let want: Vec<(i32, Option<String>)> = set.numbers().into_iter().map(|s| (s, None)).collect();
    assert_eq!(rows, want, "queue_configure through the router");
}

#[test]
fn eight_workers_drain_three_shards_through_the_router_exactly_once() {
    let set = Shards::start(SHARDS);
    let queue = "router_drain";
    configure(&set, queue);
    let plan = Plan {
        total: 3000,
        preloaded: 1500,
        workers: 8,
        lease: "10 minutes",
        bound: Duration::from_secs(45),
    };
    let run = drain::run(&set, queue, &plan, |_| {});
    assert_each_completed_once(&set, queue, &run);

    // No lease can have run out: each task was handed out once, with its
    // own payload, and every settle and claim went through.
    let mut times: HashMap<i64, usize> = HashMap::new();
    for h in run.ledger.hand_outs() {
        *times.entry(h.task_id).or_default() += 1;
        let n = run
            .enqueued
            .get(&h.task_id)
            .unwrap_or_else(|| panic!("claimed unknown task {}", h.task_id));
        assert_eq!(
            h.payload,
            Some(json!({ "n": n })),
            "task {} carries another task's payload",
            h.task_id
        );
        assert_eq!(
            h.attempts, 1,
            "task {} handed out on attempt {}",
            h.task_id, h.attempts
        );
    }
    assert_eq!(times.len(), plan.total, "not every task was handed out");
    assert!(
        times.values().all(|&k| k == 1),
        "a task was handed out twice"
    );
    let not_applied: Vec<_> = run
        .ledger
        .settles()
        .into_iter()
        .filter(|s| s.result != Settled::Applied)
        .take(5)
        .collect();
    assert!(
        not_applied.is_empty(),
        "settles not applied: {not_applied:?}"
    );
    assert_eq!(run.ledger.claim_errors(), Vec::<String>::new());
    let mut per_worker = vec![0; plan.workers];
    for h in run.ledger.hand_outs() {
        per_worker[h.worker] += 1;
    }
    eprintln!("tasks per worker: {per_worker:?}");
}

#[test]
fn a_shard_killed_mid_drain_and_restarted_loses_nothing_and_completes_nothing_twice() {
    let set = Shards::start(SHARDS);
    let queue = "router_killed";
    let down = 2;
    configure(&set, queue);
    // A short lease: the killed shard's tasks in flight come back soon after
    // it does. Most tasks enqueued up front: the kill waits for the
    // producers, and the drain must be far from done then.
    let plan = Plan {
        total: 3000,
        preloaded: 2700,
        workers: 8,
        lease: "2 seconds",
        bound: Duration::from_secs(50),
    };
    let holder = plan.workers; // the ledger's worker number of this thread
    let mut outage = None;
    let run = drain::run(&set, queue, &plan, |ledger| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while ledger.applied() < plan.total / 5 {
            assert!(
                Instant::now() < deadline,
                "the drain made no progress before the kill"
            );
            thread::sleep(Duration::from_millis(10));
        }
        // Hold a task of the shard about to go, as a worker would.
        let mut c = set.router(WORKER);
        let held = (0..30)
            .find_map(|_| {
                let t = claim_one(&mut c, queue, "holder", plan.lease)?;
                ledger.handed_out(holder, &t);
                if shard_of(t.task_id) == down {
                    return Some(t);
                }
                assert!(ledger.complete(&mut c, queue, holder, t.task_id, t.fencing_token));
                None
            })
            .expect("no task of the shard to kill was handed out");
        assert!(
            set.tasks_on(down, queue) > 1,
            "shard {down} has no work left to come back to"
        );
        let live_left: i64 = set
            .numbers()
            .iter()
            .filter(|&&s| s != down)
            .map(|&s| set.tasks_on(s, queue))
            .sum();

        // Taken before the stop: a worker's call can fail while it stops.
        let killed = Instant::now();
        set.stop_shard(down);
        let at_kill = ledger.applied();
        assert!(
            !ledger.complete(&mut c, queue, holder, held.task_id, held.fencing_token),
            "a completion on the stopped shard was answered"
        );
        thread::sleep(Duration::from_secs(3));
        let while_down = ledger.applied() - at_kill;
        set.start_shard(down);
        let restarted = Instant::now();
        // The held task, settled again once its shard is back.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ledger.complete(&mut c, queue, holder, held.task_id, held.fencing_token) {
            assert!(
                Instant::now() < deadline,
                "shard {down} did not answer after its restart"
            );
            thread::sleep(Duration::from_millis(200));
        }
        outage = Some((killed, restarted, while_down, live_left, held.task_id));
    });
    let (killed, restarted, while_down, live_left, held) = outage.expect("the fault ran");
    let uncertain = assert_each_completed_once(&set, queue, &run);

    // The other shards were drained while it was down (3 s: at 35 tasks a
    // second at least, or all they held).
    assert!(
        while_down >= live_left.min(100) as usize && while_down > 0,
        "{while_down} completions through the router while shard {down} was down, {live_left} tasks on the others"
    );
    // Every settle that failed was one of the down shard's tasks, answered
    // 08006 'shard N is unavailable', while it was down or coming back.
    let settles = run.ledger.settles();
    let failed: Vec<&Settle> = settles
        .iter()
        .filter(|s| matches!(s.result, Settled::Failed(_)))
        .collect();
    assert!(
        failed.is_empty(),
        "settles failed otherwise than 08006: {:?}",
        &failed[..failed.len().min(5)]
    );
    let unavailable: Vec<&Settle> = settles
        .iter()
        .filter(|s| matches!(s.result, Settled::Unavailable(_)))
        .collect();
    assert!(
        unavailable.iter().any(|s| s.task_id == held),
        "the held task's settle did not fail"
    );
    for s in &unavailable {
        assert_eq!(
            shard_of(s.task_id),
            down,
            "a settle on a live shard failed: {s:?}"
        );
        assert_eq!(
            s.result,
            Settled::Unavailable(format!("shard {down} is unavailable")),
            "{s:?}"
        );
        assert!(s.at >= killed, "a settle failed before the kill: {s:?}");
    }
    assert_eq!(
        run.ledger.claim_errors(),
        Vec::<String>::new(),
        "claims did not pass over the down shard"
    );
    // Tasks handed out again: their lease ran out (the down shard's in
    // flight at the kill), each still completed once (checked above).
    let mut times: HashMap<i64, usize> = HashMap::new();
    for h in run.ledger.hand_outs() {
        *times.entry(h.task_id).or_default() += 1;
    }
    let again: Vec<i64> = times
        .iter()
        .filter(|(_, &k)| k > 1)
        .map(|(id, _)| *id)
        .collect();
    eprintln!(
        "shard {down} down {:?}: {while_down} completions meanwhile ({live_left} tasks on the others at the kill), \
         {} settles answered 08006, {} tasks uncertain, {} handed out again",
        restarted - killed,
        unavailable.len(),
        uncertain.len(),
        again.len()
    );
}

#[test]
fn a_down_shard_is_passed_over_left_out_and_reported() {
    let set = Shards::start(SHARDS);
    let (q, paused) = ("outage", "outage_paused");
    let down = 2;
    let live: Vec<i32> = set.numbers().into_iter().filter(|&s| s != down).collect();
    let mut producer = set.router(PRODUCER);
    let mut worker = set.router(WORKER);
    let mut admin = set.router(ADMIN);
    let keys = key_per_shard(&set, &mut producer, "probe");
    for s in set.numbers() {
        for n in 0..2 {
            try_enqueue_keyed(
                &mut producer,
                q,
                &json!({ "shard": s, "n": n }),
                Some(&keys[&s]),
            )
            .unwrap();
        }
    }
    // A task of the shard to stop, held across the outage.
    let held = (0..SHARDS)
        .find_map(|_| {
            claim_one(&mut worker, q, "w", LONG_LEASE).filter(|t| shard_of(t.task_id) == down)
        })
        .expect("a task of the shard to stop");

    set.stop_shard(down);
    let unavailable = format!("shard {down} is unavailable");
    let is_unavailable = |e: &postgres::Error| {
        sqlstate(e).as_deref() == Some("08006")
            && e.as_db_error().map(|d| d.message()) == Some(unavailable.as_str())
    };
    // Its task: neither settled nor read.
    let e = try_complete_with(
        &mut worker,
        q,
        held.task_id,
        held.fencing_token,
        &CompleteOpts::default(),
    )
    .unwrap_err();
    assert!(is_unavailable(&e), "{}", describe(&e));
    let e = try_errors(&mut worker, q, held.task_id).unwrap_err();
    assert!(is_unavailable(&e), "{}", describe(&e));
    // A key of the down shard cannot go anywhere else; another key goes on.
    let e = try_enqueue_keyed(
        &mut producer,
        q,
        &json!({ "late": down }),
        Some(&keys[&down]),
    )
    .unwrap_err();
    assert!(is_unavailable(&e), "keyed enqueue: {}", describe(&e));
    let on_live = try_enqueue_keyed(
        &mut producer,
        q,
        &json!({ "late": live[0] }),
        Some(&keys[&live[0]]),
    )
    .unwrap();
    assert_eq!(shard_of(on_live), live[0]);
    // Unkeyed tasks go to the shards that are up, each enqueue answered.
    for n in 0..SHARDS * 2 {
        let id = try_enqueue_keyed(&mut producer, q, &json!({ "unkeyed": n }), None)
            .unwrap_or_else(|e| panic!("unkeyed enqueue with a shard down: {}", describe(&e)));
        assert_ne!(shard_of(id), down, "an unkeyed task went to the down shard");
    }

    // Claims pass the down shard over: everything ready on the others, then
    // nothing (not an error).
    let mut ready_on_live: HashSet<i64> = HashSet::new();
    for &s in &live {
        ready_on_live.extend(
            list(&mut set.shard(s, WORKER), q, Some("ready"), 1000)
                .iter()
                .map(|t| t.task_id),
        );
    }
    let mut claimed = HashSet::new();
    while let Some(t) = claim_one(&mut worker, q, "w", LONG_LEASE) {
        assert!(
            claimed.insert(t.task_id) && claimed.len() <= ready_on_live.len(),
            "claimed {} again",
            t.task_id
        );
    }
    assert_eq!(claimed, ready_on_live, "claims with a shard down");

    // Reads over every shard leave it out, with a WARNING naming it.
    let (mut reader, notices) = set.router_with_notices(WORKER);
    let listed: HashSet<i64> = all_tasks(&mut reader, q)
        .iter()
        .map(|t| t.task_id)
        .collect();
    let mut on_live: HashSet<i64> = HashSet::new();
    for &s in &live {
        on_live.extend(
            all_tasks(&mut set.shard(s, WORKER), q)
                .iter()
                .map(|t| t.task_id),
        );
    }
    assert_eq!(listed, on_live, "queue_list with a shard down");
    let warning = format!("WARNING: shard {down} is unavailable: left out");
    assert_eq!(
        notices.lock().unwrap().drain(..).collect::<Vec<_>>(),
        vec![warning.clone()]
    );
    let mut in_flight_on_live = 0;
    for &s in &live {
        in_flight_on_live +=
            list(&mut set.shard(s, WORKER), q, Some("in_flight"), 1000).len() as i64;
    }
    let in_flight: i64 = reader
        .query_one(
            "SELECT sum(in_flight)::int8 FROM aedb_queue.queue_overview(1000, $1)",
            &[&q],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        in_flight, in_flight_on_live,
        "queue_overview with a shard down"
    );
    assert_eq!(
        notices.lock().unwrap().drain(..).collect::<Vec<_>>(),
        vec![warning]
    );

    // An operator call reports the down shard in its row and applies on
    // the others.
    let rows = try_operator_rows(&mut admin, "queue_pause($1)", paused).unwrap();
    assert_eq!(rows.len(), SHARDS);
    for r in &rows {
        if r.shard == down {
            assert_eq!(
                (
                    r.result.as_deref(),
                    r.error_code.as_deref(),
                    r.error.as_deref()
                ),
                (None, Some("08006"), Some(unavailable.as_str()))
            );
        } else {
            assert!(
                r.result.is_some() && r.error_code.is_none() && r.error.is_none(),
                "{r:?}"
            );
        }
    }
    for &s in &live {
        let p: bool = set
            .shard_su(s)
            .query_one(
                "SELECT paused FROM aedb_queue.queue WHERE name = $1",
                &[&paused],
            )
            .unwrap()
            .get(0);
        assert!(p, "queue_pause did not apply on shard {s}");
    }

    // Back: the same calls reach it.
    set.start_shard(down);
    assert_eq!(
        try_complete_with(
            &mut worker,
            q,
            held.task_id,
            held.fencing_token,
            &CompleteOpts::default()
        )
        .unwrap(),
        Outcome::Applied,
        "the held task after the restart"
    );
    let late = try_enqueue_keyed(
        &mut producer,
        q,
        &json!({ "late": down }),
        Some(&keys[&down]),
    )
    .unwrap();
    assert_eq!(shard_of(late), down);
    let t = claim_one(&mut worker, q, "w", LONG_LEASE).expect("the restarted shard's tasks");
    assert_eq!(shard_of(t.task_id), down);
    let listed = all_tasks(&mut reader, q);
    assert!(
        listed.iter().any(|t| t.task_id == late),
        "queue_list after the restart"
    );
    assert_eq!(
        notices.lock().unwrap().len(),
        0,
        "warnings after the restart: {:?}",
        notices.lock().unwrap()
    );
    let rows = try_operator_rows(&mut admin, "queue_resume($1)", paused).unwrap();
    assert!(rows.iter().all(|r| r.error_code.is_none()), "{rows:?}");
}

/// Tasks of `queue` ready on `shard`.
fn ready_on(set: &Shards, shard: i32, queue: &str) -> i64 {
    set.shard_su(shard)
        .query_one(
            "SELECT count(*) FROM aedb_queue.task WHERE queue = $1 AND state = 'ready'",
            &[&queue],
        )
        .unwrap()
        .get(0)
}

/// Workers looping on `queue_complete_and_claim` through the router with
/// `aedb_queue_router.max_stay = 3`: every few jobs a loop claims on
/// another shard first and completes its held task alone. Every task is
/// still completed exactly once (each completion acknowledged once, under
/// the token the loop held, and kept on its shard), the loops did move
/// between shards while their shard had work, and nothing is left.
#[test]
fn settle_and_claim_loops_move_between_shards_and_complete_each_task_once() {
    let set = Shards::start(SHARDS);
    let queue = "router_loops";
    configure(&set, queue);
    let mut producer = set.router(PRODUCER);
    let mut enqueued: HashSet<i64> = HashSet::new();
    for b in 0..15 {
        let payloads: Vec<Value> = (0..100).map(|i| json!({ "n": b * 100 + i })).collect();
        enqueued.extend(enqueue_batch(&mut producer, queue, &payloads));
    }
    let loops: Vec<(Vec<(i64, i64)>, usize)> = thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let set = &set;
                s.spawn(move || {
                    let mut c = set.router(WORKER);
                    c.batch_execute("SET aedb_queue_router.max_stay = 3")
                        .unwrap();
                    let owner = format!("loop-{w}");
                    let mut completed = Vec::new();
                    let mut moves_with_work_left = 0;
                    let Some(mut held) = claim_one(&mut c, queue, &owner, LONG_LEASE) else {
                        return (completed, 0);
                    };
                    loop {
                        let (settled, next) = try_complete_and_claim(
                            &mut c,
                            queue,
                            &owner,
                            (held.task_id, held.fencing_token),
                            LONG_LEASE,
                            1,
                            false,
                        )
                        .unwrap_or_else(|e| panic!("complete_and_claim: {}", describe(&e)));
                        assert_eq!(
                            settled,
                            Outcome::Applied,
                            "task {} held by {owner}",
                            held.task_id
                        );
                        completed.push((held.task_id, held.fencing_token));
                        let Some(t) = next.into_iter().next() else {
                            break;
                        };
                        let from = shard_of(held.task_id);
                        if shard_of(t.task_id) != from && ready_on(set, from, queue) > 0 {
                            moves_with_work_left += 1;
                        }
                        held = t;
                    }
                    (completed, moves_with_work_left)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|h| h.join().expect("a loop"))
            .collect()
    });

    let mut acknowledged: HashMap<i64, i64> = HashMap::new();
    for (id, token) in loops.iter().flat_map(|(done, _)| done) {
        assert!(
            acknowledged.insert(*id, *token).is_none(),
            "task {id} completed twice"
        );
    }
    let kept = kept_completions(&set, queue);
    let missing: Vec<_> = enqueued
        .iter()
        .filter(|id| !kept.contains_key(id))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "tasks never completed: {missing:?}");
    assert_eq!(
        kept.len(),
        enqueued.len(),
        "completed tasks nobody enqueued"
    );
    for (id, (shard, token)) in &kept {
        assert_eq!(
            *shard,
            shard_of(*id),
            "task {id} completed on shard {shard}"
        );
        assert_eq!(
            acknowledged.get(id),
            Some(token),
            "task {id}: kept under another token than acknowledged"
        );
    }
    for s in set.numbers() {
        assert_eq!(
            set.tasks_on(s, queue),
            0,
            "shard {s} still holds tasks of {queue}"
        );
    }
    let moves: usize = loops.iter().map(|(_, m)| m).sum();
    assert!(
        moves > 0,
        "no loop moved to another shard while its own still had ready tasks"
    );
    eprintln!(
        "{} tasks, moves while work was left: {moves}",
        enqueued.len()
    );
}
