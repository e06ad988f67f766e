//! Subtransactions around a piece of work whose failure must not end the
//! caller's transaction: one queue's reap, one schedule's fire.

use std::panic::AssertUnwindSafe;

use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::{self, PgTryBuilder};
use pgrx::PgSqlErrorCode;

use crate::errors::Result;
use aedb_queue_core::error::bounded;

/// Why a piece of work run by [`in_subtransaction`] was rolled back.
#[derive(Debug)]
pub(crate) struct Failed {
    pub message: String,
    /// It waited for a lock longer than `lock_timeout` (55P03): whoever
    /// holds the lock may still be working, so the work is owed, not failed.
    pub lock_wait: bool,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Runs `body` in a subtransaction, as a PL/pgSQL EXCEPTION block does:
/// committed into the caller's transaction if it succeeds, rolled back
/// (with the user, search path and settings it changed) if it fails,
/// returning why.
pub(crate) fn in_subtransaction<T>(
    body: impl FnOnce() -> Result<T>,
) -> std::result::Result<T, Failed> {
    // SAFETY: the sequence plpgsql's exec_stmt_block uses around a block
    // with an exception handler.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let outcome = PgTryBuilder::new(AssertUnwindSafe(|| {
            body().map_err(|e| Failed {
                message: bounded(&e.to_string()).into_owned(),
                lock_wait: false,
            })
        }))
        .catch_others(|caught| Err(failed(caught)))
        .execute();
        if outcome.is_ok() {
            pg_sys::ReleaseCurrentSubTransaction();
        } else {
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
        }
        pg_sys::MemoryContextSwitchTo(context);
        pg_sys::CurrentResourceOwner = owner;
        outcome
    }
}

/// What an error caught at a `PgTryBuilder` boundary says, its message
/// bounded: it goes on into WARNINGs, LOGs and a schedule's `last_error`,
/// and a PostgreSQL error may echo a value of any size.
pub(crate) fn failed(caught: CaughtError) -> Failed {
    match caught {
        CaughtError::PostgresError(report)
        | CaughtError::ErrorReport(report)
        | CaughtError::RustPanic {
            ereport: report, ..
        } => Failed {
            message: bounded(report.message()).into_owned(),
            lock_wait: report.sql_error_code() == PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        },
    }
}
