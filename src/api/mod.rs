//! The `#[pg_extern]` entry points: check arguments with the pure rules,
//! call the store, shape the result. No SQL and no queue rules live here.

mod admin;
mod behind;
pub use behind::take as take_behind;
mod claim;
mod cron;
mod enqueue;
mod fence;
mod fire;
mod inspect;
mod overview;
mod reap;
mod schedule;
mod settle;
mod settle_and_claim;
mod triggers;
mod workflow;
mod write_path;

pub(crate) use aedb_queue_core::validate::required;
use aedb_queue_core::{validate, QueueError};
use pgrx::datum::{Array, Interval};

use crate::datum::RawJsonb;
use crate::errors::Result;
use crate::guc;
use crate::store::QueueSettings;

pub(crate) use crate::duration::{interval, micros};

/// The elements of a `bigint[]` argument, read in place: the argument must
/// not be NULL nor hold a NULL element.
pub(crate) fn int8_elements<'a>(
    arg: &'static str,
    array: &'a Option<Array<'_, i64>>,
) -> Result<&'a [i64]> {
    let array = array.as_ref().ok_or(QueueError::NullArgument { arg })?;
    match array.as_slice() {
        Ok(elements) => Ok(elements),
        Err(_) => {
            validate::no_null_elements(arg, array.iter().position(|e| e.is_none()))?;
            Err(QueueError::Internal(format!(
                "{arg}: the array's elements cannot be read in place"
            )))
        }
    }
}

pub(crate) fn checked_name<'a>(arg: &'static str, value: Option<&'a str>) -> Result<&'a str> {
    let value = validate::required(arg, value)?;
    validate::name(arg, value)?;
    Ok(value)
}

/// The arguments of a read of one task (its row, links, errors, steps,
/// waits), checked in order, then the caller's right to read the queue.
pub(crate) fn readable_task(queue: Option<&str>, task_id: Option<i64>) -> Result<(&str, i64)> {
    let queue = checked_name("queue", queue)?;
    let task_id = validate::required("task_id", task_id)?;
    crate::security::authorize(aedb_queue_core::grants::Action::Read, queue)?;
    Ok((queue, task_id))
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

/// Wakes the listeners of each of `queues` that notifies (children that
/// became ready when a parent completed or failed).
/// Tells `aedb_queue_completed` listeners of the tasks a call completed,
/// where `aedb_queue.notify_completions` is on; off, the ids are not read.
pub(crate) fn announce_completed(
    queue: &str,
    completed: impl IntoIterator<Item = i64>,
) -> Result<()> {
    if !guc::notify_completions() {
        return Ok(());
    }
    let mut ids = completed.into_iter();
    if let Some(first) = ids.next() {
        crate::store::notify_completed(queue, 1 + ids.count(), first)?;
    }
    Ok(())
}

pub(crate) fn wake(queues: Vec<String>) -> Result<()> {
    for queue in queues {
        if crate::store::settings(&queue)?.notify {
            crate::store::notify(&queue)?;
        }
    }
    Ok(())
}
