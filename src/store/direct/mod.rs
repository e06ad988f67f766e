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

use pgrx::pg_sys;

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
    judge_now(op, &admission)
}

/// `would_decline`'s judgement, with the table (and for a claim, the ready
/// index) locked: only to read them, so that it runs on a standby too.
fn judge_now(op: Operation, admission: &Admission<'_>) -> crate::errors::Result<Option<Decline>> {
    use crate::errors::internal;
    let relid =
        crate::oids::relation_oid(c"task").ok_or_else(|| internal("no table aedb_queue.task"))?;
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    // SAFETY: opened and closed here; the locks stay until the end of the
    // transaction, as a statement's.
    unsafe {
        let rel = pg_sys::table_open(relid, lock);
        let mut judged = guards::table(op.write(), rel, admission.role);
        if judged.is_ok() {
            judged = if op == Operation::Claim {
                let index = crate::oids::relation_oid(c"task_ready_idx")
                    .ok_or_else(|| internal("no index aedb_queue.task_ready_idx"))?;
                let index = pg_sys::index_open(index, lock);
                let judged =
                    guards::scan_index(index).and_then(|()| (admission.shape)(rel, Some(index)));
                pg_sys::index_close(index, pg_sys::NoLock as pg_sys::LOCKMODE);
                judged
            } else {
                (admission.shape)(rel, None)
            };
        }
        pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        Ok(judged.err())
    }
}

/// Why a decline sends the task operations to their statements, in words,
/// for `queue_write_path()`.
pub(crate) fn reason(decline: Decline) -> &'static str {
    match decline {
        Decline::SwitchedOff => "aedb_queue.direct_writes is off",
        Decline::ExecutorHooks => {
            "an executor hook is installed and aedb_queue.direct_writes is auto"
        }
        Decline::ParallelMode => "the transaction is in parallel mode",
        Decline::NotPlainTable => "the task table is not a plain table",
        Decline::NotHeap => "the task table's access method is not heap",
        Decline::Partition => "the task table is a partition",
        Decline::Triggers => "the task table has triggers",
        Decline::RowSecurity => "the task table has row-level security enabled",
        Decline::StoredGenerated => "the task table has a stored generated column",
        Decline::VirtualGenerated => "the task table has a virtual generated column",
        Decline::Privileges => "the tables' owner lacks a privilege on the task table",
        Decline::Shape => "the task table or its ready index differs from the schema",
        Decline::ScanIndex => "an index the write reads is not valid, ready and live",
        Decline::LeftOutColumn => "a column the write leaves out has a default or is NOT NULL",
        Decline::Schema => "the database has an older schema (ALTER EXTENSION aedb_queue UPDATE)",
    }
}
