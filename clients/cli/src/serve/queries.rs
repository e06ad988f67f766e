//! Every SQL statement of `serve`, and the typed rows they return.
//!
//! As in `sql.rs`: every value (queue names, ids, keys) is a bound
//! parameter and statements are literals. Nothing here counts rows: the
//! figures come from `queue_overview` (bounded reads and estimates) and
//! `queue_counters` (shared memory); task lists are `queue_list` with small
//! limits. Timestamps come back as ISO 8601 text and time spans as seconds
//! (float8), so no date crate is needed. Statements are prepared once per
//! pooled connection (`prepare_cached`).

use deadpool_postgres::Client;
use tokio_postgres::Row;

// The actions the command line also runs: one statement each, in `sql.rs`.
use crate::sql::{PAUSE, PURGE, RESUME, RETRY_DEAD, RETRY_FROM_STEP};

/// A database error, with its SQLSTATE when the server raised it.
pub type DbResult<T> = std::result::Result<T, tokio_postgres::Error>;

/// SQLSTATE of `queue_counters()` when the library is not preloaded.
pub const COUNTERS_UNAVAILABLE: &str = "55000";

macro_rules! overview_columns {
    () => {
        "SELECT queue, paused, waiting::int8, scheduled::int8, blocked::int8, \
     ready::int8, in_flight::int8, dead::int8, completed_kept::int8, \
     coalesce(estimated, '{}')::text[], \
     extract(epoch FROM oldest_ready_age)::float8, to_json(next_due) #>> '{}', \
     expired_leases::int8 "
    };
}

const OVERVIEW: &str = concat!(
    overview_columns!(),
    "FROM aedb_queue.queue_overview(exact_limit => $1::int4)"
);
/// One queue's row (none when the role may not read it).
const OVERVIEW_ONE: &str = concat!(
    overview_columns!(),
    "FROM aedb_queue.queue_overview(exact_limit => $1::int4, queue_name => $2::text)"
);

const COUNTERS: &str = "SELECT queue, enqueued::int8, completed::int8, failed::int8, \
     dead_lettered::int8, reclaimed::int8, cancelled::int8, to_json(since) #>> '{}' \
     FROM aedb_queue.queue_counters()";

const ADMINISTERS: &str =
    "SELECT coalesce(bool_or(administer), false) FROM aedb_queue.queue_access() WHERE queue = $1::text";

/// The task columns the pages show, with the times they need worked out
/// on the server's clock.
macro_rules! task_columns {
    () => {
        "task_id::int8, queue::text, state::text, priority::int8, attempts::int4, \
         max_attempts::int4, owner_id::text, fencing_token::int8, \
         to_json(lease_deadline) #>> '{}', \
         extract(epoch FROM lease_deadline - now())::float8, \
         to_json(not_before) #>> '{}', extract(epoch FROM not_before - now())::float8, \
         payload::text, progress::text, last_error::text, idempotency_key::text, \
         to_json(created_at) #>> '{}', to_json(updated_at) #>> '{}', \
         extract(epoch FROM now() - created_at)::float8, result::text, \
         to_json(completed_at) #>> '{}'"
    };
}

const LIST: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM aedb_queue.queue_list($1::text, $2::text, $3::int4)"
);
const FIND_BY_ID: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM aedb_queue.queue_find(task_id => $1::int8)"
);
const FIND_BY_KEY: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM aedb_queue.queue_find(idempotency_key => $1::text) LIMIT $2::int8"
);
const PARENTS: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM aedb_queue.queue_parents($1::text, $2::int8) LIMIT $3::int8"
);

const CHILDREN: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM aedb_queue.queue_children($1::text, $2::int8) LIMIT $3::int8"
);
const ERRORS: &str = "SELECT attempt, to_json(failed_at) #>> '{}', error \
     FROM aedb_queue.queue_errors($1::text, $2::int8)";

const SCHEDULES: &str = "SELECT name::text, cron::text, time_zone::text, paused, \
     to_json(next_fire_at) #>> '{}', last_error::text \
     FROM aedb_queue.queue_schedule_list($1::text) ORDER BY name LIMIT $2::int8";

// Only the view's columns that count nothing (its in_flight and blocked
// columns count a key's tasks).
const CONCURRENCY_KEYS: &str = "SELECT concurrency_key::text, concurrency_limit::int8, \
     taken::int8, at_limit FROM aedb_queue.concurrency_keys WHERE queue = $1::text \
     ORDER BY at_limit DESC, concurrency_key LIMIT $2::int8";
// in_line counts the line: left out.
const ORDERING_KEYS: &str = "SELECT ordering_key::text, head_task_id::int8, head_state::text, \
     stopped_by_dead FROM aedb_queue.ordering_keys WHERE queue = $1::text \
     ORDER BY stopped_by_dead DESC, ordering_key LIMIT $2::int8";

// A workflow's steps (with the wake time of a sleep step, see
// `sql::step_columns`) and event waits, bounded.
const STEPS: &str = concat!(
    "SELECT ",
    crate::sql::step_columns!(),
    " FROM aedb_queue.queue_steps($1::text, $2::int8) LIMIT $3::int8"
);
const WAITS: &str = "SELECT step::text, key::text, to_json(deadline) #>> '{}' \
     FROM aedb_queue.queue_waits($1::text, $2::int8) LIMIT $3::int8";

// The queue page's filtered task list: a page of `queue_tasks`, which
// reads every task of the queue in task id order (after $3, or the page
// before $4) and applies the filters itself. Times are text cast on the
// server (22007 for text that is no time); the payload filter is jsonb
// built here (`ListFilter::payload_filter`) and, like the field, bound,
// never spliced. queue_tasks returns its rows in task id order either way.
const LIST_PAGE: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM aedb_queue.queue_tasks($1::text, state => $2::text, \
     after_task_id => $3::int8, before_task_id => $4::int8, \
     created_after => $5::text::timestamptz, created_before => $6::text::timestamptz, \
     updated_after => $7::text::timestamptz, updated_before => $8::text::timestamptz, \
     payload_contains => $9::jsonb, payload_has_key => $10::text, \"limit\" => $11::int4) \
     ORDER BY task_id"
);

const CANCEL: &str = "SELECT aedb_queue.queue_cancel($1::text, $2::int8)";
const PING: &str = "SELECT 1";

/// One row of `queue_overview`: counts per state, some of them estimates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overview {
    pub queue: String,
    pub paused: bool,
    pub waiting: i64,
    pub scheduled: i64,
    pub blocked: i64,
    pub ready: i64,
    pub in_flight: i64,
    pub dead: i64,
    pub completed_kept: i64,
    /// Names of the figures that are estimates ("ready", "dead", ...).
    pub estimated: Vec<String>,
    pub oldest_ready_age_secs: Option<f64>,
    pub next_due: Option<String>,
    pub expired_leases: i64,
}

impl Overview {
    pub fn is_estimated(&self, figure: &str) -> bool {
        self.estimated.iter().any(|f| f == figure)
    }

    /// The task count of a state by its name (the metric's `state` label).
    pub fn count(&self, state: &str) -> i64 {
        match state {
            "waiting" => self.waiting,
            "scheduled" => self.scheduled,
            "blocked" => self.blocked,
            "ready" => self.ready,
            "in_flight" => self.in_flight,
            "dead" => self.dead,
            "completed_kept" => self.completed_kept,
            "expired_leases" => self.expired_leases,
            _ => 0,
        }
    }
}

/// Events counted since the server started (or since the counters reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub enqueued: i64,
    pub completed: i64,
    pub failed: i64,
    pub dead_lettered: i64,
    pub reclaimed: i64,
    pub cancelled: i64,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.enqueued += o.enqueued;
        self.completed += o.completed;
        self.failed += o.failed;
        self.dead_lettered += o.dead_lettered;
        self.reclaimed += o.reclaimed;
        self.cancelled += o.cancelled;
    }
}

/// One row of `queue_counters`; `queue` None is the overflow bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counter {
    pub queue: Option<String>,
    pub counts: Counts,
    pub since: Option<String>,
}

/// A task as the pages show it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Task {
    pub task_id: i64,
    pub queue: String,
    pub state: String,
    pub priority: i64,
    pub attempts: i32,
    pub max_attempts: Option<i32>,
    pub owner_id: Option<String>,
    pub fencing_token: Option<i64>,
    pub lease_until: Option<String>,
    /// Seconds until the lease runs out (negative: expired).
    pub lease_left_secs: Option<f64>,
    pub due_at: Option<String>,
    pub due_in_secs: Option<f64>,
    pub payload: Option<String>,
    pub progress: Option<String>,
    pub last_error: Option<String>,
    pub idempotency_key: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub age_secs: Option<f64>,
    pub result: Option<String>,
    pub completed_at: Option<String>,
}

impl Task {
    fn from_row(r: &Row) -> DbResult<Task> {
        Ok(Task {
            task_id: r.try_get(0)?,
            queue: r.try_get(1)?,
            state: r.try_get(2)?,
            priority: r.try_get(3)?,
            attempts: r.try_get(4)?,
            max_attempts: r.try_get(5)?,
            owner_id: r.try_get(6)?,
            fencing_token: r.try_get(7)?,
            lease_until: r.try_get(8)?,
            lease_left_secs: r.try_get(9)?,
            due_at: r.try_get(10)?,
            due_in_secs: r.try_get(11)?,
            payload: r.try_get(12)?,
            progress: r.try_get(13)?,
            last_error: r.try_get(14)?,
            idempotency_key: r.try_get(15)?,
            created_at: r.try_get(16)?,
            updated_at: r.try_get(17)?,
            age_secs: r.try_get(18)?,
            result: r.try_get(19)?,
            completed_at: r.try_get(20)?,
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schedule {
    pub name: String,
    pub cron: String,
    pub time_zone: String,
    pub paused: bool,
    pub next_fire_at: Option<String>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConcurrencyKey {
    pub key: String,
    pub limit: i64,
    pub taken: i64,
    pub at_limit: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrderingKey {
    pub key: String,
    pub head_task_id: Option<i64>,
    pub head_state: Option<String>,
    pub stopped_by_dead: bool,
}

async fn query(
    c: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> DbResult<Vec<Row>> {
    let stmt = c.prepare_cached(sql).await?;
    c.query(&stmt, params).await
}

async fn query_one(
    c: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> DbResult<Row> {
    let stmt = c.prepare_cached(sql).await?;
    c.query_one(&stmt, params).await
}

fn tasks(rows: &[Row]) -> DbResult<Vec<Task>> {
    rows.iter().map(Task::from_row).collect()
}

pub async fn ping(c: &Client) -> DbResult<()> {
    query_one(c, PING, &[]).await.map(|_| ())
}

/// `queue_overview(exact_limit)`: every queue the role may read, by name.
pub async fn overview(c: &Client, exact_limit: i32) -> DbResult<Vec<Overview>> {
    overview_rows(&query(c, OVERVIEW, &[&exact_limit]).await?)
}

/// `queue_overview(exact_limit, queue_name)`: that queue, if readable.
pub async fn overview_one(c: &Client, exact_limit: i32, queue: &str) -> DbResult<Option<Overview>> {
    let rows = query(c, OVERVIEW_ONE, &[&exact_limit, &queue]).await?;
    Ok(overview_rows(&rows)?.into_iter().next())
}

fn overview_rows(rows: &[Row]) -> DbResult<Vec<Overview>> {
    rows.iter()
        .map(|r| {
            Ok(Overview {
                queue: r.try_get(0)?,
                paused: r.try_get::<_, Option<bool>>(1)?.unwrap_or(false),
                waiting: r.try_get::<_, Option<i64>>(2)?.unwrap_or(0),
                scheduled: r.try_get::<_, Option<i64>>(3)?.unwrap_or(0),
                blocked: r.try_get::<_, Option<i64>>(4)?.unwrap_or(0),
                ready: r.try_get::<_, Option<i64>>(5)?.unwrap_or(0),
                in_flight: r.try_get::<_, Option<i64>>(6)?.unwrap_or(0),
                dead: r.try_get::<_, Option<i64>>(7)?.unwrap_or(0),
                completed_kept: r.try_get::<_, Option<i64>>(8)?.unwrap_or(0),
                estimated: r.try_get(9)?,
                oldest_ready_age_secs: r.try_get(10)?,
                next_due: r.try_get(11)?,
                expired_leases: r.try_get::<_, Option<i64>>(12)?.unwrap_or(0),
            })
        })
        .collect()
}

/// `queue_counters()`; fails with [`COUNTERS_UNAVAILABLE`] when the library
/// is not preloaded.
pub async fn counters(c: &Client) -> DbResult<Vec<Counter>> {
    let rows = query(c, COUNTERS, &[]).await?;
    rows.iter()
        .map(|r| {
            let n =
                |i: usize| -> DbResult<i64> { Ok(r.try_get::<_, Option<i64>>(i)?.unwrap_or(0)) };
            Ok(Counter {
                queue: r.try_get(0)?,
                counts: Counts {
                    enqueued: n(1)?,
                    completed: n(2)?,
                    failed: n(3)?,
                    dead_lettered: n(4)?,
                    reclaimed: n(5)?,
                    cancelled: n(6)?,
                },
                since: r.try_get(7)?,
            })
        })
        .collect()
}

/// Whether `queue_access()` says the role administers the queue.
pub async fn administers(c: &Client, queue: &str) -> DbResult<bool> {
    query_one(c, ADMINISTERS, &[&queue]).await?.try_get(0)
}

/// `queue_list(queue, state, limit)`.
pub async fn list(c: &Client, queue: &str, state: &str, limit: i32) -> DbResult<Vec<Task>> {
    tasks(&query(c, LIST, &[&queue, &state, &limit]).await?)
}

/// The queue page's list filters; None: not filtered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFilter {
    pub state: Option<String>,
    pub created_after: Option<String>,
    pub created_before: Option<String>,
    pub updated_after: Option<String>,
    pub updated_before: Option<String>,
    /// A top-level payload field: equal to `value`, or present when no value.
    pub field: Option<String>,
    pub value: Option<String>,
}

/// Which page of the filtered list: after a task id (or the first page),
/// or the page before a task id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageAt {
    After(Option<i64>),
    Before(i64),
}

impl ListFilter {
    /// The payload filter as `queue_tasks` takes it: with a value,
    /// `payload_contains` `{field: value}`, the value as the JSON it reads
    /// as (`42`, `true`, `"42"`, `{"a": 1}`) or else as a string (`acme`);
    /// a field alone, `payload_has_key`. Built with serde_json, so neither
    /// can change the filter's shape.
    pub fn payload_filter(&self) -> (Option<serde_json::Value>, Option<&str>) {
        match (&self.field, &self.value) {
            (Some(field), Some(value)) => {
                let value = serde_json::from_str(value)
                    .unwrap_or_else(|_| serde_json::Value::String(value.clone()));
                let mut object = serde_json::Map::new();
                object.insert(field.clone(), value);
                (Some(serde_json::Value::Object(object)), None)
            }
            (Some(field), None) => (None, Some(field.as_str())),
            (None, _) => (None, None),
        }
    }
}

/// A page of at most `limit` tasks of `queue` matching `f`, in task id
/// order: `queue_tasks` looks through every task of the queue.
pub async fn list_page(
    c: &Client,
    queue: &str,
    f: &ListFilter,
    at: PageAt,
    limit: i32,
) -> DbResult<Vec<Task>> {
    let (after, before) = match at {
        PageAt::After(k) => (k, None),
        PageAt::Before(k) => (None, Some(k)),
    };
    let (contains, has_key) = f.payload_filter();
    tasks(
        &query(
            c,
            LIST_PAGE,
            &[
                &queue,
                &f.state,
                &after,
                &before,
                &f.created_after,
                &f.created_before,
                &f.updated_after,
                &f.updated_before,
                &contains,
                &has_key,
                &limit,
            ],
        )
        .await?,
    )
}

/// `queue_find(task_id)`: the task, if the role may read its queue.
pub async fn find_by_id(c: &Client, task_id: i64) -> DbResult<Option<Task>> {
    Ok(tasks(&query(c, FIND_BY_ID, &[&task_id]).await?)?
        .into_iter()
        .next())
}

/// `queue_find(idempotency_key)` in every readable queue, at most `limit`.
pub async fn find_by_key(c: &Client, key: &str, limit: i64) -> DbResult<Vec<Task>> {
    tasks(&query(c, FIND_BY_KEY, &[&key, &limit]).await?)
}

/// `queue_parents(queue, task_id)`: what the task waits or waited for.
pub async fn parents(c: &Client, queue: &str, task_id: i64, limit: i64) -> DbResult<Vec<Task>> {
    tasks(&query(c, PARENTS, &[&queue, &task_id, &limit]).await?)
}

/// `queue_children(queue, task_id)`: the tasks that wait or waited for it.
pub async fn children(c: &Client, queue: &str, task_id: i64, limit: i64) -> DbResult<Vec<Task>> {
    tasks(&query(c, CHILDREN, &[&queue, &task_id, &limit]).await?)
}

/// One entry of a task's error history.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskError {
    /// The attempt that failed; none for a task dead-lettered as it was enqueued.
    pub attempt: Option<i32>,
    pub at: Option<String>,
    pub error: Option<String>,
}

/// `queue_errors(queue, task_id)`: every error kept, oldest first (the
/// extension keeps the last 20).
pub async fn errors(c: &Client, queue: &str, task_id: i64) -> DbResult<Vec<TaskError>> {
    let rows = query(c, ERRORS, &[&queue, &task_id]).await?;
    rows.iter()
        .map(|r| {
            Ok(TaskError {
                attempt: r.try_get(0)?,
                at: r.try_get(1)?,
                error: r.try_get(2)?,
            })
        })
        .collect()
}

/// A step a workflow task recorded (`queue_steps`).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub step: String,
    pub recorded_at: Option<String>,
    pub attempt: Option<i32>,
    pub fencing_token: Option<i64>,
    /// The result as JSON text (none: NULL).
    pub result: Option<String>,
    /// A sleep step's wake time, in the text of a task's `due_at`.
    pub sleep_until: Option<String>,
}

/// An event a workflow task waits for (`queue_waits`).
#[derive(Debug, Clone, PartialEq)]
pub struct Wait {
    pub step: String,
    pub key: String,
    pub deadline: Option<String>,
}

/// `queue_steps(queue, task_id)`: at most `limit`, in recording order.
pub async fn steps(c: &Client, queue: &str, task_id: i64, limit: i64) -> DbResult<Vec<Step>> {
    let rows = query(c, STEPS, &[&queue, &task_id, &limit]).await?;
    rows.iter()
        .map(|r| {
            Ok(Step {
                step: r.try_get(0)?,
                recorded_at: r.try_get(1)?,
                attempt: r.try_get(2)?,
                fencing_token: r.try_get(3)?,
                result: r
                    .try_get::<_, Option<serde_json::Value>>(4)?
                    .map(|v| v.to_string()),
                sleep_until: r.try_get(5)?,
            })
        })
        .collect()
}

/// `queue_waits(queue, task_id)`: at most `limit`, by deadline.
pub async fn waits(c: &Client, queue: &str, task_id: i64, limit: i64) -> DbResult<Vec<Wait>> {
    let rows = query(c, WAITS, &[&queue, &task_id, &limit]).await?;
    rows.iter()
        .map(|r| {
            Ok(Wait {
                step: r.try_get(0)?,
                key: r.try_get(1)?,
                deadline: r.try_get(2)?,
            })
        })
        .collect()
}

pub async fn schedules(c: &Client, queue: &str, limit: i64) -> DbResult<Vec<Schedule>> {
    let rows = query(c, SCHEDULES, &[&queue, &limit]).await?;
    rows.iter()
        .map(|r| {
            Ok(Schedule {
                name: r.try_get(0)?,
                cron: r.try_get(1)?,
                time_zone: r.try_get(2)?,
                paused: r.try_get::<_, Option<bool>>(3)?.unwrap_or(false),
                next_fire_at: r.try_get(4)?,
                last_error: r.try_get(5)?,
            })
        })
        .collect()
}

pub async fn concurrency_keys(
    c: &Client,
    queue: &str,
    limit: i64,
) -> DbResult<Vec<ConcurrencyKey>> {
    let rows = query(c, CONCURRENCY_KEYS, &[&queue, &limit]).await?;
    rows.iter()
        .map(|r| {
            Ok(ConcurrencyKey {
                key: r.try_get(0)?,
                limit: r.try_get::<_, Option<i64>>(1)?.unwrap_or(1),
                taken: r.try_get::<_, Option<i64>>(2)?.unwrap_or(0),
                at_limit: r.try_get::<_, Option<bool>>(3)?.unwrap_or(false),
            })
        })
        .collect()
}

pub async fn ordering_keys(c: &Client, queue: &str, limit: i64) -> DbResult<Vec<OrderingKey>> {
    let rows = query(c, ORDERING_KEYS, &[&queue, &limit]).await?;
    rows.iter()
        .map(|r| {
            Ok(OrderingKey {
                key: r.try_get(0)?,
                head_task_id: r.try_get(1)?,
                head_state: r.try_get(2)?,
                stopped_by_dead: r.try_get::<_, Option<bool>>(3)?.unwrap_or(false),
            })
        })
        .collect()
}

/// `queue_pause` / `queue_resume`: whether that changed anything.
pub async fn set_paused(c: &Client, queue: &str, paused: bool) -> DbResult<bool> {
    let sql = if paused { PAUSE } else { RESUME };
    query_one(c, sql, &[&queue]).await?.try_get(0)
}

/// `queue_retry_dead(queue, task_id, max)`: how many moved back to ready.
pub async fn retry_dead(
    c: &Client,
    queue: &str,
    task_id: Option<i64>,
    max: Option<i32>,
) -> DbResult<i64> {
    query_one(c, RETRY_DEAD, &[&queue, &task_id, &max])
        .await?
        .try_get(0)
}

/// `queue_purge(queue, state, force)`: how many were deleted.
pub async fn purge(c: &Client, queue: &str, state: &str, force: bool) -> DbResult<i64> {
    query_one(c, PURGE, &[&queue, &state, &force])
        .await?
        .try_get(0)
}

/// `queue_cancel(queue, task_id)`: whether a task was removed.
pub async fn cancel(c: &Client, queue: &str, task_id: i64) -> DbResult<bool> {
    query_one(c, CANCEL, &[&queue, &task_id]).await?.try_get(0)
}

/// `queue_retry_from_step(queue, task_id, step)`: the steps dropped.
pub async fn retry_from_step(
    c: &Client,
    queue: &str,
    task_id: i64,
    step: &str,
) -> DbResult<Vec<String>> {
    Ok(query_one(c, RETRY_FROM_STEP, &[&queue, &task_id, &step])
        .await?
        .try_get::<_, Option<Vec<String>>>(0)?
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement of the server, for the checks below.
    const ALL: [&str; 23] = [
        OVERVIEW,
        LIST_PAGE,
        OVERVIEW_ONE,
        COUNTERS,
        ADMINISTERS,
        LIST,
        FIND_BY_ID,
        FIND_BY_KEY,
        PARENTS,
        CHILDREN,
        ERRORS,
        SCHEDULES,
        CONCURRENCY_KEYS,
        ORDERING_KEYS,
        PAUSE,
        RESUME,
        RETRY_DEAD,
        PURGE,
        CANCEL,
        PING,
        STEPS,
        WAITS,
        RETRY_FROM_STEP,
    ];

    #[test]
    fn no_statement_counts_rows_or_reads_the_counting_views() {
        for sql in ALL {
            let s = sql.to_ascii_lowercase();
            assert!(!s.contains("count("), "counts rows: {sql}");
            assert!(
                !s.contains("queue_stats"),
                "queue_stats counts exactly: {sql}"
            );
            assert!(
                !s.contains("aedb_queue.tasks "),
                "the tasks view scans: {sql}"
            );
        }
    }

    #[test]
    fn task_lists_are_bounded() {
        for sql in [
            LIST,
            FIND_BY_KEY,
            PARENTS,
            CHILDREN,
            SCHEDULES,
            CONCURRENCY_KEYS,
            ORDERING_KEYS,
            STEPS,
            WAITS,
        ] {
            assert!(
                sql.contains("$3::int4)") || sql.contains("LIMIT $"),
                "no limit: {sql}"
            );
        }
    }

    #[test]
    fn the_list_filters_are_bound_and_the_pages_bounded() {
        for bound in [
            "state => $2::text",
            "after_task_id => $3::int8",
            "before_task_id => $4::int8",
            "payload_contains => $9::jsonb",
            "payload_has_key => $10::text",
            "\"limit\" => $11::int4",
        ] {
            assert!(LIST_PAGE.contains(bound), "{bound}: {LIST_PAGE}");
        }
        assert!(LIST_PAGE.contains("aedb_queue.queue_tasks($1::text"));
        assert!(!LIST_PAGE.contains("queue_list"), "no bounded pre-read");
    }

    fn filter(field: Option<&str>, value: Option<&str>) -> ListFilter {
        ListFilter {
            field: field.map(str::to_string),
            value: value.map(str::to_string),
            ..ListFilter::default()
        }
    }

    #[test]
    fn a_payload_field_and_value_become_a_containment_filter() {
        use serde_json::json;
        let contains = |field, value| {
            let f = filter(Some(field), Some(value));
            let (contains, has_key) = f.payload_filter();
            assert_eq!(has_key, None, "a value: containment only");
            contains
        };
        assert_eq!(contains("customer", "acme"), Some(json!({"customer": "acme"})));
        assert_eq!(contains("n", "42"), Some(json!({"n": 42})));
        assert_eq!(contains("n", "\"42\""), Some(json!({"n": "42"})));
        assert_eq!(contains("rush", "true"), Some(json!({"rush": true})));
        assert_eq!(
            contains("addr", "{\"city\": \"Oslo\"}"),
            Some(json!({"addr": {"city": "Oslo"}}))
        );
        // Text that is not JSON is a string, quotes and all: it cannot add
        // a key or end the object.
        assert_eq!(
            contains("customer", "acme\", \"admin\": true"),
            Some(json!({"customer": "acme\", \"admin\": true"}))
        );
        assert_eq!(
            contains("customer' OR '1'='1", "acme"),
            Some(json!({"customer' OR '1'='1": "acme"}))
        );
        assert_eq!(filter(Some("rush"), None).payload_filter(), (None, Some("rush")));
        assert_eq!(filter(None, None).payload_filter(), (None, None));
    }
}
