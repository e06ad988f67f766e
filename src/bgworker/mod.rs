//! The reaper inside the server (optional: only when aedb_queue is in
//! `shared_preload_libraries`). A launcher, connected to no database,
//! keeps one worker per database that allows connections; each worker
//! runs `queue_reap()` there every `aedb_queue.reaper_interval`, exactly
//! what pg_cron would run, and exits where the extension is not installed
//! (the launcher looks again later) or when someone needs the database
//! alone (DROP DATABASE, ALTER DATABASE RENAME). docs/reaper.md.

mod database;
mod launcher;

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::pg_sys::{self, PgTryBuilder};
use pgrx::{pg_shmem_init, PgLwLock};

/// What `pg_stat_activity.backend_type` shows for each process.
const LAUNCHER_TYPE: &str = "aedb_queue launcher";
const REAPER_TYPE: &str = "aedb_queue reaper";

/// Databases whose reaper left because the extension is not installed
/// there (0: a free slot): the launcher then waits before it looks again,
/// where a reaper that was killed or failed is restarted at once.
static LEFT_UNINSTALLED: PgLwLock<[u32; 64]> =
    unsafe { PgLwLock::new(c"aedb_queue reapers left uninstalled") };

/// Notes that the reaper of `db` leaves: no extension there.
fn note_left_uninstalled(db: pg_sys::Oid) {
    let mut left = LEFT_UNINSTALLED.exclusive();
    let db = db.to_u32();
    if !left.contains(&db) {
        let slot = left
            .iter()
            .position(|&d| d == 0)
            .unwrap_or(db as usize % 64);
        left[slot] = db;
    }
}

/// Whether the reaper of `db` left for want of the extension (and forgets it).
fn take_left_uninstalled(db: pg_sys::Oid) -> bool {
    let mut left = LEFT_UNINSTALLED.exclusive();
    match left.iter().position(|&d| d == db.to_u32()) {
        Some(slot) => {
            left[slot] = 0;
            true
        }
        None => false,
    }
}

/// Registers the launcher; called by `_PG_init` only while
/// `shared_preload_libraries` is being loaded (a later LOAD cannot start
/// background workers). The postmaster restarts the launcher 5 s after it
/// exits for any reason but a clean shutdown.
pub(crate) fn register() {
    // SAFETY: a flag the postmaster sets while it loads preloaded libraries.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    init_shared_memory();
    BackgroundWorkerBuilder::new(LAUNCHER_TYPE)
        .set_type(LAUNCHER_TYPE)
        .set_library("aedb_queue")
        .set_function("aedb_queue_launcher_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

/// pgrx's macro names every PostgreSQL major it supports; this crate
/// builds for 15 only.
#[allow(unexpected_cfgs)]
fn init_shared_memory() {
    use pgrx::pg_guard;
    pg_shmem_init!(LEFT_UNINSTALLED = [0u32; 64]);
}

/// Runs `body` in a transaction of its own: committed if it returns,
/// rolled back if it raises, in which case the error is logged and None
/// returned. A worker goes on after any error of one pass.
fn in_transaction<T>(what: &str, body: impl FnOnce() -> T) -> Option<T> {
    // SAFETY: the sequence PostgreSQL's own background workers use around
    // each unit of work (worker_spi), with the abort of a failed one.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        let outcome = PgTryBuilder::new(AssertUnwindSafe(|| Ok(body())))
            .catch_others(|caught| Err(crate::subtransaction::failed(caught).message))
            .execute();
        match outcome {
            Ok(value) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
                Some(value)
            }
            Err(message) => {
                pg_sys::AbortCurrentTransaction();
                pgrx::log!("aedb_queue: {what} failed, will try again: {message}");
                None
            }
        }
    }
}

/// Re-reads postgresql.conf after a SIGHUP (aedb_queue.reaper_interval).
fn reload_if_asked() {
    if pgrx::bgworkers::BackgroundWorker::sighup_received() {
        // SAFETY: what every background worker does on SIGHUP.
        unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
    }
}
