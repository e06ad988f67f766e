//! `queue_claim`: lease up to `max` due tasks to one owner.

use aedb_queue_core::grants::Action;
use aedb_queue_core::validate;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use super::{checked_name, positive_interval, required};
use crate::datum::RawJsonb;
use crate::errors::{run, Result};
use crate::guc;
use crate::security;
use crate::srf::TableIterator;
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
        let claim = Claim::checked(queue, owner_id, lease, max)?;
        security::authorize(Action::Work, queue)?;
        let rows = claim.apply()?.into_iter().map(|t| {
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

/// A claim whose arguments have all been checked (the caller has
/// authorized work on the queue).
pub(super) struct Claim<'a> {
    queue: &'a str,
    owner_id: &'a str,
    lease: Option<Interval>,
    max: i32,
}

impl<'a> Claim<'a> {
    pub(super) fn checked(
        queue: &'a str,
        owner_id: Option<&'a str>,
        lease: Option<Interval>,
        max: Option<i32>,
    ) -> Result<Self> {
        let owner_id = checked_name("owner_id", owner_id)?;
        let max = validate::claim_max(required("max", max)?)?;
        let lease = lease
            .map(|l| positive_interval("lease", Some(l)))
            .transpose()?;
        Ok(Claim {
            queue,
            owner_id,
            lease,
            max,
        })
    }

    /// Leases up to `max` tasks; none while the queue is paused.
    pub(super) fn apply(self) -> Result<Vec<store::ClaimedTask>> {
        let settings = store::settings(self.queue)?;
        if settings.paused {
            return Ok(Vec::new());
        }
        let lease = self.lease.unwrap_or_else(|| {
            settings
                .default_lease
                .unwrap_or_else(|| crate::duration::interval(DEFAULT_LEASE_SECONDS * 1_000_000))
        });
        let reap = guc::inline_reap().then_some(self.max.max(INLINE_REAP_MIN));
        let fair = settings.fair_share;
        let claim = |max: i32| store::claim(self.queue, self.owner_id, lease, max, reap, fair);
        match settings.rate() {
            Some(limit) => store::flow::claim_with_tokens(self.queue, limit, self.max, claim),
            None => claim(self.max),
        }
    }
}
