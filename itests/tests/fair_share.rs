//! Fair share under concurrent workers (docs/flow-control.md, "Fair
//! share"): several worker sessions over TCP claim at once from a queue set
//! to `fair_share`, each keeping a ledger of what it claimed, and
//!
//! - the claims of every stretch share out by the keys' weights while every
//!   key has ready tasks, and no key waits behind another's backlog;
//! - each key's tasks are claimed in their enqueue order;
//! - nothing is lost and nothing is claimed twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use aedb_queue_itests::*;
use postgres::types::Type;

const WORKERS: usize = 4;
/// The bound on a whole run: a worker still claiming after it is stuck.
const RUN_BOUND: Duration = Duration::from_secs(240);

/// One claim of the ledger.
#[derive(Debug, Clone)]
struct Claim {
    /// The worker that claimed it.
    worker: usize,
    id: i64,
    key: String,
    attempts: i32,
}

/// A fair-share queue with `weights` set (keys not named weigh 1).
fn fair_queue(cluster: &Cluster, prefix: &str, weights: &[(&str, i32)]) -> String {
    let queue = unique_queue(prefix);
    let mut admin = cluster.connect_as(ADMIN);
    let on: bool = admin
        .query_one(
            "SELECT fair_share FROM aedb_queue.queue_configure($1::text, fair_share => true)",
            &[&queue],
        )
        .unwrap_or_else(|e| panic!("queue_configure: {}", describe(&e)))
        .get(0);
    assert!(on);
    for (key, weight) in weights {
        admin
            .query_one(
                "SELECT aedb_queue.queue_configure_fairness($1::text, $2::text, $3::int4)",
                &[&queue, key, weight],
            )
            .unwrap_or_else(|e| panic!("queue_configure_fairness: {}", describe(&e)));
    }
    queue
}

/// Enqueues `n` tasks of fairness key `key` in one batch; their ids in order.
fn enqueue_key(p: &mut Client, queue: &str, key: &str, n: usize) -> Vec<i64> {
    let payloads: Vec<Value> = (0..n).map(|i| json!({"key": key, "n": i})).collect();
    p.query_typed(
        "SELECT b.id::int8 FROM aedb_queue.queue_enqueue_batch($1::text, $2::jsonb[], \
         fairness_key => $3::text) WITH ORDINALITY AS b(id, ord) ORDER BY b.ord",
        &[
            (&queue, Type::TEXT),
            (&payloads, Type::JSONB_ARRAY),
            (&key, Type::TEXT),
        ],
    )
    .unwrap_or_else(|e| panic!("enqueue_batch {key}: {}", describe(&e)))
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Claims at most one task and completes it; the claim, if any.
fn claim_and_complete(c: &mut Client, queue: &str, worker: usize) -> Option<Claim> {
    let t = claim_one(c, queue, &format!("w{worker}"), "5 minutes")?;
    let key = t
        .payload
        .as_ref()
        .and_then(|p| p["key"].as_str())
        .expect("key in payload");
    let claim = Claim {
        worker,
        id: t.task_id,
        key: key.to_string(),
        attempts: t.attempts,
    };
    assert_eq!(
        complete(c, queue, t.task_id, t.fencing_token),
        Outcome::Applied
    );
    Some(claim)
}

/// Every enqueued task claimed exactly once, on its first attempt, and the
/// queue empty afterwards (seen by another session).
fn assert_each_claimed_once(
    su: &mut Client,
    queue: &str,
    enqueued: &BTreeMap<String, Vec<i64>>,
    claims: &[Claim],
) {
    let mut seen = BTreeSet::new();
    for c in claims {
        assert!(seen.insert(c.id), "task {} claimed twice", c.id);
        assert_eq!(
            c.attempts, 1,
            "task {} claimed on attempt {}",
            c.id, c.attempts
        );
        assert!(
            enqueued[&c.key].contains(&c.id),
            "task {} claimed as key {}",
            c.id,
            c.key
        );
    }
    let all: BTreeSet<i64> = enqueued.values().flatten().copied().collect();
    let lost: Vec<_> = all.difference(&seen).collect();
    assert!(lost.is_empty(), "never claimed: {lost:?}");
    let left: i64 = su
        .query_one(
            "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "tasks left in {queue}");
}

/// Each key's tasks are claimed in their enqueue order: `place` is each
/// claim's round.
fn assert_fifo_per_key(enqueued: &BTreeMap<String, Vec<i64>>, place: &BTreeMap<i64, usize>) {
    for (key, ids) in enqueued {
        for pair in ids.windows(2) {
            assert!(
                place[&pair[0]] <= place[&pair[1]],
                "key {key}: task {} claimed after task {} (places {} and {})",
                pair[0],
                pair[1],
                place[&pair[0]],
                place[&pair[1]]
            );
        }
    }
}

/// Workers claim in rounds: all start a claim together (a barrier), all
/// claims of a round end before the next starts. So the ledger's order is
/// exact between rounds (a round's claims are the lowest ready tasks, one
/// each, taken concurrently) and the shares can be checked tightly.
///
/// A big key's 300 tasks are enqueued first, then gold (weight 3, 150
/// tasks) and two keys of weight 1 (50 each): while all four have ready
/// tasks (about the first 300 claims) every stretch gives them 1 : 3 : 1 :
/// 1; first in, first out would give the first 300 claims to the big key.
#[test]
fn concurrent_claims_share_by_weight_while_every_key_waits() {
    let cluster = Cluster::shared();
    let weights: BTreeMap<&str, i64> = [("big", 1), ("gold", 3), ("k1", 1), ("k2", 1)].into();
    let queue = fair_queue(cluster, "fair_rounds", &[("gold", 3)]);
    let mut p = cluster.connect_as(PRODUCER);
    let mut enqueued = BTreeMap::new();
    for (key, n) in [("big", 300), ("gold", 150), ("k1", 50), ("k2", 50)] {
        enqueued.insert(key.to_string(), enqueue_key(&mut p, &queue, key, n));
    }

    let barrier = Barrier::new(WORKERS);
    let rounds: Mutex<Vec<Vec<Claim>>> = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|s| {
        for me in 0..WORKERS {
            let (barrier, rounds, queue) = (&barrier, &rounds, &queue);
            s.spawn(move || {
                let mut c = cluster.connect_as(WORKER);
                for round in 0.. {
                    assert!(start.elapsed() < RUN_BOUND, "worker {me} still claiming");
                    barrier.wait();
                    let got = claim_and_complete(&mut c, queue, me);
                    {
                        let mut r = rounds.lock().unwrap();
                        if r.len() <= round {
                            r.resize(round + 1, Vec::new());
                        }
                        r[round].extend(got);
                    }
                    // Every claim of the round is in the ledger: all
                    // workers see the same and stop together.
                    barrier.wait();
                    if rounds.lock().unwrap()[round].is_empty() {
                        break;
                    }
                }
            });
        }
    });
    let rounds = rounds.into_inner().unwrap();
    let claims: Vec<Claim> = rounds.iter().flatten().cloned().collect();
    assert_each_claimed_once(&mut cluster.connect(), &queue, &enqueued, &claims);
    let place: BTreeMap<i64, usize> = rounds
        .iter()
        .enumerate()
        .flat_map(|(r, cs)| cs.iter().map(move |c| (c.id, r)))
        .collect();
    assert_fifo_per_key(&enqueued, &place);
    assert_shares(&rounds, &weights, &enqueued);
}

/// While every key has tasks left: after each round, each key's claims so
/// far are within [`SHARE_SLACK`] of its weighted share of all claims, and
/// every key is claimed in every [`STARVE_WINDOW`] consecutive rounds.
fn assert_shares(
    rounds: &[Vec<Claim>],
    weights: &BTreeMap<&str, i64>,
    enqueued: &BTreeMap<String, Vec<i64>>,
) {
    /// Ties of virtual times and the round's 4 claims taken as one step.
    const SHARE_SLACK: f64 = 6.0;
    /// 4 rounds are 16 claims: a key of weight 1 in 6 is due 2 or 3 times.
    const STARVE_WINDOW: usize = 4;
    let total_weight: i64 = weights.values().sum();
    let mut so_far: BTreeMap<&str, usize> = weights.keys().map(|k| (*k, 0)).collect();
    let mut all = 0usize;
    let mut contested = 0;
    for (r, claims) in rounds.iter().enumerate() {
        for c in claims {
            *so_far.get_mut(c.key.as_str()).unwrap() += 1;
        }
        all += claims.len();
        if so_far.iter().any(|(k, n)| *n >= enqueued[*k].len()) {
            break; // a key ran out: the shares change from here
        }
        contested = r + 1;
        for (key, n) in &so_far {
            let share = (all as i64 * weights[key]) as f64 / total_weight as f64;
            assert!(
                (*n as f64 - share).abs() <= SHARE_SLACK,
                "after round {r} ({all} claims) key {key} had {n} claims, its share is {share:.1}: {so_far:?}"
            );
        }
    }
    assert!(
        contested * WORKERS >= 250,
        "the keys were contested for only {contested} rounds"
    );
    for window in rounds[..contested].windows(STARVE_WINDOW) {
        for key in weights.keys() {
            assert!(
                window.iter().flatten().any(|c| c.key == *key),
                "key {key} not claimed in {STARVE_WINDOW} rounds: {window:?}"
            );
        }
    }
}

/// Workers claim and complete as fast as they can, without rounds. While
/// they work through a big key's backlog, a newcomer key's tasks are
/// enqueued: they are claimed next to the backlog's head, not after it, and
/// nothing is lost or claimed twice.
#[test]
fn a_newcomer_key_is_served_at_once_among_free_running_workers() {
    let cluster = Cluster::shared();
    let queue = fair_queue(cluster, "fair_free", &[]);
    let mut p = cluster.connect_as(PRODUCER);
    let mut enqueued = BTreeMap::new();
    enqueued.insert(
        "big".to_string(),
        enqueue_key(&mut p, &queue, "big", BACKLOG),
    );

    let ledger: Mutex<Vec<Claim>> = Mutex::new(Vec::new());
    let all_enqueued = AtomicBool::new(false);
    let start = Instant::now();
    let mut claimed_at_commit = 0;
    std::thread::scope(|s| {
        for me in 0..WORKERS {
            let (ledger, all_enqueued, queue) = (&ledger, &all_enqueued, &queue);
            s.spawn(move || {
                let mut c = cluster.connect_as(WORKER);
                loop {
                    assert!(start.elapsed() < RUN_BOUND, "worker {me} still claiming");
                    // Read before the claim: an empty claim after it means done.
                    let last = all_enqueued.load(Ordering::SeqCst);
                    match claim_and_complete(&mut c, queue, me) {
                        Some(claim) => ledger.lock().unwrap().push(claim),
                        None if last => break,
                        None => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
        }
        // Once the workers are under way, the newcomer arrives.
        while ledger.lock().unwrap().len() < 40 {
            assert!(start.elapsed() < RUN_BOUND, "the workers claim nothing");
            std::thread::sleep(Duration::from_millis(5));
        }
        enqueued.insert("late".to_string(), enqueue_key(&mut p, &queue, "late", 3));
        claimed_at_commit = ledger.lock().unwrap().len();
        all_enqueued.store(true, Ordering::SeqCst);
    });
    let claims = ledger.into_inner().unwrap();
    assert_each_claimed_once(&mut cluster.connect(), &queue, &enqueued, &claims);
    // The ledger's order between workers is only as exact as the threads'
    // turns; each worker's own claims are in order: each starts after its
    // last ended, when every lower task of the key was taken or being taken.
    for worker in 0..WORKERS {
        let mut last: BTreeMap<&str, i64> = BTreeMap::new();
        for c in claims.iter().filter(|c| c.worker == worker) {
            let before = last.insert(&c.key, c.id).unwrap_or(0);
            assert!(
                before < c.id,
                "worker {worker} claimed {} of key {} after {before}",
                c.id,
                c.key
            );
        }
    }
    let place: BTreeMap<i64, usize> = claims.iter().enumerate().map(|(i, c)| (c.id, i)).collect();
    // Its 3 tasks go next to the backlog's head (3 turns, plus the claims
    // under way and a worker's late entry in the ledger); first in, first
    // out would put them after every big task.
    let last_late = enqueued["late"].iter().map(|id| place[id]).max().unwrap();
    assert!(
        claimed_at_commit + NEAR_THE_HEAD < BACKLOG,
        "the workers took {claimed_at_commit} tasks before the newcomer committed: nothing to show"
    );
    assert!(
        last_late <= claimed_at_commit + NEAR_THE_HEAD,
        "the newcomer's last task was claim {last_late}; {claimed_at_commit} were in the ledger \
         when it committed"
    );
}

/// The big key's backlog in the free-running test.
const BACKLOG: usize = 600;
/// How far behind the claims logged at its commit a newcomer's 3 tasks may
/// be claimed: 3 turns of the 2 keys, the workers' claims under way, and
/// generous room for a worker that logs late.
const NEAR_THE_HEAD: usize = 60;
