//! The `#[pg_extern]` entry points: check arguments with the pure rules,
//! call the store, shape the result. No SQL and no queue rules live here.

mod admin;
mod claim;
mod cron;
mod enqueue;
mod fence;
mod inspect;
mod reap;
mod settle;
mod settle_and_claim;
mod triggers;

use aedb_queue_core::validate;
pub(crate) use aedb_queue_core::validate::required;
use pgrx::datum::Interval;

use crate::datum::RawJsonb;
use crate::errors::Result;
use crate::guc;
use crate::store::QueueSettings;

pub(crate) use crate::duration::{interval, micros};

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

/// A required positive duration, as exactly its length (see `duration`).
pub(crate) fn positive_interval(arg: &'static str, value: Option<Interval>) -> Result<Interval> {
    let value = validate::required(arg, value)?;
    Ok(interval(validate::positive_duration(arg, micros(value))?))
}
