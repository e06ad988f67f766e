//! Statements on the schedule table: upsert, pause and resume, delete,
//! list, and what a firer locks, advances and records (docs/schedules.md).

use pgrx::datum::{Interval, TimestampWithTimeZone};

use super::{
    execute, with_client, Statement, BOOL, INT4, INT8, INTERVAL, JSONB, JSONB_ARRAY, TEXT,
    TEXT_ARRAY, TIMESTAMPTZ, TIMESTAMPTZ_ARRAY,
};
use crate::datum::{RawJsonb, RawScheduleRow};
use crate::errors::{internal, Result};

/// A schedule as a schedule_row (sql/schema.sql), from table alias `s`.
macro_rules! schedule_record {
    () => {
        "ROW(s.queue, s.name, s.cron, s.time_zone, s.payload, s.priority, s.max_attempts,
             s.backoff_base, s.backoff_max, s.missed, s.catch_up_limit, s.fire_time_key, s.paused,
             s.fired_up_to, s.next_fire_at,
             ARRAY(SELECT aedb_queue.queue_cron_preview(s.cron, s.time_zone,
                                                        s.next_fire_at - interval '1 microsecond', 5)),
             s.last_error, s.created_at, s.updated_at)"
    };
}

/// Creates the schedule, or replaces its pattern, task and policy. A
/// changed pattern or zone owes nothing from before the change ($13 the
/// clock, $14 the new pattern's next fire time); paused stays as it was.
static UPSERT: Statement = Statement {
    sql: concat!(
        "INSERT INTO aedb_queue.schedule AS s
             (queue, name, cron, time_zone, payload, priority, max_attempts, backoff_base,
              backoff_max, missed, catch_up_limit, fire_time_key, fired_up_to, next_fire_at,
              created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $14, $13, $14, $14)
         ON CONFLICT (queue, name) DO UPDATE SET
             cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone, payload = EXCLUDED.payload,
             priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
             backoff_base = EXCLUDED.backoff_base, backoff_max = EXCLUDED.backoff_max,
             missed = EXCLUDED.missed, catch_up_limit = EXCLUDED.catch_up_limit,
             fire_time_key = EXCLUDED.fire_time_key,
             fired_up_to = CASE WHEN (s.cron, s.time_zone) = (EXCLUDED.cron, EXCLUDED.time_zone)
                                THEN s.fired_up_to ELSE EXCLUDED.fired_up_to END,
             next_fire_at = CASE WHEN (s.cron, s.time_zone) = (EXCLUDED.cron, EXCLUDED.time_zone)
                                 THEN s.next_fire_at ELSE EXCLUDED.next_fire_at END,
             updated_at = EXCLUDED.updated_at
         RETURNING ",
        schedule_record!()
    ),
    args: &[
        TEXT,
        TEXT,
        TEXT,
        TEXT,
        JSONB,
        INT8,
        INT4,
        INTERVAL,
        INTERVAL,
        TEXT,
        INT4,
        TEXT,
        TIMESTAMPTZ,
    ],
    clock: true,
};

/// Pauses ($3 true) or resumes the schedule; a resumed schedule owes
/// nothing from while it was paused ($4 its next fire time from the clock).
static SET_PAUSED: Statement = Statement {
    sql: "UPDATE aedb_queue.schedule s
          SET paused = $3, updated_at = $5,
              fired_up_to = CASE WHEN s.paused AND NOT $3 THEN $5 ELSE s.fired_up_to END,
              next_fire_at = CASE WHEN s.paused AND NOT $3 THEN $4 ELSE s.next_fire_at END
          WHERE s.queue = $1 AND s.name = $2
          RETURNING 1",
    args: &[TEXT, TEXT, BOOL, TIMESTAMPTZ],
    clock: true,
};

/// The pattern of a schedule, locked: a resume computes its next fire time.
static PATTERN: Statement = Statement {
    sql: "SELECT cron, time_zone, paused FROM aedb_queue.schedule
          WHERE queue = $1 AND name = $2 FOR UPDATE",
    args: &[TEXT, TEXT],
    clock: false,
};

static DELETE: Statement = Statement {
    sql: "DELETE FROM aedb_queue.schedule WHERE queue = $1 AND name = $2 RETURNING 1",
    args: &[TEXT, TEXT],
    clock: false,
};

/// The schedules of the queues $1, in (queue, name) order. Only those:
/// each row's record parses its pattern (the preview), and a caller must
/// not pay for the patterns of queues it may not read.
static LIST: Statement = Statement {
    sql: concat!(
        "SELECT ",
        schedule_record!(),
        " FROM aedb_queue.schedule s WHERE s.queue = ANY($1) ORDER BY s.queue, s.name"
    ),
    args: &[TEXT_ARRAY],
    clock: false,
};

/// How many schedules the queue $1 has besides the one named $2.
static COUNT_OTHERS: Statement = Statement {
    sql: "SELECT count(*) FROM aedb_queue.schedule WHERE queue = $1 AND name <> $2",
    args: &[TEXT, TEXT],
    clock: false,
};

/// The queues that have schedules.
static QUEUES: Statement = Statement {
    sql: "SELECT DISTINCT queue FROM aedb_queue.schedule",
    args: &[],
    clock: false,
};

/// Up to $1 schedules due at the clock, locked; rows another firer holds
/// are skipped, and one it has just advanced no longer qualifies when the
/// lock is granted (the WHERE clause is checked again on the newest row).
macro_rules! due_schedules {
    ($queue:literal) => {
        concat!(
            "SELECT queue, name, cron, time_zone, payload, priority, max_attempts, backoff_base,
                    backoff_max, missed, catch_up_limit, fire_time_key, fired_up_to
             FROM aedb_queue.schedule
             WHERE NOT paused AND next_fire_at <= $2 ",
            $queue,
            " ORDER BY next_fire_at LIMIT $1 FOR UPDATE SKIP LOCKED"
        )
    };
}

static DUE_ANY: Statement = Statement {
    sql: due_schedules!("AND $3::text IS NULL"),
    args: &[INT4, TIMESTAMPTZ, TEXT],
    clock: false,
};

static DUE_IN_QUEUE: Statement = Statement {
    sql: due_schedules!("AND queue = $3"),
    args: &[INT4, TIMESTAMPTZ, TEXT],
    clock: false,
};

/// The queues with schedules due at the clock, the longest overdue first.
static DUE_QUEUES: Statement = Statement {
    sql: "SELECT queue FROM aedb_queue.schedule
          WHERE NOT paused AND next_fire_at <= $1
          GROUP BY queue ORDER BY min(next_fire_at), queue",
    args: &[TIMESTAMPTZ],
    clock: false,
};

/// Moves each schedule past the fire times just handled, if it is still
/// where the firer found it (`was`); `error` is why they made no task
/// (NULL: they did). Returns those moved.
static ADVANCE: Statement = Statement {
    sql: "UPDATE aedb_queue.schedule s
          SET fired_up_to = u.up_to, next_fire_at = u.next, last_error = u.error
          FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[],
                      $5::timestamptz[], $6::text[]) AS u(queue, name, was, up_to, next, error)
          WHERE s.queue = u.queue AND s.name = u.name AND s.fired_up_to = u.was
          RETURNING s.queue, s.name",
    args: &[
        TEXT_ARRAY,
        TEXT_ARRAY,
        TIMESTAMPTZ_ARRAY,
        TIMESTAMPTZ_ARRAY,
        TIMESTAMPTZ_ARRAY,
        TEXT_ARRAY,
    ],
    clock: false,
};

/// Each payload with its fire time under its key, in order.
static WITH_FIRE_TIMES: Statement = Statement {
    sql: "SELECT coalesce(u.payload, '{}'::jsonb) || pg_catalog.jsonb_build_object(u.key, u.at)
          FROM unnest($1::jsonb[], $2::text[], $3::text[]) WITH ORDINALITY AS u(payload, key, at, n)
          ORDER BY u.n",
    args: &[JSONB_ARRAY, TEXT_ARRAY, TEXT_ARRAY],
    clock: false,
};

/// Whether the value is a JSON object.
static IS_OBJECT: Statement = Statement {
    sql: "SELECT pg_catalog.jsonb_typeof($1) = 'object'",
    args: &[JSONB],
    clock: false,
};

/// What `queue_schedule_upsert` stores.
pub struct ScheduleSpec<'a> {
    pub queue: &'a str,
    pub name: &'a str,
    pub cron: &'a str,
    pub time_zone: &'a str,
    pub payload: Option<RawJsonb>,
    pub priority: i64,
    pub max_attempts: Option<i32>,
    pub backoff_base: Option<Interval>,
    pub backoff_max: Option<Interval>,
    pub missed: &'a str,
    pub catch_up_limit: Option<i32>,
    pub fire_time_key: Option<&'a str>,
    pub next_fire_at: TimestampWithTimeZone,
}

/// A due schedule as a firer locked it.
pub struct DueSchedule {
    pub queue: String,
    pub name: String,
    pub cron: String,
    pub time_zone: String,
    pub payload: Option<RawJsonb>,
    pub priority: i64,
    pub max_attempts: Option<i32>,
    pub backoff_base: Option<Interval>,
    pub backoff_max: Option<Interval>,
    pub missed: String,
    pub catch_up_limit: Option<i32>,
    pub fire_time_key: Option<String>,
    pub fired_up_to: TimestampWithTimeZone,
}

pub fn upsert_schedule(spec: &ScheduleSpec<'_>) -> Result<RawScheduleRow> {
    with_client(|client| {
        let rows = execute(
            client,
            &UPSERT,
            &[
                spec.queue.into(),
                spec.name.into(),
                spec.cron.into(),
                spec.time_zone.into(),
                spec.payload.into(),
                spec.priority.into(),
                spec.max_attempts.into(),
                spec.backoff_base.into(),
                spec.backoff_max.into(),
                spec.missed.into(),
                spec.catch_up_limit.into(),
                spec.fire_time_key.into(),
                spec.next_fire_at.into(),
            ],
        )?;
        rows.first(|row| row.required(1))?
            .ok_or_else(|| internal("the schedule upsert returned no row"))
    })
}

/// The schedule's (cron, time_zone, paused), locked; None if there is none.
pub fn lock_schedule(queue: &str, name: &str) -> Result<Option<(String, String, bool)>> {
    with_client(|client| {
        execute(client, &PATTERN, &[queue.into(), name.into()])?
            .first(|row| Ok((row.required(1)?, row.required(2)?, row.required(3)?)))
    })
}

/// Pauses or resumes; false if there is no such schedule.
pub fn set_schedule_paused(
    queue: &str,
    name: &str,
    paused: bool,
    next_fire_at: TimestampWithTimeZone,
) -> Result<bool> {
    with_client(|client| {
        let rows = execute(
            client,
            &SET_PAUSED,
            &[
                queue.into(),
                name.into(),
                paused.into(),
                next_fire_at.into(),
            ],
        )?;
        Ok(!rows.is_empty())
    })
}

pub fn delete_schedule(queue: &str, name: &str) -> Result<bool> {
    with_client(|client| Ok(!execute(client, &DELETE, &[queue.into(), name.into()])?.is_empty()))
}

/// The schedules of `queues`, in (queue, name) order.
pub fn list_schedules(queues: &[&str]) -> Result<Vec<RawScheduleRow>> {
    with_client(|client| execute(client, &LIST, &[queues.into()])?.map(|row| row.required(1)))
}

/// How many schedules `queue` has besides `name`.
pub fn other_schedules(queue: &str, name: &str) -> Result<i64> {
    with_client(|client| {
        execute(client, &COUNT_OTHERS, &[queue.into(), name.into()])?
            .first(|row| row.required(1))?
            .ok_or_else(|| internal("the schedule count returned no row"))
    })
}

/// The queues that have schedules.
pub fn queues_with_schedules() -> Result<Vec<String>> {
    with_client(|client| execute(client, &QUEUES, &[])?.map(|row| row.required(1)))
}

/// Up to `max` due schedules, of `queue` or of every queue, locked.
pub fn lock_due_schedules(queue: Option<&str>, max: i32) -> Result<Vec<DueSchedule>> {
    let statement = if queue.is_some() {
        &DUE_IN_QUEUE
    } else {
        &DUE_ANY
    };
    with_client(|client| {
        execute(
            client,
            statement,
            &[max.into(), crate::clock::now().into(), queue.into()],
        )?
        .map(|row| {
            Ok(DueSchedule {
                queue: row.required(1)?,
                name: row.required(2)?,
                cron: row.required(3)?,
                time_zone: row.required(4)?,
                payload: row.get(5)?,
                priority: row.required(6)?,
                max_attempts: row.get(7)?,
                backoff_base: row.get(8)?,
                backoff_max: row.get(9)?,
                missed: row.required(10)?,
                catch_up_limit: row.get(11)?,
                fire_time_key: row.get(12)?,
                fired_up_to: row.required(13)?,
            })
        })
    })
}

/// The queues with due schedules, the longest overdue first.
pub fn queues_with_due_schedules() -> Result<Vec<String>> {
    with_client(|client| {
        execute(client, &DUE_QUEUES, &[crate::clock::now().into()])?.map(|row| row.required(1))
    })
}

/// A locked schedule, where it goes, and why its fire times made no task
/// (None: they did).
pub type Move<'a> = (
    &'a DueSchedule,
    TimestampWithTimeZone,
    TimestampWithTimeZone,
    Option<&'a str>,
);

/// Moves each locked schedule past its fire times; returns the (queue,
/// name) of those still where the firer found them, which it moved.
pub fn advance_schedules(moves: &[Move<'_>]) -> Result<Vec<(String, String)>> {
    let queues: Vec<&str> = moves.iter().map(|m| m.0.queue.as_str()).collect();
    let names: Vec<&str> = moves.iter().map(|m| m.0.name.as_str()).collect();
    let was: Vec<TimestampWithTimeZone> = moves.iter().map(|m| m.0.fired_up_to).collect();
    let up_to: Vec<TimestampWithTimeZone> = moves.iter().map(|m| m.1).collect();
    let next: Vec<TimestampWithTimeZone> = moves.iter().map(|m| m.2).collect();
    let errors: Vec<Option<&str>> = moves.iter().map(|m| m.3).collect();
    with_client(|client| {
        execute(
            client,
            &ADVANCE,
            &[
                queues.into(),
                names.into(),
                was.into(),
                up_to.into(),
                next.into(),
                errors.into(),
            ],
        )?
        .map(|row| Ok((row.required(1)?, row.required(2)?)))
    })
}

/// Each `(payload, key, fire time)` as the payload with the fire time
/// under the key, in order.
pub fn with_fire_times(fires: &[(Option<RawJsonb>, &str, String)]) -> Result<Vec<RawJsonb>> {
    let payloads: Vec<Option<RawJsonb>> = fires.iter().map(|(p, _, _)| *p).collect();
    let keys: Vec<&str> = fires.iter().map(|(_, k, _)| *k).collect();
    let times: Vec<&str> = fires.iter().map(|(_, _, t)| t.as_str()).collect();
    with_client(|client| {
        execute(
            client,
            &WITH_FIRE_TIMES,
            &[payloads.as_slice().into(), keys.into(), times.into()],
        )?
        .map(|row| row.required(1))
    })
}

pub fn is_json_object(value: RawJsonb) -> Result<bool> {
    with_client(|client| {
        Ok(execute(client, &IS_OBJECT, &[Some(value).into()])?
            .first(|row| row.get::<bool>(1))?
            .flatten()
            == Some(true))
    })
}

/// The statements a reaper runs on every pass, for the plan tests.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) static SCHEDULE_STATEMENTS: &[(&str, &Statement)] = &[
    ("SCHEDULE_UPSERT", &UPSERT),
    ("SCHEDULE_SET_PAUSED", &SET_PAUSED),
    ("SCHEDULE_PATTERN", &PATTERN),
    ("SCHEDULE_DELETE", &DELETE),
    ("SCHEDULE_LIST", &LIST),
    ("SCHEDULE_DUE_ANY", &DUE_ANY),
    ("SCHEDULE_DUE_IN_QUEUE", &DUE_IN_QUEUE),
    ("SCHEDULE_DUE_QUEUES", &DUE_QUEUES),
    ("SCHEDULE_ADVANCE", &ADVANCE),
];
