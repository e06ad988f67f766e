//! What a call should return, in the model's terms (handles, not ids).

use super::op::Handle;

/// `aedb_queue.outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    LeaseLost,
}

/// One row of `queue_claim`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub task: Handle,
    pub attempts: i32,
    pub fencing_token: i64,
    pub priority: i64,
    pub progress: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A committed enqueue: the task, and whether a key matched.
    Enqueued {
        task: Handle,
        deduplicated: bool,
    },
    /// An enqueue rolled back after it returned: the task a key matched,
    /// else a new id that no task keeps.
    RolledBack {
        deduplicated_to: Option<Handle>,
    },
    /// A committed `queue_enqueue_batch`: its tasks, in payload order.
    EnqueuedBatch(Vec<Handle>),
    /// A batch rolled back after it returned this many ids, none of which
    /// a task keeps.
    RolledBackBatch(usize),
    Claimed(Vec<Claimed>),
    /// A settle-and-claim call: the settlement's outcome, then the claim's rows.
    SettledAndClaimed(Outcome, Vec<Claimed>),
    Outcome(Outcome),
    /// `queue_complete_batch`: one outcome per entry, in order.
    Outcomes(Vec<Outcome>),
    Bool(bool),
    Count(i64),
    /// The superuser's lease change, which returns nothing.
    Done,
    /// `queue_sleep`: outcome, waiting, wake_at.
    Slept {
        outcome: Outcome,
        waiting: bool,
        wake_at: Option<At>,
    },
    /// `queue_await_event`: outcome, waiting, wake_at (the deadline, when
    /// the call made or read the wait), payload (`{"e": n}`), timed_out.
    Awaited {
        outcome: Outcome,
        waiting: bool,
        wake_at: Option<At>,
        payload: Option<u8>,
        timed_out: bool,
    },
    /// `queue_retry_from_step`: the steps dropped (`s-<n>`), in order.
    Steps(Vec<u8>),
    /// The call raised this SQLSTATE and changed nothing.
    Error(&'static str),
}

pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
pub const INVALID_PARAMETER: &str = "22023";
pub const LEASE_LOST: &str = "40002";
/// A step recorded already (`queue_step_record`, 23505).
pub const UNIQUE_VIOLATION: &str = "23505";
/// `queue_retry_from_step` of a task in flight.
pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";

/// A time on the database's clock, named by the op (its index in the case)
/// that set it: the first call of a sleep or an event wait (now + the
/// duration, the `until` given, or now + the timeout), or a `TimePasses`
/// (the current time). The driver maps each real time it meets to the op
/// where it first met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct At(pub usize);
