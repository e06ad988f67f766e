//! `queue_reap`: promote due timers and reclaim expired leases, for one
//! queue or all of them (what pg_cron runs).

use aedb_queue_core::validate;
use pgrx::prelude::*;

use super::{checked_name, required};
use crate::errors::{run, Result};
use crate::store;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reaped {
    pub promoted: i64,
    pub reclaimed: i64,
    pub dead_lettered: i64,
}

/// Up to `limit` promotions and `limit` reclaims in `queue`.
pub(crate) fn reap_queue(queue: &str, limit: i32) -> Result<Reaped> {
    let promoted = store::promote_due(queue, limit)?;
    let (reclaimed, dead_lettered) = store::reclaim_expired(queue, limit)?;
    Ok(Reaped {
        promoted,
        reclaimed,
        dead_lettered,
    })
}

/// Reaps every registered queue, `max` of each kind of work in total.
fn reap_all(max: i32) -> Result<Reaped> {
    let mut total = Reaped::default();
    for queue in store::queue_names()? {
        let promote_left = max as i64 - total.promoted;
        let reclaim_left = max as i64 - total.reclaimed - total.dead_lettered;
        if promote_left <= 0 && reclaim_left <= 0 {
            break;
        }
        if promote_left > 0 {
            total.promoted += store::promote_due(&queue, promote_left as i32)?;
        }
        if reclaim_left > 0 {
            let (reclaimed, dead) = store::reclaim_expired(&queue, reclaim_left as i32)?;
            total.reclaimed += reclaimed;
            total.dead_lettered += dead;
        }
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
            Some(_) => reap_queue(checked_name("queue", queue)?, max)?,
            None => reap_all(max)?,
        };
        Ok(TableIterator::once((
            reaped.promoted,
            reaped.reclaimed,
            reaped.dead_lettered,
        )))
    })
}
