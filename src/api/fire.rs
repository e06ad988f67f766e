//! Firing due schedules: each fire time a schedule owes becomes one task
//! in its queue, enqueued as `queue_enqueue` would (rights, settings,
//! payload limit, wake-ups).
//!
//! Exactly once: the firer locks the schedule row (`FOR UPDATE SKIP
//! LOCKED`, the row's due time checked again once the lock is granted),
//! moves `fired_up_to` past the fire times from where it found it, and
//! enqueues their tasks, all in one transaction. Two firers cannot both
//! move the same row from the same place, and a firer that rolls back
//! leaves both the row and the tasks as they were.

use aedb_queue_core::schedule::{fire_time_text, Missed, Schedule};
use aedb_queue_core::validate::EnqueueOptions;
use pgrx::datum::TimestampWithTimeZone;

use super::enqueue::CheckedEnqueue;
use super::micros;
use crate::clock::{self, from_unix_micros, unix_micros};
use crate::errors::Result;
use crate::store::{self, DueSchedule, SchemaLevel};
use crate::subtransaction::in_subtransaction;

/// What a due schedule owes now, and where it goes next.
struct Plan {
    fire_times: Vec<i64>,
    fired_up_to: TimestampWithTimeZone,
    next_fire_at: TimestampWithTimeZone,
}

impl Plan {
    /// A schedule whose stored pattern or policy no longer parses (a
    /// later parser refusing it) fires nothing and waits for an upsert.
    fn of(due: &DueSchedule, now: i64) -> std::result::Result<Plan, String> {
        let schedule = Schedule::parse(&due.cron, &due.time_zone).map_err(|e| e.to_string())?;
        let missed = Missed::parse(&due.missed, due.catch_up_limit).map_err(|e| e.to_string())?;
        let fire_times = schedule.due(unix_micros(due.fired_up_to), now, missed);
        let up_to = fire_times.last().copied().unwrap_or(now);
        Ok(Plan {
            fired_up_to: from_unix_micros(up_to),
            next_fire_at: schedule
                .next_after(up_to.max(now))
                .map_or_else(TimestampWithTimeZone::positive_infinity, from_unix_micros),
            fire_times,
        })
    }
}

/// Fires up to `max` due schedules of `queue`, or of every queue; returns
/// the tasks made. Each schedule fires in a subtransaction: one that
/// cannot enqueue (its payload outgrew the queue's limit, say) records
/// why in `last_error`, gives up those fire times, and stops no other.
pub(super) fn fire_due(queue: Option<&str>, max: i32) -> Result<i64> {
    if store::schema_level() < SchemaLevel::V050 {
        return Ok(0);
    }
    let now = unix_micros(clock::now());
    let mut made = 0;
    for due in store::lock_due_schedules(queue, max)? {
        let plan = match Plan::of(&due, now) {
            Ok(plan) => plan,
            Err(message) => {
                let never = TimestampWithTimeZone::positive_infinity();
                store::advance_schedule(&due, due.fired_up_to, never, Some(&message))?;
                continue;
            }
        };
        match in_subtransaction(|| fire(&due, &plan)) {
            Ok(tasks) => made += tasks,
            Err(message) => {
                pgrx::warning!(
                    "aedb_queue: schedule {:?} of queue {:?} made no task: {message}",
                    due.name,
                    due.queue
                );
                store::advance_schedule(&due, plan.fired_up_to, plan.next_fire_at, Some(&message))?;
            }
        }
    }
    Ok(made)
}

/// Moves the schedule past the plan's fire times, then enqueues one task
/// for each; nothing if another firer moved it first.
fn fire(due: &DueSchedule, plan: &Plan) -> Result<i64> {
    if !store::advance_schedule(due, plan.fired_up_to, plan.next_fire_at, None)? {
        return Ok(0);
    }
    let options = EnqueueOptions {
        delay_micros: 0,
        priority: due.priority,
        max_attempts: due.max_attempts,
        backoff_base_micros: due.backoff_base.map(micros),
        backoff_max_micros: due.backoff_max.map(micros),
        idempotency_key: None,
    };
    for &fire_time in &plan.fire_times {
        let payload = match &due.fire_time_key {
            Some(key) => Some(store::with_fire_time(
                due.payload,
                key,
                &fire_time_text(fire_time),
            )?),
            None => due.payload,
        };
        CheckedEnqueue::new(&due.queue, payload, options.clone(), "")?.insert()?;
    }
    Ok(plan.fire_times.len() as i64)
}
