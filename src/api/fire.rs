//! Firing due schedules: each fire time a schedule owes becomes one task
//! in its queue, enqueued as `queue_enqueue_batch` would (rights,
//! settings, payload limit, wake-ups).
//!
//! Exactly once: the firer locks the schedule rows (`FOR UPDATE SKIP
//! LOCKED`, each row's due time checked again once the lock is granted),
//! moves each row's `fired_up_to` past the fire times from where it found
//! it, and enqueues their tasks, all in one transaction. Two firers cannot
//! both move the same row from the same place, and a firer that rolls back
//! leaves both the rows and the tasks as they were.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use aedb_queue_core::reaper;
use aedb_queue_core::schedule::{fire_time_text, Missed, Schedule};
use aedb_queue_core::validate::{EnqueueOptions, MAX_BATCH};
use pgrx::datum::TimestampWithTimeZone;

use super::behind;
use super::enqueue::enqueue_many;
use super::micros;
use crate::clock::{self, from_unix_micros, unix_micros};
use crate::datum::RawJsonb;
use crate::errors::Result;
use crate::store::{self, DueSchedule, SchemaLevel};
use crate::subtransaction::in_subtransaction;

/// Parsed patterns this backend keeps, by (cron, time zone); past this
/// many it starts over.
const PARSED_KEPT: usize = 10_000;

thread_local! {
    static PARSED: RefCell<HashMap<(String, String), Schedule>> = RefCell::new(HashMap::new());
}

fn parsed(cron: &str, zone: &str) -> std::result::Result<Schedule, String> {
    pgrx::check_for_interrupts!();
    let key = (cron.to_string(), zone.to_string());
    if let Some(schedule) = PARSED.with(|p| p.borrow().get(&key).cloned()) {
        return Ok(schedule);
    }
    let schedule = Schedule::parse(cron, zone).map_err(|e| e.to_string())?;
    PARSED.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() >= PARSED_KEPT {
            p.clear();
        }
        p.insert(key, schedule.clone());
    });
    Ok(schedule)
}

/// The payload bytes one pass may fire, all schedules together: a
/// catch-up of 1,000 fire times with 1 MiB payloads is spread over passes
/// (run back to back) instead of holding a gigabyte in one.
const PASS_BYTES: usize = 64 << 20;

/// What a due schedule owes now, and where it goes next.
struct Plan<'a> {
    due: &'a DueSchedule,
    fire_times: Vec<i64>,
    fired_up_to: TimestampWithTimeZone,
    next_fire_at: TimestampWithTimeZone,
}

impl<'a> Plan<'a> {
    /// A schedule whose stored pattern or policy no longer parses (a
    /// later parser refusing it) fires nothing and waits for an upsert.
    /// At most `room` fire times are taken; the rest stay owed (the
    /// schedule stays due at the first of them).
    fn of(due: &'a DueSchedule, now: i64, room: usize) -> std::result::Result<Plan<'a>, String> {
        let schedule = parsed(&due.cron, &due.time_zone)?;
        let missed = Missed::parse(&due.missed, due.catch_up_limit).map_err(|e| e.to_string())?;
        let mut fire_times = schedule.due(unix_micros(due.fired_up_to), now, missed);
        let owed_next = fire_times.get(room.max(1)).copied();
        fire_times.truncate(room.max(1));
        let up_to = fire_times.last().copied().unwrap_or(now);
        let next_fire_at = match owed_next {
            Some(at) => from_unix_micros(at),
            None => schedule
                .next_after(up_to.max(now))
                .map_or_else(TimestampWithTimeZone::positive_infinity, from_unix_micros),
        };
        Ok(Plan {
            due,
            fired_up_to: from_unix_micros(up_to),
            next_fire_at,
            fire_times,
        })
    }
}

/// Up to `max` due schedules, locked: of `queue`, or of every queue with
/// an equal share of `max` for each (`reaper::share`; a second round
/// gives what queues with few due schedules left to the others), so one
/// tenant's thousands of schedules never starve another's one.
fn lock_due(queue: Option<&str>, max: i32) -> Result<Vec<DueSchedule>> {
    if queue.is_some() {
        return store::lock_due_schedules(queue, max);
    }
    let queues = store::queues_with_due_schedules()?;
    let mut taken: Vec<Vec<DueSchedule>> = queues.iter().map(|_| Vec::new()).collect();
    let mut pending: Vec<usize> = (0..queues.len()).collect();
    let mut left = max as i64;
    for _round in 0..2 {
        let mut busy = Vec::new();
        for (i, &q) in pending.iter().enumerate() {
            if left <= 0 {
                break;
            }
            let share = reaper::share(left, pending.len() - i);
            // Rows this transaction locked are not skipped: take the
            // queue's whole list again rather than adding to it.
            let had = taken[q].len();
            taken[q] = store::lock_due_schedules(Some(&queues[q]), had as i32 + share)?;
            let got = taken[q].len() - had;
            left -= got as i64;
            if got >= share as usize {
                busy.push(q);
            }
        }
        pending = busy;
        if pending.is_empty() || left <= 0 {
            break;
        }
    }
    Ok(taken.into_iter().flatten().collect())
}

/// Fires up to `max` due schedules of `queue`, or of every queue; returns
/// the tasks made. All fire together in one subtransaction; should that
/// fail, each fires in one of its own: one that cannot enqueue (its
/// payload outgrew the queue's limit, say) records why in `last_error`,
/// gives up those fire times, and stops no other. One that waited too
/// long for a lock (`lock_wait`) is left as it was, for a later pass.
pub(super) fn fire_due(queue: Option<&str>, max: i32) -> Result<i64> {
    if store::schema_level() < SchemaLevel::V050 {
        return Ok(0);
    }
    let now = unix_micros(clock::now());
    let due = lock_due(queue, max)?;
    let mut plans = Vec::with_capacity(due.len());
    let (mut fires_left, mut bytes_left) = (max.max(1) as usize, PASS_BYTES);
    for d in &due {
        if fires_left == 0 || bytes_left == 0 {
            behind::note();
            break;
        }
        let bytes = d.payload.map_or(0, |p| p.byte_size()) + 64;
        let room = fires_left.min(bytes_left / bytes).max(1);
        match Plan::of(d, now, room) {
            Ok(plan) => {
                fires_left = fires_left.saturating_sub(plan.fire_times.len());
                bytes_left = bytes_left.saturating_sub(plan.fire_times.len() * bytes);
                if plan.fire_times.len() == room && unix_micros(plan.next_fire_at) <= now {
                    behind::note();
                }
                plans.push(plan);
            }
            Err(message) => {
                let never = TimestampWithTimeZone::positive_infinity();
                store::advance_schedules(&[(d, d.fired_up_to, never, Some(&message))])?;
            }
        }
    }
    if plans.is_empty() {
        return Ok(0);
    }
    if let Ok(made) = in_subtransaction(|| fire(&plans)) {
        return Ok(made);
    }
    let mut made = 0;
    for plan in &plans {
        match in_subtransaction(|| fire(std::slice::from_ref(plan))) {
            Ok(tasks) => made += tasks,
            Err(failed) if failed.lock_wait => {}
            Err(failed) => {
                pgrx::warning!(
                    "aedb_queue: schedule {} of queue {} made no task: {failed}",
                    aedb_queue_core::error::quoted(&plan.due.name),
                    aedb_queue_core::error::quoted(&plan.due.queue)
                );
                let moved = (
                    plan.due,
                    plan.fired_up_to,
                    plan.next_fire_at,
                    Some(failed.message.as_str()),
                );
                store::advance_schedules(&[moved])?;
            }
        }
    }
    Ok(made)
}

/// The tasks of one group: one queue and the same options.
#[derive(PartialEq, Eq, Hash, Clone, Copy)]
struct Group<'a> {
    queue: &'a str,
    priority: i64,
    max_attempts: Option<i32>,
    backoff_base: Option<i64>,
    backoff_max: Option<i64>,
}

/// Moves the schedules past their plans' fire times, then enqueues one
/// task per fire time, a batch per queue and options; schedules another
/// firer moved first make nothing.
fn fire(plans: &[Plan<'_>]) -> Result<i64> {
    let moves: Vec<_> = plans
        .iter()
        .map(|p| (p.due, p.fired_up_to, p.next_fire_at, None))
        .collect();
    let moved: HashSet<(String, String)> = store::advance_schedules(&moves)?.into_iter().collect();
    let mut groups: Vec<(Group<'_>, Vec<Option<RawJsonb>>)> = Vec::new();
    let mut index: HashMap<Group<'_>, usize> = HashMap::new();
    let mut keyed: Vec<(usize, usize)> = Vec::new(); // (group, position) of payloads to key
    let mut fires: Vec<(Option<RawJsonb>, &str, String)> = Vec::new();
    for plan in plans {
        let d = plan.due;
        if !moved.contains(&(d.queue.clone(), d.name.clone())) {
            continue;
        }
        let group = Group {
            queue: &d.queue,
            priority: d.priority,
            max_attempts: d.max_attempts,
            backoff_base: d.backoff_base.map(micros),
            backoff_max: d.backoff_max.map(micros),
        };
        let g = *index.entry(group).or_insert_with(|| {
            groups.push((group, Vec::new()));
            groups.len() - 1
        });
        for &at in &plan.fire_times {
            if let Some(key) = &d.fire_time_key {
                keyed.push((g, groups[g].1.len()));
                fires.push((d.payload, key.as_str(), fire_time_text(at)));
            }
            groups[g].1.push(d.payload);
        }
    }
    if !fires.is_empty() {
        for ((g, at), payload) in keyed.into_iter().zip(store::with_fire_times(&fires)?) {
            groups[g].1[at] = Some(payload);
        }
    }
    let mut made = 0;
    for (group, payloads) in &groups {
        let options = EnqueueOptions {
            delay_micros: 0,
            priority: group.priority,
            max_attempts: group.max_attempts,
            backoff_base_micros: group.backoff_base,
            backoff_max_micros: group.backoff_max,
            idempotency_key: None,
            concurrency_key: None,
            ordering_key: None,
            fairness_key: None,
        };
        for chunk in payloads.chunks(MAX_BATCH) {
            made += enqueue_many(group.queue, chunk, options.clone(), false, None)?.len() as i64;
        }
    }
    Ok(made)
}
