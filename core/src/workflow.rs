//! Durable workflows: a task whose handler runs named steps. Each step's
//! result is recorded under the task's fencing token, so a re-run after a
//! crash, a lost lease or a retry returns it without running the step; a
//! sleep or an event wait parks the task until a time on the database's
//! clock, without counting the attempt. These rules decide, from what is
//! recorded and the clock, whether the handler goes on or the task parks.

use crate::error::QueueError;
use crate::validate;

/// The key of an event (`queue_emit`, `queue_await_event`): as a queue name.
pub fn event_key(arg: &str, value: &str) -> Result<(), QueueError> {
    validate::name(arg, value)
}

/// A step's name: as a queue name (non-empty, at most 128 bytes).
pub fn step_name(arg: &str, value: &str) -> Result<(), QueueError> {
    validate::name(arg, value)
}

/// What a sleep or an event wait does now. Times are microseconds on one
/// clock (the database's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The wait is over: the handler goes on.
    Over,
    /// The wait is not over: the task parks until this time (scheduled,
    /// the attempt not counted), unless an event wakes it first.
    Park { until: i64 },
}

/// A sleep whose wake time is `wake_at` (recorded by its first call).
pub fn sleep(wake_at: i64, now: i64) -> Wait {
    if now >= wake_at {
        Wait::Over
    } else {
        Wait::Park { until: wake_at }
    }
}

/// How an event wait ends, once it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventWait {
    /// The event was emitted: its payload is the step's result.
    Emitted,
    /// The deadline passed first: the step's result says it timed out.
    TimedOut,
    /// Neither yet: the task parks until the deadline, or the emit.
    Park { until: i64 },
}

/// An event wait with the deadline its first call recorded. An event
/// emitted counts even when it is read after the deadline: it was there.
pub fn event_wait(emitted: bool, deadline: i64, now: i64) -> EventWait {
    if emitted {
        EventWait::Emitted
    } else if now >= deadline {
        EventWait::TimedOut
    } else {
        EventWait::Park { until: deadline }
    }
}

/// A sleep takes a duration or a time to sleep until, exactly one.
pub fn sleep_target(duration: Option<i64>, until: Option<i64>) -> Result<SleepTarget, QueueError> {
    match (duration, until) {
        (Some(micros), None) => Ok(SleepTarget::For(validate::non_negative_duration(
            "duration", micros,
        )?)),
        (None, Some(at)) => Ok(SleepTarget::Until(at)),
        (Some(_), Some(_)) => Err(QueueError::invalid(
            "until",
            "give a duration or a time to sleep until, not both",
        )),
        (None, None) => Err(QueueError::invalid(
            "duration",
            "give a duration or a time to sleep until (until)",
        )),
    }
}

/// Where a sleep ends: after a duration from the first call, or at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepTarget {
    For(i64),
    Until(i64),
}

impl SleepTarget {
    /// The wake time for a first call at `now`.
    pub fn wake_at(self, now: i64) -> i64 {
        match self {
            SleepTarget::For(micros) => now.saturating_add(micros),
            SleepTarget::Until(at) => at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleep_is_over_at_its_wake_time_and_not_before() {
        assert_eq!(sleep(100, 99), Wait::Park { until: 100 });
        assert_eq!(sleep(100, 100), Wait::Over);
        assert_eq!(sleep(100, 5_000), Wait::Over);
    }

    #[test]
    fn an_emitted_event_wins_over_a_passed_deadline() {
        assert_eq!(event_wait(true, 100, 200), EventWait::Emitted);
        assert_eq!(event_wait(true, 100, 50), EventWait::Emitted);
        assert_eq!(event_wait(false, 100, 100), EventWait::TimedOut);
        assert_eq!(event_wait(false, 100, 99), EventWait::Park { until: 100 });
    }

    #[test]
    fn a_sleep_takes_a_duration_or_a_time_exactly() {
        assert_eq!(sleep_target(Some(5), None), Ok(SleepTarget::For(5)));
        assert_eq!(sleep_target(None, Some(7)), Ok(SleepTarget::Until(7)));
        assert_eq!(SleepTarget::For(5).wake_at(10), 15);
        assert_eq!(SleepTarget::Until(7).wake_at(10), 7);
        for (d, u, arg) in [(Some(1), Some(2), "until"), (None, None, "duration")] {
            let e = sleep_target(d, u).unwrap_err();
            assert_eq!(e.sqlstate(), "22023");
            assert!(e.to_string().contains(&format!("\"{arg}\"")), "{e}");
        }
        assert!(sleep_target(Some(-1), None).is_err());
    }

    #[test]
    fn step_names_and_event_keys_are_names() {
        assert!(step_name("step", "charge card").is_ok());
        assert!(step_name("step", "").is_err());
        assert!(event_key("key", &"k".repeat(129)).is_err());
    }
}
