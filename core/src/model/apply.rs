//! What each op does to the model, and what its call returns.

use super::rules::{self, ChildStart};
use super::*;

impl Model {
    pub(super) fn apply_op(&mut self, op: &Op) -> Reply {
        let reply = match op {
            Op::Enqueue { by, args, commit } => self.enqueue(*by, args, *commit),
            Op::EnqueueBatch {
                by,
                args,
                entries,
                commit,
            } => self.enqueue_batch(*by, args, *entries, *commit),
            Op::Claim { by, owner, max } => self.claim(*by, *owner, *max),
            Op::Complete {
                by,
                task,
                token,
                result,
                follow_up,
                strict,
            } => self.complete(*by, *task, *token, *result, follow_up.as_ref(), *strict),
            Op::CompleteAndClaim {
                by,
                task,
                token,
                strict,
                owner,
                max,
            } => self.complete_and_claim(*by, (*task, *token), *strict, *owner, *max),
            Op::CompleteBatch {
                by,
                entries,
                strict,
            } => self.complete_batch(*by, entries, *strict),
            Op::FailAndClaim {
                by,
                task,
                token,
                how,
                strict,
                owner,
                max,
            } => self.fail_and_claim(*by, (*task, *token, *how), *strict, *owner, *max),
            Op::Fail {
                by,
                task,
                token,
                how,
            } => self.fail(*by, *task, *token, *how),
            Op::Heartbeat {
                by,
                task,
                token,
                progress,
            } => self.heartbeat(*by, *task, *token, *progress),
            Op::Release {
                by,
                task,
                token,
                delay,
            } => self.release(*by, *task, *token, *delay),
            Op::Cancel { by, task } => self.cancel(*by, *task),
            Op::RetryDead { by, task } => self.retry_dead(*by, *task),
            Op::Purge { by, state, force } => self.purge(*by, *state, *force),
            Op::Pause { by } => self.set_paused(*by, true),
            Op::Resume { by } => self.set_paused(*by, false),
            Op::ExpireLease { task } => self.expire_lease(*task),
            Op::StepRecord {
                by,
                task,
                token,
                step,
                result,
                strict,
            } => self.step_record(*by, (*task, *token), *step, *result, *strict),
            Op::Sleep {
                by,
                task,
                token,
                step,
                how,
                strict,
            } => self.sleep(*by, (*task, *token), *step, *how, *strict),
            Op::AwaitEvent {
                by,
                task,
                token,
                step,
                strict,
            } => self.await_event(*by, (*task, *token), *step, *strict),
            Op::Emit { by, key, payload } => self.emit(*by, *key, *payload),
            Op::RetryFromStep { by, task, step } => self.retry_from_step(*by, *task, *step),
            Op::TimePasses { task } => self.time_passes(*task),
        };
        self.settle();
        reply
    }

    fn enqueue(&mut self, by: Session, args: &EnqueueArgs, commit: bool) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Produce) {
            return refused;
        }
        let parents = self.resolve_all(&args.wait_for);
        let created = self.create(
            by,
            args.priority,
            args.delay,
            args.max_attempts,
            args.idempotency_key,
            (args.concurrency_key, args.ordering_key),
            (&parents, args.run_on_parent_failure),
            None,
        );
        match (created, commit) {
            (Err(e), _) => Reply::Error(e),
            (Ok((task, deduplicated)), true) => Reply::Enqueued { task, deduplicated },
            // Model::apply undoes the rest with the transaction.
            (Ok((task, deduplicated)), false) => Reply::RolledBack {
                deduplicated_to: deduplicated.then_some(task),
            },
        }
    }

    /// The tasks `wait_for` names, as the call names them.
    fn resolve_all(&self, wait_for: &[TaskRef]) -> Vec<Option<Handle>> {
        wait_for.iter().map(|&t| self.resolve(t)).collect()
    }

    /// `queue_enqueue_batch`: the rights, then every entry as an enqueue of
    /// its own with the batch's options, in payload order (so an ordering
    /// key's line takes them in that order, and a concurrency key's free
    /// slots go to the first), the parents named once for all; one entry
    /// refused refuses the call. No idempotency key: nothing deduplicates.
    fn enqueue_batch(
        &mut self,
        by: Session,
        args: &EnqueueArgs,
        entries: u8,
        commit: bool,
    ) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Produce) {
            return refused;
        }
        let parents = self.resolve_all(&args.wait_for);
        let mut tasks = Vec::new();
        for entry in 0..entries {
            match self.create(
                by,
                args.priority,
                args.delay,
                args.max_attempts,
                None,
                (args.concurrency_key, args.ordering_key),
                (&parents, args.run_on_parent_failure),
                Some(entry),
            ) {
                Ok((task, _)) => tasks.push(task),
                Err(e) => return Reply::Error(e),
            }
        }
        if commit {
            Reply::EnqueuedBatch(tasks)
        } else {
            // Model::apply undoes the rest with the transaction.
            Reply::RolledBackBatch(tasks.len())
        }
    }

    /// An enqueue: the task a key matched (and true), or a new one
    /// (`entry`: its place in a batch).
    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        _by: Session,
        priority: i64,
        delay: Delay,
        max_attempts: Option<i32>,
        idempotency_key: Option<u8>,
        (concurrency_key, ordering_key): (Option<u8>, Option<u8>),
        (wait_for, run_on_parent_failure): (&[Option<Handle>], bool),
        entry: Option<u8>,
    ) -> Result<(Handle, bool), &'static str> {
        let max_attempts =
            rules::enqueue_max_attempts(max_attempts, concurrency_key, ordering_key)?;
        // A matching key returns its task before the parents are looked at.
        if let Some(&task) = idempotency_key.and_then(|k| self.keys.get(&k)) {
            return Ok((task, true));
        }
        let (start, live_parents) = if wait_for.is_empty() {
            (ChildStart::Runnable, Vec::new())
        } else {
            self.child_start(wait_for, run_on_parent_failure)?
        };
        // Linked to a parent live or completed (0.9.0): its completion
        // keeps it, so the finished DAG stays readable.
        let linked = wait_for.iter().flatten().any(|&p| {
            matches!(
                self.parent_stands(p),
                rules::Stands::Live | rules::Stands::Completed
            )
        });
        let h = self.tasks.len();
        self.tasks.push(Task {
            state: State::Ready,
            priority,
            attempts: 0,
            max_attempts,
            owner: None,
            fencing_token: 0,
            lease_expired: false,
            payload_op: self.ops,
            payload_entry: entry,
            progress: None,
            last_error: None,
            idempotency_key,
            concurrency_key,
            ordering_key,
            result: None,
            waiting_on: 0,
            run_on_parent_failure,
            due_later: delay == Delay::Far,
            has_dependents: linked,
            children: Vec::new(),
            steps: Vec::new(),
            waits: Vec::new(),
            parked: false,
            due: false,
        });
        match start {
            ChildStart::Runnable => self.make_due(h),
            ChildStart::Waiting(n) => {
                self.tasks[h].state = State::Waiting;
                self.tasks[h].waiting_on = n;
            }
            ChildStart::Dead(parent) => {
                self.tasks[h].state = State::Dead;
                self.tasks[h].last_error = Some(LastError::Parent {
                    parent,
                    why: "is dead",
                });
            }
        }
        for p in live_parents {
            self.tasks[p].has_dependents = true;
            self.tasks[p].children.push(h);
        }
        if let Some(k) = idempotency_key {
            self.keys.insert(k, h);
        }
        Ok((h, false))
    }

    fn claim(&mut self, by: Session, owner: u8, max: i32) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Work) {
            return refused;
        }
        if self.paused {
            return Reply::Claimed(Vec::new());
        }
        // The claim's inline reap comes first, slots and children settled,
        // so what it frees may be served by the same call: it promotes the
        // scheduled tasks whose time came, and reclaims expired leases.
        self.promote_due();
        self.reclaim_expired();
        self.settle();
        let mut claimed = Vec::new();
        for h in self
            .service_order(State::Ready)
            .into_iter()
            .take(max as usize)
        {
            let t = &mut self.tasks[h];
            t.state = State::InFlight;
            t.attempts += 1;
            t.fencing_token += 1;
            t.owner = Some(owner);
            claimed.push(Claimed {
                task: h,
                attempts: t.attempts,
                fencing_token: t.fencing_token,
                priority: t.priority,
                progress: t.progress,
            });
        }
        Reply::Claimed(claimed)
    }

    /// Expired leases go back to ready (keeping a key's slot), or dead
    /// when no attempt is left.
    fn reclaim_expired(&mut self) {
        for h in 0..self.tasks.len() {
            let t = &mut self.tasks[h];
            if t.state != State::InFlight || !t.lease_expired {
                continue;
            }
            let exhausted = t.attempts >= t.max_attempts;
            t.lease_expired = false;
            t.owner = None;
            t.last_error = Some(LastError::LeaseExpired { exhausted });
            if exhausted {
                t.state = State::Dead;
                self.parent_failed(h, "was dead-lettered");
            } else {
                t.state = State::Ready;
            }
        }
    }

    /// The task a fenced call holds, if it is in flight under that token.
    pub(super) fn held(&self, task: TaskRef, token: TokenRef) -> Option<Handle> {
        let h = self.resolve(task)?;
        let t = &self.tasks[h];
        (t.state == State::InFlight && self.token(Some(h), token) == t.fencing_token).then_some(h)
    }

    fn complete(
        &mut self,
        by: Session,
        task: TaskRef,
        token: TokenRef,
        result: Option<u8>,
        follow_up: Option<&FollowUp>,
        strict: bool,
    ) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Work) {
            return refused;
        }
        // Follow-ups need the rights of queue_enqueue, checked first.
        if follow_up.is_some() {
            if let Some(refused) = Self::refused(by, Right::Produce) {
                return refused;
            }
        }
        let Some(h) = self.held(task, token) else {
            return Self::fenced_out(strict);
        };
        self.completed(h, result);
        // The extension hands on what the completion freed before it
        // enqueues the follow-ups: a follow-up does not yet exist when the
        // slot frees, whatever its priority.
        self.settle();
        if let Some(f) = follow_up {
            // A valid spec into this queue: it cannot fail.
            let _ = self.create(
                by,
                f.priority,
                Delay::Now,
                None,
                f.idempotency_key,
                (f.concurrency_key, None),
                (&[], false),
                None,
            );
        }
        Reply::Outcome(Outcome::Applied)
    }

    /// A held task completes: kept (its queue keeps completed tasks, or it
    /// took part in a DAG or a workflow: has_dependents) or gone; its waiting children have one parent fewer.
    fn completed(&mut self, h: Handle, result: Option<u8>) {
        let keep = self.config.keep_completed || self.tasks[h].has_dependents;
        let t = &mut self.tasks[h];
        t.state = if keep { State::Completed } else { State::Gone };
        t.result = result;
        t.lease_expired = false;
        self.parent_completed(h);
    }

    /// One statement: a lost lease still claims, unless strict (40002,
    /// nothing settled or claimed).
    fn complete_and_claim(
        &mut self,
        by: Session,
        (task, token): (TaskRef, TokenRef),
        strict: bool,
        owner: u8,
        max: i32,
    ) -> Reply {
        let settled = match self.complete(by, task, token, None, None, strict) {
            Reply::Outcome(o) => o,
            refused => return refused,
        };
        // The completion's changes are settled before the claim reads.
        self.settle();
        match self.claim(by, owner, max) {
            Reply::Claimed(rows) => Reply::SettledAndClaimed(settled, rows),
            other => other,
        }
    }

    /// As complete-and-claim, settling with a failure: a task retried at
    /// once may be claimed again by the same call.
    fn fail_and_claim(
        &mut self,
        by: Session,
        (task, token, how): (TaskRef, TokenRef, FailHow),
        strict: bool,
        owner: u8,
        max: i32,
    ) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Work) {
            return refused;
        }
        if strict && self.held(task, token).is_none() {
            return Reply::Error(LEASE_LOST);
        }
        let settled = match self.fail(by, task, token, how) {
            Reply::Outcome(o) => o,
            refused => return refused,
        };
        self.settle();
        match self.claim(by, owner, max) {
            Reply::Claimed(rows) => Reply::SettledAndClaimed(settled, rows),
            other => other,
        }
    }

    /// Each entry as a completion of its own, in order: a task named twice
    /// is settled once (by then it is no longer in flight); with strict,
    /// any entry fenced out refuses the whole batch.
    fn complete_batch(
        &mut self,
        by: Session,
        entries: &[(TaskRef, TokenRef)],
        strict: bool,
    ) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Work) {
            return refused;
        }
        // Tasks and tokens are named as the call was made, before any
        // entry settles.
        let named: Vec<(Option<Handle>, i64)> = entries
            .iter()
            .map(|&(task, token)| {
                let h = self.resolve(task);
                (h, self.token(h, token))
            })
            .collect();
        let mut outcomes = Vec::new();
        for (task, token) in named {
            let held = task.filter(|&h| {
                self.tasks[h].state == State::InFlight && self.tasks[h].fencing_token == token
            });
            outcomes.push(match held {
                Some(h) => {
                    self.completed(h, None);
                    Outcome::Applied
                }
                None => Outcome::LeaseLost,
            });
        }
        if strict && outcomes.contains(&Outcome::LeaseLost) {
            return Reply::Error(LEASE_LOST);
        }
        Reply::Outcomes(outcomes)
    }

    pub(super) fn fenced_out(strict: bool) -> Reply {
        if strict {
            Reply::Error(LEASE_LOST)
        } else {
            Reply::Outcome(Outcome::LeaseLost)
        }
    }

    fn fail(&mut self, by: Session, task: TaskRef, token: TokenRef, how: FailHow) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Work) {
            return refused;
        }
        let Some(h) = self.held(task, token) else {
            return Reply::Outcome(Outcome::LeaseLost);
        };
        let op = self.ops;
        let t = &mut self.tasks[h];
        t.owner = None;
        t.lease_expired = false;
        t.last_error = Some(LastError::Failed(op));
        t.state = rules::after_failure(t.attempts, t.max_attempts, how);
        if t.state == State::Dead {
            self.parent_failed(h, "was dead-lettered");
        }
        Reply::Outcome(Outcome::Applied)
    }

    fn heartbeat(&mut self, by: Session, task: TaskRef, token: TokenRef, progress: u8) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Work) {
            return refused;
        }
        let Some(h) = self.held(task, token) else {
            return Reply::Outcome(Outcome::LeaseLost);
        };
        let t = &mut self.tasks[h];
        t.progress = Some(progress);
        t.lease_expired = false;
        Reply::Outcome(Outcome::Applied)
    }

    fn release(&mut self, by: Session, task: TaskRef, token: TokenRef, delay: Delay) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Work) {
            return refused;
        }
        let Some(h) = self.held(task, token) else {
            return Reply::Outcome(Outcome::LeaseLost);
        };
        let t = &mut self.tasks[h];
        t.attempts = (t.attempts - 1).max(0);
        t.owner = None;
        t.lease_expired = false;
        t.state = match delay {
            Delay::Now => State::Ready,
            Delay::Far => State::Scheduled,
        };
        Reply::Outcome(Outcome::Applied)
    }

    fn cancel(&mut self, by: Session, task: TaskRef) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Administer) {
            return refused;
        }
        let Some(h) = self
            .resolve(task)
            .filter(|&h| self.tasks[h].state.is_live())
        else {
            return Reply::Bool(false);
        };
        self.tasks[h].state = State::Gone;
        self.parent_failed(h, "was cancelled");
        Reply::Bool(true)
    }

    fn retry_dead(&mut self, by: Session, task: Option<TaskRef>) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Administer) {
            return refused;
        }
        let dead: Vec<Handle> = match task {
            None => (0..self.tasks.len()).collect(),
            Some(r) => self.resolve(r).into_iter().collect(),
        };
        let dead: Vec<Handle> = dead
            .into_iter()
            .filter(|&h| self.tasks[h].state == State::Dead)
            .collect();
        for &h in &dead {
            self.tasks[h].attempts = 0;
            self.tasks[h].due_later = false;
            self.make_due(h);
        }
        Reply::Count(dead.len() as i64)
    }

    /// `queue_purge`: admins only; a state `queue_list` knows, `in_flight`
    /// only with `force` (else 22023);
    /// every task of the queue in that state deleted (`completed`: the kept
    /// completed tasks), their idempotency keys kept; children waiting for
    /// a purged live task follow their policy (`was purged`), and the slots and
    /// line heads the purged tasks held are handed on (by `settle`).
    fn purge(&mut self, by: Session, state: PurgeState, force: bool) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Administer) {
            return refused;
        }
        let state = match state {
            PurgeState::Waiting => State::Waiting,
            PurgeState::Scheduled => State::Scheduled,
            PurgeState::Blocked => State::Blocked,
            PurgeState::Ready => State::Ready,
            PurgeState::InFlight if force => State::InFlight,
            PurgeState::InFlight => return Reply::Error(INVALID_PARAMETER),
            PurgeState::Dead => State::Dead,
            PurgeState::Completed => State::Completed,
            PurgeState::Unknown => return Reply::Error(INVALID_PARAMETER),
        };
        let purged: Vec<Handle> = (0..self.tasks.len())
            .filter(|&h| self.tasks[h].state == state)
            .collect();
        for &h in &purged {
            let t = &mut self.tasks[h];
            t.state = State::Gone;
            t.lease_expired = false;
            t.owner = None;
        }
        // A kept completed task already counted as done for its children.
        if state != State::Completed {
            self.parents_failed(purged.clone(), "was purged");
        }
        Reply::Count(purged.len() as i64)
    }

    fn set_paused(&mut self, by: Session, paused: bool) -> Reply {
        if let Some(refused) = Self::refused(by, Right::Administer) {
            return refused;
        }
        let changed = self.paused != paused;
        self.paused = paused;
        Reply::Bool(changed)
    }

    fn expire_lease(&mut self, task: TaskRef) -> Reply {
        if let Some(h) = self.resolve(task) {
            let t = &mut self.tasks[h];
            if t.state == State::InFlight {
                t.lease_expired = true;
            }
        }
        Reply::Done
    }
}
