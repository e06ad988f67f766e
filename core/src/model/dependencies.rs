//! Dependencies in the model: how a child starts (the core's
//! `dependency::start`), and what a parent's completion or failure does to
//! the children still waiting for it.

use super::{Handle, LastError, Model, State, TaskRef};
use crate::dependency::{self, OnParentFailure, Parent, Start};
use crate::QueueError;

/// Stands for an id no task has, among the handles given to the core.
const NO_TASK: i64 = -1;

impl Model {
    /// How a child of `parents` starts: the core's rule over where each
    /// parent stands (duplicates count once).
    pub(super) fn child_start(
        &self,
        parents: &[TaskRef],
        run_on_parent_failure: bool,
    ) -> Result<(Start, Vec<Handle>), QueueError> {
        let mut ids: Vec<i64> = parents
            .iter()
            .map(|&p| self.resolve(p).map_or(NO_TASK, |h| h as i64))
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
    /// cancelled"): its links go; each waiting child runs anyway or is
    /// dead-lettered naming it, and then those children's own children in
    /// turn (a child of both is dead-lettered by the parent that failed).
    pub(super) fn parent_failed(&mut self, parent: Handle, why: &'static str) {
        let mut dead = Vec::new();
        for child in std::mem::take(&mut self.tasks[parent].children) {
            if self.tasks[child].state != State::Waiting {
                continue;
            }
            if self.tasks[child].run_on_parent_failure {
                self.one_parent_fewer(child);
            } else {
                let c = &mut self.tasks[child];
                c.state = State::Dead;
                c.waiting_on = 0;
                c.last_error = Some(LastError::Parent { parent, why });
                dead.push(child);
            }
        }
        for child in dead {
            self.parent_failed(child, "was dead-lettered");
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
