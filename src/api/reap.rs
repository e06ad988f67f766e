//! `queue_reap`: promote due timers, reclaim expired leases, and expire
//! kept completed tasks and old idempotency keys, for one queue or all of
//! them (what pg_cron runs).

use aedb_queue_core::grants::{Action, Pattern};
use aedb_queue_core::validate;
use pgrx::datum::Interval;
use pgrx::prelude::*;

use super::{checked_name, required};
use crate::errors::{run, Result};
use crate::security;
use crate::store::{self, Reaped};

/// Reaps one queue, `max` of each kind of work at most.
fn reap_queue(queue: &str, promote: i32, reclaim: i32) -> Result<Reaped> {
    let reaped = store::reap(queue, promote, reclaim)?;
    let settings = store::settings(queue)?;
    if settings.notify && reaped.promoted + reaped.reclaimed > 0 {
        store::notify(queue)?;
    }
    if !store::schema_current() {
        return Ok(reaped);
    }
    let limit = promote.max(reclaim).max(1);
    // A queue that stopped keeping completed tasks drops what it kept.
    let keep = settings.keep_completed.unwrap_or(Interval::from_micros(0));
    store::expire_completed(queue, keep, limit)?;
    if let Some(keep) = settings.keep_idempotency_keys {
        store::expire_keys(queue, keep, limit)?;
    }
    Ok(reaped)
}

/// Reaps every registered queue the caller may administer, `max` of each
/// kind of work in total.
fn reap_all(max: i32) -> Result<Reaped> {
    let mut total = Reaped::default();
    for queue in store::queue_names()? {
        if !security::may(Action::Administer, &Pattern::Exact(queue.clone()))? {
            continue;
        }
        let promote_left = max as i64 - total.promoted;
        let reclaim_left = max as i64 - total.reclaimed - total.dead_lettered;
        if promote_left <= 0 && reclaim_left <= 0 {
            break;
        }
        let reaped = reap_queue(
            &queue,
            promote_left.max(0) as i32,
            reclaim_left.max(0) as i32,
        )?;
        total.promoted += reaped.promoted;
        total.reclaimed += reaped.reclaimed;
        total.dead_lettered += reaped.dead_lettered;
    }
    Ok(total)
}

#[pg_extern]
fn queue_reap(
    queue: default!(Option<&str>, "NULL"),
    max: default!(Option<i32>, 1000),
) -> TableIterator<
    'static,
    (
        name!(promoted, i64),
        name!(reclaimed, i64),
        name!(dead_lettered, i64),
    ),
> {
    run(|| {
        let max = validate::reap_max(required("max", max)?)?;
        let reaped = match queue {
            Some(_) => {
                let queue = checked_name("queue", queue)?;
                security::authorize(Action::Administer, queue)?;
                reap_queue(queue, max, max)?
            }
            None => reap_all(max)?,
        };
        Ok(TableIterator::once((
            reaped.promoted,
            reaped.reclaimed,
            reaped.dead_lettered,
        )))
    })
}
