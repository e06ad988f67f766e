//! `queue_claim`: lease up to `max` due tasks to one owner.

use aedb_queue_core::grants::Action;
use aedb_queue_core::validate;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use super::{checked_name, positive_interval, required};
use crate::datum::RawJsonb;
use crate::errors::run;
use crate::guc;
use crate::security;
use crate::store;

/// Timers promoted and leases reclaimed inline per claim, at least. Due timers
/// compete by priority only once promoted, so this is generous (each timer is
/// promoted once, so the cost is amortised) yet bounded: one claim never does
/// unbounded work, and `queue_reap` clears larger backlogs.
const INLINE_REAP_MIN: i32 = 1000;

/// The lease when neither the call nor the queue's settings give one.
const DEFAULT_LEASE_SECONDS: i64 = 30;

#[pg_extern]
#[allow(clippy::type_complexity)]
fn queue_claim(
    queue: Option<&str>,
    owner_id: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
    max: default!(Option<i32>, 1),
) -> TableIterator<
    'static,
    (
        name!(task_id, i64),
        name!(payload, Option<RawJsonb>),
        name!(attempts, i32),
        name!(fencing_token, i64),
        name!(lease_deadline, TimestampWithTimeZone),
        name!(priority, i64),
        name!(enqueued_at, TimestampWithTimeZone),
        name!(progress, Option<RawJsonb>),
    ),
> {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let owner_id = checked_name("owner_id", owner_id)?;
        let max = validate::claim_max(required("max", max)?)?;
        security::authorize(Action::Work, queue)?;
        let settings = store::settings(queue)?;
        let lease = match lease {
            Some(_) => positive_interval("lease", lease)?,
            None => settings
                .default_lease
                .unwrap_or_else(|| Interval::from_micros(DEFAULT_LEASE_SECONDS * 1_000_000)),
        };
        if settings.paused {
            return Ok(TableIterator::new(Vec::new()));
        }
        let reap = guc::inline_reap().then_some(max.max(INLINE_REAP_MIN));
        let rows = store::claim(queue, owner_id, lease, max, reap)?
            .into_iter()
            .map(|t| {
                (
                    t.task_id,
                    t.payload,
                    t.attempts,
                    t.fencing_token,
                    t.lease_deadline,
                    t.priority,
                    t.enqueued_at,
                    t.progress,
                )
            });
        Ok(TableIterator::new(rows.collect::<Vec<_>>()))
    })
}
