//! The seam between the task operations and the direct writes (`am`): the
//! one place that decides, per operation and per table state, whether an
//! enqueue, claim or completion writes through the access methods or runs
//! its statement. Every decline is the statement's turn, never an error.
//!
//! The description of what the direct path supports is `am::guards` (the
//! executor's steps, for any table) and `shape` (the task table and ready
//! index as `sql/schema.sql` defines them, which the writes assume), both
//! judged after the table is locked.

pub(super) mod claim;
pub(super) mod complete;
mod shape;

use super::am::{guards, Admission, Decline, Write};
use super::{schema_level, SchemaLevel};

/// A task operation that has a direct path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `queue_enqueue`, `queue_enqueue_batch`, a completion's follow-ups.
    Enqueue,
    /// `queue_claim`, `queue_complete_and_claim`'s claim.
    Claim,
    /// `queue_complete` of a task with no dependents in a queue that keeps
    /// no archive, and `queue_complete_batch`.
    Complete,
}

impl Operation {
    pub fn write(self) -> Write {
        match self {
            Operation::Enqueue => Write::Insert,
            Operation::Claim => Write::Update,
            Operation::Complete => Write::Delete,
        }
    }
}

/// The schema the direct writes match: the columns and indexes of this
/// version. Between installing a newer library and `ALTER EXTENSION
/// UPDATE`, older schemas run the statements.
const SCHEMA: SchemaLevel = SchemaLevel::V080;

/// What `op`'s direct write is admitted under, or why it declines before
/// the table is opened (the switch, executor hooks, the schema).
pub(super) fn admission(op: Operation) -> Result<Admission<'static>, Decline> {
    guards::switched_on()?;
    if schema_level() < SCHEMA {
        return Err(Decline::Schema);
    }
    // The statements run as the tables' owner (`owner`): so is the
    // direct write checked.
    let role = super::owner::tables_owner().map_err(|_| Decline::Shape)?;
    let shape: &'static dyn Fn(_, _) -> _ = match op {
        Operation::Claim => &shape::task_table_and_ready_index,
        Operation::Enqueue | Operation::Complete => &shape::task_table,
    };
    Ok(Admission { role, shape })
}

/// Where `op` would write now: None for the direct path, else why not.
/// What `queue_write_path()` reports; the table is locked to judge it.
pub(crate) fn would_decline(op: Operation) -> crate::errors::Result<Option<Decline>> {
    let admission = match admission(op) {
        Ok(admission) => admission,
        Err(decline) => return Ok(Some(decline)),
    };
    shape::judge_now(op, &admission)
}
