//! The contract's rules the model needs, stated here on their own: the
//! extension runs the core's `transition::on_failure`,
//! `validate::resolve_enqueue` and `dependency::start`, so a model calling
//! them too would agree with any bug in them. Each is the README's sentence
//! ("Semantics", docs/dependencies.md) written as plainly as it reads,
//! over what a case can vary.

use super::reply::INVALID_PARAMETER;
use super::{FailHow, State};

/// README: "defaults: 5 attempts".
const DEFAULT_MAX_ATTEMPTS: i32 = 5;

/// The attempts an enqueue gives its task, or why it is refused: 22023
/// for `max_attempts` below 1, and for a concurrency key given with an
/// ordering key ("a concurrency key or an ordering key, not both").
pub(super) fn enqueue_max_attempts(
    max_attempts: Option<i32>,
    concurrency_key: Option<u8>,
    ordering_key: Option<u8>,
) -> Result<i32, &'static str> {
    let max = max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if max < 1 || (concurrency_key.is_some() && ordering_key.is_some()) {
        return Err(INVALID_PARAMETER);
    }
    Ok(max)
}

/// Where a failed task goes (docs/sql.md "Fail"): dead when the worker says so
/// or when its attempts are used up (a `retry_in` does not extend them);
/// else ready at once for `retry_in => '0'`, scheduled for anything later
/// (every backoff of a case is an hour or more).
pub(super) fn after_failure(attempts: i32, max_attempts: i32, how: FailHow) -> State {
    if how == FailHow::DeadLetter || attempts >= max_attempts {
        State::Dead
    } else if how == FailHow::RetryNow {
        State::Ready
    } else {
        State::Scheduled
    }
}

/// Where a parent stands when a child names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stands {
    Live,
    Dead,
    Completed,
    /// Never made, cancelled, purged, or completed and not kept.
    Missing,
}

/// How a new child starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChildStart {
    Runnable,
    Waiting(usize),
    /// Enqueued dead, naming this parent.
    Dead(usize),
}

/// docs/dependencies.md: a missing parent refuses the call (22023); with
/// `dead_letter` a dead parent (the lowest id of them) makes the child
/// dead at once; otherwise the child waits for its live parents, each
/// counted once, and a completed (or, with `run`, dead) one counts as done.
pub(super) fn child_start(
    parents: &[(usize, Stands)],
    run_on_parent_failure: bool,
) -> Result<ChildStart, &'static str> {
    if parents.iter().any(|&(_, s)| s == Stands::Missing) {
        return Err(INVALID_PARAMETER);
    }
    let dead = parents
        .iter()
        .filter(|&&(_, s)| s == Stands::Dead)
        .map(|&(id, _)| id)
        .min();
    if let (Some(id), false) = (dead, run_on_parent_failure) {
        return Ok(ChildStart::Dead(id));
    }
    let mut live: Vec<usize> = parents
        .iter()
        .filter(|&&(_, s)| s == Stands::Live)
        .map(|&(id, _)| id)
        .collect();
    live.sort_unstable();
    live.dedup();
    Ok(match live.len() {
        0 => ChildStart::Runnable,
        n => ChildStart::Waiting(n),
    })
}

/// The `last_error` of a child a parent left dead (`why`: "is dead",
/// "was cancelled", ...), as docs/dependencies.md words it.
pub fn dead_parent_error(parent_id: i64, why: &str) -> String {
    format!("parent task {parent_id} {why}")
}
