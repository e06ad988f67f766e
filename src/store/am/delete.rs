//! Rows deleted by their primary keys straight through the table's access
//! method, as `insert` writes rows: no statement, no SPI call, no executor
//! start and end, which were most of a one-task settle and much of a
//! batch's.
//!
//! It knows nothing of tasks: the caller judges each version of the row
//! (`holds`, the statement's WHERE) and reads what it needs of the deleted
//! one (`read`, its RETURNING). A concurrent update is met as a DELETE in
//! READ COMMITTED meets it: wait for the updater, lock the newest version
//! and judge it again (what the executor's EvalPlanQual does); under
//! REPEATABLE READ and SERIALIZABLE the call fails with 40001. It declines
//! (the caller falls back to its DELETE statement) where `guards` do, or
//! when the primary key is not one bigint column.

use pgrx::pg_sys::{self, Datum};

use super::guards::{Decline, Write};
use super::row::Row;
use super::target::{Index, Target};
use super::tm_result::{serialization_failure, unexpected};
use super::Admission;

#[cfg(any(test, feature = "pg_test"))]
thread_local! {
    /// Completed `delete_by_keys` calls in this backend (deleting or not),
    /// for tests of who used it.
    pub(crate) static CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Deletes the row of `relid` whose primary key is `key` if `holds` of it,
/// and returns `read` of the deleted version: `Some(None)` when no row
/// with the key is visible or `holds` is false of it, a decline (nothing
/// done) where the statement must run (see the module comment).
pub fn delete_by_key<R>(
    relid: pg_sys::Oid,
    key: i64,
    admission: &Admission<'_>,
    holds: impl Fn(&Row) -> bool,
    read: impl FnOnce(&Row) -> R,
) -> Result<Option<R>, Decline> {
    let mut read = Some(read);
    let deleted = delete_by_keys(relid, &[key], admission, holds, |row| {
        read.take().map(|read| read(row))
    })?;
    Ok(deleted.into_iter().next().flatten())
}

/// Deletes each row of `relid` whose primary key is in `keys` if `holds`
/// of it, in the order of `keys`, and returns `read` of each deleted
/// version; a decline (nothing done) where the statement must run. A key
/// named twice is met as a deleted row the second time.
///
/// Runs as one statement would: after a command counter increment (so it
/// sees this transaction's earlier writes), with the snapshot a new
/// statement gets; the deletions are visible to the next command.
pub fn delete_by_keys<R>(
    relid: pg_sys::Oid,
    keys: &[i64],
    admission: &Admission<'_>,
    holds: impl Fn(&Row) -> bool,
    mut read: impl FnMut(&Row) -> R,
) -> Result<Vec<R>, Decline> {
    // SAFETY: every pointer comes from Postgres and lives until the end of
    // this call (the slot, the scan) or of the transaction (the relations'
    // locks, kept as the executor keeps them); an error raised by Postgres
    // aborts the (sub)transaction, which releases buffers, relations and the
    // pushed snapshot.
    unsafe {
        let target = Target::open(Write::Delete, relid, Index::BigintPrimaryKey, admission)?;
        let (rel, snapshot) = (target.rel, target.snapshot);
        let slot = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        let scan = crate::pg_compat::index_beginscan(rel, target.index, snapshot, 1, 0);
        // Leave index entries of dead versions to VACUUM, as the statement's
        // bitmap scan does: marking one dead re-reads and locks its index
        // page on the next lookup, a fifth of a batch's cost per task.
        (*scan).xactStartedInRecovery = true;
        let row = Row::over(slot);
        let mut deleted = Vec::new();
        for &key in keys {
            let mut scan_key: pg_sys::ScanKeyData = std::mem::zeroed();
            pg_sys::ScanKeyInit(
                &mut scan_key,
                1,
                pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
                pg_sys::Oid::from(pg_sys::F_INT8EQ),
                Datum::from(key),
            );
            pg_sys::index_rescan(scan, &mut scan_key, 1, std::ptr::null_mut(), 0);
            let found =
                pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot);
            if found && holds(&row) && delete_newest(rel, snapshot, &row, &holds) {
                deleted.push(read(&row));
            }
        }
        pg_sys::index_endscan(scan);
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        target.close();
        #[cfg(any(test, feature = "pg_test"))]
        CALLS.with(|c| c.set(c.get() + 1));
        Ok(deleted)
    }
}

/// Deletes the version in `row`'s slot; if a concurrent transaction updated
/// it, deletes the newest version instead, as long as `holds` of it. True
/// when a version was deleted; the slot then holds it.
unsafe fn delete_newest(
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    row: &Row,
    holds: &impl Fn(&Row) -> bool,
) -> bool {
    unsafe {
        let am = &*(*rel).rd_tableam;
        let command = pg_sys::GetCurrentCommandId(true);
        loop {
            let mut tid = (*row.slot()).tts_tid;
            let mut failure: pg_sys::TM_FailureData = std::mem::zeroed();
            let deleted = am.tuple_delete.expect("table AM deletes")(
                rel,
                &mut tid,
                command,
                snapshot,
                std::ptr::null_mut(),
                true,
                &mut failure,
                false,
            );
            match deleted {
                pg_sys::TM_Result::TM_Ok => return true,
                // Deleted or updated by this transaction since the
                // snapshot: the DELETE statement skips it too.
                pg_sys::TM_Result::TM_SelfModified => return false,
                pg_sys::TM_Result::TM_Updated | pg_sys::TM_Result::TM_Deleted
                    if pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 =>
                {
                    serialization_failure(deleted)
                }
                pg_sys::TM_Result::TM_Deleted => return false,
                pg_sys::TM_Result::TM_Updated => {
                    let locked = am.tuple_lock.expect("table AM locks")(
                        rel,
                        &mut tid,
                        snapshot,
                        row.slot(),
                        command,
                        pg_sys::LockTupleMode::LockTupleExclusive,
                        pg_sys::LockWaitPolicy::LockWaitBlock,
                        pg_sys::TUPLE_LOCK_FLAG_FIND_LAST_VERSION as u8,
                        &mut failure,
                    );
                    match locked {
                        pg_sys::TM_Result::TM_Ok if holds(row) => continue,
                        pg_sys::TM_Result::TM_Ok
                        | pg_sys::TM_Result::TM_SelfModified
                        | pg_sys::TM_Result::TM_Deleted => return false,
                        other => unexpected("tuple_lock", other),
                    }
                }
                other => unexpected("tuple_delete", other),
            }
        }
    }
}
