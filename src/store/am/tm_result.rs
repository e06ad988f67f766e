//! What a table access method's result means where a statement would have
//! met it.

use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// What a DELETE statement raises in REPEATABLE READ or SERIALIZABLE when
/// the row changed after the transaction's snapshot.
pub(super) fn serialization_failure(result: pg_sys::TM_Result::Type) -> ! {
    let what = if result == pg_sys::TM_Result::TM_Deleted {
        "delete"
    } else {
        "update"
    };
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
        format!("could not serialize access due to concurrent {what}"),
        "aedb_queue",
    )
    .report(PgLogLevel::ERROR);
    unreachable!("an ERROR report does not return")
}

pub(super) fn unexpected(call: &str, result: pg_sys::TM_Result::Type) -> ! {
    pgrx::error!("unexpected {call} result {result}")
}
