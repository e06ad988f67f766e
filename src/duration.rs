//! The one rule for every duration argument and setting: an interval is
//! converted to microseconds with a month counted as 30 days and a day as
//! 24 hours (as Postgres compares intervals), checked against the limits,
//! and then used as exactly that many microseconds. So a value cannot mean
//! one length when checked and another when added to a timestamp (a
//! calendar month, a 23-hour day at a DST change), and the 100-year cap
//! holds whatever mix of months, days and time it was written in.

use pgrx::datum::Interval;

use aedb_queue_core::MICROS_PER_DAY;

/// Interval length in microseconds (a month is 30 days), saturating.
pub(crate) fn micros(interval: Interval) -> i64 {
    let total = interval.months() as i128 * 30 * MICROS_PER_DAY as i128
        + interval.days() as i128 * MICROS_PER_DAY as i128
        + interval.micros() as i128;
    total.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// The interval of exactly `micros` microseconds (no months, no days).
/// Built directly: pgrx's `Interval::from_micros` goes through seconds as
/// an f64 and a call of `make_interval` (about 2,000 instructions).
pub(crate) fn interval(micros: i64) -> Interval {
    Interval::new(0, 0, micros).expect("no months: the signs cannot disagree")
}
