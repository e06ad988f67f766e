//! The launcher: one per cluster, connected to no database. Every second
//! it lists the databases that allow connections and starts a reaper for
//! each that has none running.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::{in_transaction, reload_if_asked, REAPER_TYPE};
use crate::guc;

/// How long the launcher sleeps between looks.
const TICK: Duration = Duration::from_secs(1);

/// How long the launcher waits before it looks again at a database whose
/// reaper found no extension there (CREATE EXTENSION is seen this late at
/// most). A reaper that stopped for any other reason restarts at once.
const BACKOFF: Duration = Duration::from_secs(10);

/// The reaper the launcher started for one database.
struct Reaper {
    handle: *mut pg_sys::BackgroundWorkerHandle,
}

impl Reaper {
    fn running(&self) -> bool {
        let mut pid = 0;
        // SAFETY: a handle RegisterDynamicBackgroundWorker returned.
        let status = unsafe { pg_sys::GetBackgroundWorkerPid(self.handle, &mut pid) };
        matches!(
            status,
            pg_sys::BgwHandleStatus::BGWH_STARTED | pg_sys::BgwHandleStatus::BGWH_NOT_YET_STARTED
        )
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            // SAFETY: palloc'd in TopMemoryContext by `start`, freed once.
            unsafe { pg_sys::pfree(self.handle.cast()) };
        }
    }
}

#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn aedb_queue_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(None, None);
    let mut reapers: HashMap<pg_sys::Oid, Reaper> = HashMap::new();
    let mut not_before: HashMap<pg_sys::Oid, Instant> = HashMap::new();
    let mut warned_no_slot = false;
    while BackgroundWorker::wait_latch(Some(TICK)) {
        reload_if_asked();
        if guc::reaper_interval().is_none() {
            continue;
        }
        let Some(databases) = in_transaction("listing databases", databases) else {
            continue;
        };
        reapers.retain(|db, _| databases.contains(db));
        not_before.retain(|db, _| databases.contains(db));
        let now = Instant::now();
        for db in databases {
            if let Some(reaper) = reapers.get(&db) {
                if reaper.running() {
                    continue;
                }
                if super::take_left_uninstalled(db) {
                    not_before.insert(db, now + BACKOFF);
                }
                reapers.remove(&db);
            }
            if not_before.get(&db).is_some_and(|&t| now < t) {
                continue;
            }
            match start(db) {
                Some(reaper) => {
                    reapers.insert(db, reaper);
                    warned_no_slot = false;
                }
                None if !warned_no_slot => {
                    pgrx::warning!(
                        "aedb_queue: no background worker slot left for a reaper; raise max_worker_processes"
                    );
                    warned_no_slot = true;
                }
                None => {}
            }
        }
    }
}

/// The databases a reaper may connect to (not templates).
fn databases() -> Vec<pg_sys::Oid> {
    let mut found = Vec::new();
    // SAFETY: a catalog scan of pg_database inside a transaction, as the
    // autovacuum launcher lists databases without connecting to one.
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::table_open(pg_sys::DatabaseRelationId, lock);
        let scan = pg_sys::table_beginscan_catalog(rel, 0, std::ptr::null_mut());
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_database>(tuple);
            if (*form).datallowconn && !(*form).datistemplate {
                found.push((*form).oid);
            }
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(rel, lock);
    }
    found
}

/// Starts the reaper of database `db`; None when no worker slot is free.
fn start(db: pg_sys::Oid) -> Option<Reaper> {
    // SAFETY: a zeroed BackgroundWorker filled as bgworker.h documents;
    // the handle is allocated where it outlives transactions.
    unsafe {
        let mut worker: pg_sys::BackgroundWorker = std::mem::zeroed();
        copy_name(&mut worker.bgw_name, REAPER_TYPE);
        copy_name(&mut worker.bgw_type, REAPER_TYPE);
        copy_name(&mut worker.bgw_library_name, "aedb_queue");
        copy_name(&mut worker.bgw_function_name, "aedb_queue_reaper_main");
        worker.bgw_flags =
            (pg_sys::BGWORKER_SHMEM_ACCESS | pg_sys::BGWORKER_BACKEND_DATABASE_CONNECTION) as i32;
        worker.bgw_start_time = pg_sys::BgWorkerStartTime::BgWorkerStart_RecoveryFinished;
        worker.bgw_restart_time = pg_sys::BGW_NEVER_RESTART;
        worker.bgw_main_arg = pg_sys::Datum::from(db.to_u32());
        worker.bgw_notify_pid = pg_sys::MyProcPid;
        let old = pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
        let mut handle = std::ptr::null_mut();
        let registered = pg_sys::RegisterDynamicBackgroundWorker(&mut worker, &mut handle);
        pg_sys::MemoryContextSwitchTo(old);
        // `then`, not `then_some`: a Reaper made for a failed registration
        // would be dropped at once, and its Drop would pfree a null handle.
        (registered && !handle.is_null()).then(|| Reaper { handle })
    }
}

/// Copies `value` into a fixed-size C string field, NUL-terminated.
fn copy_name(field: &mut [std::ffi::c_char], value: &str) {
    let bytes = value.as_bytes();
    let n = bytes.len().min(field.len() - 1);
    for (to, &from) in field.iter_mut().zip(&bytes[..n]) {
        *to = from as std::ffi::c_char;
    }
    field[n] = 0;
}
