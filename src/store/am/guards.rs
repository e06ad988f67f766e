//! What the direct writes support, checked where a statement's executor
//! would do the step itself (`steps` lists every step and its decision).
//! A write the executor would treat differently is declined: its caller
//! runs the statement instead, so the direct path only ever runs where it
//! does what the statement does.
//!
//! The table's state is judged after the table is locked (locking
//! processes pending invalidations), on every call: the checks read the
//! relation cache, and those that cost more are kept per relation in
//! `Verdicts`, which any invalidation processed while one is being
//! computed leaves unstored.

use std::cell::{Cell, RefCell};

use pgrx::pg_sys::{self, Oid};
use rustc_hash::FxHashMap;

use crate::guc::{self, DirectWrites};

/// The kind of write, as the executor's `CmdType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    Insert,
    Update,
    Delete,
}

impl Write {
    fn command(self) -> pg_sys::CmdType::Type {
        match self {
            Write::Insert => pg_sys::CmdType::CMD_INSERT,
            Write::Update => pg_sys::CmdType::CMD_UPDATE,
            Write::Delete => pg_sys::CmdType::CMD_DELETE,
        }
    }

    /// The privileges the statement's range table entry asks of its role:
    /// the write itself, and SELECT for the columns its WHERE and RETURNING
    /// read.
    fn privileges(self) -> pg_sys::AclMode {
        let write = match self {
            Write::Insert => pg_sys::ACL_INSERT,
            Write::Update => pg_sys::ACL_UPDATE,
            Write::Delete => pg_sys::ACL_DELETE,
        };
        (write | pg_sys::ACL_SELECT) as pg_sys::AclMode
    }
}

/// Why a write runs its statement: each is a step of the executor the
/// direct path does not do (see `steps::STEPS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decline {
    /// `aedb_queue.direct_writes = off`.
    SwitchedOff,
    /// An executor hook is installed and `direct_writes` is `auto`.
    ExecutorHooks,
    /// The transaction is in parallel mode.
    ParallelMode,
    /// Not a plain table (view, partitioned, foreign, ...).
    NotPlainTable,
    /// A table access method other than heap.
    NotHeap,
    /// A partition: its partition constraint is checked by the executor.
    Partition,
    /// Triggers of any kind (foreign keys, deferred unique checks and
    /// transition tables are triggers too).
    Triggers,
    /// Row-level security is enabled.
    RowSecurity,
    /// A stored generated column.
    StoredGenerated,
    /// A virtual generated column (18): its NOT NULL and the CHECK
    /// expressions that name it are the executor's to expand.
    VirtualGenerated,
    /// The statement's role lacks a table privilege it needs: the
    /// statement raises the error.
    Privileges,
    /// The caller's description of the table (column types, the scanned
    /// index's definition) does not match it.
    Shape,
    /// The index a write reads is not valid, ready and live, or not a btree.
    ScanIndex,
    /// A left-out column has a default or must not be NULL (insert).
    LeftOutColumn,
    /// The database's schema predates what the direct path writes.
    Schema,
}

/// Whether direct writes may run at all now: the switch, executor hooks,
/// parallel mode.
pub fn switched_on() -> Result<(), Decline> {
    let setting = guc::direct_writes();
    if setting == DirectWrites::Off {
        return Err(Decline::SwitchedOff);
    }
    // SAFETY: reads the backend's hook pointers and parallel-mode flag.
    unsafe {
        if setting == DirectWrites::Auto && executor_hooked() {
            return Err(Decline::ExecutorHooks);
        }
        if pg_sys::IsInParallelMode() {
            return Err(Decline::ParallelMode);
        }
    }
    Ok(())
}

/// Whether any executor hook is installed: whatever installed it expects
/// to see every statement's execution, ours included.
unsafe fn executor_hooked() -> bool {
    unsafe {
        [
            (*std::ptr::addr_of!(pg_sys::ExecutorStart_hook)).is_some(),
            (*std::ptr::addr_of!(pg_sys::ExecutorRun_hook)).is_some(),
            (*std::ptr::addr_of!(pg_sys::ExecutorFinish_hook)).is_some(),
            (*std::ptr::addr_of!(pg_sys::ExecutorEnd_hook)).is_some(),
            (*std::ptr::addr_of!(pg_sys::ExecutorCheckPerms_hook)).is_some(),
        ]
        .contains(&true)
    }
}

/// Judges the locked table `rel` for `write` as the statement would run as
/// `role`. Raises what the statement would raise at its start (a table
/// published without the replica identity an update or delete needs).
///
/// # Safety
/// `rel` is open and locked with at least RowExclusiveLock.
pub unsafe fn table(write: Write, rel: pg_sys::Relation, role: Oid) -> Result<(), Decline> {
    unsafe {
        switched_on()?;
        let form = &*(*rel).rd_rel;
        let refused = if form.relkind != pg_sys::RELKIND_RELATION as std::ffi::c_char {
            Some(Decline::NotPlainTable)
        } else if form.relam != Oid::from(pg_sys::HEAP_TABLE_AM_OID) {
            Some(Decline::NotHeap)
        } else if form.relispartition {
            Some(Decline::Partition)
        } else if !(*rel).trigdesc.is_null() {
            Some(Decline::Triggers)
        } else if form.relrowsecurity {
            Some(Decline::RowSecurity)
        } else if has_generated_stored(rel) {
            Some(Decline::StoredGenerated)
        } else if crate::pg_compat::has_generated_virtual(rel) {
            Some(Decline::VirtualGenerated)
        } else {
            None
        };
        if let Some(decline) = refused {
            return Err(decline);
        }
        let wanted = write.privileges();
        let granted =
            pg_sys::pg_class_aclmask((*rel).rd_id, role, wanted, pg_sys::AclMaskHow::ACLMASK_ALL);
        if granted != wanted {
            return Err(Decline::Privileges);
        }
        // The executor's own check (CheckValidResultRel's): an update or
        // delete of a table published without a usable replica identity
        // fails here with the statement's error.
        if write != Write::Insert {
            pg_sys::CheckCmdReplicaIdentity(rel, write.command());
        }
        Ok(())
    }
}

unsafe fn has_generated_stored(rel: pg_sys::Relation) -> bool {
    unsafe {
        let constr = (*(*rel).rd_att).constr;
        !constr.is_null() && (*constr).has_generated_stored
    }
}

/// Whether the index a write reads to find its rows serves it: valid,
/// ready, live (a cancelled `DROP INDEX CONCURRENTLY` leaves one that is
/// none of these, and no longer filled) and a btree.
///
/// # Safety
/// `index` is open and locked.
pub unsafe fn scan_index(index: pg_sys::Relation) -> Result<(), Decline> {
    unsafe {
        let form = &*(*index).rd_index;
        let btree = (*(*index).rd_rel).relam == Oid::from(pg_sys::BTREE_AM_OID);
        if form.indisvalid && form.indisready && form.indislive && btree {
            Ok(())
        } else {
            Err(Decline::ScanIndex)
        }
    }
}

/// Verdicts that cost more than a look at the relation cache (a table's
/// column types, an index's definition), kept per relation until an
/// invalidation of it.
struct Verdicts {
    kept: RefCell<FxHashMap<Oid, Result<(), Decline>>>,
}

thread_local! {
    /// Bumped by every relation-cache invalidation this backend processes.
    static GENERATION: Cell<u64> = const { Cell::new(0) };
    static VERDICTS: Verdicts = Verdicts {
        kept: RefCell::new(FxHashMap::default()),
    };
}

/// Forgets kept verdicts of `relid` (every relation for InvalidOid); called
/// from the relation-cache callback.
pub(super) fn invalidated(relid: Oid) {
    GENERATION.with(|g| g.set(g.get().wrapping_add(1)));
    VERDICTS.with(|verdicts| {
        // Being judged: the generation bump keeps that result unstored.
        if let Ok(mut kept) = verdicts.kept.try_borrow_mut() {
            if relid == pg_sys::InvalidOid {
                kept.clear();
            } else {
                kept.remove(&relid);
            }
        }
    });
}

/// The count of relation-cache invalidations processed so far: what was
/// built from the catalogs while it stayed the same is current.
pub(super) fn generation() -> u64 {
    GENERATION.with(Cell::get)
}

/// `judge`'s verdict on relation `relid` (a caller's description of a
/// table's columns or an index's definition), kept until the relation's
/// next invalidation; not kept when an invalidation was processed while
/// `judge` ran (it may have read the catalogs as they were before).
pub fn verdict(relid: Oid, judge: impl FnOnce() -> Result<(), Decline>) -> Result<(), Decline> {
    let kept = VERDICTS.with(|v| v.kept.borrow().get(&relid).copied());
    let verdict = match kept {
        Some(verdict) => verdict,
        None => {
            let before = generation();
            let verdict = judge();
            if generation() == before {
                VERDICTS.with(|v| v.kept.borrow_mut().insert(relid, verdict));
            }
            verdict
        }
    };
    verdict
}
