//! The call's clock: the time an entry point was called, read once per call
//! (`errors::run`) so that all its statements agree, and current even where
//! `statement_timestamp()` stands still (inside a procedure, a PL/pgSQL
//! loop, or a long transaction).

use std::cell::Cell;

use pgrx::datum::TimestampWithTimeZone;
use pgrx::{pg_sys, FromDatum};

thread_local! {
    static CALL_STARTED: Cell<Option<pg_sys::TimestampTz>> = const { Cell::new(None) };
}

/// Starts a call: its statements run at this time.
pub(crate) fn start_call() {
    // SAFETY: reads the system clock.
    CALL_STARTED.with(|c| c.set(Some(unsafe { pg_sys::GetCurrentTimestamp() })));
}

pub(crate) fn now_datum() -> pg_sys::Datum {
    let at = CALL_STARTED.with(Cell::get).unwrap_or_else(|| {
        // SAFETY: reads the system clock.
        unsafe { pg_sys::GetCurrentTimestamp() }
    });
    pg_sys::Datum::from(at)
}

pub(crate) fn now() -> TimestampWithTimeZone {
    // SAFETY: a timestamptz datum is a plain integer.
    unsafe { TimestampWithTimeZone::from_datum(now_datum(), false) }
        .expect("a timestamptz datum is never NULL")
}

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 UTC).
const POSTGRES_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// A timestamp as microseconds since the Unix epoch (the core's unit).
pub(crate) fn unix_micros(at: TimestampWithTimeZone) -> i64 {
    let datum: pg_sys::Datum =
        pgrx::IntoDatum::into_datum(at).expect("a timestamptz is never NULL");
    (datum.value() as i64).saturating_add(POSTGRES_EPOCH_UNIX_MICROS)
}

/// The timestamp `micros` after the Unix epoch.
pub(crate) fn from_unix_micros(micros: i64) -> TimestampWithTimeZone {
    let at = micros.saturating_sub(POSTGRES_EPOCH_UNIX_MICROS);
    // SAFETY: a timestamptz datum is a plain integer.
    unsafe { TimestampWithTimeZone::from_datum(pg_sys::Datum::from(at), false) }
        .expect("a timestamptz datum is never NULL")
}

/// A `TimestampTz` (microseconds since PostgreSQL's epoch) as a timestamp.
pub(crate) fn from_postgres_micros(at: pg_sys::TimestampTz) -> TimestampWithTimeZone {
    from_unix_micros(at.saturating_add(POSTGRES_EPOCH_UNIX_MICROS))
}
