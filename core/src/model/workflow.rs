//! Durable workflows in the model (docs/guide.md "Durable workflows",
//! docs/sql.md): steps recorded once under the fencing token, sleeps and
//! event waits that park the task without counting the attempt, emits, and
//! an operator's retry from a step.
//!
//! Times are named by the op that set them ([`At`]); a sleep's wake time
//! or a wait's deadline is either behind (it passed at once: `duration =>
//! '0'`, `until` an hour ago) or a day ahead, until the op `TimePasses`
//! brings the clock to it.

use super::*;

impl Model {
    /// `queue_step_record`: under the fence (`lease_lost`, 40002 with
    /// strict), then a name recorded already is 23505, the first standing.
    pub(super) fn step_record(
        &mut self,
        by: Session,
        (task, token): (TaskRef, TokenRef),
        step: u8,
        result: Option<u8>,
        strict: bool,
    ) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Work) {
            return refused;
        }
        let Some(h) = self.held(task, token) else {
            return Self::fenced_out(strict);
        };
        if self.step_of(h, step).is_some() {
            return Reply::Error(UNIQUE_VIOLATION);
        }
        self.record(h, step, StepKind::Record(result));
        Reply::Outcome(Outcome::Applied)
    }

    fn step_of(&self, h: Handle, step: u8) -> Option<&Step> {
        self.tasks[h].steps.iter().find(|s| s.name == step)
    }

    /// A step recorded for the held task, with its claim's attempt and
    /// token; its first marks the task as a workflow's (kept when it
    /// completes, with its steps).
    fn record(&mut self, h: Handle, name: u8, kind: StepKind) {
        let t = &mut self.tasks[h];
        t.has_dependents = true;
        let (attempt, fencing_token) = (t.attempts, t.fencing_token);
        t.steps.push(Step {
            name,
            kind,
            attempt,
            fencing_token,
        });
    }

    /// The held task is handed back until a time ahead: scheduled, its
    /// attempt given back, no owner (as a delayed release).
    fn park(&mut self, h: Handle) {
        let t = &mut self.tasks[h];
        t.attempts = (t.attempts - 1).max(0);
        t.owner = None;
        t.lease_expired = false;
        t.state = State::Scheduled;
        t.parked = true;
    }

    /// `queue_sleep`: the first call records the wake time; while it is
    /// ahead the task parks (`waiting`), once passed the handler goes on. A
    /// step of that name that is not a sleep: 22023.
    pub(super) fn sleep(
        &mut self,
        by: Session,
        (task, token): (TaskRef, TokenRef),
        step: u8,
        how: SleepFor,
        strict: bool,
    ) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Work) {
            return refused;
        }
        let Some(h) = self.held(task, token) else {
            return match strict {
                true => Reply::Error(LEASE_LOST),
                false => Reply::Slept {
                    outcome: Outcome::LeaseLost,
                    waiting: false,
                    wake_at: None,
                },
            };
        };
        let (until, ahead) = match self.step_of(h, step).map(|s| &s.kind) {
            Some(&StepKind::Sleep { until, ahead }) => (until, ahead),
            Some(_) => return Reply::Error(INVALID_PARAMETER),
            None => {
                let (until, ahead) = (At(self.ops), how.ahead());
                self.record(h, step, StepKind::Sleep { until, ahead });
                (until, ahead)
            }
        };
        if ahead {
            self.park(h);
        }
        Reply::Slept {
            outcome: Outcome::Applied,
            waiting: ahead,
            wake_at: Some(until),
        }
    }

    /// `queue_await_event` of the step's key: an ended wait (a step of that
    /// name: its end, a step of another kind: 22023) returns its end; an
    /// event emitted ends it now with its payload; else the wait (made by
    /// the first call, its deadline a day ahead) parks the task until the
    /// deadline, and past it the wait ends `timed_out`.
    pub(super) fn await_event(
        &mut self,
        by: Session,
        (task, token): (TaskRef, TokenRef),
        step: u8,
        strict: bool,
    ) -> Reply {
        let ended = |wake_at, payload, timed_out| Reply::Awaited {
            outcome: Outcome::Applied,
            waiting: false,
            wake_at,
            payload,
            timed_out,
        };
        if let Some(refused) = Self::refused(by, Right::Work) {
            return refused;
        }
        let Some(h) = self.held(task, token) else {
            return match strict {
                true => Reply::Error(LEASE_LOST),
                false => Reply::Awaited {
                    outcome: Outcome::LeaseLost,
                    waiting: false,
                    wake_at: None,
                    payload: None,
                    timed_out: false,
                },
            };
        };
        match self.step_of(h, step).map(|s| &s.kind) {
            Some(&StepKind::Event { payload, timed_out }) => {
                return ended(None, payload, timed_out)
            }
            Some(_) => return Reply::Error(INVALID_PARAMETER),
            None => {}
        }
        let key = step;
        if let Some(&payload) = self.events.get(&key) {
            self.end_wait(
                h,
                step,
                StepKind::Event {
                    payload,
                    timed_out: false,
                },
            );
            return ended(None, payload, false);
        }
        let ops = self.ops;
        let waits = &mut self.tasks[h].waits;
        let wait = match waits.iter().find(|w| w.step == step) {
            Some(w) => w.clone(),
            None => {
                let w = EventWaitRow {
                    step,
                    key,
                    deadline: At(ops),
                    ahead: true,
                };
                waits.push(w.clone());
                w
            }
        };
        if !wait.ahead {
            self.end_wait(
                h,
                step,
                StepKind::Event {
                    payload: None,
                    timed_out: true,
                },
            );
            return ended(Some(wait.deadline), None, true);
        }
        self.park(h);
        Reply::Awaited {
            outcome: Outcome::Applied,
            waiting: true,
            wake_at: Some(wait.deadline),
            payload: None,
            timed_out: false,
        }
    }

    /// An event wait ends: its step recorded, its wait gone.
    fn end_wait(&mut self, h: Handle, step: u8, kind: StepKind) {
        self.record(h, step, kind);
        self.tasks[h].waits.retain(|w| w.step != step);
    }

    /// `queue_emit`: the first emit of a key stands (true), later ones
    /// change nothing (false). The tasks parked with a wait for the key
    /// (scheduled, not yet due) become ready in the emit's transaction.
    pub(super) fn emit(&mut self, by: Session, key: u8, payload: Option<u8>) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Produce) {
            return refused;
        }
        if self.events.contains_key(&key) {
            return Reply::Bool(false);
        }
        self.events.insert(key, payload);
        let woken: Vec<Handle> = (0..self.tasks.len())
            .filter(|&h| {
                let t = &self.tasks[h];
                t.state == State::Scheduled && !t.due && t.waits.iter().any(|w| w.key == key)
            })
            .collect();
        // The extension wakes the waiters by making them due now, then
        // promotes due timers oldest first: those that were due before the
        // emit (a wait past its deadline not yet promoted) go ready too.
        if !woken.is_empty() {
            for h in woken {
                self.wake(h);
            }
            self.promote_due();
        }
        Reply::Bool(true)
    }

    /// A scheduled task becomes due now and is promoted.
    fn wake(&mut self, h: Handle) {
        let t = &mut self.tasks[h];
        t.parked = false;
        t.due = false;
        t.due_later = false;
        self.make_due(h);
    }

    /// A reap's promotion: every scheduled task whose time came.
    pub(super) fn promote_due(&mut self) {
        for h in 0..self.tasks.len() {
            if self.tasks[h].state == State::Scheduled && self.tasks[h].due {
                self.wake(h);
            }
        }
    }

    /// `queue_retry_from_step`: admins; a task not in the task table is
    /// 22023, one in flight 55000, a step not recorded 22023; the step and
    /// those recorded after it dropped, with all the task's waits; a dead
    /// task retried (attempts 0), a scheduled one due now (with a reap of
    /// the queue: every task whose time came is promoted).
    pub(super) fn retry_from_step(&mut self, by: Session, task: TaskRef, step: StepRef) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Administer) {
            return refused;
        }
        let step = self.step_name(self.resolve(task), step);
        let Some(h) = self
            .resolve(task)
            .filter(|&h| self.tasks[h].state.is_live())
        else {
            return Reply::Error(INVALID_PARAMETER);
        };
        if self.tasks[h].state == State::InFlight {
            return Reply::Error(OBJECT_NOT_IN_PREREQUISITE_STATE);
        }
        let t = &mut self.tasks[h];
        let Some(from) = t.steps.iter().position(|s| s.name == step) else {
            return Reply::Error(INVALID_PARAMETER);
        };
        let dropped: Vec<u8> = t.steps.drain(from..).map(|s| s.name).collect();
        t.waits.clear();
        match t.state {
            State::Dead => {
                t.attempts = 0;
                t.due_later = false;
                self.make_due(h);
            }
            State::Scheduled if !t.due => {
                t.due = true;
                self.promote_due();
            }
            _ => {}
        }
        Reply::Steps(dropped)
    }

    /// The clock reaches the task's wake times and deadlines still ahead
    /// (they read as this op's time from now on); a task parked for one of
    /// them is due, promoted by the next reap.
    pub(super) fn time_passes(&mut self, task: TaskRef) -> Reply {
        let Some(h) = self.resolve(task) else {
            return Reply::Done;
        };
        let now = At(self.ops);
        let t = &mut self.tasks[h];
        for s in &mut t.steps {
            if let StepKind::Sleep { until, ahead } = &mut s.kind {
                if *ahead {
                    (*until, *ahead) = (now, false);
                }
            }
        }
        for w in &mut t.waits {
            if w.ahead {
                (w.deadline, w.ahead) = (now, false);
            }
        }
        if t.parked {
            t.parked = false;
            t.due = true;
        }
        Reply::Done
    }
}
