//! A task as the model keeps it, and the row a reader should see of it.

use super::op::Handle;
use super::reply::At;

/// Where a task stands. `Gone`: cancelled, or completed in a queue that
/// keeps nothing (no row in any table, yet its idempotency key holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Waiting,
    Scheduled,
    Blocked,
    Ready,
    InFlight,
    Dead,
    Completed,
    Gone,
}

impl State {
    /// The `state` column of a task row.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Waiting => "waiting",
            State::Scheduled => "scheduled",
            State::Blocked => "blocked",
            State::Ready => "ready",
            State::InFlight => "in_flight",
            State::Dead => "dead",
            State::Completed => "completed",
            State::Gone => "gone",
        }
    }

    /// In the task table (cancel finds it; a child waits for it).
    pub fn is_live(self) -> bool {
        !matches!(self, State::Completed | State::Gone)
    }
}

/// Why a task's `last_error` is what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LastError {
    /// `queue_fail`'s `error` argument, `error at op <n>`.
    Failed(usize),
    /// A reclaimed lease: requeued, or dead with its attempts exhausted.
    LeaseExpired { exhausted: bool },
    /// A parent left without completing (`is dead`, `was dead-lettered`,
    /// `was cancelled`, `was purged`): the text is `rules::dead_parent_error`'s.
    Parent { parent: Handle, why: &'static str },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub state: State,
    pub priority: i64,
    pub attempts: i32,
    pub max_attempts: i32,
    pub owner: Option<u8>,
    pub fencing_token: i64,
    /// In flight with its lease run out and not yet reclaimed.
    pub lease_expired: bool,
    /// The op (its index in the case) that enqueued it: `{"op": n}`.
    pub payload_op: usize,
    /// Its place in a batch: `{"op": n, "entry": i}`.
    pub payload_entry: Option<u8>,
    pub progress: Option<u8>,
    pub last_error: Option<LastError>,
    pub idempotency_key: Option<u8>,
    pub concurrency_key: Option<u8>,
    pub ordering_key: Option<u8>,
    pub result: Option<u8>,
    /// Parents not yet completed (while `Waiting`).
    pub waiting_on: usize,
    pub run_on_parent_failure: bool,
    /// Its `not_before` lies beyond the case (a `Far` delay).
    pub due_later: bool,
    /// Kept after completion: a child was ever linked to it while live, it
    /// was linked to a parent live or completed, or it recorded a step.
    pub has_dependents: bool,
    /// Children linked to it, until it fails (then the links go).
    pub children: Vec<Handle>,
    /// Its workflow steps, in the order they were recorded.
    pub steps: Vec<Step>,
    /// Its event waits (a step each), in the order they were made.
    pub waits: Vec<EventWaitRow>,
    /// Scheduled by a sleep or an event wait whose time is still ahead.
    pub parked: bool,
    /// Scheduled with its `not_before` passed (a `TimePasses` of a parked
    /// task): the next reap (a claim's, a retry from a step's) promotes it.
    pub due: bool,
}

/// What a step recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepKind {
    /// `queue_step_record`'s result, `{"r": n}` or NULL.
    Record(Option<u8>),
    /// A sleep: `{"until": wake time}`.
    Sleep { until: At, ahead: bool },
    /// An event wait that ended: `{"payload": {"e": n} or null, "timed_out": b}`.
    Event {
        payload: Option<u8>,
        timed_out: bool,
    },
}

/// One row of `queue_steps` (recorded_at left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// `s-<n>`.
    pub name: u8,
    pub kind: StepKind,
    pub attempt: i32,
    pub fencing_token: i64,
}

/// One row of `queue_waits`: the step `s-<step>` waits for `k-<key>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventWaitRow {
    pub step: u8,
    pub key: u8,
    pub deadline: At,
    /// The deadline is still ahead.
    pub ahead: bool,
}

/// What `queue_get` / `queue_list` should show of a task (times left out:
/// a case never depends on the clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub task: Handle,
    pub state: &'static str,
    pub priority: i64,
    pub attempts: i32,
    pub max_attempts: i32,
    pub owner: Option<u8>,
    pub fencing_token: i64,
    pub payload_op: usize,
    pub payload_entry: Option<u8>,
    pub progress: Option<u8>,
    pub last_error: Option<LastError>,
    pub idempotency_key: Option<u8>,
    pub result: Option<u8>,
}

impl Task {
    pub fn row(&self, task: Handle) -> Row {
        Row {
            task,
            state: self.state.as_str(),
            priority: self.priority,
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            owner: self.owner,
            fencing_token: self.fencing_token,
            payload_op: self.payload_op,
            payload_entry: self.payload_entry,
            progress: self.progress,
            // The archive of completed tasks keeps no error (the errors
            // of a live task are queue_errors' business).
            last_error: match self.state {
                State::Completed => None,
                _ => self.last_error.clone(),
            },
            idempotency_key: self.idempotency_key,
            result: self.result,
        }
    }
}
