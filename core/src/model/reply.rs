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
    /// The call raised this SQLSTATE and changed nothing.
    Error(&'static str),
}

pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
pub const INVALID_PARAMETER: &str = "22023";
pub const LEASE_LOST: &str = "40002";
