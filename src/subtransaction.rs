//! Subtransactions around a piece of work whose failure must not end the
//! caller's transaction: one queue's reap, one schedule's fire.

use std::panic::AssertUnwindSafe;

use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::{self, PgTryBuilder};

use crate::errors::Result;
use aedb_queue_core::error::bounded;

/// Runs `body` in a subtransaction, as a PL/pgSQL EXCEPTION block does:
/// committed into the caller's transaction if it succeeds, rolled back
/// (with the user, search path and settings it changed) if it fails,
/// returning the error's message.
pub(crate) fn in_subtransaction<T>(
    body: impl FnOnce() -> Result<T>,
) -> std::result::Result<T, String> {
    // SAFETY: the sequence plpgsql's exec_stmt_block uses around a block
    // with an exception handler.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let outcome = PgTryBuilder::new(AssertUnwindSafe(|| {
            body().map_err(|e| bounded(&e.to_string()).into_owned())
        }))
        .catch_others(|caught| Err(message_of(caught)))
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

/// The message of an error caught at a `PgTryBuilder` boundary, bounded:
/// it goes on into WARNINGs, LOGs and a schedule's `last_error`, and a
/// PostgreSQL error may echo a value of any size.
pub(crate) fn message_of(caught: CaughtError) -> String {
    match caught {
        CaughtError::PostgresError(report)
        | CaughtError::ErrorReport(report)
        | CaughtError::RustPanic {
            ereport: report, ..
        } => bounded(report.message()).into_owned(),
    }
}
