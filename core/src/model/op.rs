//! The operations a model case is made of: calls of the SQL surface as a
//! session makes them, with task ids and fencing tokens given as
//! references the model resolves (the generator cannot know real ids).

/// The n-th task a case created (0-based): tasks are numbered in the order
/// their enqueue committed, which is also the order of their ids.
pub type Handle = usize;

/// Who makes a call: each is a login role of the integration harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Session {
    /// `aedb_queue_producer`: enqueues only.
    Producer,
    /// `aedb_queue_worker`: claims, settles, reads.
    Worker,
    /// Producer and worker: settles with follow-ups.
    Service,
    /// `aedb_queue_admin`: everything, including cancel, pause, retry_dead.
    Admin,
}

/// What a call needs of its caller's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    Produce,
    Work,
    Administer,
}

impl Session {
    pub const ALL: [Session; 4] = [
        Session::Producer,
        Session::Worker,
        Session::Service,
        Session::Admin,
    ];

    /// The EXECUTE rights each role's group gives (the admin's group is a
    /// member of the producer's and the worker's).
    pub fn has(self, right: Right) -> bool {
        matches!(
            (self, right),
            (Session::Admin, _)
                | (Session::Producer | Session::Service, Right::Produce)
                | (Session::Worker | Session::Service, Right::Work)
        )
    }
}

/// A delay as the model sees it: none, or one so long that it never
/// passes during a case (so no outcome depends on the wall clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delay {
    Now,
    Far,
}

/// A task named by a call: the `n % created`-th task of the case; the
/// `n % in_flight`-th task in flight (as `Known` when none is), which is
/// what workers mostly name; or an id that no task has (also what `Known`
/// means before any task exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskRef {
    Known(u8),
    InFlight(u8),
    /// The `n % parked`-th task parked by a sleep or an event wait whose
    /// time is still ahead (as `Known` when none is).
    Parked(u8),
    /// The `n % stepped`-th task with recorded steps that is live and not
    /// in flight (as `Known` when none is): what an operator retries from
    /// a step.
    Stepped(u8),
    Unknown,
}

/// The fencing token presented, relative to the task's current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRef {
    Current,
    /// One behind: a holder from before the last claim.
    Stale,
    /// One ahead: a token no claim has handed out yet.
    Ahead,
}

/// A step an operator names: the `n % recorded`-th step the task recorded
/// (`s-<n>` when it recorded none), or `s-<n>` whether recorded or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepRef {
    Recorded(u8),
    Named(u8),
}

/// How a sleep is asked for: `duration => '0'` (over at once), `duration
/// => '1 day'`, `until` an hour ago (over at once), `until` a day ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepFor {
    NoTime,
    ADay,
    UntilPast,
    UntilTomorrow,
}

impl SleepFor {
    /// Whether the wake time it sets is still ahead (a day at least).
    pub fn ahead(self) -> bool {
        matches!(self, SleepFor::ADay | SleepFor::UntilTomorrow)
    }
}

/// How a worker reports a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailHow {
    /// The task's own backoff (at least an hour in a case: see `EnqueueArgs`).
    Backoff,
    /// `retry_in => '0'`: ready again at once.
    RetryNow,
    /// `retry_in` far in the future.
    RetryFar,
    /// `dead_letter => true`.
    DeadLetter,
}

/// Arguments of `queue_enqueue` the model varies. Every enqueue of a case
/// passes `backoff_base => '1 hour'`, so a backoff never expires in a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueArgs {
    pub priority: i64,
    pub delay: Delay,
    pub max_attempts: Option<i32>,
    /// `key-<n>`.
    pub idempotency_key: Option<u8>,
    pub wait_for: Vec<TaskRef>,
    /// `on_parent_failure => 'run'` (else the default, `'dead_letter'`).
    pub run_on_parent_failure: bool,
    /// `ck-<n>`.
    pub concurrency_key: Option<u8>,
    /// `ok-<n>` (with a concurrency key too: refused, 22023).
    pub ordering_key: Option<u8>,
}

/// The state `queue_purge` names (`completed`: the kept completed tasks),
/// or one it does not know (22023).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeState {
    Waiting,
    Scheduled,
    Blocked,
    Ready,
    InFlight,
    Dead,
    Completed,
    Unknown,
}

impl PurgeState {
    pub const ALL: [PurgeState; 8] = [
        PurgeState::Waiting,
        PurgeState::Scheduled,
        PurgeState::Blocked,
        PurgeState::Ready,
        PurgeState::InFlight,
        PurgeState::Dead,
        PurgeState::Completed,
        PurgeState::Unknown,
    ];

    /// The `state` argument.
    pub fn as_str(self) -> &'static str {
        match self {
            PurgeState::Waiting => "waiting",
            PurgeState::Scheduled => "scheduled",
            PurgeState::Blocked => "blocked",
            PurgeState::Ready => "ready",
            PurgeState::InFlight => "in_flight",
            PurgeState::Dead => "dead",
            PurgeState::Completed => "completed",
            PurgeState::Unknown => "running",
        }
    }
}

/// One follow-up of a completion, into the same queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowUp {
    pub priority: i64,
    pub idempotency_key: Option<u8>,
    pub concurrency_key: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `queue_enqueue`, committed, or rolled back after the call returned.
    Enqueue {
        by: Session,
        args: EnqueueArgs,
        commit: bool,
    },
    /// `queue_enqueue_batch` of `entries` payloads (`{"op": n, "entry": i}`)
    /// with one set of options for all of them (the call takes no
    /// idempotency key: `args.idempotency_key` is None), committed or
    /// rolled back after the call returned.
    EnqueueBatch {
        by: Session,
        args: EnqueueArgs,
        entries: u8,
        commit: bool,
    },
    /// `queue_claim(owner_id => 'owner-<owner>', lease => '1 hour', max)`.
    Claim {
        by: Session,
        owner: u8,
        max: i32,
    },
    /// `queue_complete(result => {"r": result}, follow_ups, strict)`.
    Complete {
        by: Session,
        task: TaskRef,
        token: TokenRef,
        result: Option<u8>,
        follow_up: Option<FollowUp>,
        strict: bool,
    },
    /// `queue_complete_and_claim(owner_id => 'owner-<owner>', held, strict,
    /// lease => '1 hour', max)`: the completion, then a claim.
    CompleteAndClaim {
        by: Session,
        task: TaskRef,
        token: TokenRef,
        strict: bool,
        owner: u8,
        max: i32,
    },
    /// `queue_fail_and_claim(..., error, retry_in / dead_letter, strict,
    /// lease => '1 hour', max)`: the failure, then a claim.
    FailAndClaim {
        by: Session,
        task: TaskRef,
        token: TokenRef,
        how: FailHow,
        strict: bool,
        owner: u8,
        max: i32,
    },
    /// `queue_complete_batch(task_ids, fencing_tokens, strict)`.
    CompleteBatch {
        by: Session,
        entries: Vec<(TaskRef, TokenRef)>,
        strict: bool,
    },
    Fail {
        by: Session,
        task: TaskRef,
        token: TokenRef,
        how: FailHow,
    },
    /// `queue_heartbeat(extend => '1 hour', progress => {"p": progress})`.
    Heartbeat {
        by: Session,
        task: TaskRef,
        token: TokenRef,
        progress: u8,
    },
    /// `queue_release(delay)`.
    Release {
        by: Session,
        task: TaskRef,
        token: TokenRef,
        delay: Delay,
    },
    Cancel {
        by: Session,
        task: TaskRef,
    },
    /// `queue_retry_dead(task_id)`; None: every dead task.
    RetryDead {
        by: Session,
        task: Option<TaskRef>,
    },
    /// `queue_purge(queue, state, force)`.
    Purge {
        by: Session,
        state: PurgeState,
        force: bool,
    },
    Pause {
        by: Session,
    },
    Resume {
        by: Session,
    },
    /// `queue_step_record(step => 's-<step>', result => {"r": result},
    /// strict)`.
    StepRecord {
        by: Session,
        task: TaskRef,
        token: TokenRef,
        step: u8,
        result: Option<u8>,
        strict: bool,
    },
    /// `queue_sleep(step => 's-<step>', duration or until, strict)`.
    Sleep {
        by: Session,
        task: TaskRef,
        token: TokenRef,
        step: u8,
        how: SleepFor,
        strict: bool,
    },
    /// `queue_await_event(step => 's-<step>', key => 'k-<step>', timeout =>
    /// '1 day', strict)`: a step always waits for the key of its number
    /// (which key a second call of a step names is left out).
    AwaitEvent {
        by: Session,
        task: TaskRef,
        token: TokenRef,
        step: u8,
        strict: bool,
    },
    /// `queue_emit(key => 'k-<key>', payload => {"e": payload})`.
    Emit {
        by: Session,
        key: u8,
        payload: Option<u8>,
    },
    /// `queue_retry_from_step(task_id, step)`.
    RetryFromStep {
        by: Session,
        task: TaskRef,
        step: StepRef,
    },
    /// The wall clock reaches the task's wake times and deadlines: the
    /// superuser sets every sleep's wake time and every wait's deadline of
    /// the task that is still ahead to the current time, and the task's
    /// `not_before` too when it is parked for one of them (scheduled, not
    /// yet promoted: the next claim's reap, or a reap of the queue, does).
    TimePasses {
        task: TaskRef,
    },
    /// The operator makes a lease run out now (the superuser sets the
    /// task's `lease_deadline` to the current time): explicit, so the model
    /// knows which leases have expired. Nothing happens unless in flight.
    ExpireLease {
        task: TaskRef,
    },
}

impl Op {
    pub fn session(&self) -> Option<Session> {
        match self {
            Op::Enqueue { by, .. }
            | Op::EnqueueBatch { by, .. }
            | Op::Claim { by, .. }
            | Op::Complete { by, .. }
            | Op::CompleteAndClaim { by, .. }
            | Op::CompleteBatch { by, .. }
            | Op::FailAndClaim { by, .. }
            | Op::Fail { by, .. }
            | Op::Heartbeat { by, .. }
            | Op::Release { by, .. }
            | Op::Cancel { by, .. }
            | Op::RetryDead { by, .. }
            | Op::Purge { by, .. }
            | Op::Pause { by }
            | Op::Resume { by } => Some(*by),
            Op::StepRecord { by, .. }
            | Op::Sleep { by, .. }
            | Op::AwaitEvent { by, .. }
            | Op::Emit { by, .. }
            | Op::RetryFromStep { by, .. } => Some(*by),
            Op::ExpireLease { .. } | Op::TimePasses { .. } => None,
        }
    }
}
