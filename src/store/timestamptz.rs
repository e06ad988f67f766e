//! Timestamp arithmetic on datums, as SQL computes it: a delay's
//! `not_before` for an enqueue (`insert`), a lease's deadline for the direct
//! claim.

use pgrx::datum::Interval;
use pgrx::pg_sys;

// The built-in SQL function called directly; pgrx's bindings wrap it as a
// Rust function, and DirectFunctionCall wants the C entry point.
extern "C-unwind" {
    fn timestamptz_pl_interval(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

/// `at + interval` for a timestamptz datum `at`, as SQL's `+` computes it.
pub(super) fn plus(at: pg_sys::Datum, interval: &Interval) -> pg_sys::Datum {
    // SAFETY: a built-in function called with arguments of its types.
    unsafe {
        pg_sys::DirectFunctionCall2Coll(
            Some(timestamptz_pl_interval),
            pg_sys::InvalidOid,
            at,
            interval_datum(interval),
        )
    }
}

/// An interval as a datum pointing at the value itself, which outlives the
/// write: `into_datum` would copy it into palloc'd memory first.
pub(super) fn interval_datum(value: &Interval) -> pg_sys::Datum {
    pg_sys::Datum::from(std::ptr::from_ref(value))
}
