//! Turns a [`QueueError`] into a Postgres ERROR with its SQLSTATE.

use aedb_queue_core::QueueError;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

pub type Result<T> = std::result::Result<T, QueueError>;

fn code(error: &QueueError) -> PgSqlErrorCode {
    match error {
        QueueError::NullArgument { .. } => PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        QueueError::InvalidArgument { .. } => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        QueueError::PayloadTooLarge { .. } => PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        QueueError::LeaseLost { .. } => PgSqlErrorCode::ERRCODE_T_R_INTEGRITY_CONSTRAINT_VIOLATION,
        QueueError::PermissionDenied { .. } => PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        QueueError::Internal(_) => PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
    }
}

fn hint(error: &QueueError) -> Option<&'static str> {
    match error {
        QueueError::LeaseLost { .. } => Some(
            "The lease expired and the task was reclaimed, or it was cancelled or settled; \
             this transaction is rolled back so its writes do not apply twice.",
        ),
        QueueError::PermissionDenied { .. } => Some(
            "An aedb_queue admin can grant it with aedb_queue.queue_grant(queue_pattern, role, privilege).",
        ),
        _ => None,
    }
}

/// Runs an entry point's body, raising its error (if any) as a Postgres ERROR.
pub fn run<T>(body: impl FnOnce() -> Result<T>) -> T {
    match body() {
        Ok(value) => value,
        Err(error) => raise(error),
    }
}

pub fn raise(error: QueueError) -> ! {
    let mut report = ErrorReport::new(code(&error), error.to_string(), "aedb_queue");
    if let Some(hint) = hint(&error) {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("an ERROR report does not return")
}

pub fn internal(error: impl std::fmt::Display) -> QueueError {
    QueueError::Internal(error.to_string())
}
