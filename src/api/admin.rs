//! Queue administration: settings, pause/resume, dead letters, purges and
//! per-queue grants. Every call needs the admin privilege on its queue.

use aedb_queue_core::grants::{Action, Pattern, Privilege};
use aedb_queue_core::{validate, QueueError};
use pgrx::datum::Interval;
use pgrx::pg_sys::Oid;
use pgrx::prelude::*;

use super::{checked_name, interval, micros, required};
use crate::errors::{run, Result};
use crate::security;
use crate::srf::TableIterator;
use crate::store::{self, QueueSettings, SettingsChange};

type SettingsRow = (
    String,           // queue
    Option<i32>,      // max_attempts
    Option<Interval>, // backoff_base
    Option<Interval>, // backoff_max
    Option<Interval>, // default_lease
    Option<i32>,      // max_payload_bytes
    Option<Interval>, // keep_completed
    Option<Interval>, // keep_idempotency_keys
    bool,             // notify
    bool,             // paused
    Option<i32>,      // concurrency_limit
    Option<i32>,      // rate_limit
    Option<Interval>, // rate_interval
    Option<i32>,      // rate_burst
    Option<String>,   // ordering_on_dead
    bool,             // fair_share
);

fn settings_row(queue: &str, s: QueueSettings) -> SettingsRow {
    let interval = |m: Option<i64>| m.map(crate::duration::interval);
    (
        queue.to_string(),
        s.retry.max_attempts,
        interval(s.retry.backoff_base_micros),
        interval(s.retry.backoff_max_micros),
        s.default_lease,
        s.max_payload_bytes,
        s.keep_completed,
        s.keep_idempotency_keys,
        s.notify,
        s.paused,
        s.concurrency_limit,
        s.rate_limit,
        s.rate_interval,
        s.rate_burst,
        s.ordering_on_dead,
        s.fair_share,
    )
}

fn positive(arg: &'static str, value: Option<Interval>) -> Result<Option<Interval>> {
    value
        .map(|v| validate::positive_duration(arg, micros(v)).map(interval))
        .transpose()
}

fn at_least_one(arg: &'static str, value: Option<i32>) -> Result<Option<i32>> {
    match value {
        Some(v) if v < 1 => Err(QueueError::invalid(
            arg,
            format!("must be at least 1, got {v}"),
        )),
        _ => Ok(value),
    }
}

/// Sets per-queue defaults (NULL leaves a setting as it is; `reset` first
/// returns every setting not given to the extension's default). Defaults
/// apply to tasks enqueued afterwards; a task's own options still win.
/// `concurrency_limit` applies at once: to the slots of every key;
/// `rate_limit` (per `rate_interval`, default 1 second, with bursts of
/// `rate_burst`, default `rate_limit`) to the next claim;
/// `ordering_on_dead` ('block', the default, or 'release') to dead tasks'
/// ordering keys, at once; `fair_share` to the next claims, the queue's
/// tasks given their virtual times when it is turned on.
/// Returns the settings now in force.
#[pg_extern(name = "queue_configure")]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn configure_v060(
    queue: Option<&str>,
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
    default_lease: default!(Option<Interval>, "NULL"),
    max_payload_bytes: default!(Option<i32>, "NULL"),
    keep_completed: default!(Option<Interval>, "NULL"),
    keep_idempotency_keys: default!(Option<Interval>, "NULL"),
    notify: default!(Option<bool>, "NULL"),
    reset: default!(Option<bool>, false),
    concurrency_limit: default!(Option<i32>, "NULL"),
    rate_limit: default!(Option<i32>, "NULL"),
    rate_interval: default!(Option<Interval>, "NULL"),
    rate_burst: default!(Option<i32>, "NULL"),
    ordering_on_dead: default!(Option<&str>, "NULL"),
    fair_share: default!(Option<bool>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(max_attempts, Option<i32>),
        name!(backoff_base, Option<Interval>),
        name!(backoff_max, Option<Interval>),
        name!(default_lease, Option<Interval>),
        name!(max_payload_bytes, Option<i32>),
        name!(keep_completed, Option<Interval>),
        name!(keep_idempotency_keys, Option<Interval>),
        name!(notify, bool),
        name!(paused, bool),
        name!(concurrency_limit, Option<i32>),
        name!(rate_limit, Option<i32>),
        name!(rate_interval, Option<Interval>),
        name!(rate_burst, Option<i32>),
        name!(ordering_on_dead, Option<String>),
        name!(fair_share, bool),
    ),
> {
    run(|| {
        let queue = checked_name("queue", queue)?;
        // Rights first: ordering_on_dead's error echoes the argument.
        security::authorize(Action::Administer, queue)?;
        let change = SettingsChange {
            max_attempts: at_least_one("max_attempts", max_attempts)?,
            backoff_base: positive("backoff_base", backoff_base)?,
            backoff_max: positive("backoff_max", backoff_max)?,
            default_lease: positive("default_lease", default_lease)?,
            max_payload_bytes: at_least_one("max_payload_bytes", max_payload_bytes)?,
            keep_completed: positive("keep_completed", keep_completed)?,
            keep_idempotency_keys: positive("keep_idempotency_keys", keep_idempotency_keys)?,
            notify,
            concurrency_limit: at_least_one("concurrency_limit", concurrency_limit)?,
            rate_limit: at_least_one("rate_limit", rate_limit)?,
            rate_interval: positive("rate_interval", rate_interval)?,
            rate_burst: at_least_one("rate_burst", rate_burst)?,
            ordering_on_dead: ordering_on_dead
                .map(|p| validate::ordering_on_dead("ordering_on_dead", p).map(str::to_string))
                .transpose()?,
            fair_share,
            reset: required("reset", reset)?,
        };
        Ok(TableIterator::once(settings_row(
            queue,
            configure(queue, &change)?,
        )))
    })
}

/// Applies `change` as the queue's admin; the settings now in force.
fn configure(queue: &str, change: &SettingsChange) -> Result<QueueSettings> {
    security::authorize(Action::Administer, queue)?;
    let settings = store::configure(queue, change)?;
    // Checked on the result, so a new base is compared with the kept ceiling.
    if let (Some(base), Some(ceiling)) = (
        settings.retry.backoff_base_micros,
        settings.retry.backoff_max_micros,
    ) {
        if ceiling < base {
            return Err(QueueError::invalid(
                "backoff_max",
                "must not be below backoff_base",
            ));
        }
    }
    Ok(settings)
}

/// `queue_configure` as versions before 0.6.0 declare it (no
/// `concurrency_limit`), for their SQL until `ALTER EXTENSION aedb_queue
/// UPDATE` (docs/upgrades.md, the ABI rule).
#[pg_extern(sql = false)]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn queue_configure(
    queue: Option<&str>,
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
    default_lease: default!(Option<Interval>, "NULL"),
    max_payload_bytes: default!(Option<i32>, "NULL"),
    keep_completed: default!(Option<Interval>, "NULL"),
    keep_idempotency_keys: default!(Option<Interval>, "NULL"),
    notify: default!(Option<bool>, "NULL"),
    reset: default!(Option<bool>, false),
) -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(max_attempts, Option<i32>),
        name!(backoff_base, Option<Interval>),
        name!(backoff_max, Option<Interval>),
        name!(default_lease, Option<Interval>),
        name!(max_payload_bytes, Option<i32>),
        name!(keep_completed, Option<Interval>),
        name!(keep_idempotency_keys, Option<Interval>),
        name!(notify, bool),
        name!(paused, bool),
    ),
> {
    let rows = configure_v060(
        queue,
        max_attempts,
        backoff_base,
        backoff_max,
        default_lease,
        max_payload_bytes,
        keep_completed,
        keep_idempotency_keys,
        notify,
        reset,
        None,
        None,
        None,
        None,
        None,
        None,
    );
    rows.map_rows(|r| (r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8, r.9))
}

/// Sets a fairness key's weight in its fair-share queue (NULL: 1): a key of
/// weight 2 gets two claims to another's one while both have ready tasks.
#[pg_extern]
fn queue_configure_fairness(
    queue: Option<&str>,
    fairness_key: Option<&str>,
    weight: Option<i32>,
) -> bool {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let key = required("fairness_key", fairness_key)?;
        validate::name("fairness_key", key)?;
        let weight = validate::fair_weight("weight", weight)?;
        security::authorize(Action::Administer, queue)?;
        store::flow::set_fair_weight(queue, key, weight)?;
        Ok(true)
    })
}

/// Sets one concurrency key's own limit (NULL: back to the queue's), at
/// once (its rows in `aedb_queue.concurrency_keys` show the result).
#[pg_extern]
fn queue_configure_key(
    queue: Option<&str>,
    concurrency_key: Option<&str>,
    concurrency_limit: Option<i32>,
) -> bool {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let key = required("concurrency_key", concurrency_key)?;
        validate::name("concurrency_key", key)?;
        let limit = at_least_one("concurrency_limit", concurrency_limit)?;
        security::authorize(Action::Administer, queue)?;
        super::wake(store::flow::set_key_limit(queue, key, limit)?)?;
        Ok(true)
    })
}

/// Stops the queue handing out tasks (enqueues still land); true if it was running.
#[pg_extern]
fn queue_pause(queue: Option<&str>) -> bool {
    run(|| set_paused(queue, true))
}

/// Lets the queue hand out tasks again; true if it was paused.
#[pg_extern]
fn queue_resume(queue: Option<&str>) -> bool {
    run(|| set_paused(queue, false))
}

fn set_paused(queue: Option<&str>, paused: bool) -> Result<bool> {
    let queue = checked_name("queue", queue)?;
    security::authorize(Action::Administer, queue)?;
    store::set_paused(queue, paused)
}

/// Moves one dead task (or all, up to `max`) back to ready with its attempts
/// reset; returns how many moved. Fencing tokens keep counting up.
#[pg_extern]
fn queue_retry_dead(
    queue: Option<&str>,
    task_id: default!(Option<i64>, "NULL"),
    max: default!(Option<i32>, "NULL"),
) -> i64 {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let max = max.map_or(Ok(i32::MAX), validate::reap_max)?;
        security::authorize(Action::Administer, queue)?;
        store::retry_dead(queue, task_id, max)
    })
}

/// Deletes every task of the queue in `state` (`completed`: the kept
/// completed tasks); in-flight tasks only with `force`. Returns how many.
#[pg_extern]
fn queue_purge(
    queue: Option<&str>,
    state: Option<&str>,
    force: default!(Option<bool>, false),
) -> i64 {
    run(|| {
        let queue = checked_name("queue", queue)?;
        // Rights first: the state's error echoes the argument.
        security::authorize(Action::Administer, queue)?;
        let state = required("state", state)?;
        validate::listed_state(state)?;
        if state == "in_flight" && !required("force", force)? {
            return Err(QueueError::invalid(
                "state",
                "in_flight tasks belong to running workers; pass force => true to purge them",
            ));
        }
        let (purged, woken) = store::purge(queue, state)?;
        super::wake(woken)?;
        Ok(purged)
    })
}

/// Lets `role` do what `privilege` (producer, worker or admin) allows on the
/// queues `queue_pattern` matches (an exact name, or a prefix followed by
/// `*`), confining it to its grants if it was not confined yet. Returns
/// false when the grant already existed. A confined admin may only change
/// the grants of roles already confined within the queues it administers.
#[pg_extern]
fn queue_grant(queue_pattern: Option<&str>, role: Option<&str>, privilege: Option<&str>) -> bool {
    run(|| change_grant(queue_pattern, role, privilege, false))
}

/// Removes a grant made by `queue_grant`; returns whether it existed. The
/// role stays confined (with no grant left it may use no queue); only
/// `queue_unconfine` lifts a confinement.
#[pg_extern]
fn queue_revoke(queue_pattern: Option<&str>, role: Option<&str>, privilege: Option<&str>) -> bool {
    run(|| change_grant(queue_pattern, role, privilege, true))
}

/// Confines `role` (and every role that is a member of it) to its grants,
/// none yet; true if it was not confined. Unconfined admins only.
#[pg_extern]
fn queue_confine(role: Option<&str>) -> bool {
    run(|| {
        security::require_unconfined("confine roles")?;
        let (_, role_oid) = grantee(role)?;
        store::confine(role_oid)
    })
}

/// Lifts the confinement of `role` and drops all its grants; true if it
/// had either. Unconfined admins only.
#[pg_extern]
fn queue_unconfine(role: Option<&str>) -> bool {
    run(|| {
        security::require_unconfined("unconfine roles")?;
        let (_, role_oid) = grantee(role)?;
        store::unconfine(role_oid)
    })
}

/// The role argument of the rights calls: an existing role that may hold grants.
fn grantee(role: Option<&str>) -> Result<(&str, Oid)> {
    let name = required("role", role)?;
    let oid = security::role_oid(name)?;
    security::check_grantee(name, oid)?;
    Ok((name, oid))
}

fn change_grant(
    queue_pattern: Option<&str>,
    role: Option<&str>,
    privilege: Option<&str>,
    revoke: bool,
) -> Result<bool> {
    let text = required("queue_pattern", queue_pattern)?;
    let pattern = Pattern::parse("queue_pattern", text)?;
    // Rights first: the privilege's and the role's errors echo them.
    security::authorize_pattern(Action::Administer, &pattern, text)?;
    let privilege = Privilege::parse("privilege", required("privilege", privilege)?)?;
    let (name, role_oid) = grantee(role)?;
    let target = security::rights_of(role_oid)?;
    for admin in security::identity_rights()? {
        if !admin.may_change_grants_of(&target, &pattern) {
            return Err(QueueError::RoleOutsideYourQueues {
                role: name.to_string(),
            });
        }
    }
    // Only an unconfined admin gets here with an unconfined target.
    if !revoke && store::schema_level() >= store::SchemaLevel::V030 {
        store::confine(role_oid)?;
    }
    store::change_grant(role_oid, text, privilege, revoke)
}
