//! `queue_enqueue`, `queue_enqueue_batch`, and the enqueue path follow-ups share.

use aedb_queue_core::dependency::{self, OnParentFailure, Parent, Start};
use aedb_queue_core::grants::{Action, Pattern};
use aedb_queue_core::spec::EnqueueSpec;
use aedb_queue_core::validate::{self, EnqueueOptions, ResolvedEnqueue};
use pgrx::datum::{Array, Interval};
use pgrx::prelude::*;

use super::{checked_json, checked_name, checked_size, int8_elements, interval, micros, required};
use crate::datum::{RawJsonb, RawJsonbArray};
use crate::enqueued::Enqueued;
use crate::errors::{internal, run, Result};
use crate::security;
use crate::srf::TableIterator;
use crate::store::{self, NewState, NewTask, QueueSettings};

/// An enqueue whose every argument has been checked: inserting it can only
/// fail on a database error, so a batch of them is all-or-nothing.
pub(crate) struct CheckedEnqueue {
    queue: String,
    payload: Option<RawJsonb>,
    options: ResolvedEnqueue,
    notify: bool,
    registered: bool,
    fair_share: bool,
    parents: Option<Parents>,
}

/// The tasks a new one waits for (`wait_for`), checked.
pub(crate) struct Parents {
    /// Names the argument in errors (`wait_for`, `follow_ups[1].wait_for`).
    arg: String,
    ids: Vec<i64>,
    policy: OnParentFailure,
}

impl Parents {
    /// None when the task waits for nothing.
    pub(crate) fn checked(
        prefix: &str,
        wait_for: Option<&[i64]>,
        on_parent_failure: Option<&str>,
        children: usize,
    ) -> Result<Option<Parents>> {
        let policy_arg = validate::argument_name(prefix, "on_parent_failure");
        let policy =
            OnParentFailure::parse(&policy_arg, on_parent_failure.unwrap_or("dead_letter"))?;
        let Some(ids) = wait_for.filter(|ids| !ids.is_empty()) else {
            return Ok(None);
        };
        let arg = validate::argument_name(prefix, "wait_for").into_owned();
        let ids = dependency::parent_ids(&arg, ids, children)?;
        Ok(Some(Parents { arg, ids, policy }))
    }

    /// Locks the parents against completion until this transaction ends
    /// and finds how the children start, and which parents to link them
    /// to. A parent in a queue the caller may neither read nor enqueue into
    /// counts as missing, so no caller learns of another tenant's tasks
    /// (and a producer may chain the tasks of its own queues).
    fn link(&self) -> Result<Linked> {
        let mut readable = Vec::with_capacity(self.ids.len());
        for (id, queue) in store::parent_queues(&self.ids)? {
            let queue = Pattern::Exact(queue);
            if security::may(Action::Read, &queue)? || security::may(Action::Enqueue, &queue)? {
                readable.push(id);
            }
        }
        let found = if readable.is_empty() {
            Vec::new()
        } else {
            store::link_parents(&readable)?
        };
        let states: Vec<(i64, Parent)> = self
            .ids
            .iter()
            .map(|&id| {
                let state = found
                    .iter()
                    .find(|(f, _)| *f == id)
                    .map_or(Parent::Missing, |(_, p)| *p);
                (id, state)
            })
            .collect();
        let start = dependency::start(&self.arg, &states, self.policy)?;
        let links = states
            .iter()
            .filter(|(_, p)| matches!(p, Parent::Live | Parent::Completed))
            .map(|(id, _)| *id)
            .collect();
        let error = match start {
            Start::Dead { parent } => Some(dependency::dead_parent_error(parent, "is dead")),
            _ => None,
        };
        Ok(Linked {
            start,
            links,
            error,
            run_on_failure: self.policy.runs_anyway(),
        })
    }
}

/// Parents locked for a new task: how it starts, and its links.
struct Linked {
    start: Start,
    links: Vec<i64>,
    error: Option<String>,
    run_on_failure: bool,
}

impl Linked {
    /// The new task's state: waiting, dead, or `runnable` (ready, or
    /// scheduled after its delay).
    fn state<'a>(&'a self, runnable: NewState<'a>) -> NewState<'a> {
        match (self.start, &self.error) {
            (Start::Waiting(n), _) => NewState::Waiting(n),
            (Start::Dead { .. }, Some(error)) => NewState::Dead(error),
            _ => runnable,
        }
    }

    fn insert_links(&self, children: &[i64]) -> Result<()> {
        store::insert_links(&self.links, children, self.run_on_failure)
    }
}

impl CheckedEnqueue {
    /// `prefix` names where the arguments came from in errors: empty for
    /// `queue_enqueue`'s own, `follow_ups[2].` for a follow-up spec.
    pub(crate) fn new(
        queue: &str,
        payload: Option<RawJsonb>,
        options: EnqueueOptions,
        prefix: &str,
    ) -> Result<Self> {
        validate::name(&validate::argument_name(prefix, "queue"), queue)?;
        security::authorize(Action::Enqueue, queue)?;
        let settings = store::settings(queue)?;
        let payload = checked_json(
            &validate::argument_name(prefix, "payload"),
            payload,
            &settings,
        )?;
        let options = validate::resolve_enqueue(options, settings.retry, prefix)?;
        Ok(CheckedEnqueue {
            queue: queue.to_string(),
            notify: wakes_workers(&settings, &options),
            registered: settings.registered,
            fair_share: settings.fair_share,
            payload,
            options,
            parents: None,
        })
    }

    /// The task waits for `parents` (checked) before it can run.
    pub(crate) fn waiting_for(mut self, parents: Option<Parents>) -> Self {
        self.parents = parents;
        self
    }

    pub(crate) fn from_spec(spec: EnqueueSpec, payload: Option<RawJsonb>) -> Result<Self> {
        let options = EnqueueOptions {
            delay_micros: spec.delay.unwrap_or(0),
            priority: spec.priority.unwrap_or(0),
            max_attempts: spec.max_attempts,
            backoff_base_micros: spec.backoff_base,
            backoff_max_micros: spec.backoff_max,
            idempotency_key: spec.idempotency_key,
            concurrency_key: spec.concurrency_key,
            ordering_key: spec.ordering_key,
            fairness_key: spec.fairness_key,
        };
        let parents = Parents::checked(
            &spec.path,
            Some(&spec.wait_for),
            spec.on_parent_failure.as_deref(),
            1,
        )?;
        Ok(Self::new(&spec.queue, payload, options, &spec.path)?.waiting_for(parents))
    }

    /// Inserts the task; returns its id and whether an idempotency key matched.
    pub(crate) fn insert(&self) -> Result<(i64, bool)> {
        let (task_id, deduplicated, ready) = self.insert_once()?;
        if self.notify && ready && !deduplicated {
            store::notify(&self.queue)?;
        }
        Ok((task_id, deduplicated))
    }

    /// Inserts the task (after its parents are locked and linked): its id,
    /// whether a key matched, and whether it is ready now.
    fn insert_once(&self) -> Result<(i64, bool, bool)> {
        let Some(key) = self.options.idempotency_key.as_deref() else {
            return self.insert_under(None, None);
        };
        // A key expired (queue_reap) between a failed reserve and the
        // lookup is free again: reserve once more. Each round either takes
        // the key or finds its holder, unless the reaper keeps racing us.
        for _ in 0..3 {
            if let Some(id) = store::reserve_key(&self.queue, key)? {
                return self.insert_under(Some(id), Some(key));
            }
            if let Some(id) = store::lookup_key(&self.queue, key)? {
                return Ok((id, true, false));
            }
        }
        Err(internal(
            "idempotency key expired three times while being looked up",
        ))
    }
}

impl CheckedEnqueue {
    fn insert_under(&self, id: Option<i64>, key: Option<&str>) -> Result<(i64, bool, bool)> {
        let runnable = runnable_state(&self.options);
        let linked = self.parents.as_ref().map(Parents::link).transpose()?;
        let state = linked.as_ref().map_or(runnable, |l| l.state(runnable));
        let task = new_task(
            &self.queue,
            (self.registered, self.fair_share),
            &self.options,
            state,
        );
        let id = store::insert_task(&task, id, self.payload, key)?;
        if let Some(linked) = &linked {
            linked.insert_links(&[id])?;
        }
        Ok((id, false, state == NewState::Ready))
    }
}

/// Ready, or scheduled until the delay has passed.
fn runnable_state(options: &ResolvedEnqueue) -> NewState<'static> {
    if options.is_scheduled() {
        NewState::Scheduled
    } else {
        NewState::Ready
    }
}

/// Listeners are woken for tasks they can claim now; a delayed task wakes
/// them when a reap promotes it.
fn wakes_workers(settings: &QueueSettings, options: &ResolvedEnqueue) -> bool {
    settings.notify && !options.is_scheduled()
}

/// `(registered, fair_share)`: what the queue's settings say of it.
fn new_task<'a>(
    queue: &'a str,
    (registered, fair_share): (bool, bool),
    options: &'a ResolvedEnqueue,
    state: NewState<'a>,
) -> NewTask<'a> {
    NewTask {
        queue,
        registered,
        fair_share,
        fairness_key: options.fairness_key.as_deref(),
        state,
        delay: interval(options.delay_micros),
        priority: options.priority,
        max_attempts: options.max_attempts,
        backoff_base: interval(options.backoff_base_micros),
        backoff_max: interval(options.backoff_max_micros),
        concurrency_key: options.concurrency_key.as_deref(),
        ordering_key: options.ordering_key.as_deref(),
    }
}

fn options(
    delay: Option<Interval>,
    priority: Option<i64>,
    max_attempts: Option<i32>,
    backoff_base: Option<Interval>,
    backoff_max: Option<Interval>,
    idempotency_key: Option<&str>,
    keys: Keys<'_>,
) -> Result<EnqueueOptions> {
    Ok(EnqueueOptions {
        delay_micros: micros(required("delay", delay)?),
        priority: required("priority", priority)?,
        max_attempts,
        backoff_base_micros: backoff_base.map(micros),
        backoff_max_micros: backoff_max.map(micros),
        idempotency_key: idempotency_key.map(str::to_string),
        concurrency_key: keys.concurrency.map(str::to_string),
        ordering_key: keys.ordering.map(str::to_string),
        fairness_key: keys.fairness.map(str::to_string),
    })
}

/// The flow-control keys of an enqueue call.
#[derive(Default)]
struct Keys<'a> {
    concurrency: Option<&'a str>,
    ordering: Option<&'a str>,
    fairness: Option<&'a str>,
}

/// Enqueues one task in the caller's transaction; with `wait_for`, it
/// waits until every one of those tasks has completed; with
/// `concurrency_key`, it runs only while its key has a free slot; with
/// `ordering_key`, after the key's earlier tasks, one at a time; with
/// `fairness_key`, as that key's share of a fair-share queue.
#[pg_extern(name = "queue_enqueue")]
#[allow(clippy::too_many_arguments)]
fn enqueue_v060(
    queue: Option<&str>,
    payload: default!(Option<RawJsonb>, "NULL"),
    delay: default!(Option<Interval>, "'0'"),
    priority: default!(Option<i64>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
    idempotency_key: default!(Option<&str>, "NULL"),
    wait_for: default!(Option<Array<'_, i64>>, "NULL"),
    on_parent_failure: default!(Option<&str>, "'dead_letter'"),
    concurrency_key: default!(Option<&str>, "NULL"),
    ordering_key: default!(Option<&str>, "NULL"),
    fairness_key: default!(Option<&str>, "NULL"),
) -> Enqueued {
    run(|| {
        let queue = required("queue", queue)?;
        let options = options(
            delay,
            priority,
            max_attempts,
            backoff_base,
            backoff_max,
            idempotency_key,
            Keys {
                concurrency: concurrency_key,
                ordering: ordering_key,
                fairness: fairness_key,
            },
        )?;
        let on_parent_failure = required("on_parent_failure", on_parent_failure)?;
        let wait_for = wait_for
            .as_ref()
            .map(|_| int8_elements("wait_for", &wait_for))
            .transpose()?;
        let checked = CheckedEnqueue::new(queue, payload, options, "")?;
        let parents = Parents::checked("", wait_for, Some(on_parent_failure), 1)?;
        let (task_id, deduplicated) = checked.waiting_for(parents).insert()?;
        Ok(Enqueued {
            task_id,
            deduplicated,
        })
    })
}

/// `queue_enqueue` as 0.5.0 declares it (no `concurrency_key`), for its
/// SQL until `ALTER EXTENSION aedb_queue UPDATE` (docs/upgrades.md, the
/// ABI rule).
#[pg_extern(sql = false)]
#[allow(clippy::too_many_arguments)]
fn enqueue(
    queue: Option<&str>,
    payload: default!(Option<RawJsonb>, "NULL"),
    delay: default!(Option<Interval>, "'0'"),
    priority: default!(Option<i64>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
    idempotency_key: default!(Option<&str>, "NULL"),
    wait_for: default!(Option<Array<'_, i64>>, "NULL"),
    on_parent_failure: default!(Option<&str>, "'dead_letter'"),
) -> Enqueued {
    enqueue_v060(
        queue,
        payload,
        delay,
        priority,
        max_attempts,
        backoff_base,
        backoff_max,
        idempotency_key,
        wait_for,
        on_parent_failure,
        None,
        None,
        None,
    )
}

/// `queue_enqueue` as 0.4.0 declares it (no `wait_for`): its SQL calls this
/// symbol until `ALTER EXTENSION aedb_queue UPDATE` (docs/upgrades.md, the
/// ABI rule).
#[pg_extern(sql = false)]
#[allow(clippy::too_many_arguments)]
fn queue_enqueue_row(
    queue: Option<&str>,
    payload: default!(Option<RawJsonb>, "NULL"),
    delay: default!(Option<Interval>, "'0'"),
    priority: default!(Option<i64>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
    idempotency_key: default!(Option<&str>, "NULL"),
) -> Enqueued {
    enqueue(
        queue,
        payload,
        delay,
        priority,
        max_attempts,
        backoff_base,
        backoff_max,
        idempotency_key,
        None,
        Some("dead_letter"),
    )
}

/// `queue_enqueue` as versions before 0.4.0 declare it (`RETURNS TABLE`):
/// their SQL calls this symbol until `ALTER EXTENSION aedb_queue UPDATE`
/// (docs/upgrades.md, the ABI rule).
#[pg_extern(sql = false)]
#[allow(clippy::too_many_arguments)]
fn queue_enqueue(
    queue: Option<&str>,
    payload: default!(Option<RawJsonb>, "NULL"),
    delay: default!(Option<Interval>, "'0'"),
    priority: default!(Option<i64>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
    idempotency_key: default!(Option<&str>, "NULL"),
) -> TableIterator<'static, (name!(task_id, i64), name!(deduplicated, bool))> {
    let row = queue_enqueue_row(
        queue,
        payload,
        delay,
        priority,
        max_attempts,
        backoff_base,
        backoff_max,
        idempotency_key,
    );
    TableIterator::once((row.task_id, row.deduplicated))
}

/// Enqueues one task per payload, with the same options, in one write
/// (`queue_enqueue_batch`, and a pass of schedule fires): the right to
/// enqueue, each payload's size (named `payloads[i]`, or `payload` for
/// fires, whose payload is the schedule's), the options, then the rows,
/// their links, and the wake-up. At most `validate::MAX_BATCH` payloads.
pub(crate) fn enqueue_many(
    queue: &str,
    payloads: &[Option<RawJsonb>],
    options: EnqueueOptions,
    indexed: bool,
    parents: Option<&Parents>,
) -> Result<Vec<i64>> {
    security::authorize(Action::Enqueue, queue)?;
    let settings = store::settings(queue)?;
    for (i, payload) in payloads.iter().enumerate() {
        if let Some(payload) = payload {
            let arg = if indexed {
                format!("payloads[{}]", i + 1)
            } else {
                "payload".to_string()
            };
            checked_size(&arg, payload.byte_size(), &settings)?;
        }
    }
    let resolved = validate::resolve_enqueue(options, settings.retry, "")?;
    if payloads.is_empty() {
        return Ok(Vec::new());
    }
    let runnable = runnable_state(&resolved);
    let linked = parents.map(Parents::link).transpose()?;
    let state = linked.as_ref().map_or(runnable, |l| l.state(runnable));
    let task = new_task(
        queue,
        (settings.registered, settings.fair_share),
        &resolved,
        state,
    );
    let ids = store::insert_batch(&task, payloads)?;
    if let Some(linked) = &linked {
        linked.insert_links(&ids)?;
    }
    if wakes_workers(&settings, &resolved) && state == NewState::Ready {
        store::notify(queue)?;
    }
    Ok(ids)
}

/// Enqueues one task per payload in a single statement; returns their ids
/// in payload order. With `wait_for`, every one of them waits for those
/// tasks; with `concurrency_key`, every one takes that key's slots; with
/// `ordering_key`, they join that key's line in payload order.
#[pg_extern(name = "queue_enqueue_batch")]
#[allow(clippy::too_many_arguments)]
fn enqueue_batch_v060(
    queue: Option<&str>,
    payloads: Option<RawJsonbArray>,
    delay: default!(Option<Interval>, "'0'"),
    priority: default!(Option<i64>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
    wait_for: default!(Option<Array<'_, i64>>, "NULL"),
    on_parent_failure: default!(Option<&str>, "'dead_letter'"),
    concurrency_key: default!(Option<&str>, "NULL"),
    ordering_key: default!(Option<&str>, "NULL"),
    fairness_key: default!(Option<&str>, "NULL"),
) -> SetOfIterator<'static, i64> {
    run(|| {
        let queue = checked_name("queue", queue)?;
        // Rights first: on_parent_failure's error echoes the argument
        // (enqueue_many checks again, for the fires that call it alone).
        security::authorize(Action::Enqueue, queue)?;
        let payloads = required("payloads", payloads)?;
        let on_parent_failure = required("on_parent_failure", on_parent_failure)?;
        let wait_for = wait_for
            .as_ref()
            .map(|_| int8_elements("wait_for", &wait_for))
            .transpose()?;
        validate::batch_length("payloads", payloads.len())?;
        let options = options(
            delay,
            priority,
            max_attempts,
            backoff_base,
            backoff_max,
            None,
            Keys {
                concurrency: concurrency_key,
                ordering: ordering_key,
                fairness: fairness_key,
            },
        )?;
        let payloads = payloads.elements();
        let parents = Parents::checked("", wait_for, Some(on_parent_failure), payloads.len())?;
        let ids = enqueue_many(queue, &payloads, options, true, parents.as_ref())?;
        Ok(SetOfIterator::new(ids))
    })
}

/// `queue_enqueue_batch` as 0.5.0 declares it (no `concurrency_key`), for
/// its SQL until `ALTER EXTENSION aedb_queue UPDATE`.
#[pg_extern(sql = false)]
#[allow(clippy::too_many_arguments)]
fn enqueue_batch(
    queue: Option<&str>,
    payloads: Option<RawJsonbArray>,
    delay: default!(Option<Interval>, "'0'"),
    priority: default!(Option<i64>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
    wait_for: default!(Option<Array<'_, i64>>, "NULL"),
    on_parent_failure: default!(Option<&str>, "'dead_letter'"),
) -> SetOfIterator<'static, i64> {
    enqueue_batch_v060(
        queue,
        payloads,
        delay,
        priority,
        max_attempts,
        backoff_base,
        backoff_max,
        wait_for,
        on_parent_failure,
        None,
        None,
        None,
    )
}

/// `queue_enqueue_batch` as 0.4.0 declares it (no `wait_for`), for its SQL
/// until `ALTER EXTENSION aedb_queue UPDATE`.
#[pg_extern(sql = false)]
fn queue_enqueue_batch(
    queue: Option<&str>,
    payloads: Option<RawJsonbArray>,
    delay: default!(Option<Interval>, "'0'"),
    priority: default!(Option<i64>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
) -> SetOfIterator<'static, i64> {
    enqueue_batch(
        queue,
        payloads,
        delay,
        priority,
        max_attempts,
        backoff_base,
        backoff_max,
        None,
        Some("dead_letter"),
    )
}
