//! The PostgreSQL internals whose signatures or layout differ between the
//! majors we build for (15 to 18), each behind one small wrapper; the rest
//! of the crate calls these and has no `cfg(feature = "pgNN")` of its own.
//! docs/write-path.md ("For the next majors") lists what changed where.

use pgrx::pg_sys::{self, Oid};

/// The attributes of a tuple descriptor. In 18 the full attributes follow
/// the new `compact_attrs` array (`TupleDescAttr` computes the same address).
///
/// # Safety
/// `desc` is a valid descriptor that outlives the returned slice.
pub(crate) unsafe fn attributes<'a>(
    desc: pg_sys::TupleDesc,
) -> &'a [pg_sys::FormData_pg_attribute] {
    unsafe {
        let natts = (*desc).natts.max(0) as usize;
        #[cfg(not(feature = "pg18"))]
        {
            (*desc).attrs.as_slice(natts)
        }
        #[cfg(feature = "pg18")]
        {
            let first = (*desc)
                .compact_attrs
                .as_ptr()
                .add(natts)
                .cast::<pg_sys::FormData_pg_attribute>();
            std::slice::from_raw_parts(first, natts)
        }
    }
}

/// Whether the relation has a virtual generated column (18 added them;
/// none before).
///
/// # Safety
/// `rel` is open.
pub(crate) unsafe fn has_generated_virtual(rel: pg_sys::Relation) -> bool {
    #[cfg(feature = "pg18")]
    unsafe {
        let constr = (*(*rel).rd_att).constr;
        !constr.is_null() && (*constr).has_generated_virtual
    }
    #[cfg(not(feature = "pg18"))]
    {
        let _ = rel;
        false
    }
}

/// Whether `role` may execute the function `function` (16 folded the
/// per-kind ACL checks into `object_aclcheck`).
///
/// # Safety
/// Called in a transaction.
pub(crate) unsafe fn function_executable(function: Oid, role: Oid) -> bool {
    let mode = pg_sys::ACL_EXECUTE as pg_sys::AclMode;
    unsafe {
        #[cfg(feature = "pg15")]
        let result = pg_sys::pg_proc_aclcheck(function, role, mode);
        #[cfg(not(feature = "pg15"))]
        let result = pg_sys::object_aclcheck(pg_sys::ProcedureRelationId, function, role, mode);
        result == pg_sys::AclResult::ACLCHECK_OK
    }
}

/// What undoes `restrict_search_path`: the GUC nest level in 17 and later.
pub(crate) struct SearchPathLevel(#[allow(dead_code)] i32);

/// Resolves unqualified names in `pg_catalog` only until
/// `restore_search_path`. 15 and 16 push an override path (catalog, no
/// `pg_temp`); 17 removed override paths, so there the path is set as a
/// SET clause of a function sets it (`RestrictSearchPath`: `pg_catalog,
/// pg_temp`, temp last, where only relations are ever looked up) in a new
/// GUC nest level. An error's abort pops either.
///
/// # Safety
/// Called in a transaction; paired with `restore_search_path` on success.
pub(crate) unsafe fn restrict_search_path() -> SearchPathLevel {
    unsafe {
        #[cfg(any(feature = "pg15", feature = "pg16"))]
        {
            let mut path = pg_sys::OverrideSearchPath {
                schemas: std::ptr::null_mut(),
                addCatalog: true,
                addTemp: false,
                generation: 0,
            };
            pg_sys::PushOverrideSearchPath(&mut path);
            SearchPathLevel(0)
        }
        #[cfg(not(any(feature = "pg15", feature = "pg16")))]
        {
            let level = pg_sys::NewGUCNestLevel();
            pg_sys::RestrictSearchPath();
            SearchPathLevel(level)
        }
    }
}

/// # Safety
/// Undoes the latest `restrict_search_path` of this call, in order.
pub(crate) unsafe fn restore_search_path(level: SearchPathLevel) {
    unsafe {
        #[cfg(any(feature = "pg15", feature = "pg16"))]
        {
            let _ = level;
            pg_sys::PopOverrideSearchPath();
        }
        #[cfg(not(any(feature = "pg15", feature = "pg16")))]
        pg_sys::AtEOXact_GUC(false, level.0);
    }
}

/// The relation's primary key index (InvalidOid if none, or if deferrable:
/// 18 asks, earlier majors never return a deferrable one).
///
/// # Safety
/// `rel` is open.
pub(crate) unsafe fn primary_key_index(rel: pg_sys::Relation) -> Oid {
    unsafe {
        #[cfg(not(feature = "pg18"))]
        {
            pg_sys::RelationGetPrimaryKeyIndex(rel)
        }
        #[cfg(feature = "pg18")]
        {
            pg_sys::RelationGetPrimaryKeyIndex(rel, false)
        }
    }
}

/// `index_beginscan` (18 adds an instrumentation pointer; none, as for a
/// catalog scan).
///
/// # Safety
/// As `index_beginscan`.
pub(crate) unsafe fn index_beginscan(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    nkeys: i32,
    norderbys: i32,
) -> pg_sys::IndexScanDesc {
    unsafe {
        #[cfg(not(feature = "pg18"))]
        {
            pg_sys::index_beginscan(heap, index, snapshot, nkeys, norderbys)
        }
        #[cfg(feature = "pg18")]
        {
            pg_sys::index_beginscan(
                heap,
                index,
                snapshot,
                std::ptr::null_mut(),
                nkeys,
                norderbys,
            )
        }
    }
}

/// Which index entries a new row version needs after `tuple_update`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum IndexUpdate {
    /// A HOT update: no index gets an entry.
    None,
    /// Every index gets one.
    All,
    /// 16 and later: HOT, but summarizing (BRIN) indexes get one.
    Summarizing,
}

/// The table AM's `tuple_update` with the executor's arguments (wait for
/// locks, no crosscheck snapshot) and its index verdict (a bool until 15,
/// `TU_UpdateIndexes` from 16).
///
/// # Safety
/// As `table_tuple_update`.
pub(crate) unsafe fn tuple_update(
    rel: pg_sys::Relation,
    tid: &mut pg_sys::ItemPointerData,
    slot: *mut pg_sys::TupleTableSlot,
    snapshot: pg_sys::Snapshot,
    failure: &mut pg_sys::TM_FailureData,
    lock_mode: &mut pg_sys::LockTupleMode::Type,
) -> (pg_sys::TM_Result::Type, IndexUpdate) {
    unsafe {
        let am = &*(*rel).rd_tableam;
        #[cfg(feature = "pg15")]
        let mut verdict = false;
        #[cfg(not(feature = "pg15"))]
        let mut verdict = pg_sys::TU_UpdateIndexes::TU_None;
        let written = am.tuple_update.expect("table AM updates")(
            rel,
            tid,
            slot,
            pg_sys::GetCurrentCommandId(true),
            snapshot,
            std::ptr::null_mut(),
            true,
            failure,
            lock_mode,
            &mut verdict,
        );
        #[cfg(feature = "pg15")]
        let update = if verdict {
            IndexUpdate::All
        } else {
            IndexUpdate::None
        };
        #[cfg(not(feature = "pg15"))]
        let update = match verdict {
            pg_sys::TU_UpdateIndexes::TU_None => IndexUpdate::None,
            pg_sys::TU_UpdateIndexes::TU_Summarizing => IndexUpdate::Summarizing,
            _ => IndexUpdate::All,
        };
        (written, update)
    }
}

/// `ExecInsertIndexTuples` without speculative insertion or arbiters, as
/// an INSERT (`update` false) or an UPDATE's new version writes them; 16
/// added `onlySummarizing`, which an UPDATE passes when `tuple_update` said
/// `TU_Summarizing` (15 never says so).
///
/// # Safety
/// As `ExecInsertIndexTuples`.
pub(crate) unsafe fn insert_index_tuples(
    result_rel: *mut pg_sys::ResultRelInfo,
    slot: *mut pg_sys::TupleTableSlot,
    estate: *mut pg_sys::EState,
    update: bool,
    only_summarizing: bool,
) {
    unsafe {
        #[cfg(feature = "pg15")]
        {
            debug_assert!(!only_summarizing, "15 has no summarizing-only index update");
            pg_sys::ExecInsertIndexTuples(
                result_rel,
                slot,
                estate,
                update,
                false,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
        }
        #[cfg(not(feature = "pg15"))]
        pg_sys::ExecInsertIndexTuples(
            result_rel,
            slot,
            estate,
            update,
            false,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            only_summarizing,
        );
    }
}
