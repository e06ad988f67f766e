//! Turns a [`QueueError`] into a Postgres ERROR with its SQLSTATE.

use aedb_queue_core::error::bounded;
use aedb_queue_core::QueueError;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

pub type Result<T> = std::result::Result<T, QueueError>;

/// The error's SQLSTATE (`QueueError::sqlstate`, the one mapping) as
/// Postgres encodes it (MAKE_SQLSTATE: six bits per character).
fn code(error: &QueueError) -> PgSqlErrorCode {
    let encoded = error
        .sqlstate()
        .bytes()
        .enumerate()
        .fold(0i32, |code, (i, c)| {
            code | ((((c as i32) - ('0' as i32)) & 0x3F) << (6 * i))
        });
    PgSqlErrorCode::from(encoded)
}

fn hint(error: &QueueError) -> Option<String> {
    let fixed = match error {
        QueueError::Prerequisite { hint, .. } => return Some(hint.clone()),
        QueueError::InvalidArgument { arg, .. } if arg == "every" => Some(
            "pg_cron 1.4 schedules with cron expressions, so a job runs at most once a minute.",
        ),
        QueueError::LeaseLost { .. } => Some(
            "The lease expired and the task was reclaimed, or it was cancelled or settled; \
             this transaction is rolled back so its writes do not apply twice.",
        ),
        QueueError::PermissionDenied { .. } => Some(
            "An aedb_queue admin can grant it with aedb_queue.queue_grant(queue_pattern, role, privilege).",
        ),
        QueueError::NoEnqueueRight { .. } => Some(
            "Grant the role aedb_queue_producer (GRANT aedb_queue_producer TO ...).",
        ),
        QueueError::Confined { .. } => Some(
            "A session is confined when its current role, the role SET ROLE chose or its login role belongs to a confined role (docs/security.md).",
        ),
        _ => None,
    };
    fixed.map(str::to_string)
}

/// Runs an entry point's body, raising its error (if any) as a Postgres
/// ERROR; every call starts by reading the clock and taking in other
/// sessions' committed changes to what this backend keeps copies of.
pub fn run<T>(body: impl FnOnce() -> Result<T>) -> T {
    crate::clock::start_call();
    crate::cache::catch_up();
    match body() {
        Ok(value) => value,
        Err(error) => raise(error),
    }
}

/// Raises `error`; its message is bounded once more here, the last
/// defence behind the quoting of every value in it.
pub fn raise(error: QueueError) -> ! {
    let message = bounded(&error.to_string()).into_owned();
    let mut report = ErrorReport::new(code(&error), message, "aedb_queue");
    if let Some(hint) = hint(&error) {
        report = report.set_hint(bounded(&hint).into_owned());
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("an ERROR report does not return")
}

pub fn internal(error: impl std::fmt::Display) -> QueueError {
    QueueError::Internal(error.to_string())
}
