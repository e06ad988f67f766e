//! Per-queue event counters in shared memory (`queue_counters()`), for
//! dashboards and Prometheus: no shared row is updated per job.
//!
//! A call that changes tasks counts into this backend's pending list,
//! tagged with the current subtransaction; at commit the list is added to
//! the shared table (one shared lock, atomic adds), at abort it is dropped,
//! and a rolled-back subtransaction drops its part. So a count is there
//! exactly when the change it counts committed. Prepared transactions are
//! not counted (their commit runs in another backend). Only when aedb_queue
//! is in `shared_preload_libraries`; the table's rules are
//! `aedb_queue_core::counters`.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) use aedb_queue_core::counters::Counter;
use aedb_queue_core::counters::{Owner, Pending, Snapshot, Table, Taker};
use aedb_queue_core::QueueError;
use pgrx::pg_sys;
use pgrx::{pg_guard, pg_shmem_init, PGRXSharedMemory, PgLwLock};

use crate::errors::Result;
use crate::guc;

struct SharedTable(Table);

// SAFETY: integers and atomics only, no pointers; every write to a slot's
// identity happens under the exclusive lock.
unsafe impl PGRXSharedMemory for SharedTable {}

static TABLE: PgLwLock<SharedTable> = unsafe { PgLwLock::new(c"aedb_queue counters") };

/// Set in the postmaster while it preloads the library, inherited by every
/// backend: the table exists.
static PRELOADED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static PENDING: RefCell<Pending> = RefCell::new(Pending::default());
    static CALLBACKS_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// Reserves the table; `_PG_init` calls it while preloading.
#[allow(unexpected_cfgs)]
pub(crate) fn register() {
    // SAFETY: a flag the postmaster sets while it loads preloaded libraries.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    pg_shmem_init!(TABLE = SharedTable(*Table::new_boxed()));
    PRELOADED.store(true, Ordering::Relaxed);
}

/// Counts `n` events of `counter` on `queue`, applied if this transaction
/// (and the subtransaction now running) commits.
pub(crate) fn count(queue: &str, counter: Counter, n: u64) {
    if n == 0 || !PRELOADED.load(Ordering::Relaxed) || !guc::track_counters() {
        return;
    }
    if !CALLBACKS_REGISTERED.with(|r| r.replace(true)) {
        // SAFETY: registers this backend's callbacks once, for its lifetime.
        unsafe {
            pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());
            pg_sys::RegisterSubXactCallback(Some(on_subxact), std::ptr::null_mut());
        }
    }
    // SAFETY: reads the current transaction state and session user.
    let sub = unsafe { pg_sys::GetCurrentSubTransactionId() };
    PENDING.with(|p| p.borrow_mut().add(sub, queue, counter, n));
    TAKER.with(|t| t.set(Some(taker())));
}

thread_local! {
    /// Who takes the slots of this transaction's new queues, noted while
    /// it runs: at commit the catalogs are no longer read.
    static TAKER: Cell<Option<Taker>> = const { Cell::new(None) };
}

/// The session's login role (SET ROLE does not change it), exempt from
/// the per-role share of slots when a superuser (the reapers are).
fn taker() -> Taker {
    // SAFETY: the session user is set for the backend's lifetime, and
    // superuser_arg reads a cached catalog entry inside a transaction.
    unsafe {
        let role = pg_sys::GetSessionUserId();
        Taker {
            role: role.to_u32(),
            exempt: pg_sys::superuser_arg(role),
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    match event {
        pg_sys::XactEvent::XACT_EVENT_COMMIT => flush(),
        pg_sys::XactEvent::XACT_EVENT_ABORT | pg_sys::XactEvent::XACT_EVENT_PREPARE => {
            PENDING.with(|p| drop(p.borrow_mut().take()));
        }
        _ => {}
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subxact(
    event: pg_sys::SubXactEvent::Type,
    sub: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        PENDING.with(|p| p.borrow_mut().roll_back_to(sub));
    }
}

/// Adds the committed transaction's counts to the table: under the shared
/// lock when every queue has its slot, the exclusive one to take slots.
fn flush() {
    let counts = PENDING.with(|p| p.borrow_mut().take());
    if counts.is_empty() {
        return;
    }
    // SAFETY: this backend's database, fixed for its lifetime.
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let missing: Vec<_> = {
        let table = TABLE.share();
        counts
            .iter()
            .filter(|(queue, c)| !table.0.add_existing(database, &Owner::Queue(queue), c))
            .collect()
    };
    if missing.is_empty() {
        return;
    }
    // SAFETY: reads the system clock.
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    let taker = TAKER.with(|t| t.take()).unwrap_or(Taker {
        role: 0,
        exempt: true,
    });
    let mut table = TABLE.exclusive();
    for (queue, c) in missing {
        table
            .0
            .add_new(database, &Owner::Queue(queue), c, now, taker);
    }
}

/// The counts of this database's queues (and its overflow bucket).
pub(crate) fn snapshot() -> Result<Vec<Snapshot>> {
    if !PRELOADED.load(Ordering::Relaxed) {
        return Err(QueueError::Prerequisite {
            message: "aedb_queue's counters need aedb_queue in shared_preload_libraries".into(),
            hint: "Add aedb_queue to shared_preload_libraries in postgresql.conf and restart the server.".into(),
        });
    }
    // SAFETY: this backend's database.
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    Ok(TABLE.share().0.snapshot(database))
}
