//! Every SQL statement the extension runs, in one place.
//!
//! Each statement is prepared once per backend and reused; every value is a
//! parameter, so no queue name, key or payload is ever spliced into SQL.
//! Every statement is shaped to have one good plan whatever its parameters
//! (partial indexes with literal predicates; rows picked with `LIMIT $n ...
//! FOR UPDATE SKIP LOCKED` fed to the write through `= ANY(ARRAY(...))`, by
//! ctid in claims, by task id in the reaper), and
//! runs with a generic plan and no sequential scans (`PlannerSettings`).
//! Statements use schema-qualified names. Statements that need the time
//! take it as their last parameter (`clock: true`), which `execute` fills
//! with the call's clock (`crate::clock`): the time the entry point was
//! called, so it is current inside a long transaction and inside a
//! procedure or PL/pgSQL loop, where `statement_timestamp()` stands still.

/// The `kept` clause of a completion that keeps its task: the rows of the
/// CTE `done` (the deleted tasks) into the archive with `$result` as their
/// result and `$at` as the completion time; with `in_workflow` (schemas
/// from 0.9.0), marked as kept for their workflow or DAG.
macro_rules! archive_done {
    ($result:literal, $at:literal, in_workflow) => {
        concat!(
            "kept AS (
              INSERT INTO aedb_queue.completed_task
                  (task_id, queue, priority, attempts, max_attempts, fencing_token, owner_id,
                   payload, progress, result, idempotency_key, created_at, completed_at,
                   in_workflow)
              SELECT task_id, queue, priority, attempts, max_attempts, fencing_token, owner_id,
                     payload, progress, ",
            $result,
            ", idempotency_key, created_at, ",
            $at,
            ", true
              FROM done)"
        )
    };
    ($result:literal, $at:literal) => {
        concat!(
            "kept AS (
              INSERT INTO aedb_queue.completed_task
                  (task_id, queue, priority, attempts, max_attempts, fencing_token, owner_id,
                   payload, progress, result, idempotency_key, created_at, completed_at)
              SELECT task_id, queue, priority, attempts, max_attempts, fencing_token, owner_id,
                     payload, progress, ",
            $result,
            ", idempotency_key, created_at, ",
            $at,
            "
              FROM done)"
        )
    };
}

/// The start of a statement that must read an index in order and stop at
/// its limit: the planner hook then leaves it no sort and no bitmap scan
/// (`planner::IN_INDEX_ORDER`).
macro_rules! in_index_order {
    () => {
        "/* in index order */ "
    };
}

mod admin;
pub(crate) mod am;
mod claimed;
pub(crate) mod cron;
mod dependency;
pub(crate) mod direct;
mod fence;
pub(crate) mod flow;
pub(crate) mod insert;
mod latest;
mod overview;
mod owner;
pub(crate) mod planner;
#[cfg(any(test, feature = "pg_test"))]
mod plans;
mod rights;
mod rows;
mod schedule;
mod tasks;
mod timestamptz;
pub(crate) mod workflow;

pub use admin::{
    configure, expire_completed, expire_keys, get_task, list_tasks, notify, notify_completed,
    page_tasks, purge, retry_dead, set_paused, settings, QueueSettings, SettingsChange, TaskFilter,
};
pub use claimed::ClaimedTask;
pub use cron::{pg_cron_state, schedule_reaper, unschedule_reaper};
pub use dependency::{
    children_of, complete_parents, insert_links, link_parents, parent_queues, parents_of,
};
pub use fence::fence_holds;
pub use insert::{insert_batch, insert_task, lookup_key, reserve_key, NewState, NewTask};
pub use overview::{errors_of, executable, queue_names, queue_of_task, tasks_of_key};
pub use rights::{change_grant, confine, rights_of, unconfine};
pub use schedule::{
    advance_schedules, delete_schedule, is_json_object, list_schedules, lock_due_schedules,
    lock_schedule, other_schedules, queues_with_due_schedules, queues_with_schedules,
    set_schedule_paused, upsert_schedule, with_fire_times, DueSchedule, ScheduleSpec,
};
pub use tasks::{
    cancel, claim, complete, complete_many, heartbeat, lock_for_fail, queues_with_work, reap,
    release, settle_failure, Reaped,
};

/// What the plan tests inspect: every statement, by module.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) use {
    admin::LISTING_STATEMENTS,
    plans::{explain, seq_scans_of, sorts_of},
    rights::{CONFINED, GRANTS},
    schedule::SCHEDULE_STATEMENTS,
    tasks::{LIFECYCLE_STATEMENTS, QUEUES_WITH_WORK},
};

use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::rc::Rc;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{PgBuiltInOids, PgOid};
use pgrx::spi::{OwnedPreparedStatement, SpiClient};
use pgrx::Spi;

use crate::errors::{internal, Result};
use owner::OwnerRights;
pub(crate) use rows::{Row, Rows};

pub(crate) struct Statement {
    pub(crate) sql: &'static str,
    pub(crate) args: &'static [PgBuiltInOids],
    /// The statement takes one more parameter after `args`, the call's
    /// clock (timestamptz), supplied by `execute`.
    pub(crate) clock: bool,
}

impl Statement {
    fn parameter_types(&self) -> Vec<PgBuiltInOids> {
        let mut types = self.args.to_vec();
        if self.clock {
            types.push(TIMESTAMPTZ);
        }
        types
    }
}

/// The SQL that appends one entry to a task's error history
/// (`task.errors`, 0.8.0): `{"attempt", "at", "error"}`, the attempt that
/// failed, the statement's clock `$at`, the error `$error`; the last 20
/// entries are kept (a task retried forever does not grow without bound).
macro_rules! append_error {
    ($errors:literal, $error:expr, $at:literal) => {
        concat!(
            "CASE WHEN jsonb_array_length(coalesce(",
            $errors,
            ", '[]')) >= 20
                  THEN ",
            $errors,
            " - 0 ELSE coalesce(",
            $errors,
            ", '[]') END
             || jsonb_build_array(jsonb_build_object('attempt', attempts, 'at', ",
            $at,
            ", 'error', ",
            $error,
            "))"
        )
    };
}
pub(crate) use append_error;

/// A statement as the current schema needs it, and as databases still on an
/// older version's schema run it until `ALTER EXTENSION aedb_queue UPDATE`
/// (see [`SchemaLevel`]): `older` lists `(level, statement)` newest first,
/// each statement serving the schemas below its level.
pub(crate) struct Versioned {
    pub(crate) current: Statement,
    pub(crate) older: &'static [(SchemaLevel, Statement)],
}

impl Versioned {
    pub(crate) fn get(&'static self) -> &'static Statement {
        let level = schema_level();
        let mut chosen = &self.current;
        for (below, statement) in self.older {
            if level >= *below {
                break;
            }
            chosen = statement;
        }
        chosen
    }
}

pub(crate) const BOOL: PgBuiltInOids = PgBuiltInOids::BOOLOID;
pub(crate) const INT4: PgBuiltInOids = PgBuiltInOids::INT4OID;
pub(crate) const INT4_ARRAY: PgBuiltInOids = PgBuiltInOids::INT4ARRAYOID;
pub(crate) const INT8: PgBuiltInOids = PgBuiltInOids::INT8OID;
pub(crate) const INT8_ARRAY: PgBuiltInOids = PgBuiltInOids::INT8ARRAYOID;
pub(crate) const INTERVAL: PgBuiltInOids = PgBuiltInOids::INTERVALOID;
pub(crate) const JSONB: PgBuiltInOids = PgBuiltInOids::JSONBOID;
pub(crate) const JSONB_ARRAY: PgBuiltInOids = PgBuiltInOids::JSONBARRAYOID;
pub(crate) const TEXT: PgBuiltInOids = PgBuiltInOids::TEXTOID;
pub(crate) const TIMESTAMPTZ: PgBuiltInOids = PgBuiltInOids::TIMESTAMPTZOID;
pub(crate) const TEXT_ARRAY: PgBuiltInOids = PgBuiltInOids::TEXTARRAYOID;
pub(crate) const TIMESTAMPTZ_ARRAY: PgBuiltInOids = PgBuiltInOids::TIMESTAMPTZARRAYOID;

thread_local! {
    static PLANS: RefCell<FxHashMap<usize, Rc<OwnedPreparedStatement>>> = RefCell::new(FxHashMap::default());
}

#[cfg(any(test, feature = "pg_test"))]
thread_local! {
    static RUN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many statements `execute` has run in this backend (tests count the
/// statements of one call with it).
#[cfg(any(test, feature = "pg_test"))]
pub(crate) fn statements_run() -> usize {
    RUN.with(|run| run.get())
}

/// Runs `stmt`, preparing it on first use in this backend. The plan is
/// cloned out of the cache before running, so a nested call (a trigger that
/// enqueues) never finds the cache borrowed.
pub(crate) fn execute<'conn>(
    client: &mut SpiClient<'conn>,
    stmt: &'static Statement,
    args: &[DatumWithOid<'_>],
) -> Result<Rows<'conn>> {
    let key = stmt as *const Statement as usize;
    #[cfg(any(test, feature = "pg_test"))]
    RUN.with(|run| run.set(run.get() + 1));
    let cached = PLANS.with(|plans| plans.borrow().get(&key).cloned());
    let plan = match cached {
        Some(plan) => plan,
        None => {
            let oids: Vec<PgOid> = stmt
                .parameter_types()
                .into_iter()
                .map(PgOid::BuiltIn)
                .collect();
            let plan = Rc::new(
                client
                    .prepare_mut(planner::marked(stmt.sql).as_str(), &oids)
                    .map_err(internal)?
                    .keep(),
            );
            PLANS.with(|plans| plans.borrow_mut().insert(key, plan.clone()));
            plan
        }
    };
    if stmt.clock {
        // SAFETY: the same datums with the same type oids, plus the clock.
        let mut with_clock: Vec<DatumWithOid<'_>> = args
            .iter()
            .map(|a| unsafe { DatumWithOid::new_from_datum(a.datum(), a.oid()) })
            .collect();
        with_clock.push(crate::clock::now().into());
        return client
            .update(&*plan, None, &with_clock)
            .map(Rows::new)
            .map_err(internal);
    }
    client
        .update(&*plan, None, args)
        .map(Rows::new)
        .map_err(internal)
}

/// Which version's schema the database has: between installing this
/// library and `ALTER EXTENSION aedb_queue UPDATE`, the old version's SQL
/// functions call into it, so it must not need what later versions added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SchemaLevel {
    /// No settings columns, grants, archive; the old ready index order.
    V010,
    /// No confinement rows: a role holding a grant is confined.
    V020,
    /// No `aedb_queue_internal.fence_holds` (batch settles hash the pairs in SQL).
    V030,
    /// No schedule table.
    V040,
    /// No concurrency keys.
    V050,
    /// No task error history (`task.errors`): 0.6.0 and 0.7.0.
    V060,
    /// No workflow tables (`task_step`, `event`, `event_wait`).
    V080,
    V090,
}

pub fn schema_level() -> SchemaLevel {
    thread_local! {
        static LEVEL: std::cell::Cell<Option<((u64, u64), SchemaLevel)>> = const { std::cell::Cell::new(None) };
    }
    let generation = crate::cache::generation(crate::cache::Topic::Catalog);
    match LEVEL.with(|c| c.get()) {
        Some((seen, level)) if seen == generation => level,
        _ => {
            // queue_counters came with task.errors (0.8.0).
            let level = if crate::catalog::relation_oid(c"task_step").is_some() {
                SchemaLevel::V090
            } else if crate::catalog::function_oid_in(c"aedb_queue", c"queue_counters").is_some()
            {
                    SchemaLevel::V080
                } else if crate::catalog::relation_oid(c"concurrency_slot").is_some() {
                    SchemaLevel::V060
                } else if crate::catalog::relation_oid(c"schedule").is_some() {
                    SchemaLevel::V050
                } else if crate::catalog::function_oid_in(c"aedb_queue_internal", c"fence_holds")
                    .is_some()
                {
                    SchemaLevel::V040
                } else if crate::catalog::relation_oid(c"confined_role").is_some() {
                    SchemaLevel::V030
                } else if crate::catalog::relation_oid(c"queue_grant").is_some() {
                    SchemaLevel::V020
                } else {
                    SchemaLevel::V010
                };
            LEVEL.with(|c| c.set(Some((generation, level))));
            level
        }
    }
}

/// Tells every backend its copies of `table` are stale where no trigger
/// does (schemas before 0.3.0, see `cache`).
pub(crate) fn copies_stale_without_trigger(table: &std::ffi::CStr) {
    if schema_level() < SchemaLevel::V030 {
        if let Some(relid) = crate::catalog::relation_oid(table) {
            crate::cache::invalidate_relation(relid);
        }
    }
}

/// False while the database still has the 0.1.0 schema (see [`SchemaLevel`]).
pub fn schema_current() -> bool {
    schema_level() >= SchemaLevel::V020
}

/// Runs `body` with an SPI connection, as the extension's owner with names
/// resolved in pg_catalog only (`owner`), and generic plans (`planner`):
/// callers need no rights on our tables, and no object of theirs can stand
/// in for one our statements use.
pub(crate) fn with_client<R>(body: impl FnOnce(&mut SpiClient<'_>) -> Result<R>) -> Result<R> {
    in_one_scope(|| Spi::connect_mut(body))
}

thread_local! {
    /// Whether `in_one_scope` is running: the owner's rights and generic
    /// plans are set already.
    static IN_SCOPE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `body` as the owner with generic plans, set once for every
/// `with_client` inside it: a call that runs several store functions (a
/// settle, then a claim) pays for the switch once. The GUC nest level of
/// generic plans was the costliest part of a `with_client`.
pub(crate) fn in_one_scope<R>(body: impl FnOnce() -> Result<R>) -> Result<R> {
    if IN_SCOPE.with(|s| s.get()) {
        return body();
    }
    let _rights = OwnerRights::enter()?;
    let _generic = planner::GenericPlans::enter();
    let _scope = Scope::enter();
    body()
}

/// Marks `in_one_scope` as running until dropped, also when unwinding.
struct Scope;

impl Scope {
    fn enter() -> Self {
        IN_SCOPE.with(|s| s.set(true));
        Scope
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        IN_SCOPE.with(|s| s.set(false));
    }
}

pub(crate) fn first_i64(rows: Rows<'_>) -> Result<Option<i64>> {
    Ok(rows.first(|row| row.get::<i64>(1))?.flatten())
}
