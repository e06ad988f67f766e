//! What every direct write that finds its rows through an index does first
//! and last, as a statement would: refuse a read-only transaction, lock the
//! table and the index, pass `guards` and the caller's shape, and run under
//! the snapshot a new statement gets, after a command counter increment so
//! that it sees the transaction's earlier writes; then close keeping the
//! locks until the end of the transaction, and make its writes visible to
//! the next command.

use pgrx::pg_sys::{self, Oid};

use super::guards::{self, Decline, Write};
use super::Admission;

/// The index a write reads its rows through.
pub(super) enum Index {
    /// This one.
    Named(Oid),
    /// The table's primary key, which must be one bigint column.
    BigintPrimaryKey,
}

/// The locked table and index, and the statement's snapshot.
pub(super) struct Target {
    pub rel: pg_sys::Relation,
    pub index: pg_sys::Relation,
    pub snapshot: pg_sys::Snapshot,
}

const LOCK: pg_sys::LOCKMODE = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;

/// Raises 25006 in a read-only transaction, as the executor does before any
/// write: the heap itself would take the rows.
pub fn refuse_if_read_only(write: Write) {
    let command = match write {
        Write::Insert => c"INSERT",
        Write::Update => c"UPDATE",
        Write::Delete => c"DELETE",
    };
    // SAFETY: reads the backend's flag (all PreventCommandIfReadOnly reads),
    // so the usual case makes no call; raises a Postgres error when it is set.
    unsafe {
        if pg_sys::XactReadOnly {
            pg_sys::PreventCommandIfReadOnly(command.as_ptr());
        }
    }
}

impl Target {
    /// Opens `relid` and its `index` for `write`, or declines with both
    /// closed.
    ///
    /// # Safety
    /// Called inside a transaction; the target is closed with `close`
    /// (or released by the abort of an error).
    pub(super) unsafe fn open(
        write: Write,
        relid: Oid,
        index: Index,
        admission: &Admission<'_>,
    ) -> Result<Target, Decline> {
        unsafe {
            refuse_if_read_only(write);
            let rel = pg_sys::table_open(relid, LOCK);
            if let Err(decline) = guards::table(write, rel, admission.role) {
                pg_sys::table_close(rel, LOCK);
                return Err(decline);
            }
            let (oid, bigint_key) = match index {
                Index::Named(oid) => (oid, false),
                Index::BigintPrimaryKey => (crate::pg_compat::primary_key_index(rel), true),
            };
            if oid == pg_sys::InvalidOid {
                pg_sys::table_close(rel, LOCK);
                return Err(Decline::Shape);
            }
            let index = pg_sys::index_open(oid, LOCK);
            let judged = if bigint_key && !one_bigint_column(rel, index) {
                Err(Decline::Shape)
            } else {
                guards::scan_index(index).and_then(|()| (admission.shape)(rel, Some(index)))
            };
            if let Err(decline) = judged {
                pg_sys::index_close(index, LOCK);
                pg_sys::table_close(rel, LOCK);
                return Err(decline);
            }
            pg_sys::CommandCounterIncrement();
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
            pg_sys::UpdateActiveSnapshotCommandId();
            Ok(Target {
                rel,
                index,
                snapshot: pg_sys::GetActiveSnapshot(),
            })
        }
    }

    /// Closes the table and index keeping their locks, pops the snapshot
    /// and makes the writes visible to the next command.
    pub(super) unsafe fn close(self) {
        unsafe {
            pg_sys::index_close(self.index, pg_sys::NoLock as pg_sys::LOCKMODE);
            pg_sys::table_close(self.rel, pg_sys::NoLock as pg_sys::LOCKMODE);
            pg_sys::PopActiveSnapshot();
            pg_sys::CommandCounterIncrement();
        }
    }
}

/// Whether `index`'s key is one bigint column of `rel`.
unsafe fn one_bigint_column(rel: pg_sys::Relation, index: pg_sys::Relation) -> bool {
    unsafe {
        let form = &*(*index).rd_index;
        let columns = form.indkey.values.as_slice(form.indnatts as usize);
        let desc = (*rel).rd_att;
        let attrs = crate::pg_compat::attributes(desc);
        matches!(columns, [column] if *column > 0
            && attrs[*column as usize - 1].atttypid == pg_sys::INT8OID)
    }
}
