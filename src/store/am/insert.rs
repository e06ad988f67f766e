//! Many rows written to one table the way COPY writes them: straight to the
//! heap with `heap_multi_insert` (one WAL record per page, not per row), then
//! into each index, with the table's constraints checked on every row.
//!
//! It skips what a statement costs beyond its rows: the executor's start
//! and end and the SPI connection (most of a one-row enqueue), and for a
//! batch the per-row work of `INSERT ... SELECT unnest(...)` (a function
//! scan into a tuplestore, a projection, a heap insert and WAL record per
//! row). It does no SQL and knows nothing of tasks: the caller says what
//! each column holds. It declines (and the caller falls back to its INSERT
//! statement) where `guards` do, or when a column left out has a default
//! or must not be NULL.

use std::ffi::CStr;

use pgrx::pg_sys::{self, Datum};

use super::guards::{self, Decline, Write};
use super::index_cache::OpenIndexes;
use super::refute::Constant;
use super::Admission;

/// What one column holds in every row written.
pub enum Values<'a> {
    /// The same value in every row.
    Same(Datum),
    /// One value per row; `None` is NULL.
    PerRow(&'a [Option<Datum>]),
}

/// Rows per `heap_multi_insert` call, as COPY buffers them.
const ROWS_PER_CALL: usize = 1000;

/// Up to this many slots, they are over the relation's own descriptor.
const PINNED_SLOTS_MAX: usize = 16;

/// Writes `rows` rows to `relid`, each column named in `columns` set from its
/// `Values` and every other column NULL. Declines, having written nothing,
/// where the statement must run (see the module comment).
///
/// The caller holds an SPI connection or runs inside a function call: the
/// rows are written as the current command and made visible to the next.
pub fn write(
    relid: pg_sys::Oid,
    columns: &[(&CStr, Values<'_>)],
    rows: usize,
    admission: &Admission<'_>,
) -> Result<(), Decline> {
    // SAFETY: every pointer below comes from Postgres and lives in the
    // executor state's memory context or the current one; errors raised by
    // Postgres abort the transaction, which releases the relation, its
    // locks and buffers.
    unsafe {
        super::target::refuse_if_read_only(Write::Insert);
        let rel = pg_sys::table_open(relid, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
        let layout = guards::table(Write::Insert, rel, admission.role)
            .and_then(|()| (admission.shape)(rel, None))
            .and_then(|()| layout(rel, columns).ok_or_else(|| Decline::LeftOutColumn));
        let layout = match layout {
            Ok(layout) => layout,
            Err(decline) => {
                pg_sys::table_close(rel, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
                return Err(decline);
            }
        };
        insert_rows(rel, &layout, rows);
        // Keep the lock until commit, as the executor does.
        pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::CommandCounterIncrement();
        #[cfg(any(test, feature = "pg_test"))]
        WRITES.with(|w| w.set(w.get() + 1));
        Ok(())
    }
}

#[cfg(any(test, feature = "pg_test"))]
thread_local! {
    /// Completed `write` calls in this backend, for tests of who used it.
    pub(crate) static WRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// For each attribute of the table in order, the values it gets; `None` for
/// NULL. None at all when an attribute left out may not be NULL or has a
/// default, or a named column does not exist or is named twice.
///
/// Each column is looked for from the attribute after the previous one's,
/// so columns named in the table's order cost one comparison each, where
/// checking every attribute against every column cost a one-row enqueue
/// some 25 × 13 of them.
unsafe fn layout<'a>(
    rel: pg_sys::Relation,
    columns: &'a [(&CStr, Values<'a>)],
) -> Option<Vec<Option<&'a Values<'a>>>> {
    unsafe {
        let desc = (*rel).rd_att;
        let attrs = crate::pg_compat::attributes(desc);
        let mut layout: Vec<Option<&Values<'_>>> = vec![None; attrs.len()];
        let mut from = 0;
        for (name, values) in columns {
            let at = find_attribute(attrs, name, from)?;
            if layout[at].replace(values).is_some() {
                return None;
            }
            from = at + 1;
        }
        let left_out_needs_a_value = attrs.iter().zip(&layout).any(|(attr, column)| {
            column.is_none() && !attr.attisdropped && (attr.attnotnull || attr.atthasdef)
        });
        (!left_out_needs_a_value).then_some(layout)
    }
}

/// The position of the live attribute named `name`, looked for from `from`
/// to the end, then from the start.
pub(crate) fn find_attribute(
    attrs: &[pg_sys::FormData_pg_attribute],
    name: &CStr,
    from: usize,
) -> Option<usize> {
    let wanted = name.to_bytes_with_nul();
    let from = from.min(attrs.len());
    (from..attrs.len())
        .chain(0..from)
        .find(|&i| !attrs[i].attisdropped && name_is(&attrs[i].attname, wanted))
}

/// Whether a catalog name (NUL-terminated in its fixed-size array) is
/// `wanted`, given with its NUL.
fn name_is(name: &pg_sys::NameData, wanted: &[u8]) -> bool {
    // SAFETY: c_char and u8 have the same size and alignment.
    let have: &[u8] =
        unsafe { std::slice::from_raw_parts(name.data.as_ptr().cast(), name.data.len()) };
    // The first byte settles most mismatches without a call to memcmp.
    have.first() == wanted.first() && have.get(..wanted.len()) == Some(wanted)
}

unsafe fn insert_rows(rel: pg_sys::Relation, layout: &[Option<&Values<'_>>], rows: usize) {
    unsafe {
        let estate = pg_sys::CreateExecutorState();
        let result_rel = pg_sys::palloc0(std::mem::size_of::<pg_sys::ResultRelInfo>())
            as *mut pg_sys::ResultRelInfo;
        pg_sys::InitResultRelInfo(result_rel, rel, 0, std::ptr::null_mut(), 0);
        let indexes = OpenIndexes::open(result_rel, rel, estate, &constants(rel, layout));
        let per_call = if can_refuse_a_row(rel, result_rel) {
            1
        } else {
            ROWS_PER_CALL
        };
        let has_constraints = !(*(*rel).rd_att).constr.is_null();
        let command = pg_sys::GetCurrentCommandId(true);
        // A batch's slots are over an unpinned copy of the descriptor: slots
        // over the relation's own each pin it with the resource owner,
        // whose lookups are linear, and a batch needs up to ROWS_PER_CALL of
        // them. A few slots pin it more cheaply than it is copied.
        let slot_count = rows.min(per_call);
        let desc = if slot_count <= PINNED_SLOTS_MAX {
            (*rel).rd_att
        } else {
            pg_sys::CreateTupleDescCopy((*rel).rd_att)
        };
        let mut slots: Vec<*mut pg_sys::TupleTableSlot> = (0..slot_count)
            .map(|_| pg_sys::MakeTupleTableSlot(desc, &raw const pg_sys::TTSOpsBufferHeapTuple))
            .collect();

        for start in (0..rows).step_by(per_call) {
            let count = (rows - start).min(per_call);
            for (i, &slot) in slots[..count].iter().enumerate() {
                fill(slot, layout, start + i);
                if has_constraints {
                    pg_sys::ExecConstraints(result_rel, slot, estate);
                }
            }
            pg_sys::heap_multi_insert(
                rel,
                slots.as_mut_ptr(),
                count as std::ffi::c_int,
                command,
                0,
                // No BulkInsertState: its ring of buffers would make this
                // backend write out the pages it fills, and a queue's rows
                // are read (and deleted) soon, from shared buffers.
                std::ptr::null_mut(),
            );
            for &slot in &slots[..count] {
                reset_per_row_memory(estate);
                crate::pg_compat::insert_index_tuples(result_rel, slot, estate, false, false);
            }
        }

        for slot in slots {
            pg_sys::ExecDropSingleTupleTableSlot(slot);
        }
        drop(indexes);
        pg_sys::FreeExecutorState(estate);
    }
}

/// Whether an open index other than the primary key (whose keys the caller
/// draws from a sequence) is unique or an exclusion constraint: one that
/// can refuse a row part-way through a batch. The rows then go to the heap
/// one at a time, each followed by its index entries, as an INSERT writes
/// them, so that a refused batch leaves (and counts in the table's
/// statistics) the rows its statement would, not the whole batch.
unsafe fn can_refuse_a_row(rel: pg_sys::Relation, result_rel: *mut pg_sys::ResultRelInfo) -> bool {
    unsafe {
        let count = (*result_rel).ri_NumIndices.max(0) as usize;
        let primary_key = crate::pg_compat::primary_key_index(rel);
        (0..count).any(|i| {
            let index = *(*result_rel).ri_IndexRelationDescs.add(i);
            let info = *(*result_rel).ri_IndexRelationInfo.add(i);
            !index.is_null()
                && (*index).rd_id != primary_key
                && ((*info).ii_Unique || !(*info).ii_ExclusionOps.is_null())
        })
    }
}

/// The columns every row gets alike that partial indexes can be judged by:
/// NULL ones, and by-value ones with the same value in every row.
unsafe fn constants(rel: pg_sys::Relation, layout: &[Option<&Values<'_>>]) -> Vec<Constant> {
    unsafe {
        let desc = (*rel).rd_att;
        let attrs = crate::pg_compat::attributes(desc);
        // Sized for every column: collecting a filtered iterator would grow
        // the vector (a reallocation) a few times on every write.
        let mut constants = Vec::with_capacity(layout.len());
        constants.extend(
            layout
                .iter()
                .zip(attrs)
                .enumerate()
                .filter(|(_, (_, attr))| !attr.attisdropped)
                .filter_map(|(i, (column, attr))| {
                    let value = match column {
                        None => None,
                        Some(Values::Same(datum)) if attr.attbyval => Some(datum.value()),
                        Some(_) => return None,
                    };
                    Some(Constant {
                        attno: (i + 1) as i16,
                        value,
                    })
                }),
        );
        constants
    }
}

unsafe fn fill(slot: *mut pg_sys::TupleTableSlot, layout: &[Option<&Values<'_>>], row: usize) {
    unsafe {
        pg_sys::ExecClearTuple(slot);
        let values = std::slice::from_raw_parts_mut((*slot).tts_values, layout.len());
        let nulls = std::slice::from_raw_parts_mut((*slot).tts_isnull, layout.len());
        for (attr, column) in layout.iter().enumerate() {
            let value = match column {
                Some(Values::Same(datum)) => Some(*datum),
                Some(Values::PerRow(per_row)) => per_row[row],
                None => None,
            };
            values[attr] = value.unwrap_or(Datum::from(0usize));
            nulls[attr] = value.is_none();
        }
        pg_sys::ExecStoreVirtualTuple(slot);
    }
}

/// Index predicates and expressions are evaluated in the per-row context.
pub(super) unsafe fn reset_per_row_memory(estate: *mut pg_sys::EState) {
    unsafe {
        let context = (*estate).es_per_tuple_exprcontext;
        if !context.is_null() {
            pg_sys::MemoryContextReset((*context).ecxt_per_tuple_memory);
        }
    }
}
