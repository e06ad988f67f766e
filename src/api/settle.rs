//! Fenced settlements (`queue_complete`, `queue_fail`, `queue_heartbeat`,
//! `queue_release`) and `queue_cancel`.

use aedb_queue_core::fence;
use aedb_queue_core::grants::Action;
use aedb_queue_core::spec::parse_spec;
use aedb_queue_core::transition::{on_failure, FailOutcome, FailRequest, RetryPolicy};
use aedb_queue_core::{validate, QueueError};
use pgrx::datum::Interval;
use pgrx::prelude::*;
use std::collections::HashSet;

use super::enqueue::CheckedEnqueue;
use super::{announce_completed, wake};
use super::{
    checked_json, checked_name, int8_elements, interval, micros, positive_interval, required,
};
use crate::datum::{follow_up_specs, RawJsonb};
use crate::errors::{run, Result};
use crate::guc;
use crate::outcome::Outcome;
use crate::security;
use crate::srf::TableIterator;
use crate::store;

/// Removes the task and, in the same transaction, enqueues its follow-ups.
/// With `strict`, a fenced-out call raises SQLSTATE 40002 so the caller's own
/// writes in this transaction roll back with it (exactly-once outbox).
#[pg_extern]
fn queue_complete(
    queue: Option<&str>,
    task_id: Option<i64>,
    fencing_token: Option<i64>,
    result: default!(Option<RawJsonb>, "NULL"),
    follow_ups: default!(Option<RawJsonb>, "NULL"),
    strict: default!(Option<bool>, false),
) -> Outcome {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let held = Held::checked(
            queue,
            ("task_id", task_id),
            ("fencing_token", fencing_token),
        )?;
        let strict = required("strict", strict)?;
        security::authorize(Action::Work, queue)?;
        Completion::checked(held, result, follow_ups)?.apply(strict)
    })
}

/// The task a worker holds: its queue, id and fencing token.
#[derive(Clone, Copy)]
pub(super) struct Held<'a> {
    pub(super) queue: &'a str,
    pub(super) task_id: i64,
    pub(super) fencing_token: i64,
}

impl<'a> Held<'a> {
    /// The arguments come as (name, value), so errors name the caller's own.
    pub(super) fn checked(
        queue: &'a str,
        task_id: (&'static str, Option<i64>),
        fencing_token: (&'static str, Option<i64>),
    ) -> Result<Self> {
        Ok(Held {
            queue,
            task_id: required(task_id.0, task_id.1)?,
            fencing_token: required(fencing_token.0, fencing_token.1)?,
        })
    }

    /// The fence failed: 40002 under `strict`, else the caller learns it.
    pub(super) fn fenced_out(self, strict: bool) -> Result<Outcome> {
        if strict {
            return Err(QueueError::LeaseLost {
                task_id: self.task_id,
                fencing_token: self.fencing_token,
            });
        }
        Ok(Outcome::LeaseLost)
    }
}

/// A completion whose arguments have all been checked (the caller has
/// authorized work on the queue): applying it touches the table first.
pub(super) struct Completion<'a> {
    held: Held<'a>,
    result: Option<RawJsonb>,
    follow_ups: Vec<CheckedEnqueue>,
    keeping: bool,
}

impl<'a> Completion<'a> {
    pub(super) fn checked(
        held: Held<'a>,
        result: Option<RawJsonb>,
        follow_ups: Option<RawJsonb>,
    ) -> Result<Self> {
        let settings = store::settings(held.queue)?;
        let result = checked_json("result", result, &settings)?;
        // Check every follow-up before touching anything.
        let follow_ups = match follow_ups {
            Some(value) => checked_follow_ups(value)?,
            None => Vec::new(),
        };
        Ok(Completion {
            held,
            result,
            follow_ups,
            keeping: settings.keep_completed.is_some(),
        })
    }

    pub(super) fn apply(self, strict: bool) -> Result<Outcome> {
        let Held {
            queue,
            task_id,
            fencing_token,
        } = self.held;
        let completed = store::complete(queue, task_id, fencing_token, self.result, self.keeping)?;
        let Some(woken) = completed else {
            return self.held.fenced_out(strict);
        };
        wake(woken)?;
        announce_completed(queue, [task_id])?;
        for follow_up in &self.follow_ups {
            follow_up.insert()?;
        }
        Ok(Outcome::Applied)
    }
}

/// The follow-ups, each checked as `queue_enqueue` checks its arguments:
/// the caller's right to enqueue at all, then per spec the grant on its
/// queue, then its options and payload.
fn checked_follow_ups(value: RawJsonb) -> Result<Vec<CheckedEnqueue>> {
    let specs = follow_up_specs("follow_ups", value, guc::max_payload_bytes())?;
    if !specs.is_empty() {
        security::require_enqueue_right("follow_ups")?;
    }
    specs
        .into_iter()
        .map(|(path, fields)| {
            let spec = parse_spec(&path, &fields.as_json())?;
            CheckedEnqueue::from_spec(spec, fields.payload)
        })
        .collect()
}

/// Completes many tasks in one statement, each under its own fencing token;
/// returns one row per task. With `strict`, any fenced-out task raises
/// SQLSTATE 40002 and nothing applies.
#[pg_extern]
fn queue_complete_batch(
    queue: Option<&str>,
    task_ids: Option<Array<'_, i64>>,
    fencing_tokens: Option<Array<'_, i64>>,
    strict: default!(Option<bool>, false),
) -> TableIterator<'static, (name!(task_id, i64), name!(outcome, Outcome))> {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let task_ids = int8_elements("task_ids", &task_ids)?;
        let fencing_tokens = int8_elements("fencing_tokens", &fencing_tokens)?;
        let strict = required("strict", strict)?;
        validate::same_length(
            "fencing_tokens",
            fencing_tokens.len(),
            "task_ids",
            task_ids.len(),
        )?;
        validate::batch_length("task_ids", task_ids.len())?;
        security::authorize(Action::Work, queue)?;
        let settled = if store::settings(queue)?.keep_completed.is_some() {
            let mut applied = HashSet::new();
            for (&id, &token) in task_ids.iter().zip(fencing_tokens) {
                if applied.contains(&(id, token)) {
                    continue;
                }
                if let Some(woken) = store::complete(queue, id, token, None, true)? {
                    applied.insert((id, token));
                    wake(woken)?;
                }
            }
            applied.into_iter().collect()
        } else {
            let (mut settled, woken) = store::complete_many(queue, task_ids, fencing_tokens)?;
            wake(woken)?;
            // What the plain path left may be parents: they take their own.
            let left = fence::unsettled(task_ids, fencing_tokens, &mut settled);
            let (parents, woken) = store::complete_parents(queue, &left)?;
            settled.extend(parents);
            wake(woken)?;
            settled
        };
        let rows: Vec<_> = task_ids
            .iter()
            .zip(fence::report_once(task_ids, fencing_tokens, settled))
            .map(|(&id, applied)| (id, Outcome::from_applied(applied)))
            .collect();
        if strict {
            if let Some(i) = rows.iter().position(|(_, o)| *o == Outcome::LeaseLost) {
                return Err(QueueError::LeaseLost {
                    task_id: task_ids[i],
                    fencing_token: fencing_tokens[i],
                });
            }
        }
        let applied = rows.iter().filter(|(_, o)| *o == Outcome::Applied);
        announce_completed(queue, applied.map(|&(id, _)| id))?;
        Ok(TableIterator::new(rows))
    })
}

/// Reports a failed attempt: retry after backoff (or `retry_in`), or dead-letter.
#[pg_extern]
fn queue_fail(
    queue: Option<&str>,
    task_id: Option<i64>,
    fencing_token: Option<i64>,
    error: Option<&str>,
    retry_in: default!(Option<Interval>, "NULL"),
    dead_letter: default!(Option<bool>, false),
) -> Outcome {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let held = Held::checked(
            queue,
            ("task_id", task_id),
            ("fencing_token", fencing_token),
        )?;
        let failure = Failure::checked(held, error, retry_in, dead_letter)?;
        security::authorize(Action::Work, queue)?;
        failure.apply(false)
    })
}

/// A failure report whose arguments have all been checked.
pub(super) struct Failure<'a> {
    held: Held<'a>,
    error: &'a str,
    request: FailRequest,
}

impl<'a> Failure<'a> {
    pub(super) fn checked(
        held: Held<'a>,
        error: Option<&'a str>,
        retry_in: Option<Interval>,
        dead_letter: Option<bool>,
    ) -> Result<Self> {
        let error = required("error", error)?;
        validate::error_text("error", error.len())?;
        let retry_in_micros = retry_in
            .map(|r| validate::non_negative_duration("retry_in", micros(r)))
            .transpose()?;
        let request = FailRequest {
            retry_in_micros,
            dead_letter: required("dead_letter", dead_letter)?,
        };
        Ok(Failure {
            held,
            error,
            request,
        })
    }

    /// Retries the task after its backoff, or dead-letters it.
    pub(super) fn apply(self, strict: bool) -> Result<Outcome> {
        let Held {
            queue,
            task_id,
            fencing_token,
        } = self.held;
        let Some(task) = store::lock_for_fail(queue, task_id, fencing_token)? else {
            return self.held.fenced_out(strict);
        };
        let policy = RetryPolicy {
            attempts: task.attempts,
            max_attempts: task.max_attempts,
            backoff_base_micros: micros(task.backoff_base),
            backoff_max_micros: micros(task.backoff_max),
        };
        let woken = match on_failure(policy, self.request) {
            FailOutcome::RetryAfter(delay) => {
                let state = if delay > 0 { "scheduled" } else { "ready" };
                store::settle_failure(queue, task_id, state, Some(interval(delay)), self.error)?
            }
            FailOutcome::DeadLetter => {
                store::settle_failure(queue, task_id, "dead", None, self.error)?
            }
        };
        wake(woken)?;
        Ok(Outcome::Applied)
    }
}

/// Extends the lease to now + `extend` and records `progress`, which the
/// next claim of this task returns.
#[pg_extern]
fn queue_heartbeat(
    queue: Option<&str>,
    task_id: Option<i64>,
    fencing_token: Option<i64>,
    extend: Option<Interval>,
    progress: default!(Option<RawJsonb>, "NULL"),
) -> Outcome {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let task_id = required("task_id", task_id)?;
        let fencing_token = required("fencing_token", fencing_token)?;
        let extend = positive_interval("extend", extend)?;
        security::authorize(Action::Work, queue)?;
        let progress = checked_json("progress", progress, &store::settings(queue)?)?;
        Ok(Outcome::from_applied(store::heartbeat(
            queue,
            task_id,
            fencing_token,
            extend,
            progress,
        )?))
    })
}

/// Hands a leased task back unworked (a worker shutting down): ready again,
/// or scheduled after `delay`, without counting the claim's attempt; its
/// progress stays for the next claim. Fenced like `queue_fail`.
#[pg_extern]
fn queue_release(
    queue: Option<&str>,
    task_id: Option<i64>,
    fencing_token: Option<i64>,
    delay: default!(Option<Interval>, "'0'"),
    strict: default!(Option<bool>, false),
) -> Outcome {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let held = Held::checked(
            queue,
            ("task_id", task_id),
            ("fencing_token", fencing_token),
        )?;
        let delay = validate::non_negative_duration("delay", micros(required("delay", delay)?))?;
        let strict = required("strict", strict)?;
        security::authorize(Action::Work, queue)?;
        let released = store::release(
            queue,
            held.task_id,
            held.fencing_token,
            interval(delay),
            delay == 0,
        )?;
        let Some(woken) = released else {
            return held.fenced_out(strict);
        };
        wake(woken)?;
        Ok(Outcome::Applied)
    })
}

/// Removes a task in any state; a worker still holding it is fenced out.
#[pg_extern]
fn queue_cancel(queue: Option<&str>, task_id: Option<i64>) -> bool {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let task_id = required("task_id", task_id)?;
        security::authorize(Action::Administer, queue)?;
        let Some(woken) = store::cancel(queue, task_id)? else {
            return Ok(false);
        };
        wake(woken)?;
        Ok(true)
    })
}
