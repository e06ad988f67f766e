//! A queue drained through the router: producers enqueue (one per call and
//! in batches, no routing key, so the router spreads them over the shards)
//! while workers, each on its own router session as [`WORKER`], claim and
//! complete. Every hand-out and every settle attempt goes into an
//! in-memory [`Ledger`] with its task id, token and answer, from which the
//! tests prove what completed and how often.
//!
//! Through the router each call is its own transaction on its shard, so an
//! application's exactly-once proof is the router's answer: `applied`
//! means the completion committed on the shard. A settle that comes back
//! 08006 (the shard could not be reached, or went away during the call) is
//! uncertain: the shard may have committed it. The worker keeps it and
//! tries again now and then; once the shard is back the answer is
//! `applied` (nothing had committed and the lease was still its own) or
//! `lease_lost` (it had committed, or the lease ran out and another worker
//! took the task).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use rand::Rng;

use super::calls::try_claim;
use super::Shards;
use crate::{
    describe, enqueue_batch, json, produce_on, sqlstate, try_complete_with, Claimed, Client,
    CompleteOpts, Outcome, Value, PRODUCER, WORKER,
};

/// How a drain runs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Tasks in all, payload `{"n": 0..total}`.
    pub total: usize,
    /// Of these, enqueued before the workers start (batches of 100).
    pub preloaded: usize,
    pub workers: usize,
    pub lease: &'static str,
    /// Hard bound on the whole drain, so that it always ends by itself.
    pub bound: Duration,
}

/// The router's answer to one settle attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    Applied,
    LeaseLost,
    /// SQLSTATE 08006, with the message.
    Unavailable(String),
    /// Any other error: "SQLSTATE: message".
    Failed(String),
}

#[derive(Debug, Clone)]
pub struct Settle {
    pub task_id: i64,
    pub token: i64,
    pub worker: usize,
    pub result: Settled,
    pub at: Instant,
}

/// A task handed out by a claim.
#[derive(Debug, Clone)]
pub struct HandOut {
    pub task_id: i64,
    pub token: i64,
    pub attempts: i32,
    pub payload: Option<Value>,
    pub worker: usize,
}

/// Every hand-out, settle attempt and claim error of a drain.
#[derive(Default)]
pub struct Ledger {
    hand_outs: Mutex<Vec<HandOut>>,
    settles: Mutex<Vec<Settle>>,
    claim_errors: Mutex<Vec<String>>,
}

impl Ledger {
    pub fn hand_outs(&self) -> Vec<HandOut> {
        self.hand_outs.lock().unwrap().clone()
    }

    pub fn settles(&self) -> Vec<Settle> {
        self.settles.lock().unwrap().clone()
    }

    pub fn claim_errors(&self) -> Vec<String> {
        self.claim_errors.lock().unwrap().clone()
    }

    /// Completions the router acknowledged so far.
    pub fn applied(&self) -> usize {
        self.settles
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.result == Settled::Applied)
            .count()
    }

    pub fn handed_out(&self, worker: usize, t: &Claimed) {
        self.hand_outs.lock().unwrap().push(HandOut {
            task_id: t.task_id,
            token: t.fencing_token,
            attempts: t.attempts,
            payload: t.payload.clone(),
            worker,
        });
    }

    /// Completes `task_id` under `token` through `c` and records the
    /// answer. False when it was 08006, so the caller should try again.
    pub fn complete(
        &self,
        c: &mut Client,
        queue: &str,
        worker: usize,
        task_id: i64,
        token: i64,
    ) -> bool {
        let result = match try_complete_with(c, queue, task_id, token, &CompleteOpts::default()) {
            Ok(Outcome::Applied) => Settled::Applied,
            Ok(Outcome::LeaseLost) => Settled::LeaseLost,
            Err(e) if sqlstate(&e).as_deref() == Some("08006") => Settled::Unavailable(
                e.as_db_error()
                    .map(|d| d.message().to_string())
                    .unwrap_or_default(),
            ),
            Err(e) => Settled::Failed(describe(&e)),
        };
        let retry = matches!(result, Settled::Unavailable(_));
        self.settles.lock().unwrap().push(Settle {
            task_id,
            token,
            worker,
            result,
            at: Instant::now(),
        });
        !retry
    }
}

/// What a drain did.
pub struct Run {
    /// Every task enqueued: id -> its payload's n.
    pub enqueued: HashMap<i64, usize>,
    pub ledger: Ledger,
    /// Some worker was still going at the bound.
    pub hit_bound: bool,
    pub elapsed: Duration,
}

/// Drains `queue` through the router as `plan` says. `during` runs on the
/// calling thread once the producers are done, while the workers go on
/// (the fault of a test); then the drain waits until no shard holds a task
/// of `queue` and stops the workers once each has settled what it held.
pub fn run(shards: &Shards, queue: &str, plan: &Plan, during: impl FnOnce(&Ledger)) -> Run {
    let mut enqueued = HashMap::new();
    let mut producer = shards.router(PRODUCER);
    for start in (0..plan.preloaded).step_by(100) {
        let end = (start + 100).min(plan.preloaded);
        let payloads: Vec<Value> = (start..end).map(|n| json!({ "n": n })).collect();
        let ids = enqueue_batch(&mut producer, queue, &payloads);
        assert_eq!(
            ids.len(),
            end - start,
            "queue_enqueue_batch through the router"
        );
        enqueued.extend(ids.into_iter().zip(start..end));
    }

    let ledger = Ledger::default();
    let stop = AtomicBool::new(false);
    let abort = AtomicBool::new(false);
    let started = Instant::now();
    let bound = started + plan.bound;
    let rest = plan.total - plan.preloaded;
    let (produced, hit_bound) = thread::scope(|s| {
        let workers: Vec<_> = (0..plan.workers)
            .map(|w| {
                let flags = (&stop, &abort);
                let ledger = &ledger;
                s.spawn(move || work(shards, queue, plan.lease, w, ledger, flags, bound))
            })
            .collect();
        let producers: Vec<_> = [(0, rest / 2, false), (rest / 2, rest - rest / 2, true)]
            .into_iter()
            .map(|(from, count, batched)| {
                let first = plan.preloaded + from;
                s.spawn(move || produce(shards, queue, first, count, batched))
            })
            .collect();
        let produced: Vec<(i64, usize)> = producers
            .into_iter()
            .flat_map(|h| h.join().expect("producer panicked"))
            .collect();
        // A failing check in `during` ends the workers at once.
        let _abort_on_panic = AbortOnPanic(&abort);
        during(&ledger);
        wait_drained(shards, queue, bound);
        stop.store(true, Ordering::SeqCst);
        let hit_bound = workers
            .into_iter()
            .fold(false, |hit, h| h.join().expect("worker panicked") || hit);
        (produced, hit_bound)
    });
    let before = enqueued.len() + produced.len();
    enqueued.extend(produced);
    assert_eq!(
        enqueued.len(),
        before,
        "the router returned one task id twice"
    );
    assert_eq!(enqueued.len(), plan.total);
    Run {
        enqueued,
        ledger,
        hit_bound,
        elapsed: started.elapsed(),
    }
}

/// Sets its flag when dropped during a panic.
struct AbortOnPanic<'a>(&'a AtomicBool);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// One worker: claims 1 to 3 tasks at a time and completes each; a
/// completion answered 08006 is kept and tried again every 200 ms. True if
/// it stopped at the bound.
fn work(
    shards: &Shards,
    queue: &str,
    lease: &str,
    worker: usize,
    ledger: &Ledger,
    (stop, abort): (&AtomicBool, &AtomicBool),
    bound: Instant,
) -> bool {
    let mut c = shards.router(WORKER);
    let owner = format!("router-worker-{worker}");
    let mut rng = rand::thread_rng();
    let mut held: Vec<(i64, i64)> = Vec::new();
    let mut retried = Instant::now();
    loop {
        if Instant::now() > bound {
            return true;
        }
        if abort.load(Ordering::SeqCst) {
            return false;
        }
        if !held.is_empty() && retried.elapsed() >= Duration::from_millis(200) {
            held.retain(|&(id, token)| !ledger.complete(&mut c, queue, worker, id, token));
            retried = Instant::now();
        }
        if stop.load(Ordering::SeqCst) {
            if held.is_empty() {
                return false;
            }
            thread::sleep(Duration::from_millis(50));
            continue;
        }
        match try_claim(&mut c, queue, &owner, lease, rng.gen_range(1..=3)) {
            Err(e) => {
                ledger.claim_errors.lock().unwrap().push(describe(&e));
                thread::sleep(Duration::from_millis(20));
            }
            Ok(batch) if batch.is_empty() => thread::sleep(Duration::from_millis(20)),
            Ok(batch) => {
                for t in batch {
                    ledger.handed_out(worker, &t);
                    if !ledger.complete(&mut c, queue, worker, t.task_id, t.fencing_token) {
                        held.push((t.task_id, t.fencing_token));
                    }
                }
            }
        }
    }
}

/// Enqueues `count` tasks through the router (see [`produce_on`]; each
/// batch goes to one shard).
fn produce(
    shards: &Shards,
    queue: &str,
    first: usize,
    count: usize,
    batched: bool,
) -> Vec<(i64, usize)> {
    produce_on(&mut shards.router(PRODUCER), queue, first, count, batched)
}

/// Waits until no shard holds a task of `queue` (asked of each shard
/// directly), or the bound.
fn wait_drained(shards: &Shards, queue: &str, bound: Instant) {
    let mut su: Vec<Client> = shards
        .numbers()
        .into_iter()
        .map(|s| shards.shard_su(s))
        .collect();
    while Instant::now() < bound {
        let left: i64 = su
            .iter_mut()
            .map(|c| -> i64 {
                c.query_one(
                    "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
                    &[&queue],
                )
                .expect("count the shard's tasks")
                .get(0)
            })
            .sum();
        if left == 0 {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Each shard's kept completions of `queue` (the queue keeps completed
/// tasks): task id -> (the shard it is kept on, its fencing token).
pub fn kept_completions(shards: &Shards, queue: &str) -> HashMap<i64, (i32, i64)> {
    let mut kept = HashMap::new();
    for s in shards.numbers() {
        for r in shards
            .shard_su(s)
            .query(
                "SELECT task_id, fencing_token FROM aedb_queue.completed_task WHERE queue = $1",
                &[&queue],
            )
            .expect("read completed_task")
        {
            let previous = kept.insert(r.get::<_, i64>(0), (s, r.get::<_, i64>(1)));
            assert!(
                previous.is_none(),
                "task {} kept as completed on two shards",
                r.get::<_, i64>(0)
            );
        }
    }
    kept
}
