//! The `#[pg_extern]` entry points: check arguments with the pure rules,
//! call the store, shape the result. No SQL and no queue rules live here.

mod admin;
mod claim;
mod enqueue;
mod inspect;
mod reap;
mod settle;

pub(crate) use aedb_queue_core::validate::required;
use aedb_queue_core::{validate, MICROS_PER_DAY};
use pgrx::datum::Interval;

use crate::errors::Result;
use crate::guc;
use crate::jsonb::RawJsonb;
use crate::store::QueueSettings;

/// Interval length in microseconds, counting a month as 30 days as Postgres
/// does when it compares intervals.
pub(crate) fn micros(interval: Interval) -> i64 {
    let total = interval.months() as i128 * 30 * MICROS_PER_DAY as i128
        + interval.days() as i128 * MICROS_PER_DAY as i128
        + interval.micros() as i128;
    total.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

pub(crate) fn interval(micros: i64) -> Interval {
    Interval::from_micros(micros)
}

pub(crate) fn checked_name<'a>(arg: &'static str, value: Option<&'a str>) -> Result<&'a str> {
    let value = validate::required(arg, value)?;
    validate::name(arg, value)?;
    Ok(value)
}

/// Checks a jsonb value's size against the payload limit of `settings`'s queue.
pub(crate) fn checked_json(
    arg: &str,
    value: Option<RawJsonb>,
    settings: &QueueSettings,
) -> Result<Option<RawJsonb>> {
    if let Some(json) = value {
        checked_size(arg, json.byte_size(), settings)?;
    }
    Ok(value)
}

/// A queue's own limit applies below `aedb_queue.max_payload_bytes`, never above it.
pub(crate) fn checked_size(arg: &str, bytes: usize, settings: &QueueSettings) -> Result<()> {
    let global = guc::max_payload_bytes();
    let limit = settings
        .max_payload_bytes
        .map_or(global, |own| global.min(own.max(1) as usize));
    validate::payload_size(arg, bytes, limit)
}

pub(crate) fn positive_interval(arg: &'static str, value: Option<Interval>) -> Result<Interval> {
    let value = validate::required(arg, value)?;
    validate::positive_duration(arg, micros(value))?;
    Ok(value)
}
