//! Dependencies in the model: how a child starts (the model's own
//! `rules::child_start`), and what a parent's completion or failure does to
//! the children still waiting for it.

use super::rules::{self, ChildStart, Stands};
use super::{Handle, LastError, Model, State};

impl Model {
    /// How a child of `parents` starts, and the live parents it waits for
    /// (each once). The parents are resolved by the caller, as the call
    /// named them (a batch names them once for all its entries, before the
    /// first is made); `None` names no task.
    pub(super) fn child_start(
        &self,
        parents: &[Option<Handle>],
        run_on_parent_failure: bool,
    ) -> Result<(ChildStart, Vec<Handle>), &'static str> {
        let stands: Vec<(usize, Stands)> = parents
            .iter()
            .map(|&p| {
                p.map_or((usize::MAX, Stands::Missing), |h| {
                    (h, self.parent_stands(h))
                })
            })
            .collect();
        let start = rules::child_start(&stands, run_on_parent_failure)?;
        let mut live: Vec<Handle> = stands
            .iter()
            .filter(|(_, s)| *s == Stands::Live)
            .map(|&(h, _)| h)
            .collect();
        live.sort_unstable();
        live.dedup();
        Ok((start, live))
    }

    pub(super) fn parent_stands(&self, h: Handle) -> Stands {
        match self.tasks[h].state {
            State::Dead => Stands::Dead,
            State::Completed => Stands::Completed,
            State::Gone => Stands::Missing,
            _ => Stands::Live,
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
