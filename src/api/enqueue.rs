//! `queue_enqueue`, `queue_enqueue_batch`, and the enqueue path follow-ups share.

use aedb_queue_core::grants::Action;
use aedb_queue_core::spec::EnqueueSpec;
use aedb_queue_core::validate::{self, EnqueueOptions, ResolvedEnqueue};
use pgrx::datum::Interval;
use pgrx::prelude::*;

use super::{checked_json, checked_name, checked_size, interval, micros, required};
use crate::datum::{RawJsonb, RawJsonbArray};
use crate::enqueued::Enqueued;
use crate::errors::{internal, run, Result};
use crate::security;
use crate::srf::TableIterator;
use crate::store::{self, NewTask, QueueSettings};

/// An enqueue whose every argument has been checked: inserting it can only
/// fail on a database error, so a batch of them is all-or-nothing.
pub(crate) struct CheckedEnqueue {
    queue: String,
    payload: Option<RawJsonb>,
    options: ResolvedEnqueue,
    notify: bool,
    registered: bool,
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
            payload,
            options,
        })
    }

    pub(crate) fn from_spec(spec: EnqueueSpec, payload: Option<RawJsonb>) -> Result<Self> {
        let options = EnqueueOptions {
            delay_micros: spec.delay.unwrap_or(0),
            priority: spec.priority.unwrap_or(0),
            max_attempts: spec.max_attempts,
            backoff_base_micros: spec.backoff_base,
            backoff_max_micros: spec.backoff_max,
            idempotency_key: spec.idempotency_key,
        };
        Self::new(&spec.queue, payload, options, &spec.path)
    }

    fn new_task(&self) -> NewTask<'_> {
        new_task(&self.queue, self.registered, &self.options)
    }

    /// Inserts the task; returns its id and whether an idempotency key matched.
    pub(crate) fn insert(&self) -> Result<(i64, bool)> {
        let (task_id, deduplicated) = self.insert_once()?;
        if self.notify && !deduplicated {
            store::notify(&self.queue)?;
        }
        Ok((task_id, deduplicated))
    }

    fn insert_once(&self) -> Result<(i64, bool)> {
        let task = self.new_task();
        let Some(key) = self.options.idempotency_key.as_deref() else {
            return Ok((store::insert_task(&task, None, self.payload, None)?, false));
        };
        // A key expired (queue_reap) between a failed reserve and the
        // lookup is free again: reserve once more. Each round either takes
        // the key or finds its holder, unless the reaper keeps racing us.
        for _ in 0..3 {
            if let Some(id) = store::reserve_key(&self.queue, key)? {
                let id = store::insert_task(&task, Some(id), self.payload, Some(key))?;
                return Ok((id, false));
            }
            if let Some(id) = store::lookup_key(&self.queue, key)? {
                return Ok((id, true));
            }
        }
        Err(internal(
            "idempotency key expired three times while being looked up",
        ))
    }
}

/// Listeners are woken for tasks they can claim now; a delayed task wakes
/// them when a reap promotes it.
fn wakes_workers(settings: &QueueSettings, options: &ResolvedEnqueue) -> bool {
    settings.notify && !options.is_scheduled()
}

fn new_task<'a>(queue: &'a str, registered: bool, options: &ResolvedEnqueue) -> NewTask<'a> {
    NewTask {
        queue,
        registered,
        scheduled: options.is_scheduled(),
        delay: interval(options.delay_micros),
        priority: options.priority,
        max_attempts: options.max_attempts,
        backoff_base: interval(options.backoff_base_micros),
        backoff_max: interval(options.backoff_max_micros),
    }
}

fn options(
    delay: Option<Interval>,
    priority: Option<i64>,
    max_attempts: Option<i32>,
    backoff_base: Option<Interval>,
    backoff_max: Option<Interval>,
    idempotency_key: Option<&str>,
) -> Result<EnqueueOptions> {
    Ok(EnqueueOptions {
        delay_micros: micros(required("delay", delay)?),
        priority: required("priority", priority)?,
        max_attempts,
        backoff_base_micros: backoff_base.map(micros),
        backoff_max_micros: backoff_max.map(micros),
        idempotency_key: idempotency_key.map(str::to_string),
    })
}

/// Enqueues one task in the caller's transaction.
#[pg_extern(name = "queue_enqueue")]
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
    run(|| {
        let queue = required("queue", queue)?;
        let options = options(
            delay,
            priority,
            max_attempts,
            backoff_base,
            backoff_max,
            idempotency_key,
        )?;
        let (task_id, deduplicated) = CheckedEnqueue::new(queue, payload, options, "")?.insert()?;
        Ok(Enqueued {
            task_id,
            deduplicated,
        })
    })
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

/// Enqueues one task per payload in a single statement; returns their ids
/// in payload order.
#[pg_extern]
fn queue_enqueue_batch(
    queue: Option<&str>,
    payloads: Option<RawJsonbArray>,
    delay: default!(Option<Interval>, "'0'"),
    priority: default!(Option<i64>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
) -> SetOfIterator<'static, i64> {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let payloads = required("payloads", payloads)?;
        security::authorize(Action::Enqueue, queue)?;
        let settings = store::settings(queue)?;
        validate::batch_length("payloads", payloads.len())?;
        let payloads = payloads.elements();
        for (i, payload) in payloads.iter().enumerate() {
            if let Some(payload) = payload {
                checked_size(
                    &format!("payloads[{}]", i + 1),
                    payload.byte_size(),
                    &settings,
                )?;
            }
        }
        let options = options(
            delay,
            priority,
            max_attempts,
            backoff_base,
            backoff_max,
            None,
        )?;
        let resolved = validate::resolve_enqueue(options, settings.retry, "")?;
        if payloads.is_empty() {
            return Ok(SetOfIterator::new(Vec::new()));
        }
        let ids = store::insert_batch(&new_task(queue, settings.registered, &resolved), &payloads)?;
        if wakes_workers(&settings, &resolved) {
            store::notify(queue)?;
        }
        Ok(SetOfIterator::new(ids))
    })
}
