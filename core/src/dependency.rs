//! Task dependencies: which parents a new task waits for, and what it is
//! when enqueued, given where each parent stands.

use crate::error::quoted;
use crate::QueueError;

/// Most parents one task may wait for.
pub const MAX_PARENTS: usize = 1_000;
/// Most (parent, child) pairs one call may link: a batch of children times
/// their parents.
pub const MAX_LINKS: usize = 100_000;

/// What a child does when a parent is dead-lettered or cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnParentFailure {
    /// The child is dead-lettered too, its error naming the parent.
    DeadLetter,
    /// The parent counts as done: the child runs once the others complete.
    Run,
}

impl OnParentFailure {
    pub fn parse(arg: &str, value: &str) -> Result<Self, QueueError> {
        match value {
            "dead_letter" => Ok(OnParentFailure::DeadLetter),
            "run" => Ok(OnParentFailure::Run),
            _ => Err(QueueError::invalid(
                arg,
                format!("must be 'dead_letter' or 'run', got {}", quoted(value)),
            )),
        }
    }

    pub fn runs_anyway(self) -> bool {
        self == OnParentFailure::Run
    }
}

/// The parent ids, sorted and each once; at most [`MAX_PARENTS`], and
/// `links` (children times parents) at most [`MAX_LINKS`].
pub fn parent_ids(arg: &str, ids: &[i64], children: usize) -> Result<Vec<i64>, QueueError> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() > MAX_PARENTS {
        return Err(QueueError::limit(
            arg,
            format!("has {} task ids, more than {MAX_PARENTS}", ids.len()),
        ));
    }
    if ids.len().saturating_mul(children) > MAX_LINKS {
        return Err(QueueError::limit(
            arg,
            format!(
                "links {} tasks to {} parents, more than {MAX_LINKS} pairs",
                children,
                ids.len()
            ),
        ));
    }
    Ok(ids)
}

/// Where a parent stands when a child is enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parent {
    /// Waiting, scheduled, ready or in flight: the child waits for it.
    Live,
    /// Dead-lettered: the child's policy applies at once.
    Dead,
    /// Completed and kept: nothing to wait for.
    Completed,
    /// In neither table: never made, cancelled or purged, or completed in
    /// a queue that does not keep completed tasks. Refused: which it was
    /// cannot be told.
    Missing,
}

/// How a new child starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Waiting for this many parents.
    Waiting(i32),
    /// Nothing to wait for: ready (or scheduled, after its delay).
    Runnable,
    /// Dead-lettered: this parent is dead and the policy says so.
    Dead { parent: i64 },
}

pub fn start(
    arg: &str,
    parents: &[(i64, Parent)],
    policy: OnParentFailure,
) -> Result<Start, QueueError> {
    if let Some((id, _)) = parents.iter().find(|(_, p)| *p == Parent::Missing) {
        return Err(QueueError::invalid(
            arg,
            format!(
                "task {id} is neither live nor kept after completion (it never existed, was \
                 cancelled or purged, or completed in a queue that does not keep completed tasks)"
            ),
        ));
    }
    if !policy.runs_anyway() {
        if let Some((id, _)) = parents.iter().find(|(_, p)| *p == Parent::Dead) {
            return Ok(Start::Dead { parent: *id });
        }
    }
    let live = parents.iter().filter(|(_, p)| *p == Parent::Live).count();
    Ok(match live {
        0 => Start::Runnable,
        n => Start::Waiting(n as i32),
    })
}

/// The error a dead-lettered child carries.
pub fn dead_parent_error(parent: i64, why: &str) -> String {
    format!("parent task {parent} {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_ids_are_sorted_once_and_bounded() {
        assert_eq!(
            parent_ids("wait_for", &[3, 1, 3, 2], 1).unwrap(),
            vec![1, 2, 3]
        );
        assert!(parent_ids("wait_for", &[], 5).unwrap().is_empty());
        let many: Vec<i64> = (0..1001).collect();
        let e = parent_ids("wait_for", &many, 1).unwrap_err();
        assert_eq!(e.sqlstate(), "54000");
        assert!(e.to_string().contains("\"wait_for\""));
        let hundred: Vec<i64> = (0..100).collect();
        assert!(parent_ids("wait_for", &hundred, 1000).is_ok());
        assert_eq!(
            parent_ids("wait_for", &hundred, 1001)
                .unwrap_err()
                .sqlstate(),
            "54000"
        );
    }

    #[test]
    fn the_policy_is_checked() {
        assert_eq!(
            OnParentFailure::parse("p", "run").unwrap(),
            OnParentFailure::Run
        );
        assert_eq!(
            OnParentFailure::parse("p", "dead_letter").unwrap(),
            OnParentFailure::DeadLetter
        );
        let e = OnParentFailure::parse("on_parent_failure", "retry").unwrap_err();
        assert_eq!(e.sqlstate(), "22023");
        assert!(e.to_string().contains("\"on_parent_failure\""));
    }

    #[test]
    fn a_child_waits_for_its_live_parents_only() {
        use Parent::*;
        let dl = OnParentFailure::DeadLetter;
        assert_eq!(
            start("w", &[(1, Live), (2, Completed), (3, Live)], dl).unwrap(),
            Start::Waiting(2)
        );
        assert_eq!(start("w", &[(2, Completed)], dl).unwrap(), Start::Runnable);
        assert_eq!(start("w", &[], dl).unwrap(), Start::Runnable);
    }

    #[test]
    fn a_dead_parent_applies_the_policy_at_once() {
        use Parent::*;
        assert_eq!(
            start("w", &[(1, Live), (2, Dead)], OnParentFailure::DeadLetter).unwrap(),
            Start::Dead { parent: 2 }
        );
        assert_eq!(
            start("w", &[(1, Live), (2, Dead)], OnParentFailure::Run).unwrap(),
            Start::Waiting(1)
        );
        assert_eq!(
            start("w", &[(2, Dead)], OnParentFailure::Run).unwrap(),
            Start::Runnable
        );
    }

    #[test]
    fn a_missing_parent_is_refused_naming_the_argument() {
        use Parent::*;
        let e = start("wait_for", &[(1, Live), (7, Missing)], OnParentFailure::Run).unwrap_err();
        assert_eq!(e.sqlstate(), "22023");
        let text = e.to_string();
        assert!(
            text.contains("\"wait_for\"") && text.contains("task 7"),
            "{text}"
        );
    }
}
