//! A reference model of one queue's SQL surface, for the property test
//! `itests/tests/model.rs`: pure, deterministic, no clock. It takes the
//! operations a case is made of ([`Op`]) and says what each call must
//! return ([`Reply`]) and what every task row must then read ([`Row`]).
//!
//! It is a model of the contract (docs/sql.md, "SQL surface" and "Semantics",
//! docs/dependencies.md, docs/flow-control.md), not a second copy of the
//! extension: it calls none of the core's rules (a bug there would pass
//! both); the few it needs (the failure transition, enqueue defaults, how a
//! child starts given its parents, the text of a parent's error) are
//! restated in [`rules`], the rest is the plain state machine the
//! documents describe.
//!
//! Time never decides an outcome: delays and backoffs are either zero or
//! longer than any case, leases last an hour, and a lease runs out only by
//! the explicit [`Op::ExpireLease`].

mod apply;
mod dependencies;
pub mod op;
pub mod reply;
pub mod rules;
pub mod task;
#[cfg(test)]
mod tests;
mod workflow;

pub use op::*;
pub use reply::*;
pub use task::*;

/// Settings a case fixes for its queue before its first op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// `queue_configure(keep_completed => '1 day')`: completed tasks stay
    /// readable (as `completed`) for the whole case.
    pub keep_completed: bool,
    /// `queue_configure(concurrency_limit => n)`: slots per concurrency key.
    pub concurrency_limit: usize,
}

/// The queue as a reader should see it after the ops applied so far.
#[derive(Debug, Clone)]
pub struct Model {
    config: Config,
    paused: bool,
    /// Every task the case created, by handle (creation order = id order).
    tasks: Vec<Task>,
    /// Idempotency key -> the task it names (keys outlive their tasks).
    keys: std::collections::BTreeMap<u8, Handle>,
    /// Ops applied so far: the index of the next one.
    ops: usize,
    /// Events emitted (`k-<n>`): their payloads (`{"e": n}` or NULL).
    events: std::collections::BTreeMap<u8, Option<u8>>,
}

impl Model {
    pub fn new(config: Config) -> Model {
        Model {
            config,
            paused: false,
            tasks: Vec::new(),
            keys: Default::default(),
            ops: 0,
            events: Default::default(),
        }
    }

    pub fn config(&self) -> Config {
        self.config
    }

    /// How many tasks the case has created (handles `0..created()`).
    pub fn created(&self) -> usize {
        self.tasks.len()
    }

    /// The task a reference names, if any.
    pub fn resolve(&self, task: TaskRef) -> Option<Handle> {
        let in_flight: Vec<Handle> = (0..self.tasks.len())
            .filter(|&h| self.tasks[h].state == State::InFlight)
            .collect();
        let parked: Vec<Handle> = (0..self.tasks.len())
            .filter(|&h| self.tasks[h].parked)
            .collect();
        let stepped: Vec<Handle> = (0..self.tasks.len())
            .filter(|&h| {
                let t = &self.tasks[h];
                !t.steps.is_empty() && t.state.is_live() && t.state != State::InFlight
            })
            .collect();
        match task {
            TaskRef::InFlight(n) if !in_flight.is_empty() => {
                Some(in_flight[n as usize % in_flight.len()])
            }
            TaskRef::Parked(n) if !parked.is_empty() => Some(parked[n as usize % parked.len()]),
            TaskRef::Stepped(n) if !stepped.is_empty() => Some(stepped[n as usize % stepped.len()]),
            TaskRef::Known(n) | TaskRef::InFlight(n) | TaskRef::Parked(n) | TaskRef::Stepped(n)
                if !self.tasks.is_empty() =>
            {
                Some(n as usize % self.tasks.len())
            }
            _ => None,
        }
    }

    /// The name (`s-<n>`) of the step a call names of a task.
    pub fn step_name(&self, task: Option<Handle>, step: StepRef) -> u8 {
        let steps = task.map_or(&[][..], |h| &self.tasks[h].steps[..]);
        match step {
            StepRef::Recorded(n) if !steps.is_empty() => steps[n as usize % steps.len()].name,
            StepRef::Recorded(n) | StepRef::Named(n) => n,
        }
    }

    /// The token a call presents: relative to the task's current one (an
    /// unknown task: as if it had one token).
    pub fn token(&self, task: Option<Handle>, token: TokenRef) -> i64 {
        let current = task.map_or(1, |h| self.tasks[h].fencing_token);
        match token {
            TokenRef::Current => current,
            TokenRef::Stale => current - 1,
            TokenRef::Ahead => current + 1,
        }
    }

    /// Every task a reader can see (`queue_list(queue, NULL)`), by handle.
    pub fn rows(&self) -> Vec<Row> {
        self.tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.state != State::Gone)
            .map(|(h, t)| t.row(h))
            .collect()
    }

    pub fn task(&self, h: Handle) -> &Task {
        &self.tasks[h]
    }

    /// Applies one op: what the call returns. A call that raises, or whose
    /// transaction rolls back, changes nothing.
    pub fn apply(&mut self, op: &Op) -> Reply {
        let before = self.clone();
        let reply = self.apply_op(op);
        self.ops += 1;
        if matches!(
            reply,
            Reply::Error(_) | Reply::RolledBack { .. } | Reply::RolledBackBatch(_)
        ) {
            *self = Model {
                ops: self.ops,
                ..before
            };
        }
        reply
    }

    /// The queue's order of service: highest priority first, then id.
    fn service_order(&self, state: State) -> Vec<Handle> {
        let mut v: Vec<Handle> = (0..self.tasks.len())
            .filter(|&h| self.tasks[h].state == state)
            .collect();
        v.sort_by_key(|&h| (-self.tasks[h].priority, h));
        v
    }

    /// A task becomes due (enqueued now, released now, retried, its last
    /// parent done): ready, or blocked behind its concurrency key; a far
    /// `not_before` keeps it scheduled.
    fn make_due(&mut self, h: Handle) {
        self.tasks[h].state = if self.in_line_ahead(h) {
            State::Blocked
        } else if self.tasks[h].due_later {
            State::Scheduled
        } else if self.tasks[h].concurrency_key.is_some() {
            State::Blocked
        } else {
            State::Ready
        };
    }

    /// Hands on what the op freed: concurrency slots and ordering lines.
    /// A task that left `scheduled` is neither parked nor due.
    fn settle(&mut self) {
        self.settle_lines();
        self.settle_slots();
        for t in &mut self.tasks {
            if t.state != State::Scheduled {
                t.parked = false;
                t.due = false;
            }
        }
    }

    /// Concurrency keys: a keyed task holds a slot while ready or in
    /// flight; a key with a free slot has no blocked task (its first in
    /// the queue's order gets the slot).
    fn settle_slots(&mut self) {
        for h in self.service_order(State::Blocked) {
            let key = self.tasks[h].concurrency_key;
            if key.is_none() {
                continue;
            }
            let taken = self
                .tasks
                .iter()
                .filter(|t| {
                    t.concurrency_key == key && matches!(t.state, State::Ready | State::InFlight)
                })
                .count();
            if taken < self.config.concurrency_limit {
                self.tasks[h].state = State::Ready;
            }
        }
    }

    /// Ordering keys (their `ordering_on_dead` left at `block`): a key's
    /// tasks in the task table form a line by id; only its head may be
    /// scheduled, ready, in flight or dead (a dead head stops the line),
    /// the rest wait blocked. A head that left hands the line on.
    fn settle_lines(&mut self) {
        let mut seen = std::collections::BTreeSet::new();
        for h in 0..self.tasks.len() {
            let t = &self.tasks[h];
            let Some(key) = t.ordering_key else { continue };
            if !t.state.is_live() || t.state == State::Waiting || !seen.insert(key) {
                continue;
            }
            if t.state == State::Blocked {
                self.make_due(h);
            }
        }
    }

    /// Whether a task of this ordering key is in line ahead of `h`.
    fn in_line_ahead(&self, h: Handle) -> bool {
        let key = self.tasks[h].ordering_key;
        key.is_some()
            && self.tasks[..h]
                .iter()
                .any(|t| t.ordering_key == key && t.state.is_live() && t.state != State::Waiting)
    }

    /// The rights check every call makes first.
    fn refused(by: Session, right: Right) -> Option<Reply> {
        (!by.has(right)).then_some(Reply::Error(INSUFFICIENT_PRIVILEGE))
    }
}
