//! `queue_complete_and_claim` and `queue_fail_and_claim`: a worker settles
//! the task it holds and claims its next ones in one call and one commit.
//!
//! Each is the settle call followed by the claim call, with every check of
//! both made before either touches a row: the settle is fenced as in
//! `queue_complete`/`queue_fail`, and its outcome is reported on every row.

use aedb_queue_core::grants::Action;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use super::claim::Claim;
use super::settle::{Completion, Failure, Held};
use super::{checked_name, required};
use crate::datum::RawJsonb;
use crate::errors::{run, Result};
use crate::outcome::Outcome;
use crate::security;
use crate::srf::TableIterator;
use crate::store::{self, ClaimedTask};

/// One row of a settle-and-claim: the held task's outcome, and one claimed
/// task (all NULL when nothing was claimed, so the outcome always arrives).
/// The entry points spell it out: `#[pg_extern]` reads their signatures
/// before type aliases exist.
type Row = (
    Outcome,
    Option<i64>,
    Option<RawJsonb>,
    Option<i32>,
    Option<i64>,
    Option<TimestampWithTimeZone>,
    Option<i64>,
    Option<TimestampWithTimeZone>,
    Option<RawJsonb>,
);

fn rows(settled: Outcome, claimed: Vec<ClaimedTask>) -> TableIterator<'static, Row> {
    if claimed.is_empty() {
        let none = (settled, None, None, None, None, None, None, None, None);
        return TableIterator::new(vec![none]);
    }
    let rows: Vec<Row> = claimed
        .into_iter()
        .map(|t| {
            (
                settled,
                Some(t.task_id),
                t.payload,
                Some(t.attempts),
                Some(t.fencing_token),
                Some(t.lease_deadline),
                Some(t.priority),
                Some(t.enqueued_at),
                t.progress,
            )
        })
        .collect();
    TableIterator::new(rows)
}

/// Completes the held task as `queue_complete` does (result, follow-ups,
/// strict), then claims up to `max` tasks as `queue_claim` does. The
/// claim happens whatever the outcome, unless `strict` raised 40002.
#[pg_extern]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn queue_complete_and_claim(
    queue: Option<&str>,
    owner_id: Option<&str>,
    held_task_id: Option<i64>,
    held_fencing_token: Option<i64>,
    result: default!(Option<RawJsonb>, "NULL"),
    follow_ups: default!(Option<RawJsonb>, "NULL"),
    strict: default!(Option<bool>, false),
    lease: default!(Option<Interval>, "NULL"),
    max: default!(Option<i32>, 1),
) -> TableIterator<
    'static,
    (
        name!(settled, Outcome),
        name!(task_id, Option<i64>),
        name!(payload, Option<RawJsonb>),
        name!(attempts, Option<i32>),
        name!(fencing_token, Option<i64>),
        name!(lease_deadline, Option<TimestampWithTimeZone>),
        name!(priority, Option<i64>),
        name!(enqueued_at, Option<TimestampWithTimeZone>),
        name!(progress, Option<RawJsonb>),
    ),
> {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let held = held_task(queue, held_task_id, held_fencing_token)?;
        let strict = required("strict", strict)?;
        let claim = Claim::checked(queue, owner_id, lease, max)?;
        security::authorize(Action::Work, queue)?;
        let completion = Completion::checked(held, result, follow_ups)?;
        store::in_one_scope(|| {
            let settled = completion.apply(strict)?;
            Ok(rows(settled, claim.apply()?))
        })
    })
}

/// Reports a failed attempt as `queue_fail` does (retry or dead-letter),
/// then claims up to `max` tasks. A failure retried at once may be claimed
/// again by this very call.
#[pg_extern]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn queue_fail_and_claim(
    queue: Option<&str>,
    owner_id: Option<&str>,
    held_task_id: Option<i64>,
    held_fencing_token: Option<i64>,
    error: Option<&str>,
    retry_in: default!(Option<Interval>, "NULL"),
    dead_letter: default!(Option<bool>, false),
    strict: default!(Option<bool>, false),
    lease: default!(Option<Interval>, "NULL"),
    max: default!(Option<i32>, 1),
) -> TableIterator<
    'static,
    (
        name!(settled, Outcome),
        name!(task_id, Option<i64>),
        name!(payload, Option<RawJsonb>),
        name!(attempts, Option<i32>),
        name!(fencing_token, Option<i64>),
        name!(lease_deadline, Option<TimestampWithTimeZone>),
        name!(priority, Option<i64>),
        name!(enqueued_at, Option<TimestampWithTimeZone>),
        name!(progress, Option<RawJsonb>),
    ),
> {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let held = held_task(queue, held_task_id, held_fencing_token)?;
        let failure = Failure::checked(held, error, retry_in, dead_letter)?;
        let strict = required("strict", strict)?;
        let claim = Claim::checked(queue, owner_id, lease, max)?;
        security::authorize(Action::Work, queue)?;
        store::in_one_scope(|| {
            let settled = failure.apply(strict)?;
            Ok(rows(settled, claim.apply()?))
        })
    })
}

fn held_task<'a>(
    queue: &'a str,
    task_id: Option<i64>,
    fencing_token: Option<i64>,
) -> Result<Held<'a>> {
    Held::checked(
        queue,
        ("held_task_id", task_id),
        ("held_fencing_token", fencing_token),
    )
}
