//! The indexes `insert::write` and `update` fill, kept per backend and relation: each
//! index's `IndexInfo` with its predicate and expressions compiled, in a
//! memory context of its own under `CacheMemoryContext`. Building them
//! (`ExecOpenIndices`, then compiling four partial-index predicates) was a
//! sixth of a one-row enqueue, and they change only with the relation's
//! definition: a relation-cache invalidation of the relation or of one of
//! its indexes drops them.
//!
//! The set is valid when looked up after the table is locked: locking
//! processes pending invalidations, and no index can appear, change state
//! or go away while the table is held (`CREATE INDEX` and `DROP INDEX` need
//! locks that conflict with ours; `CONCURRENTLY` waits for our transaction
//! between its steps). A set is kept only if no invalidation of the table or
//! of one of its indexes was processed
//! while it was built: opening its indexes takes their locks, which
//! processes pending invalidations, and one of those may be about the
//! table (a new index, one no longer ready) when the set is not yet there
//! to be dropped. Only btree indexes are kept (no access-method state
//! outlives a call); a relation with another kind is opened the executor's
//! way on every call.

use rustc_hash::FxHashMap;
use std::cell::RefCell;

use pgrx::pg_sys::{self, Oid};

use super::memory::small_context;
use super::refute::{self, Constant};

struct IndexSet {
    context: pg_sys::MemoryContext,
    indexes: Vec<Oid>,
    infos: Vec<*mut pg_sys::IndexInfo>,
    /// The attributes the indexes' predicates read.
    predicate_attrs: Vec<i16>,
    /// Per set of constant columns (of those attributes) seen in a write,
    /// which indexes their values refute (`refute`); a few per table.
    refuted: Vec<(Vec<Constant>, Vec<bool>)>,
    /// Being used by a write: an invalidation only marks it stale.
    in_use: bool,
    stale: bool,
}

/// Refutation results kept per set before they are recomputed.
const REFUTED_KEPT: usize = 8;

thread_local! {
    /// The set being built (table, its indexes, and whether an invalidation
    /// of one of them came meanwhile).
    static BUILDING: RefCell<Option<(Oid, Vec<Oid>, bool)>> = const { RefCell::new(None) };
    static SETS: RefCell<FxHashMap<Oid, IndexSet>> = RefCell::new(FxHashMap::default());
}

pub(crate) fn register() {
    // SAFETY: called once from _PG_init; the callback only touches a thread-local.
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache), pg_sys::Datum::from(0)) }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_relcache(_arg: pg_sys::Datum, relid: Oid) {
    super::guards::invalidated(relid);
    BUILDING.with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            if let Some((table, indexes, stale)) = b.as_mut() {
                *stale |=
                    relid == pg_sys::InvalidOid || relid == *table || indexes.contains(&relid);
            }
        }
    });
    SETS.with(|sets| {
        let Ok(mut sets) = sets.try_borrow_mut() else {
            return;
        };
        let all = relid == pg_sys::InvalidOid;
        sets.retain(|table, set| {
            if !(all || *table == relid || set.indexes.contains(&relid)) {
                return true;
            }
            if set.in_use {
                set.stale = true;
                return true;
            }
            // SAFETY: nothing points into the context of a set not in use.
            unsafe { pg_sys::MemoryContextDelete(set.context) };
            false
        });
    });
}

/// The indexes of a relation opened for `ExecInsertIndexTuples`: in the
/// result relation's arrays, locked with RowExclusiveLock until the
/// transaction ends. Dropping closes them and returns the cached set.
pub(crate) struct OpenIndexes {
    result_rel: *mut pg_sys::ResultRelInfo,
    cached: Option<Oid>,
}

impl OpenIndexes {
    /// Of a cached set, only the indexes whose predicates `constants` (the
    /// columns every row of the write holds alike) do not refute.
    ///
    /// # Safety
    /// `rel` is open and locked with at least RowExclusiveLock, and
    /// `result_rel` was initialised for it and outlives the returned value;
    /// `constants` name by-value attributes of `rel`, or NULL ones.
    pub(crate) unsafe fn open(
        result_rel: *mut pg_sys::ResultRelInfo,
        rel: pg_sys::Relation,
        estate: *mut pg_sys::EState,
        constants: &[Constant],
    ) -> OpenIndexes {
        unsafe {
            let relid = (*rel).rd_id;
            let state = SETS.with(|sets| sets.borrow().get(&relid).map(|set| set.in_use));
            // A set already in use (a write inside a write) is not shared.
            let cached = match state {
                Some(false) => true,
                Some(true) => false,
                None => build(rel),
            };
            if !cached {
                pg_sys::ExecOpenIndices(result_rel, false);
                compile_index_expressions(result_rel, estate);
                return OpenIndexes {
                    result_rel,
                    cached: None,
                };
            }
            // The oids are copied out: opening an index (or proving what a
            // write refutes) may run the invalidation callback, which
            // borrows the sets; a set in use is only marked stale by it.
            let (mut indexes, mut infos, key, known) = SETS.with(|sets| {
                let mut sets = sets.borrow_mut();
                let set = sets
                    .get_mut(&relid)
                    .expect("the set was just found or built");
                set.in_use = true;
                let mut key: Vec<Constant> = Vec::with_capacity(constants.len());
                key.extend(
                    constants
                        .iter()
                        .copied()
                        .filter(|c| set.predicate_attrs.binary_search(&c.attno).is_ok()),
                );
                let known = set
                    .refuted
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, r)| r.clone());
                (set.indexes.clone(), set.infos.clone(), key, known)
            });
            // From here on a failure leaves the set to the guard, not in use.
            let opened = OpenIndexes {
                result_rel,
                cached: Some(relid),
            };
            let refuted = match known {
                Some(refuted) => refuted,
                None => {
                    let refuted = refute::refuted(rel, &infos, &key);
                    SETS.with(|sets| {
                        if let Some(set) = sets.borrow_mut().get_mut(&relid) {
                            if set.refuted.len() >= REFUTED_KEPT {
                                set.refuted.clear();
                            }
                            set.refuted.push((key, refuted.clone()));
                        }
                    });
                    refuted
                }
            };
            let mut skip = refuted.iter();
            indexes.retain(|_| !skip.next().copied().unwrap_or(false));
            let mut skip = refuted.iter();
            infos.retain(|_| !skip.next().copied().unwrap_or(false));
            let info_array =
                pg_sys::palloc(infos.len().max(1) * std::mem::size_of::<*mut pg_sys::IndexInfo>())
                    as *mut *mut pg_sys::IndexInfo;
            for (i, &info) in infos.iter().enumerate() {
                *info_array.add(i) = info;
            }
            let count = indexes.len();
            let descs = pg_sys::palloc0(count.max(1) * std::mem::size_of::<pg_sys::Relation>())
                as *mut pg_sys::Relation;
            (*result_rel).ri_IndexRelationDescs = descs;
            (*result_rel).ri_IndexRelationInfo = info_array;
            (*result_rel).ri_NumIndices = count as i32;
            for (i, &oid) in indexes.iter().enumerate() {
                *descs.add(i) =
                    pg_sys::index_open(oid, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
            }
            opened
        }
    }
}

impl Drop for OpenIndexes {
    fn drop(&mut self) {
        // SAFETY: closes what `open` opened (the executor's way or ours);
        // while unwinding, the abort releases the relations instead.
        unsafe {
            if !std::thread::panicking() {
                close_keeping_locks(self.result_rel);
            }
        }
        if let Some(relid) = self.cached {
            SETS.with(|sets| {
                let mut sets = sets.borrow_mut();
                let stale = match sets.get_mut(&relid) {
                    Some(set) => {
                        set.in_use = false;
                        set.stale
                    }
                    None => false,
                };
                if stale {
                    if let Some(set) = sets.remove(&relid) {
                        // SAFETY: no longer in use.
                        unsafe { pg_sys::MemoryContextDelete(set.context) };
                    }
                }
            });
        }
    }
}

/// Builds and caches the set of `rel`'s indexes; false (nothing cached)
/// when one of them is not a btree, or an invalidation was processed while
/// it was built (the set may be stale already; this call opens the indexes
/// the executor's way, from the relation cache as it now is).
unsafe fn build(rel: pg_sys::Relation) -> bool {
    unsafe {
        let list = pg_sys::RelationGetIndexList(rel);
        let oids: Vec<Oid> = if list.is_null() {
            Vec::new()
        } else {
            (0..(*list).length)
                .map(|i| pg_sys::list_nth_oid(list, i))
                .collect()
        };
        pg_sys::list_free(list);
        BUILDING.with(|b| *b.borrow_mut() = Some(((*rel).rd_id, oids.clone(), false)));
        let context = small_context(pg_sys::CacheMemoryContext, c"aedb_queue bulk indexes");
        let caller = pg_sys::MemoryContextSwitchTo(context);
        let mut infos = Vec::with_capacity(oids.len());
        let mut all_btree = true;
        for &oid in &oids {
            let index = pg_sys::index_open(oid, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
            all_btree &= (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID;
            let info = pg_sys::BuildIndexInfo(index);
            compile(info);
            infos.push(info);
            pg_sys::index_close(index, pg_sys::NoLock as pg_sys::LOCKMODE);
        }
        pg_sys::MemoryContextSwitchTo(caller);
        let stale = BUILDING
            .with(|b| b.borrow_mut().take())
            .is_none_or(|(_, _, stale)| stale);
        if !all_btree || stale {
            pg_sys::MemoryContextDelete(context);
            return false;
        }
        let set = IndexSet {
            context,
            indexes: oids,
            predicate_attrs: refute::predicate_attributes(&infos),
            refuted: Vec::new(),
            infos,
            in_use: false,
            stale: false,
        };
        SETS.with(|sets| sets.borrow_mut().insert((*rel).rd_id, set));
        true
    }
}

/// Compiles the index's predicate and expressions as they are, in the
/// current memory context, where `ExecInsertIndexTuples` would first pass
/// them through the planner again (`ExecPrepareQual`, `ExecPrepareExpr`):
/// the relation cache keeps them constant-folded with operator functions
/// set, which is all that step does to them.
unsafe fn compile(info: *mut pg_sys::IndexInfo) {
    unsafe {
        if !(*info).ii_Predicate.is_null() && (*info).ii_PredicateState.is_null() {
            (*info).ii_PredicateState =
                pg_sys::ExecInitQual((*info).ii_Predicate, std::ptr::null_mut());
        }
        if !(*info).ii_Expressions.is_null() && (*info).ii_ExpressionsState.is_null() {
            (*info).ii_ExpressionsState =
                pg_sys::ExecInitExprList((*info).ii_Expressions, std::ptr::null_mut());
        }
    }
}

/// The same compilation for indexes the executor opened, in the executor
/// state's memory (where `ExecPrepareQual` would put them).
unsafe fn compile_index_expressions(
    result_rel: *mut pg_sys::ResultRelInfo,
    estate: *mut pg_sys::EState,
) {
    unsafe {
        let count = (*result_rel).ri_NumIndices as usize;
        if count == 0 {
            return;
        }
        let infos = std::slice::from_raw_parts((*result_rel).ri_IndexRelationInfo, count);
        let caller = pg_sys::MemoryContextSwitchTo((*estate).es_query_cxt);
        for &info in infos {
            compile(info);
        }
        pg_sys::MemoryContextSwitchTo(caller);
    }
}

/// Closes the indexes but keeps their locks until the transaction ends, as
/// the table's: `ExecCloseIndices` releases each lock, and the next write of
/// the transaction would take it again.
unsafe fn close_keeping_locks(result_rel: *mut pg_sys::ResultRelInfo) {
    unsafe {
        let count = (*result_rel).ri_NumIndices as usize;
        if count == 0 {
            return;
        }
        let indexes = std::slice::from_raw_parts((*result_rel).ri_IndexRelationDescs, count);
        for &index in indexes {
            if !index.is_null() {
                pg_sys::index_close(index, pg_sys::NoLock as pg_sys::LOCKMODE);
            }
        }
    }
}
