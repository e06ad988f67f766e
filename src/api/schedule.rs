//! Periodic schedules: `queue_schedule_upsert`, `_pause`, `_resume`,
//! `_delete`, `_list`, and `queue_cron_preview`. Managing a schedule needs
//! the admin privilege on its queue; its fires are enqueues into that
//! queue (`fire`).

use aedb_queue_core::error::quoted;
use aedb_queue_core::grants::{Action, Pattern};
use aedb_queue_core::schedule::{search_start, Missed, Schedule, MAX_CATCH_UP};
use aedb_queue_core::validate::{self, EnqueueOptions};
use aedb_queue_core::QueueError;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use super::{checked_json, checked_name, micros, required};
use crate::clock::{self, from_unix_micros, unix_micros};
use crate::datum::{RawJsonb, RawScheduleRow};
use crate::errors::{run, Result};
use crate::guc;
use crate::security;
use crate::store::{self, ScheduleSpec};

/// The pattern argument, no longer than `aedb_queue.max_cron_pattern_bytes`.
fn checked_cron(cron: Option<&str>) -> Result<&str> {
    let cron = required("cron", cron)?;
    let limit = guc::max_cron_pattern_bytes();
    if cron.len() > limit {
        return Err(QueueError::limit(
            "cron",
            format!(
                "is {} bytes, longer than {limit} (aedb_queue.max_cron_pattern_bytes)",
                cron.len()
            ),
        ));
    }
    Ok(cron)
}

/// Refuses a new schedule in a queue that has as many as it may.
fn check_room(queue: &str, name: &str) -> Result<()> {
    let limit = guc::max_schedules_per_queue();
    if store::other_schedules(queue, name)? >= limit {
        return Err(QueueError::limit(
            "name",
            format!("would be schedule {} of its queue, more than {limit} (aedb_queue.max_schedules_per_queue)", limit + 1),
        ));
    }
    Ok(())
}

/// The first fire time after now; a pattern that never fires is refused.
fn next_fire_time(schedule: &Schedule, cron: &str) -> Result<TimestampWithTimeZone> {
    schedule
        .next_after(unix_micros(clock::now()))
        .map(from_unix_micros)
        .ok_or_else(|| QueueError::invalid("cron", format!("{} never fires", quoted(cron))))
}

/// Creates the schedule `name` of `queue`, or replaces what it makes and
/// when. A new pattern or time zone owes no fire time from before the
/// change; otherwise the schedule keeps its place (and stays paused if
/// it was). Returns the schedule as stored.
#[pg_extern]
#[allow(clippy::too_many_arguments)]
fn queue_schedule_upsert(
    queue: Option<&str>,
    name: Option<&str>,
    cron: Option<&str>,
    time_zone: default!(Option<&str>, "'UTC'"),
    payload: default!(Option<RawJsonb>, "NULL"),
    priority: default!(Option<i64>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
    missed: default!(Option<&str>, "'skip'"),
    catch_up_limit: default!(Option<i32>, "NULL"),
    fire_time_key: default!(Option<&str>, "NULL"),
) -> RawScheduleRow {
    run(|| {
        let queue = checked_name("queue", queue)?;
        let name = checked_name("name", name)?;
        // Rights first: the pattern's and the zone's errors echo them.
        security::authorize(Action::Administer, queue)?;
        let cron = checked_cron(cron)?;
        let time_zone = required("time_zone", time_zone)?;
        let schedule = Schedule::parse(cron, time_zone)?;
        let missed_policy = required("missed", missed)?;
        Missed::parse(missed_policy, catch_up_limit)?;
        let priority = required("priority", priority)?;
        if let Some(key) = fire_time_key {
            validate::name("fire_time_key", key)?;
        }
        let settings = store::settings(queue)?;
        let payload = checked_json("payload", payload, &settings)?;
        // The task's options are checked now, as an enqueue would check them.
        let options = EnqueueOptions {
            delay_micros: 0,
            priority,
            max_attempts,
            backoff_base_micros: backoff_base.map(micros),
            backoff_max_micros: backoff_max.map(micros),
            idempotency_key: None,
            concurrency_key: None,
            ordering_key: None,
            fairness_key: None,
        };
        validate::resolve_enqueue(options, settings.retry, "")?;
        if let (Some(_), Some(json)) = (fire_time_key, payload) {
            if !store::is_json_object(json)? {
                return Err(QueueError::invalid(
                    "payload",
                    "must be a JSON object or NULL when fire_time_key is given",
                ));
            }
        }
        check_room(queue, name)?;
        store::upsert_schedule(&ScheduleSpec {
            queue,
            name,
            cron,
            time_zone,
            payload,
            priority,
            max_attempts,
            backoff_base,
            backoff_max,
            missed: missed_policy,
            catch_up_limit,
            fire_time_key,
            next_fire_at: next_fire_time(&schedule, cron)?,
        })
    })
}

/// Stops the schedule firing; false if there is no such schedule.
#[pg_extern]
fn queue_schedule_pause(queue: Option<&str>, name: Option<&str>) -> bool {
    run(|| {
        let (queue, name) = schedule_name(queue, name)?;
        security::authorize(Action::Administer, queue)?;
        store::set_schedule_paused(queue, name, true, clock::now())
    })
}

/// Lets the schedule fire again from its next fire time after now: fire
/// times that passed while it was paused are not owed.
#[pg_extern]
fn queue_schedule_resume(queue: Option<&str>, name: Option<&str>) -> bool {
    run(|| {
        let (queue, name) = schedule_name(queue, name)?;
        security::authorize(Action::Administer, queue)?;
        let Some((cron, time_zone, _)) = store::lock_schedule(queue, name)? else {
            return Ok(false);
        };
        let next = Schedule::parse(&cron, &time_zone)
            .ok()
            .and_then(|s| s.next_after(unix_micros(clock::now())))
            .map_or_else(TimestampWithTimeZone::positive_infinity, from_unix_micros);
        store::set_schedule_paused(queue, name, false, next)
    })
}

/// Deletes the schedule (the tasks it made stay); false if there was none.
#[pg_extern]
fn queue_schedule_delete(queue: Option<&str>, name: Option<&str>) -> bool {
    run(|| {
        let (queue, name) = schedule_name(queue, name)?;
        security::authorize(Action::Administer, queue)?;
        store::delete_schedule(queue, name)
    })
}

/// The schedules of `queue`, or of every queue the caller may read, with
/// their next fire times.
#[pg_extern(stable)]
fn queue_schedule_list(
    queue: default!(Option<&str>, "NULL"),
) -> SetOfIterator<'static, RawScheduleRow> {
    run(|| {
        if let Some(queue) = queue {
            checked_name("queue", Some(queue))?;
            security::authorize(Action::Read, queue)?;
        }
        let queues = match queue {
            Some(queue) => vec![queue.to_string()],
            None => store::queues_with_schedules()?
                .into_iter()
                .filter_map(
                    |q| match security::may(Action::Read, &Pattern::Exact(q.clone())) {
                        Ok(true) => Some(Ok(q)),
                        Ok(false) => None,
                        Err(e) => Some(Err(e)),
                    },
                )
                .collect::<Result<Vec<_>>>()?,
        };
        let queues: Vec<&str> = queues.iter().map(String::as_str).collect();
        Ok(SetOfIterator::new(store::list_schedules(&queues)?))
    })
}

/// The next `count` fire times of a cron pattern in a time zone after
/// `after`: how a schedule would fire, daylight-saving days included.
#[pg_extern(stable)]
fn queue_cron_preview(
    cron: Option<&str>,
    time_zone: default!(Option<&str>, "'UTC'"),
    after: default!(Option<TimestampWithTimeZone>, "now()"),
    count: default!(Option<i32>, 5),
) -> SetOfIterator<'static, TimestampWithTimeZone> {
    run(|| {
        let schedule = Schedule::parse(checked_cron(cron)?, required("time_zone", time_zone)?)?;
        let after = search_start("after", unix_micros(required("after", after)?))?;
        let count = required("count", count)?;
        if !(1..=MAX_CATCH_UP as i32).contains(&count) {
            return Err(QueueError::invalid(
                "count",
                format!("must be between 1 and {MAX_CATCH_UP}, got {count}"),
            ));
        }
        let times = schedule.upcoming(after, count as usize);
        Ok(SetOfIterator::new(times.into_iter().map(from_unix_micros)))
    })
}

fn schedule_name<'a>(queue: Option<&'a str>, name: Option<&'a str>) -> Result<(&'a str, &'a str)> {
    Ok((checked_name("queue", queue)?, checked_name("name", name)?))
}
