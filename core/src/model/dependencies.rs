//! Dependencies in the model: how a child starts (the core's
//! `dependency::start`), and what a parent's completion or failure does to
//! the children still waiting for it.

use super::{Handle, LastError, Model, State};
use crate::dependency::{self, OnParentFailure, Parent, Start};
use crate::QueueError;

/// Stands for an id no task has, among the handles given to the core.
const NO_TASK: i64 = -1;

impl Model {
    /// How a child of `parents` starts: the core's rule over where each
    /// parent stands (duplicates count once). The parents are resolved by
    /// the caller, as the call named them (a batch names them once for all
    /// its entries, before the first is made).
    pub(super) fn child_start(
        &self,
        parents: &[Option<Handle>],
        run_on_parent_failure: bool,
    ) -> Result<(Start, Vec<Handle>), QueueError> {
        let mut ids: Vec<i64> = parents
            .iter()
            .map(|&p| p.map_or(NO_TASK, |h| h as i64))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let stands: Vec<(i64, Parent)> =
            ids.iter().map(|&id| (id, self.parent_stands(id))).collect();
        let policy = if run_on_parent_failure {
            OnParentFailure::Run
        } else {
            OnParentFailure::DeadLetter
        };
        let start = dependency::start("wait_for", &stands, policy)?;
        let live = stands
            .iter()
            .filter(|(_, p)| *p == Parent::Live)
            .map(|&(id, _)| id as Handle)
            .collect();
        Ok((start, live))
    }

    fn parent_stands(&self, id: i64) -> Parent {
        if id == NO_TASK {
            return Parent::Missing;
        }
        match self.tasks[id as Handle].state {
            State::Dead => Parent::Dead,
            State::Completed => Parent::Completed,
            State::Gone => Parent::Missing,
            _ => Parent::Live,
        }
    }

    /// A parent completed: each waiting child has one parent fewer.
    pub(super) fn parent_completed(&mut self, parent: Handle) {
        for child in self.tasks[parent].children.clone() {
            self.one_parent_fewer(child);
        }
    }

    /// A parent left without completing (`why`: "was dead-lettered", "was
    /// cancelled"): see [`Model::parents_failed`].
    pub(super) fn parent_failed(&mut self, parent: Handle, why: &'static str) {
        self.parents_failed(vec![parent], why);
    }

    /// Parents that left at once without completing (a purge's, "was
    /// purged"): their links go; each waiting child of theirs runs anyway
    /// (one parent fewer for each of them) or is dead-lettered naming one
    /// of them (the first by id: the contract names no other), and then
    /// the children dead-lettered so, all at once, in turn ("was
    /// dead-lettered"). So every direct child of a parent that failed
    /// names a parent that failed, not a sibling dead-lettered with it.
    pub(super) fn parents_failed(&mut self, mut parents: Vec<Handle>, mut why: &'static str) {
        parents.sort_unstable();
        while !parents.is_empty() {
            // child -> the parents of this round it waited for, by id.
            let mut hit: std::collections::BTreeMap<Handle, Vec<Handle>> = Default::default();
            for &p in &parents {
                for child in std::mem::take(&mut self.tasks[p].children) {
                    hit.entry(child).or_default().push(p);
                }
            }
            let mut dead = Vec::new();
            for (child, by) in hit {
                if self.tasks[child].state != State::Waiting {
                    continue;
                }
                if self.tasks[child].run_on_parent_failure {
                    for _ in &by {
                        self.one_parent_fewer(child);
                    }
                } else {
                    let c = &mut self.tasks[child];
                    c.state = State::Dead;
                    c.waiting_on = 0;
                    c.last_error = Some(LastError::Parent { parent: by[0], why });
                    dead.push(child);
                }
            }
            parents = dead;
            why = "was dead-lettered";
        }
    }

    fn one_parent_fewer(&mut self, child: Handle) {
        let c = &mut self.tasks[child];
        if c.state != State::Waiting {
            return;
        }
        c.waiting_on -= 1;
        if c.waiting_on == 0 {
            self.make_due(child);
        }
    }
}
