//! `queue_reap`: promote due timers and reclaim expired leases, for one
//! queue or all of them (what pg_cron runs).

use aedb_queue_core::validate;
use pgrx::prelude::*;

use super::{checked_name, required};
use crate::errors::{run, Result};
use crate::store::{self, Reaped};

/// Reaps every registered queue, `max` of each kind of work in total.
fn reap_all(max: i32) -> Result<Reaped> {
    let mut total = Reaped::default();
    for queue in store::queue_names()? {
        let promote_left = max as i64 - total.promoted;
        let reclaim_left = max as i64 - total.reclaimed - total.dead_lettered;
        if promote_left <= 0 && reclaim_left <= 0 {
            break;
        }
        let reaped = store::reap(
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
            Some(_) => store::reap(checked_name("queue", queue)?, max, max)?,
            None => reap_all(max)?,
        };
        Ok(TableIterator::once((
            reaped.promoted,
            reaped.reclaimed,
            reaped.dead_lettered,
        )))
    })
}
