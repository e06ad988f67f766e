//! `queue_reap`: promote due timers, reclaim expired leases, and expire
//! kept completed tasks and old idempotency keys, for one queue or all of
//! them (what pg_cron runs).

use aedb_queue_core::grants::Action;
use aedb_queue_core::{reaper, validate};
use pgrx::prelude::*;

use super::fire::fire_due;
use super::{checked_name, required};
use crate::errors::{run, Result};
use crate::lock_wait::with_short_lock_waits;
use crate::security;
use crate::srf::TableIterator;
use crate::store::{self, Reaped};
use crate::subtransaction::in_subtransaction;

/// Reaps one queue: up to `promote` due timers and `reclaim` expired
/// leases, then expires kept completed tasks and idempotency keys.
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
    // A queue that stopped keeping completed tasks drops what it kept;
    // the tasks of workflows and DAGs stay for keep_workflows at least.
    let keep = settings
        .keep_completed
        .unwrap_or(crate::duration::interval(0));
    let mut expired = store::expire_completed(queue, keep, crate::guc::keep_workflows(), limit)?;
    if let Some(keep) = settings.keep_idempotency_keys {
        expired = expired.max(store::expire_keys(queue, keep, limit)?);
    }
    if expired >= limit as i64 {
        super::behind::note();
    }
    Ok(reaped)
}

/// Reaps every queue with work, `max` of each kind in total, shared so
/// that each gets a part (`reaper::share`). Each queue is reaped in its own
/// subtransaction: one queue's bad data, error or lock never stops the
/// others (its error is logged as a WARNING naming it, and its part of the
/// work is undone; a lock not granted at once leaves it for a later pass). Only unconfined admins may: it spans every tenant.
fn reap_all(max: i32) -> Result<Reaped> {
    let mut pending = store::queues_with_work()?;
    let mut total = Reaped::default();
    // A second round gives what queues with little work left over to
    // those that used their whole part.
    for round in 0..2 {
        let promote_left = |t: &Reaped| max as i64 - t.promoted;
        let reclaim_left = |t: &Reaped| max as i64 - t.reclaimed - t.dead_lettered;
        if round > 0 && promote_left(&total) <= 0 && reclaim_left(&total) <= 0 {
            break;
        }
        let mut busy = Vec::new();
        for (i, queue) in pending.iter().enumerate() {
            let left = pending.len() - i;
            let promote = reaper::share(promote_left(&total), left);
            let reclaim = reaper::share(reclaim_left(&total), left);
            match in_subtransaction(|| reap_queue(queue, promote, reclaim)) {
                Ok(reaped) => {
                    total.promoted += reaped.promoted;
                    total.reclaimed += reaped.reclaimed;
                    total.dead_lettered += reaped.dead_lettered;
                    if reaped.promoted >= promote as i64
                        || reaped.reclaimed + reaped.dead_lettered >= reclaim as i64
                    {
                        busy.push(queue.clone());
                    }
                }
                // Someone holds a lock this queue's reap needs: its work
                // waits for a later pass, unlike a real failure.
                Err(failed) if failed.lock_wait => {
                    let queue = aedb_queue_core::error::quoted(queue);
                    pgrx::debug1!("aedb_queue: queue_reap() passed over queue {queue}: {failed}")
                }
                Err(failed) => {
                    let queue = aedb_queue_core::error::quoted(queue);
                    pgrx::warning!("aedb_queue: queue_reap() skipped queue {queue}: {failed}")
                }
            }
        }
        pending = busy;
    }
    sweep_workflows(max);
    Ok(total)
}

/// Removes the workflow steps and waits of tasks that are gone, up to
/// `max` rows of each table a pass (`store::workflow::sweep`); a failure
/// is logged and left for a later pass, like one queue's.
fn sweep_workflows(max: i32) {
    if store::schema_level() < store::SchemaLevel::V090 {
        return;
    }
    match in_subtransaction(|| store::workflow::sweep(max as i64)) {
        Ok(_) => {}
        Err(failed) if failed.lock_wait => {}
        Err(failed) => pgrx::warning!("aedb_queue: queue_reap() did not sweep workflow steps: {failed}"),
    }
}

/// Fires due schedules, then reaps: one queue (admin on it), or every
/// queue (unconfined admins: what the reapers run).
fn reap_and_fire(queue: Option<&str>, max: Option<i32>) -> Result<(Reaped, i64)> {
    let max = validate::reap_max(required("max", max)?)?;
    match queue {
        Some(_) => {
            let queue = checked_name("queue", queue)?;
            security::authorize(Action::Administer, queue)?;
            let fired = fire_due(Some(queue), max)?;
            Ok((reap_queue(queue, max, max)?, fired))
        }
        None => {
            security::require_unconfined("reap every queue")?;
            with_short_lock_waits(|| {
                let fired = fire_due(None, max)?;
                Ok((reap_all(max)?, fired))
            })
        }
    }
}

/// Fires due schedules (up to `max`), promotes due timers and reclaims
/// expired leases (up to `max` of each), and expires what retention says.
#[pg_extern(name = "queue_reap")]
fn reap(
    queue: default!(Option<&str>, "NULL"),
    max: default!(Option<i32>, 1000),
) -> TableIterator<
    'static,
    (
        name!(promoted, i64),
        name!(reclaimed, i64),
        name!(dead_lettered, i64),
        name!(fired, i64),
    ),
> {
    run(|| {
        let (reaped, fired) = reap_and_fire(queue, max)?;
        Ok(TableIterator::once((
            reaped.promoted,
            reaped.reclaimed,
            reaped.dead_lettered,
            fired,
        )))
    })
}

/// `queue_reap` as versions before 0.5.0 declare it (no `fired` column):
/// their SQL calls this symbol until `ALTER EXTENSION aedb_queue UPDATE`
/// (docs/upgrades.md, the ABI rule).
#[pg_extern(sql = false)]
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
        let (reaped, _) = reap_and_fire(queue, max)?;
        Ok(TableIterator::once((
            reaped.promoted,
            reaped.reclaimed,
            reaped.dead_lettered,
        )))
    })
}
