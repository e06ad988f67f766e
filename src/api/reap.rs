//! `queue_reap`: promote due timers, reclaim expired leases, and expire
//! kept completed tasks and old idempotency keys, for one queue or all of
//! them (what pg_cron runs).

use std::panic::AssertUnwindSafe;

use aedb_queue_core::grants::Action;
use aedb_queue_core::{reaper, validate};
use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::{self, PgTryBuilder};
use pgrx::prelude::*;

use super::{checked_name, required};
use crate::errors::{run, Result};
use crate::security;
use crate::srf::TableIterator;
use crate::store::{self, Reaped};

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
    // A queue that stopped keeping completed tasks drops what it kept.
    let keep = settings
        .keep_completed
        .unwrap_or(crate::duration::interval(0));
    store::expire_completed(queue, keep, limit)?;
    if let Some(keep) = settings.keep_idempotency_keys {
        store::expire_keys(queue, keep, limit)?;
    }
    Ok(reaped)
}

/// Reaps every queue with work, `max` of each kind in total, shared so
/// that each gets a part (`reaper::share`). Each queue is reaped in its own
/// subtransaction: one queue's bad data, error or lock never stops the
/// others (its error is logged as a WARNING naming it, and its part of the
/// work is undone). Only unconfined admins may: it spans every tenant.
fn reap_all(max: i32) -> Result<Reaped> {
    security::require_unconfined("reap every queue")?;
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
                Err(message) => {
                    pgrx::warning!("aedb_queue: queue_reap() skipped queue {queue:?}: {message}")
                }
            }
        }
        pending = busy;
    }
    Ok(total)
}

/// Runs `body` in a subtransaction, as a PL/pgSQL EXCEPTION block does:
/// committed into the caller's transaction if it succeeds, rolled back
/// (with the user, search path and settings it changed) if it fails,
/// returning the error's message.
fn in_subtransaction<T>(body: impl FnOnce() -> Result<T>) -> std::result::Result<T, String> {
    // SAFETY: the sequence plpgsql's exec_stmt_block uses around a block
    // with an exception handler.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let outcome = PgTryBuilder::new(AssertUnwindSafe(|| body().map_err(|e| e.to_string())))
            .catch_others(|caught| match caught {
                CaughtError::PostgresError(report)
                | CaughtError::ErrorReport(report)
                | CaughtError::RustPanic {
                    ereport: report, ..
                } => Err(report.message().to_string()),
            })
            .execute();
        if outcome.is_ok() {
            pg_sys::ReleaseCurrentSubTransaction();
        } else {
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
        }
        pg_sys::MemoryContextSwitchTo(context);
        pg_sys::CurrentResourceOwner = owner;
        outcome
    }
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
