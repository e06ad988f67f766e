//! Rows taken in an index's order, locked with SKIP LOCKED and updated
//! straight through the table's access method: what a claim's `SELECT ...
//! FOR UPDATE SKIP LOCKED` and its `UPDATE ... RETURNING` did, without a
//! statement. The executor's start and end, its projections and the Tid
//! Scan were half of a one-task claim.
//!
//! It knows nothing of tasks: the caller gives the index ranges to read in
//! turn, judges each visible version (`holds`), says what the new version
//! holds (`change`) and reads it (`read`, the RETURNING). A row locked or
//! changed by another transaction since the snapshot is passed over, as
//! SKIP LOCKED passes over a locked one (a READ COMMITTED statement would
//! follow a committed update to the newest version; a claim leaves that
//! task to the next one); under REPEATABLE READ and SERIALIZABLE a row
//! changed since the snapshot fails the call with 40001, as the statement's
//! row lock does. It declines (the caller runs its statement) where
//! `guards` do.

use std::ffi::CStr;

use pgrx::pg_sys::{self, Datum, Oid};

use super::guards::{Decline, Write};
use super::index_cache::OpenIndexes;
use super::refute::Constant;
use super::row::Row;
use super::target::{Index, Target};
use super::tm_result::{serialization_failure, unexpected};
use super::Admission;
use crate::pg_compat::{self, IndexUpdate};

/// One condition of an index scan: `column <op> argument`, with `procedure`
/// the operator's function and `strategy` its btree strategy.
#[derive(Clone, Copy)]
pub struct Key {
    pub column: i16,
    pub strategy: u16,
    pub procedure: Oid,
    pub argument: Datum,
}

/// The new version of a row being written, filled from the old one.
pub struct Changes<'a> {
    row: &'a Row,
    values: &'a mut [Datum],
    nulls: &'a mut [bool],
    /// The columns set so far (attribute numbers).
    set: &'a mut Vec<i16>,
}

impl Changes<'_> {
    /// Sets column `name`; false when there is no such column.
    pub fn set(&mut self, name: &CStr, value: Option<Datum>) -> bool {
        let Some(column) = self.row.column(name) else {
            return false;
        };
        let at = column as usize - 1;
        self.values[at] = value.unwrap_or(Datum::from(0usize));
        self.nulls[at] = value.is_none();
        self.set.push(column as i16);
        true
    }
}

/// What every new version holds alike, for `refute`: by-value columns set
/// to the same value in every row (None = NULL).
pub type Constants<'a> = &'a [(&'a CStr, Option<Datum>)];

/// Updates up to `limit` rows of `relid` met in `index` (a btree on it),
/// reading each of `ranges` (its conditions) in index order in turn: each
/// visible row `holds` of that this transaction can lock at once is locked
/// and given the values `change` sets, and `read` of its new version is
/// returned. A `change` that sets a column that does not exist fails the
/// call. A decline (nothing done) where the statement must run.
///
/// Runs as one statement would: after a command counter increment, with
/// the snapshot a new statement gets; the updates are visible to the next
/// command.
#[allow(clippy::too_many_arguments)]
pub fn update_in_order<R>(
    relid: Oid,
    index: Oid,
    ranges: &[&[Key]],
    limit: usize,
    constants: Constants<'_>,
    admission: &Admission<'_>,
    holds: impl Fn(&Row) -> bool,
    mut change: impl FnMut(&Row, &mut Changes<'_>) -> bool,
    mut read: impl FnMut(&Row) -> R,
) -> Result<Vec<R>, Decline> {
    // SAFETY: every pointer comes from Postgres and lives until the end of
    // this call (slots, scans, the executor state) or of the transaction
    // (the relations' locks, kept as the executor keeps them); an error
    // raised by Postgres aborts the (sub)transaction, which releases
    // buffers, relations and the pushed snapshot.
    unsafe {
        let target = Target::open(Write::Update, relid, Index::Named(index), admission)?;
        let (rel, scanned, snapshot) = (target.rel, target.index, target.snapshot);
        let writer = Writer::open(rel, constants);
        let found = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        let row = Row::over(found);
        // One `Row` over the writer's slot for every new version: its
        // column numbers are found once per call, not once per row.
        let written = Row::over(writer.new);
        let mut updated = Vec::new();
        for range in ranges {
            if updated.len() >= limit {
                break;
            }
            let mut keys = scan_keys(scanned, range);
            let scan =
                crate::pg_compat::index_beginscan(rel, scanned, snapshot, keys.len() as i32, 0);
            pg_sys::index_rescan(
                scan,
                keys.as_mut_ptr(),
                keys.len() as i32,
                std::ptr::null_mut(),
                0,
            );
            while updated.len() < limit
                && pg_sys::index_getnext_slot(
                    scan,
                    pg_sys::ScanDirection::ForwardScanDirection,
                    found,
                )
            {
                if holds(&row) && lock_at_once(rel, snapshot, found) {
                    writer.update(rel, snapshot, &row, &mut change);
                    updated.push(read(&written));
                }
            }
            pg_sys::index_endscan(scan);
        }
        pg_sys::ExecDropSingleTupleTableSlot(found);
        writer.close();
        target.close();
        #[cfg(any(test, feature = "pg_test"))]
        CALLS.with(|c| c.set(c.get() + 1));
        Ok(updated)
    }
}

#[cfg(any(test, feature = "pg_test"))]
thread_local! {
    /// Completed `update_in_order` calls in this backend, for tests of who
    /// used it.
    pub(crate) static CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The scan keys of `range` on `index`, with the index column's collation.
unsafe fn scan_keys(index: pg_sys::Relation, range: &[Key]) -> Vec<pg_sys::ScanKeyData> {
    unsafe {
        range
            .iter()
            .map(|key| {
                let mut data: pg_sys::ScanKeyData = std::mem::zeroed();
                pg_sys::ScanKeyEntryInitialize(
                    &mut data,
                    0,
                    key.column,
                    key.strategy,
                    pg_sys::InvalidOid,
                    *(*index).rd_indcollation.add(key.column as usize - 1),
                    key.procedure,
                    key.argument,
                );
                data
            })
            .collect()
    }
}

/// Locks the version in `slot` for update if no other transaction holds
/// or changed it: false (SKIP LOCKED) when one does. Under REPEATABLE READ
/// or SERIALIZABLE a version changed since the snapshot raises 40001.
unsafe fn lock_at_once(
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    unsafe {
        let am = &*(*rel).rd_tableam;
        let mut tid = (*slot).tts_tid;
        let mut failure: pg_sys::TM_FailureData = std::mem::zeroed();
        let locked = am.tuple_lock.expect("table AM locks")(
            rel,
            &mut tid,
            snapshot,
            slot,
            pg_sys::GetCurrentCommandId(true),
            pg_sys::LockTupleMode::LockTupleExclusive,
            pg_sys::LockWaitPolicy::LockWaitSkip,
            0,
            &mut failure,
        );
        match locked {
            pg_sys::TM_Result::TM_Ok => true,
            pg_sys::TM_Result::TM_WouldBlock | pg_sys::TM_Result::TM_SelfModified => false,
            pg_sys::TM_Result::TM_Updated | pg_sys::TM_Result::TM_Deleted
                if pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 =>
            {
                serialization_failure(locked)
            }
            pg_sys::TM_Result::TM_Updated | pg_sys::TM_Result::TM_Deleted => false,
            other => unexpected("tuple_lock", other),
        }
    }
}

/// The executor state, indexes and new-version slot the updates share.
struct Writer {
    estate: *mut pg_sys::EState,
    result_rel: *mut pg_sys::ResultRelInfo,
    indexes: Option<OpenIndexes>,
    /// Per open index, the attributes its keys and expressions read (0: the
    /// whole row).
    index_attrs: Vec<Vec<i16>>,
    new: *mut pg_sys::TupleTableSlot,
    has_constraints: bool,
}

impl Writer {
    unsafe fn open(rel: pg_sys::Relation, constants: Constants<'_>) -> Writer {
        unsafe {
            let estate = pg_sys::CreateExecutorState();
            let result_rel = pg_sys::palloc0(std::mem::size_of::<pg_sys::ResultRelInfo>())
                as *mut pg_sys::ResultRelInfo;
            pg_sys::InitResultRelInfo(result_rel, rel, 0, std::ptr::null_mut(), 0);
            let constants = refutable(rel, constants);
            let indexes = OpenIndexes::open(result_rel, rel, estate, &constants);
            Writer {
                estate,
                result_rel,
                indexes: Some(indexes),
                index_attrs: index_attrs(result_rel),
                new: pg_sys::MakeTupleTableSlot((*rel).rd_att, &raw const pg_sys::TTSOpsVirtual),
                has_constraints: !(*(*rel).rd_att).constr.is_null(),
            }
        }
    }

    /// Writes the new version of the locked row in `old` into the table
    /// and `self.new` (valid until the next update).
    unsafe fn update(
        &self,
        rel: pg_sys::Relation,
        snapshot: pg_sys::Snapshot,
        old: &Row,
        change: &mut impl FnMut(&Row, &mut Changes<'_>) -> bool,
    ) {
        unsafe {
            let from = old.slot();
            pg_sys::slot_getsomeattrs_int(from, (*(*from).tts_tupleDescriptor).natts);
            let natts = (*(*rel).rd_att).natts as usize;
            let new = self.new;
            pg_sys::ExecClearTuple(new);
            let values = std::slice::from_raw_parts_mut((*new).tts_values, natts);
            let nulls = std::slice::from_raw_parts_mut((*new).tts_isnull, natts);
            values.copy_from_slice(std::slice::from_raw_parts((*from).tts_values, natts));
            nulls.copy_from_slice(std::slice::from_raw_parts((*from).tts_isnull, natts));
            let mut set = Vec::new();
            let mut changes = Changes {
                row: old,
                values,
                nulls,
                set: &mut set,
            };
            if !change(old, &mut changes) {
                pgrx::error!("update_in_order: a change names a column the table does not have");
            }
            pg_sys::ExecStoreVirtualTuple(new);
            super::insert::reset_per_row_memory(self.estate);
            if self.has_constraints {
                pg_sys::ExecConstraints(self.result_rel, new, self.estate);
            }
            let mut tid = (*from).tts_tid;
            let mut failure: pg_sys::TM_FailureData = std::mem::zeroed();
            let mut lock_mode = pg_sys::LockTupleMode::LockTupleExclusive;
            let (written, update_indexes) =
                pg_compat::tuple_update(rel, &mut tid, new, snapshot, &mut failure, &mut lock_mode);
            if written != pg_sys::TM_Result::TM_Ok {
                // The row is locked by this transaction: nothing else can
                // have changed it.
                unexpected("tuple_update", written);
            }
            if update_indexes != IndexUpdate::None {
                self.hint_unchanged_indexes(&set);
                // As the executor's UPDATE: after a HOT update that changed
                // a summarized column, only the summarizing indexes.
                let only_summarizing = update_indexes == IndexUpdate::Summarizing;
                pg_compat::insert_index_tuples(
                    self.result_rel,
                    new,
                    self.estate,
                    true,
                    only_summarizing,
                );
            }
        }
    }

    /// Tells each index whether the update left its keys alone, as an
    /// UPDATE statement's target list does (`index_unchanged_by_update`):
    /// a btree then tries a bottom-up deletion of old versions before
    /// splitting a page, and only then. Without a range table entry the
    /// executor would call every index unchanged.
    unsafe fn hint_unchanged_indexes(&self, set: &[i16]) {
        unsafe {
            for (i, attrs) in self.index_attrs.iter().enumerate() {
                let info = *(*self.result_rel).ri_IndexRelationInfo.add(i);
                if info.is_null() {
                    continue;
                }
                (*info).ii_CheckedUnchanged = true;
                (*info).ii_IndexUnchanged = !attrs.iter().any(|a| *a == 0 || set.contains(a));
            }
        }
    }

    unsafe fn close(mut self) {
        unsafe {
            pg_sys::ExecDropSingleTupleTableSlot(self.new);
            drop(self.indexes.take());
            pg_sys::FreeExecutorState(self.estate);
        }
    }
}

/// `constants` as attribute numbers and by-value words; names the table
/// lacks are left out (they refute nothing).
unsafe fn refutable(rel: pg_sys::Relation, constants: Constants<'_>) -> Vec<Constant> {
    unsafe {
        let desc = (*rel).rd_att;
        let attrs = crate::pg_compat::attributes(desc);
        let mut out: Vec<Constant> = constants
            .iter()
            .filter_map(|(name, value)| {
                let at = super::insert::find_attribute(attrs, name, 0)?;
                let value = match value {
                    None => None,
                    Some(datum) if attrs[at].attbyval => Some(datum.value()),
                    Some(_) => return None,
                };
                Some(Constant {
                    attno: at as i16 + 1,
                    value,
                })
            })
            .collect();
        out.sort_by_key(|c| c.attno);
        out
    }
}

/// Per index open in `result_rel`, the attributes its keys and expressions
/// read (0 for a whole-row reference).
unsafe fn index_attrs(result_rel: *mut pg_sys::ResultRelInfo) -> Vec<Vec<i16>> {
    unsafe {
        let count = (*result_rel).ri_NumIndices.max(0) as usize;
        (0..count)
            .map(|i| {
                let info = *(*result_rel).ri_IndexRelationInfo.add(i);
                if info.is_null() {
                    return Vec::new();
                }
                let keys = (*info).ii_NumIndexAttrs as usize;
                let mut attrs: Vec<i16> = (&(*info).ii_IndexAttrNumbers)[..keys]
                    .iter()
                    .copied()
                    .filter(|&a| a != 0)
                    .collect();
                let expressions = super::refute::attributes_read((*info).ii_Expressions.cast());
                attrs.extend(expressions.into_iter().map(|attno| attno.max(0) as i16));
                attrs
            })
            .collect()
    }
}
