//! The SQL surface against its reference model (`core/src/model`): random
//! sequences of calls from four sessions (producer, worker, service,
//! admin), each call in its own transaction (an enqueue sometimes rolled
//! back), each call's reply and then every task row compared with what
//! the model says. proptest shrinks a failing case to a minimal sequence.
//!
//! `AEDB_MODEL_CASES` (default 100) sets how many cases run; each case has
//! its own queue on the binary's shared cluster. docs/model.md has more.

use aedb_queue_core::model::*;
use aedb_queue_itests::{
    describe, json, sqlstate, unique_queue, Client, Cluster, Value, ADMIN, PRODUCER, SERVICE,
    WORKER,
};
use postgres::types::ToSql;
use proptest::prelude::*;
use proptest::test_runner::Config as RunConfig;
use std::sync::{Mutex, OnceLock};

const DEFAULT_CASES: u32 = 100;
const LONGEST_CASE: usize = 40;

// ---------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------

fn task_ref() -> impl Strategy<Value = TaskRef> {
    prop_oneof![19 => any::<u8>().prop_map(TaskRef::Known), 1 => Just(TaskRef::Unknown)]
}

/// What a worker names: mostly a task in flight.
fn held_ref() -> impl Strategy<Value = TaskRef> {
    prop_oneof![3 => any::<u8>().prop_map(TaskRef::InFlight), 1 => task_ref()]
}

fn token_ref() -> impl Strategy<Value = TokenRef> {
    prop_oneof![
        14 => Just(TokenRef::Current),
        4 => Just(TokenRef::Stale),
        2 => Just(TokenRef::Ahead)
    ]
}

/// Mostly a session with the right; now and then one without it.
fn session(right: Right) -> impl Strategy<Value = Session> {
    let (with, without): (Vec<Session>, Vec<Session>) =
        Session::ALL.iter().partition(|s| s.has(right));
    prop_oneof![
        12 => proptest::sample::select(with),
        1 => proptest::sample::select(without)
    ]
}

fn small_key() -> impl Strategy<Value = Option<u8>> {
    prop_oneof![3 => Just(None), 1 => (0u8..3).prop_map(Some)]
}

fn enqueue_args() -> impl Strategy<Value = EnqueueArgs> {
    (
        0i64..3,
        prop_oneof![6 => Just(Delay::Now), 1 => Just(Delay::Far)],
        prop_oneof![2 => Just(None), 1 => (1i32..4).prop_map(Some)],
        small_key(),
        prop_oneof![3 => Just(Vec::new()), 1 => proptest::collection::vec(task_ref(), 1..3)],
        any::<bool>(),
        (small_key(), small_key()),
    )
        .prop_map(
            |(priority, delay, max_attempts, idempotency_key, wait_for, run, (ck, ok))| {
                // Where a child joins its ordering key's line is left out.
                let ordering_key = ok.filter(|_| wait_for.is_empty());
                EnqueueArgs {
                    priority,
                    delay,
                    max_attempts,
                    idempotency_key,
                    wait_for,
                    run_on_parent_failure: run,
                    concurrency_key: ck,
                    ordering_key,
                }
            },
        )
}

fn follow_up() -> impl Strategy<Value = Option<FollowUp>> {
    prop_oneof![
        4 => Just(None),
        1 => (0i64..3, small_key(), small_key()).prop_map(|(priority, idempotency_key, concurrency_key)| {
            Some(FollowUp { priority, idempotency_key, concurrency_key })
        })
    ]
}

/// `queue_enqueue_batch` takes no idempotency key: one set of options
/// (the single enqueue's otherwise) for all its entries.
fn batch_args() -> impl Strategy<Value = EnqueueArgs> {
    enqueue_args().prop_map(|args| EnqueueArgs {
        idempotency_key: None,
        ..args
    })
}

fn purge_state() -> impl Strategy<Value = PurgeState> {
    let known: Vec<PurgeState> = PurgeState::ALL
        .into_iter()
        .filter(|s| *s != PurgeState::Unknown)
        .collect();
    prop_oneof![
        14 => proptest::sample::select(known),
        1 => Just(PurgeState::Unknown)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let fail_how = prop_oneof![
        Just(FailHow::Backoff),
        Just(FailHow::RetryNow),
        Just(FailHow::RetryFar),
        Just(FailHow::DeadLetter)
    ];
    let delay = prop_oneof![Just(Delay::Now), Just(Delay::Far)];
    prop_oneof![
        30 => (session(Right::Produce), enqueue_args(), prop::bool::weighted(0.9))
            .prop_map(|(by, args, commit)| Op::Enqueue { by, args, commit }),
        8 => (session(Right::Produce), batch_args(), 1u8..5, prop::bool::weighted(0.9))
            .prop_map(|(by, args, entries, commit)| Op::EnqueueBatch { by, args, entries, commit }),
        20 => (session(Right::Work), 0u8..3, 1i32..4)
            .prop_map(|(by, owner, max)| Op::Claim { by, owner, max }),
        16 => (session(Right::Work), held_ref(), token_ref(), proptest::option::of(0u8..9),
               follow_up(), prop::bool::weighted(0.3))
            .prop_map(|(by, task, token, result, follow_up, strict)| Op::Complete {
                by, task, token, result, follow_up, strict
            }),
        6 => (session(Right::Work), held_ref(), token_ref(), prop::bool::weighted(0.3), 0u8..3, 1i32..3)
            .prop_map(|(by, task, token, strict, owner, max)| Op::CompleteAndClaim {
                by, task, token, strict, owner, max
            }),
        5 => (session(Right::Work), proptest::collection::vec((held_ref(), token_ref()), 1..5),
              prop::bool::weighted(0.3))
            .prop_map(|(by, entries, strict)| Op::CompleteBatch { by, entries, strict }),
        4 => (session(Right::Work), held_ref(), token_ref(), fail_how.clone(), prop::bool::weighted(0.3),
              0u8..3, 1i32..3)
            .prop_map(|(by, task, token, how, strict, owner, max)| Op::FailAndClaim {
                by, task, token, how, strict, owner, max
            }),
        9 => (session(Right::Work), held_ref(), token_ref(), fail_how)
            .prop_map(|(by, task, token, how)| Op::Fail { by, task, token, how }),
        5 => (session(Right::Work), held_ref(), token_ref(), 0u8..9)
            .prop_map(|(by, task, token, progress)| Op::Heartbeat { by, task, token, progress }),
        5 => (session(Right::Work), held_ref(), token_ref(), delay)
            .prop_map(|(by, task, token, delay)| Op::Release { by, task, token, delay }),
        4 => (session(Right::Administer), task_ref())
            .prop_map(|(by, task)| Op::Cancel { by, task }),
        4 => (session(Right::Administer), proptest::option::of(task_ref()))
            .prop_map(|(by, task)| Op::RetryDead { by, task }),
        3 => (session(Right::Administer), purge_state(), prop::bool::weighted(0.8))
            .prop_map(|(by, state, force)| Op::Purge { by, state, force }),
        1 => session(Right::Administer).prop_map(|by| Op::Pause { by }),
        3 => session(Right::Administer).prop_map(|by| Op::Resume { by }),
        4 => held_ref().prop_map(|task| Op::ExpireLease { task }),
        40 => workflow_op(),
    ]
}

/// The ops of a workflow case: mostly workflow calls on tasks in flight,
/// claims to put tasks in flight, enqueues, and the rest of the surface
/// now and then.
fn workflow_case_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => workflow_op(),
        3 => (session(Right::Work), 0u8..3, 1i32..4)
            .prop_map(|(by, owner, max)| Op::Claim { by, owner, max }),
        2 => (session(Right::Produce), enqueue_args(), prop::bool::weighted(0.9))
            .prop_map(|(by, args, commit)| Op::Enqueue { by, args, commit }),
        3 => op(),
    ]
}

/// A step's name, `s-<n>` (an event wait's key is `k-<n>` of its step).
fn step() -> impl Strategy<Value = u8> {
    0u8..4
}

/// What a time-passes or a retry from a step names: mostly a parked task.
fn parked_ref() -> impl Strategy<Value = TaskRef> {
    prop_oneof![3 => any::<u8>().prop_map(TaskRef::Parked), 2 => task_ref()]
}

/// Durable workflows: steps, sleeps, event waits, emits, retries from a
/// step, and the clock reaching a task's wake times.
fn workflow_op() -> impl Strategy<Value = Op> {
    let held_ref = || prop_oneof![9 => any::<u8>().prop_map(TaskRef::InFlight), 1 => task_ref()];
    let token_ref = || {
        prop_oneof![
            16 => Just(TokenRef::Current),
            3 => Just(TokenRef::Stale),
            1 => Just(TokenRef::Ahead)
        ]
    };
    let sleep_for = prop_oneof![
        Just(SleepFor::NoTime),
        Just(SleepFor::ADay),
        Just(SleepFor::UntilPast),
        Just(SleepFor::UntilTomorrow)
    ];
    prop_oneof![
        8 => (session(Right::Work), held_ref(), token_ref(), step(), proptest::option::of(0u8..9),
              prop::bool::weighted(0.3))
            .prop_map(|(by, task, token, step, result, strict)| Op::StepRecord {
                by, task, token, step, result, strict
            }),
        5 => (session(Right::Work), held_ref(), token_ref(), step(), sleep_for, prop::bool::weighted(0.3))
            .prop_map(|(by, task, token, step, how, strict)| Op::Sleep { by, task, token, step, how, strict }),
        5 => (session(Right::Work), held_ref(), token_ref(), step(), prop::bool::weighted(0.3))
            .prop_map(|(by, task, token, step, strict)| Op::AwaitEvent { by, task, token, step, strict }),
        4 => (session(Right::Produce), step(), proptest::option::of(0u8..9))
            .prop_map(|(by, key, payload)| Op::Emit { by, key, payload }),
        4 => (session(Right::Administer),
              prop_oneof![3 => any::<u8>().prop_map(TaskRef::Stepped), 1 => parked_ref()],
              prop_oneof![4 => any::<u8>().prop_map(StepRef::Recorded), 1 => step().prop_map(StepRef::Named)])
            .prop_map(|(by, task, step)| Op::RetryFromStep { by, task, step }),
        4 => parked_ref().prop_map(|task| Op::TimePasses { task }),
    ]
}

fn case() -> impl Strategy<Value = (Config, Vec<Op>)> {
    (
        any::<bool>(),
        1usize..3,
        prop_oneof![
            3 => proptest::collection::vec(op(), 1..LONGEST_CASE),
            2 => proptest::collection::vec(workflow_case_op(), 1..LONGEST_CASE),
        ],
    )
        .prop_map(|(keep_completed, concurrency_limit, ops)| {
            (
                Config {
                    keep_completed,
                    concurrency_limit,
                },
                ops,
            )
        })
}

// ---------------------------------------------------------------------------
// Sessions, and one case against the cluster
// ---------------------------------------------------------------------------

/// One connection per role, kept for every case (a new queue per case).
struct Sessions {
    producer: Client,
    worker: Client,
    service: Client,
    admin: Client,
    operator: Client,
}

impl Sessions {
    fn open() -> Sessions {
        let cluster = Cluster::shared();
        let worker_like = |role| {
            let mut c = cluster.connect_as(role);
            // Claims read from the head of the ready index and check for
            // expired leases every time, so a claim's outcome does not
            // depend on how long ago this session last claimed (the
            // resumed scans are the isolation specs' business).
            c.batch_execute("SET aedb_queue.claim_rescan_interval = 0")
                .expect("SET claim_rescan_interval");
            c
        };
        Sessions {
            worker: worker_like(WORKER),
            service: worker_like(SERVICE),
            admin: worker_like(ADMIN),
            producer: cluster.connect_as(PRODUCER),
            operator: cluster.connect(),
        }
    }

    fn of(&mut self, s: Session) -> &mut Client {
        match s {
            Session::Producer => &mut self.producer,
            Session::Worker => &mut self.worker,
            Session::Service => &mut self.service,
            Session::Admin => &mut self.admin,
        }
    }
}

fn sessions() -> &'static Mutex<Sessions> {
    static SESSIONS: OnceLock<Mutex<Sessions>> = OnceLock::new();
    SESSIONS.get_or_init(|| Mutex::new(Sessions::open()))
}

/// A case in progress: its queue, the model, and the real id of each handle.
struct Run<'a> {
    s: &'a mut Sessions,
    queue: String,
    model: Model,
    ids: Vec<i64>,
    step: usize,
    /// Each time on the database's clock met so far (microseconds since
    /// the epoch), with the op where it was met first: the model's `At`.
    times: Vec<(i64, usize)>,
}

type Params = Vec<Box<dyn ToSql + Sync>>;

fn refs(p: &Params) -> Vec<&(dyn ToSql + Sync)> {
    p.iter()
        .map(|b| b.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// The SQLSTATE of a refused call, as the model names it.
fn failed(e: &postgres::Error) -> Reply {
    const KNOWN: &[&str] = &[
        INSUFFICIENT_PRIVILEGE,
        INVALID_PARAMETER,
        LEASE_LOST,
        UNIQUE_VIOLATION,
        OBJECT_NOT_IN_PREREQUISITE_STATE,
    ];
    let code = sqlstate(e).unwrap_or_else(|| panic!("not a server error: {e}"));
    match KNOWN.iter().find(|k| **k == code) {
        Some(k) => Reply::Error(k),
        None => panic!("unexpected error: {}", describe(e)),
    }
}

const NO_SUCH_TASK: i64 = 0;

impl Run<'_> {
    fn start(s: &mut Sessions, config: Config) -> Run<'_> {
        let queue = unique_queue("model");
        let keep = config.keep_completed.then_some("1 day");
        s.admin
            .query(
                "SELECT 1 FROM aedb_queue.queue_configure($1::text, \
                 keep_completed => $2::text::interval, concurrency_limit => $3::int4)",
                &[&queue, &keep, &(config.concurrency_limit as i32)],
            )
            .expect("queue_configure");
        Run {
            s,
            queue,
            model: Model::new(config),
            ids: Vec::new(),
            step: 0,
            times: Vec::new(),
        }
    }

    fn id(&self, task: TaskRef) -> i64 {
        self.model
            .resolve(task)
            .map_or(NO_SUCH_TASK, |h| self.ids[h])
    }

    /// The handle of a real id (usize::MAX: no task of the case has it).
    fn handle(&self, id: i64) -> Handle {
        self.ids.iter().position(|&i| i == id).unwrap_or(usize::MAX)
    }

    fn held(&self, task: TaskRef, token: TokenRef) -> (i64, i64) {
        (
            self.id(task),
            self.model.token(self.model.resolve(task), token),
        )
    }

    /// Runs one op against the cluster: what the call returned.
    fn call(&mut self, op: &Op) -> Reply {
        let q = self.queue.clone();
        match op {
            Op::Enqueue { by, args, commit } => self.enqueue(*by, args, *commit),
            Op::EnqueueBatch {
                by,
                args,
                entries,
                commit,
            } => self.enqueue_batch(*by, args, *entries, *commit),
            Op::Claim { by, owner, max } => {
                let r = self.s.of(*by).query(
                    "SELECT task_id::int8, attempts::int4, fencing_token::int8, priority::int8, progress \
                     FROM aedb_queue.queue_claim($1::text, $2::text, lease => '1 hour', max => $3::int4)",
                    &[&q, &format!("owner-{owner}"), max],
                );
                match r {
                    Err(e) => failed(&e),
                    Ok(rows) => Reply::Claimed(
                        rows.iter()
                            .map(|r| Claimed {
                                task: self.handle(r.get(0)),
                                attempts: r.get(1),
                                fencing_token: r.get(2),
                                priority: r.get(3),
                                progress: number(r.get(4), "p"),
                            })
                            .collect(),
                    ),
                }
            }
            Op::Complete {
                by,
                task,
                token,
                result,
                follow_up,
                strict,
            } => {
                let (id, token) = self.held(*task, *token);
                let result = result.map(|r| json!({ "r": r }));
                let follow_ups = follow_up.as_ref().map(|f| self.follow_up_spec(f));
                self.outcome(
                    *by,
                    "SELECT aedb_queue.queue_complete($1::text, $2::int8, $3::int8, \
                     result => $4::jsonb, follow_ups => $5::jsonb, strict => $6::bool)::text",
                    vec![
                        Box::new(q),
                        Box::new(id),
                        Box::new(token),
                        Box::new(result),
                        Box::new(follow_ups),
                        Box::new(*strict),
                    ],
                )
            }
            Op::CompleteAndClaim {
                by,
                task,
                token,
                strict,
                owner,
                max,
            } => {
                let (id, token) = self.held(*task, *token);
                let r = self.s.of(*by).query(
                    "SELECT settled::text, task_id::int8, attempts::int4, fencing_token::int8, \
                            priority::int8, progress \
                     FROM aedb_queue.queue_complete_and_claim($1::text, $2::text, $3::int8, $4::int8, \
                          strict => $5::bool, lease => '1 hour', max => $6::int4)",
                    &[&q, &format!("owner-{owner}"), &id, &token, strict, max],
                );
                self.settled_and_claimed(r)
            }
            Op::FailAndClaim {
                by,
                task,
                token,
                how,
                strict,
                owner,
                max,
            } => {
                let (id, token) = self.held(*task, *token);
                let (retry_in, dead_letter) = fail_args(*how);
                let error = format!("error at op {}", self.step);
                let r = self.s.of(*by).query(
                    "SELECT settled::text, task_id::int8, attempts::int4, fencing_token::int8, \
                            priority::int8, progress \
                     FROM aedb_queue.queue_fail_and_claim($1::text, $2::text, $3::int8, $4::int8, $5::text, \
                          retry_in => $6::text::interval, dead_letter => $7::bool, strict => $8::bool, \
                          lease => '1 hour', max => $9::int4)",
                    &[&q, &format!("owner-{owner}"), &id, &token, &error, &retry_in, &dead_letter, strict, max],
                );
                self.settled_and_claimed(r)
            }
            Op::CompleteBatch {
                by,
                entries,
                strict,
            } => {
                let (ids, tokens): (Vec<i64>, Vec<i64>) =
                    entries.iter().map(|&(t, k)| self.held(t, k)).unzip();
                let r = self.s.of(*by).query(
                    "SELECT outcome::text FROM aedb_queue.queue_complete_batch($1::text, $2::int8[], \
                     $3::int8[], strict => $4::bool) WITH ORDINALITY AS b(task_id, outcome, n) ORDER BY n",
                    &[&q, &ids, &tokens, strict],
                );
                match r {
                    Err(e) => failed(&e),
                    Ok(rows) => Reply::Outcomes(rows.iter().map(|r| outcome(r.get(0))).collect()),
                }
            }
            Op::Fail {
                by,
                task,
                token,
                how,
            } => {
                let (id, token) = self.held(*task, *token);
                let (retry_in, dead_letter) = fail_args(*how);
                self.outcome(
                    *by,
                    "SELECT aedb_queue.queue_fail($1::text, $2::int8, $3::int8, $4::text, \
                     retry_in => $5::text::interval, dead_letter => $6::bool)::text",
                    vec![
                        Box::new(q),
                        Box::new(id),
                        Box::new(token),
                        Box::new(format!("error at op {}", self.step)),
                        Box::new(retry_in.map(str::to_string)),
                        Box::new(dead_letter),
                    ],
                )
            }
            Op::Heartbeat {
                by,
                task,
                token,
                progress,
            } => {
                let (id, token) = self.held(*task, *token);
                self.outcome(
                    *by,
                    "SELECT aedb_queue.queue_heartbeat($1::text, $2::int8, $3::int8, '1 hour', \
                     progress => $4::jsonb)::text",
                    vec![
                        Box::new(q),
                        Box::new(id),
                        Box::new(token),
                        Box::new(json!({ "p": progress })),
                    ],
                )
            }
            Op::Release {
                by,
                task,
                token,
                delay,
            } => {
                let (id, token) = self.held(*task, *token);
                let delay = if *delay == Delay::Far { "1 day" } else { "0" };
                self.outcome(
                    *by,
                    "SELECT aedb_queue.queue_release($1::text, $2::int8, $3::int8, \
                     delay => $4::text::interval)::text",
                    vec![
                        Box::new(q),
                        Box::new(id),
                        Box::new(token),
                        Box::new(delay.to_string()),
                    ],
                )
            }
            Op::Cancel { by, task } => {
                let id = self.id(*task);
                match self.s.of(*by).query_one(
                    "SELECT aedb_queue.queue_cancel($1::text, $2::int8)",
                    &[&q, &id],
                ) {
                    Ok(r) => Reply::Bool(r.get(0)),
                    Err(e) => failed(&e),
                }
            }
            Op::RetryDead { by, task } => {
                let id = task.map(|t| self.id(t));
                match self.s.of(*by).query_one(
                    "SELECT aedb_queue.queue_retry_dead($1::text, $2::int8)::int8",
                    &[&q, &id],
                ) {
                    Ok(r) => Reply::Count(r.get(0)),
                    Err(e) => failed(&e),
                }
            }
            Op::Purge { by, state, force } => {
                match self.s.of(*by).query_one(
                    "SELECT aedb_queue.queue_purge($1::text, $2::text, force => $3::bool)::int8",
                    &[&q, &state.as_str(), force],
                ) {
                    Ok(r) => Reply::Count(r.get(0)),
                    Err(e) => failed(&e),
                }
            }
            Op::Pause { by } | Op::Resume { by } => {
                let f = if matches!(op, Op::Pause { .. }) {
                    "queue_pause"
                } else {
                    "queue_resume"
                };
                let sql = format!("SELECT aedb_queue.{f}($1::text)");
                match self.s.of(*by).query_one(sql.as_str(), &[&q]) {
                    Ok(r) => Reply::Bool(r.get(0)),
                    Err(e) => failed(&e),
                }
            }
            Op::StepRecord { .. }
            | Op::Sleep { .. }
            | Op::AwaitEvent { .. }
            | Op::Emit { .. }
            | Op::RetryFromStep { .. }
            | Op::TimePasses { .. } => self.call_workflow(op),
            Op::ExpireLease { task } => {
                // The operator (superuser) reaches into the table: the
                // lease ran out just now.
                let id = self.id(*task);
                self.s
                    .operator
                    .execute(
                        "UPDATE aedb_queue.task SET lease_deadline = clock_timestamp() \
                         WHERE task_id = $1 AND queue = $2 AND state = 'in_flight'",
                        &[&id, &q],
                    )
                    .expect("expire a lease");
                Reply::Done
            }
        }
    }

    /// A time of the cluster's, in the model's terms: the op where the
    /// case met it first (this op, when it is new).
    fn at(&mut self, micros: Option<i64>) -> Option<At> {
        let micros = micros?;
        if let Some(&(_, op)) = self.times.iter().find(|(t, _)| *t == micros) {
            return Some(At(op));
        }
        self.times.push((micros, self.step));
        Some(At(self.step))
    }

    /// The workflow ops.
    fn call_workflow(&mut self, op: &Op) -> Reply {
        let q = self.queue.clone();
        match op {
            Op::StepRecord {
                by,
                task,
                token,
                step,
                result,
                strict,
            } => {
                let (id, token) = self.held(*task, *token);
                let result = result.map(|r| json!({ "r": r }));
                self.outcome(
                    *by,
                    "SELECT aedb_queue.queue_step_record($1::text, $2::int8, $3::int8, $4::text, \
                     result => $5::jsonb, strict => $6::bool)::text",
                    vec![
                        Box::new(q),
                        Box::new(id),
                        Box::new(token),
                        Box::new(format!("s-{step}")),
                        Box::new(result),
                        Box::new(*strict),
                    ],
                )
            }
            Op::Sleep {
                by,
                task,
                token,
                step,
                how,
                strict,
            } => {
                let (id, token) = self.held(*task, *token);
                let (duration, until) = match how {
                    SleepFor::NoTime => (Some("0"), None),
                    SleepFor::ADay => (Some("1 day"), None),
                    SleepFor::UntilPast => (None, Some("-1 hour")),
                    SleepFor::UntilTomorrow => (None, Some("1 day")),
                };
                let r = self.s.of(*by).query_one(
                    "SELECT outcome::text, waiting, (extract(epoch FROM wake_at) * 1000000)::int8 \
                     FROM aedb_queue.queue_sleep($1::text, $2::int8, $3::int8, $4::text, \
                          duration => $5::text::interval, until => now() + $6::text::interval, \
                          strict => $7::bool)",
                    &[
                        &q,
                        &id,
                        &token,
                        &format!("s-{step}"),
                        &duration,
                        &until,
                        strict,
                    ],
                );
                match r {
                    Err(e) => failed(&e),
                    Ok(r) => Reply::Slept {
                        outcome: outcome(r.get(0)),
                        waiting: r.get(1),
                        wake_at: self.at(r.get(2)),
                    },
                }
            }
            Op::AwaitEvent {
                by,
                task,
                token,
                step,
                strict,
            } => {
                let (id, token) = self.held(*task, *token);
                let r = self.s.of(*by).query_one(
                    "SELECT outcome::text, waiting, (extract(epoch FROM wake_at) * 1000000)::int8, \
                            payload, timed_out \
                     FROM aedb_queue.queue_await_event($1::text, $2::int8, $3::int8, $4::text, $5::text, \
                          timeout => '1 day', strict => $6::bool)",
                    &[&q, &id, &token, &format!("s-{step}"), &format!("k-{step}"), strict],
                );
                match r {
                    Err(e) => failed(&e),
                    Ok(r) => Reply::Awaited {
                        outcome: outcome(r.get(0)),
                        waiting: r.get(1),
                        wake_at: self.at(r.get(2)),
                        payload: number(r.get(3), "e"),
                        timed_out: r.get(4),
                    },
                }
            }
            Op::Emit { by, key, payload } => {
                let payload = payload.map(|p| json!({ "e": p }));
                match self.s.of(*by).query_one(
                    "SELECT aedb_queue.queue_emit($1::text, $2::text, $3::jsonb)",
                    &[&q, &format!("k-{key}"), &payload],
                ) {
                    Ok(r) => Reply::Bool(r.get(0)),
                    Err(e) => failed(&e),
                }
            }
            Op::RetryFromStep { by, task, step } => {
                let id = self.id(*task);
                let step = self.model.step_name(self.model.resolve(*task), *step);
                match self.s.of(*by).query_one(
                    "SELECT aedb_queue.queue_retry_from_step($1::text, $2::int8, $3::text)",
                    &[&q, &id, &format!("s-{step}")],
                ) {
                    Ok(r) => Reply::Steps(
                        r.get::<_, Vec<String>>(0)
                            .iter()
                            .map(|s| step_number(s))
                            .collect(),
                    ),
                    Err(e) => failed(&e),
                }
            }
            Op::TimePasses { task } => {
                // The operator (superuser) moves the task's times ahead to
                // now; the task's not_before too when it is parked for one
                // of them (the CTEs all read the times as they were).
                let id = self.id(*task);
                let now: i64 = self
                    .s
                    .operator
                    .query_one(
                        "WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t), \
                         parked AS (UPDATE aedb_queue.task k SET not_before = (SELECT t FROM now) \
                             WHERE k.task_id = $1 AND k.queue = $2 AND k.state = 'scheduled' \
                               AND k.not_before > (SELECT t FROM now) \
                               AND (k.not_before IN (SELECT (s.result ->> 'until')::timestamptz \
                                                     FROM aedb_queue.task_step s \
                                                     WHERE s.task_id = $1 AND s.result ? 'until') \
                                    OR k.not_before IN (SELECT w.deadline FROM aedb_queue.event_wait w \
                                                        WHERE w.task_id = $1)) \
                             RETURNING 1), \
                         sleeps AS (UPDATE aedb_queue.task_step \
                             SET result = jsonb_build_object('until', (SELECT t FROM now)) \
                             WHERE task_id = $1 AND result ? 'until' \
                               AND (result ->> 'until')::timestamptz > (SELECT t FROM now) RETURNING 1), \
                         waits AS (UPDATE aedb_queue.event_wait SET deadline = (SELECT t FROM now) \
                             WHERE task_id = $1 AND deadline > (SELECT t FROM now) RETURNING 1) \
                         SELECT (extract(epoch FROM t) * 1000000)::int8 FROM now",
                        &[&id, &q],
                    )
                    .expect("time passes")
                    .get(0);
                self.times.push((now, self.step));
                Reply::Done
            }
            other => unreachable!("not a workflow op: {other:?}"),
        }
    }

    /// The steps and the waits of every task the task table or the archive
    /// of completed tasks holds (those of tasks gone stay until the
    /// reaper's sweep, which no case runs: left out), read from the tables.
    fn workflow_rows(&mut self) -> (Vec<SeenStep>, Vec<SeenWait>) {
        let queue = self.queue.clone();
        let held = "(EXISTS (SELECT 1 FROM aedb_queue.task t WHERE t.task_id = x.task_id) \
                     OR EXISTS (SELECT 1 FROM aedb_queue.completed_task c WHERE c.task_id = x.task_id))";
        let steps = self
            .s
            .operator
            .query(
                format!(
                    "SELECT x.task_id, x.step, x.result, \
                            (extract(epoch FROM (x.result ->> 'until')::timestamptz) * 1000000)::int8, \
                            x.attempt, x.fencing_token \
                     FROM aedb_queue.task_step x WHERE x.queue = $1 AND {held} \
                     ORDER BY x.task_id, x.recorded_at, x.step"
                )
                .as_str(),
                &[&queue],
            )
            .expect("task steps");
        let waits = self
            .s
            .operator
            .query(
                format!(
                    "SELECT x.task_id, x.step, x.key, (extract(epoch FROM x.deadline) * 1000000)::int8 \
                     FROM aedb_queue.event_wait x WHERE x.queue = $1 AND {held} \
                     ORDER BY x.task_id, x.step"
                )
                .as_str(),
                &[&queue],
            )
            .expect("event waits");
        let steps = steps
            .iter()
            .map(|r| self.seen_step(r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
            .collect();
        let waits = waits
            .iter()
            .map(|r| SeenWait {
                task_id: r.get(0),
                step: r.get(1),
                key: r.get(2),
                deadline: self.at(r.get(3)),
            })
            .collect();
        (steps, waits)
    }

    fn seen_step(
        &mut self,
        task_id: i64,
        step: String,
        result: Option<Value>,
        until: Option<i64>,
        attempt: i32,
        fencing_token: i64,
    ) -> SeenStep {
        // A sleep's wake time as an `At`, the rest of its result ({}) as is.
        let result = match (result, until) {
            (Some(Value::Object(mut o)), Some(_)) => {
                o.remove("until");
                Some(Value::Object(o))
            }
            (result, _) => result,
        };
        SeenStep {
            task_id,
            step,
            result,
            until: self.at(until),
            attempt,
            fencing_token,
        }
    }

    /// Each task's steps and waits through `queue_steps` and `queue_waits`
    /// (as the worker), for every task the model has in the task table or
    /// the archive.
    fn workflow_by_task(&mut self) -> (Vec<SeenStep>, Vec<SeenWait>) {
        let queue = self.queue.clone();
        let (mut steps, mut waits) = (Vec::new(), Vec::new());
        for h in 0..self.model.created() {
            if self.model.task(h).state == State::Gone {
                continue;
            }
            let id = self.ids[h];
            let rows = self
                .s
                .worker
                .query(
                    "SELECT step, result, (extract(epoch FROM (result ->> 'until')::timestamptz) * 1000000)::int8, \
                            attempt, fencing_token::int8 \
                     FROM aedb_queue.queue_steps($1::text, $2::int8)",
                    &[&queue, &id],
                )
                .expect("queue_steps");
            for r in rows {
                let s = self.seen_step(id, r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
                steps.push(s);
            }
            let rows = self
                .s
                .worker
                .query(
                    "SELECT step, key, (extract(epoch FROM deadline) * 1000000)::int8 \
                     FROM aedb_queue.queue_waits($1::text, $2::int8) ORDER BY step",
                    &[&queue, &id],
                )
                .expect("queue_waits");
            for r in rows {
                let deadline = self.at(r.get(2));
                waits.push(SeenWait {
                    task_id: id,
                    step: r.get(0),
                    key: r.get(1),
                    deadline,
                });
            }
        }
        (steps, waits)
    }

    /// The steps and waits the model expects, in the cluster's terms.
    fn expected_workflow(&self) -> (Vec<SeenStep>, Vec<SeenWait>) {
        let (mut steps, mut waits) = (Vec::new(), Vec::new());
        for h in 0..self.model.created() {
            let t = self.model.task(h);
            if t.state == State::Gone {
                continue;
            }
            let task_id = self.ids.get(h).copied().unwrap_or(-1);
            for s in &t.steps {
                let (result, until) = match &s.kind {
                    StepKind::Record(r) => (r.map(|r| json!({ "r": r })), None),
                    StepKind::Sleep { until, .. } => (Some(json!({})), Some(*until)),
                    StepKind::Event { payload, timed_out } => (
                        Some(json!({
                            "payload": payload.map(|p| json!({ "e": p })),
                            "timed_out": timed_out
                        })),
                        None,
                    ),
                };
                steps.push(SeenStep {
                    task_id,
                    step: format!("s-{}", s.name),
                    result,
                    until,
                    attempt: s.attempt,
                    fencing_token: s.fencing_token,
                });
            }
            let mut ws = t.waits.clone();
            ws.sort_by_key(|w| w.step);
            for w in ws {
                waits.push(SeenWait {
                    task_id,
                    step: format!("s-{}", w.step),
                    key: format!("k-{}", w.key),
                    deadline: Some(w.deadline),
                });
            }
        }
        (steps, waits)
    }

    fn enqueue(&mut self, by: Session, args: &EnqueueArgs, commit: bool) -> Reply {
        let wait_for: Option<Vec<i64>> = (!args.wait_for.is_empty())
            .then(|| args.wait_for.iter().map(|&t| self.id(t)).collect());
        let policy = if args.run_on_parent_failure {
            "run"
        } else {
            "dead_letter"
        };
        let delay = if args.delay == Delay::Far {
            "1 day"
        } else {
            "0"
        };
        let params: Params = vec![
            Box::new(self.queue.clone()),
            Box::new(json!({ "op": self.step })),
            Box::new(delay.to_string()),
            Box::new(args.priority),
            Box::new(args.max_attempts),
            Box::new(args.idempotency_key.map(|k| format!("key-{k}"))),
            Box::new(wait_for),
            Box::new(policy.to_string()),
            Box::new(args.concurrency_key.map(|k| format!("ck-{k}"))),
            Box::new(args.ordering_key.map(|k| format!("ok-{k}"))),
        ];
        let sql = "SELECT task_id::int8, deduplicated FROM aedb_queue.queue_enqueue($1::text, $2::jsonb, \
                   delay => $3::text::interval, priority => $4::int8, max_attempts => $5::int4, \
                   backoff_base => '1 hour', idempotency_key => $6::text, wait_for => $7::int8[], \
                   on_parent_failure => $8::text, concurrency_key => $9::text, ordering_key => $10::text)";
        let mut tx = self.s.of(by).transaction().expect("BEGIN");
        let row = match tx.query_one(sql, &refs(&params)) {
            Ok(row) => row,
            Err(e) => return failed(&e),
        };
        let (id, deduplicated): (i64, bool) = (row.get(0), row.get(1));
        if !commit {
            tx.rollback().expect("ROLLBACK");
            return Reply::RolledBack {
                deduplicated_to: deduplicated.then(|| self.handle(id)),
            };
        }
        tx.commit().expect("COMMIT");
        if !deduplicated && !self.ids.contains(&id) {
            self.ids.push(id);
        }
        Reply::Enqueued {
            task: self.handle(id),
            deduplicated,
        }
    }

    /// `queue_enqueue_batch` with the batch's options, in a transaction of
    /// its own: the ids in payload order (WITH ORDINALITY), mapped to
    /// handles when committed (new ids, in the order returned: a batch
    /// whose ids did not rise in payload order shows in the rows, whose
    /// payloads name their entry).
    fn enqueue_batch(
        &mut self,
        by: Session,
        args: &EnqueueArgs,
        entries: u8,
        commit: bool,
    ) -> Reply {
        let wait_for: Option<Vec<i64>> = (!args.wait_for.is_empty())
            .then(|| args.wait_for.iter().map(|&t| self.id(t)).collect());
        let policy = if args.run_on_parent_failure {
            "run"
        } else {
            "dead_letter"
        };
        let delay = if args.delay == Delay::Far {
            "1 day"
        } else {
            "0"
        };
        let payloads: Vec<Value> = (0..entries)
            .map(|i| json!({ "op": self.step, "entry": i }))
            .collect();
        let params: Params = vec![
            Box::new(self.queue.clone()),
            Box::new(payloads),
            Box::new(delay.to_string()),
            Box::new(args.priority),
            Box::new(args.max_attempts),
            Box::new(wait_for),
            Box::new(policy.to_string()),
            Box::new(args.concurrency_key.map(|k| format!("ck-{k}"))),
            Box::new(args.ordering_key.map(|k| format!("ok-{k}"))),
        ];
        let sql = "SELECT b.task_id::int8 FROM aedb_queue.queue_enqueue_batch($1::text, $2::jsonb[], \
                   delay => $3::text::interval, priority => $4::int8, max_attempts => $5::int4, \
                   backoff_base => '1 hour', wait_for => $6::int8[], on_parent_failure => $7::text, \
                   concurrency_key => $8::text, ordering_key => $9::text) \
                   WITH ORDINALITY AS b(task_id, n) ORDER BY b.n";
        let mut tx = self.s.of(by).transaction().expect("BEGIN");
        let rows = match tx.query(sql, &refs(&params)) {
            Ok(rows) => rows,
            Err(e) => return failed(&e),
        };
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let known = ids.iter().any(|id| self.ids.contains(id));
        if !commit {
            tx.rollback().expect("ROLLBACK");
            if !known {
                return Reply::RolledBackBatch(ids.len());
            }
            // An id some task of the case has: shown as such.
            return Reply::EnqueuedBatch(ids.iter().map(|&id| self.handle(id)).collect());
        }
        tx.commit().expect("COMMIT");
        for &id in &ids {
            if !self.ids.contains(&id) {
                self.ids.push(id);
            }
        }
        Reply::EnqueuedBatch(ids.iter().map(|&id| self.handle(id)).collect())
    }

    /// The rows of a settle-and-claim call: the settlement on each, the
    /// claimed tasks on those with a task.
    fn settled_and_claimed(&self, r: Result<Vec<postgres::Row>, postgres::Error>) -> Reply {
        match r {
            Err(e) => failed(&e),
            Ok(rows) => Reply::SettledAndClaimed(
                outcome(rows[0].get(0)),
                rows.iter()
                    .filter(|r| r.get::<_, Option<i64>>(1).is_some())
                    .map(|r| Claimed {
                        task: self.handle(r.get(1)),
                        attempts: r.get(2),
                        fencing_token: r.get(3),
                        priority: r.get(4),
                        progress: number(r.get(5), "p"),
                    })
                    .collect(),
            ),
        }
    }

    fn follow_up_spec(&self, f: &FollowUp) -> Value {
        let mut spec = json!({ "queue": self.queue, "payload": { "op": self.step }, "priority": f.priority,
                               "backoff_base": "1 hour" });
        if let Some(k) = f.idempotency_key {
            spec["idempotency_key"] = json!(format!("key-{k}"));
        }
        if let Some(k) = f.concurrency_key {
            spec["concurrency_key"] = json!(format!("ck-{k}"));
        }
        json!([spec])
    }

    fn outcome(&mut self, by: Session, sql: &str, params: Params) -> Reply {
        match self.s.of(by).query_one(sql, &refs(&params)) {
            Ok(r) => Reply::Outcome(outcome(r.get(0))),
            Err(e) => failed(&e),
        }
    }

    /// Every task row of the queue, as the worker reads them.
    fn rows(&mut self) -> Vec<Seen> {
        self.read("queue_list($1::text, NULL, 1000)", &[&self.queue.clone()])
    }

    /// Each task of the case one at a time (`queue_get`): a row for each
    /// task the listing has, none for the others.
    fn rows_one_by_one(&mut self) -> Vec<Seen> {
        let queue = self.queue.clone();
        let ids = self.ids.clone();
        ids.iter()
            .flat_map(|id| self.read("queue_get($1::text, $2::int8)", &[&queue, id]))
            .collect()
    }

    fn read(&mut self, call: &str, params: &[&(dyn ToSql + Sync)]) -> Vec<Seen> {
        let sql = format!(
            "SELECT task_id::int8, state::text, priority::int8, attempts::int4, max_attempts::int4, \
                    owner_id::text, fencing_token::int8, payload, progress, last_error::text, \
                    idempotency_key::text, result \
             FROM aedb_queue.{call} ORDER BY task_id"
        );
        let rows = self.s.worker.query(sql.as_str(), params).expect(call);
        rows.iter()
            .map(|r| Seen {
                task_id: r.get(0),
                state: r.get(1),
                priority: r.get(2),
                attempts: r.get(3),
                max_attempts: r.get(4),
                owner_id: r.get(5),
                fencing_token: r.get(6),
                payload: r.get(7),
                progress: r.get(8),
                last_error: r.get(9),
                idempotency_key: r.get(10),
                result: r.get(11),
            })
            .collect()
    }

    /// Tasks the call made without returning their ids (follow-ups): the
    /// new ids in the listing, in id order.
    fn learn_new_ids(&mut self, seen: &[Seen]) {
        for s in seen {
            if self.ids.len() < self.model.created() && !self.ids.contains(&s.task_id) {
                self.ids.push(s.task_id);
            }
        }
    }

    /// The rows the model expects, in the cluster's terms.
    fn expected(&self) -> Vec<Seen> {
        self.model
            .rows()
            .into_iter()
            .map(|r| Seen {
                task_id: self.ids.get(r.task).copied().unwrap_or(-1),
                state: r.state.to_string(),
                priority: r.priority,
                attempts: r.attempts,
                max_attempts: r.max_attempts,
                owner_id: r.owner.map(|o| format!("owner-{o}")),
                fencing_token: r.fencing_token,
                payload: Some(match r.payload_entry {
                    None => json!({ "op": r.payload_op }),
                    Some(entry) => json!({ "op": r.payload_op, "entry": entry }),
                }),
                progress: r.progress.map(|p| json!({ "p": p })),
                last_error: r.last_error.map(|e| self.error_text(&e)),
                idempotency_key: r.idempotency_key.map(|k| format!("key-{k}")),
                result: r.result.map(|v| json!({ "r": v })),
            })
            .collect()
    }

    fn error_text(&self, e: &LastError) -> String {
        match e {
            LastError::Failed(op) => format!("error at op {op}"),
            LastError::LeaseExpired { exhausted: true } => {
                "lease expired; attempts exhausted".into()
            }
            LastError::LeaseExpired { exhausted: false } => "lease expired; requeued".into(),
            LastError::Parent { parent, why } => {
                aedb_queue_core::model::rules::dead_parent_error(self.ids[*parent], why)
            }
        }
    }
}

/// `queue_fail`'s `retry_in` and `dead_letter` for a way of failing.
fn fail_args(how: FailHow) -> (Option<&'static str>, bool) {
    match how {
        FailHow::Backoff => (None, false),
        FailHow::RetryNow => (Some("0"), false),
        FailHow::RetryFar => (Some("1 hour"), false),
        FailHow::DeadLetter => (None, true),
    }
}

/// The number of a step's name (`s-3`).
fn step_number(name: &str) -> u8 {
    name.strip_prefix("s-")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("step {name:?}"))
}

#[derive(Debug, Clone, PartialEq)]
struct SeenStep {
    task_id: i64,
    step: String,
    /// A sleep's result without its wake time (`{}`).
    result: Option<Value>,
    /// A sleep's wake time.
    until: Option<At>,
    attempt: i32,
    fencing_token: i64,
}

#[derive(Debug, Clone, PartialEq)]
struct SeenWait {
    task_id: i64,
    step: String,
    key: String,
    deadline: Option<At>,
}

/// `aedb_queue.outcome` as text.
fn outcome(text: &str) -> Outcome {
    match text {
        "applied" => Outcome::Applied,
        "lease_lost" => Outcome::LeaseLost,
        other => panic!("outcome {other:?}"),
    }
}

/// A number under `key` of a small JSON object (`{"p": 3}`).
fn number(v: Option<Value>, key: &str) -> Option<u8> {
    v.map(|v| v[key].as_u64().expect("a small number") as u8)
}

#[derive(Debug, Clone, PartialEq)]
struct Seen {
    task_id: i64,
    state: String,
    priority: i64,
    attempts: i32,
    max_attempts: i32,
    owner_id: Option<String>,
    fencing_token: i64,
    payload: Option<Value>,
    progress: Option<Value>,
    last_error: Option<String>,
    idempotency_key: Option<String>,
    result: Option<Value>,
}

/// With `AEDB_MODEL_STATS=1`: how often each op met each reply and each
/// state was seen, summed over the cases so far and printed after each, to
/// check that the generator reaches the paths that matter.
struct Tally(std::collections::BTreeMap<String, u64>);

impl Tally {
    fn on() -> bool {
        std::env::var_os("AEDB_MODEL_STATS").is_some()
    }

    fn count(&mut self, op: &Op, reply: &Reply, rows: &[Seen]) {
        let kind = |d: String| d.split([' ', '(', '{']).next().unwrap_or("").to_string();
        let reply = match reply {
            Reply::Claimed(c) => format!("Claimed {}", c.len().min(2)),
            Reply::SettledAndClaimed(o, c) => format!("{o:?}, claimed {}", c.len().min(2)),
            Reply::Outcomes(o) => format!(
                "{} applied of {}",
                o.iter().filter(|o| **o == Outcome::Applied).count().min(2),
                o.len().min(3)
            ),
            Reply::Enqueued { deduplicated, .. } => format!("Enqueued dedup={deduplicated}"),
            Reply::EnqueuedBatch(t) => format!("EnqueuedBatch of {}", t.len()),
            Reply::Count(n) => format!("Count {}", n.min(&3)),
            Reply::Slept {
                outcome, waiting, ..
            } => format!("Slept {outcome:?} waiting={waiting}"),
            Reply::Awaited {
                outcome,
                waiting,
                payload,
                timed_out,
                ..
            } => format!(
                "Awaited {outcome:?} waiting={waiting} payload={} timed_out={timed_out}",
                payload.is_some()
            ),
            Reply::Steps(s) => format!("Steps dropped {}", s.len().min(3)),
            other => format!("{other:?}"),
        };
        *self
            .0
            .entry(format!("{} -> {reply}", kind(format!("{op:?}"))))
            .or_default() += 1;
        for r in rows {
            *self.0.entry(format!("state {}", r.state)).or_default() += 1;
            // Children dead-lettered by a parent: how its parent left.
            if let Some(why) = r
                .last_error
                .as_deref()
                .and_then(|e| e.strip_prefix("parent task "))
            {
                let why = why.split_once(' ').map_or(why, |(_, w)| w);
                *self.0.entry(format!("row: parent {why}")).or_default() += 1;
            }
        }
    }

    fn print(&self) {
        let lines: Vec<String> = self.0.iter().map(|(k, n)| format!("{n:>7} {k}")).collect();
        eprintln!("--- model tally ---\n{}", lines.join("\n"));
    }
}

fn tally() -> &'static Mutex<Tally> {
    static TALLY: OnceLock<Mutex<Tally>> = OnceLock::new();
    TALLY.get_or_init(|| Mutex::new(Tally(Default::default())))
}

fn run_case(config: Config, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut guard = sessions().lock().unwrap_or_else(|e| e.into_inner());
    let mut run = Run::start(&mut guard, config);
    for (step, op) in ops.iter().enumerate() {
        run.step = step;
        let got = run.call(op);
        let want = run.model.apply(op);
        prop_assert_eq!(
            &got,
            &want,
            "op {} ({:?}) returned",
            step,
            op
        );
        let seen = run.rows();
        run.learn_new_ids(&seen);
        if Tally::on() {
            tally().lock().unwrap().count(op, &want, &seen);
        }
        prop_assert_eq!(
            seen,
            run.expected(),
            "the rows after op {} ({:?})",
            step,
            op
        );
        let seen = run.workflow_rows();
        prop_assert_eq!(
            seen,
            run.expected_workflow(),
            "the steps and waits after op {} ({:?})",
            step,
            op
        );
    }
    let seen = run.workflow_by_task();
    prop_assert_eq!(
        seen,
        run.expected_workflow(),
        "queue_steps and queue_waits of every task at the end"
    );
    let mut by_get = run.rows_one_by_one();
    by_get.sort_by_key(|r| r.task_id);
    prop_assert_eq!(by_get, run.expected(), "queue_get of every task at the end");
    if Tally::on() {
        tally().lock().unwrap().print();
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("AEDB_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

proptest! {
    #![proptest_config(RunConfig {
        cases: cases(),
        // No regression files in the checkout: the failure message holds the
        // shrunk case, to be pasted into a test or the model's own tests.
        failure_persistence: None,
        ..RunConfig::default()
    })]

    #[test]
    fn the_sql_surface_follows_the_model((config, ops) in case()) {
        run_case(config, &ops)?;
    }
}
