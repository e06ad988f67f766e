//! Periodic schedules: a cron pattern read in an IANA time zone, and the
//! fire times it yields. Times cross this module as microseconds since the
//! Unix epoch, UTC, as the rest of the core counts them.
//!
//! Parsing and the daylight-saving rules are croner's (the Open Cron Pattern
//! Specification, as Vixie cron behaves): on a spring-forward day a job at a
//! fixed wall time that does not exist fires at the first valid time after
//! the gap, on the same day; on a fall-back day it fires once, at the first
//! of the two instants with that wall time. Jobs with `*` or steps in their
//! time fields fire for each matching instant, as the clock really runs.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::Cron;

use crate::error::{quoted, QueueError};

/// How many fire times one call may return, whatever the policy: a
/// schedule left unfired for years must not make one reaper pass enqueue
/// millions of tasks.
pub const MAX_CATCH_UP: u32 = 1_000;

/// 0001-01-01 and 5000-01-01 UTC, in microseconds since the Unix epoch:
/// croner searches fire times within these years only, so a start outside
/// them could yield nothing but silence.
pub const SEARCH_FROM: i64 = -62_135_596_800_000_000;
pub const SEARCH_UNTIL: i64 = 95_617_584_000_000_000;

/// Checks an instant fire times are searched from (`queue_cron_preview`'s
/// `after`): SQLSTATE 22008 outside the years 1 to 4999.
pub fn search_start(arg: &str, at: i64) -> Result<i64, QueueError> {
    if (SEARCH_FROM..SEARCH_UNTIL).contains(&at) {
        Ok(at)
    } else {
        Err(QueueError::TimeOutOfRange {
            arg: arg.to_string(),
            reason: "must be in the years 1 to 4999 (UTC), where fire times are searched".into(),
        })
    }
}

/// A parsed schedule: when it fires, and in which time zone its pattern's
/// wall times are read.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    zone: Tz,
}

/// What a schedule does with fire times that passed while nothing fired it
/// (no reaper ran, the schedule was paused, the server was down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    /// Only the latest fire time that has passed gets a task.
    Skip,
    /// The latest `n` fire times that have passed each get a task, oldest
    /// first (`1 ..= MAX_CATCH_UP`).
    CatchUp(u32),
}

impl Missed {
    /// The policy from its SQL spelling: `skip`, or `catch_up` with at most
    /// `limit` tasks.
    pub fn parse(policy: &str, limit: Option<i32>) -> Result<Missed, QueueError> {
        match (policy, limit) {
            ("skip", None) => Ok(Missed::Skip),
            ("skip", Some(_)) => Err(QueueError::invalid(
                "catch_up_limit",
                "applies only to the policy catch_up",
            )),
            ("catch_up", Some(n)) if (1..=MAX_CATCH_UP as i32).contains(&n) => {
                Ok(Missed::CatchUp(n as u32))
            }
            ("catch_up", Some(_)) => Err(QueueError::invalid(
                "catch_up_limit",
                format!("must be between 1 and {MAX_CATCH_UP}"),
            )),
            ("catch_up", None) => Err(QueueError::invalid(
                "catch_up_limit",
                "is required with the policy catch_up",
            )),
            _ => Err(QueueError::invalid(
                "missed",
                "must be 'skip' or 'catch_up'",
            )),
        }
    }

    fn limit(self) -> usize {
        match self {
            Missed::Skip => 1,
            Missed::CatchUp(n) => n.min(MAX_CATCH_UP) as usize,
        }
    }
}

impl Schedule {
    /// Parses a pattern of 5 fields (minute hour day-of-month month
    /// day-of-week) or 6 (seconds first), and an IANA zone name.
    pub fn parse(pattern: &str, zone: &str) -> Result<Schedule, QueueError> {
        let zone = Tz::from_str(zone).map_err(|_| {
            QueueError::invalid("time_zone", format!("unknown time zone {}", quoted(zone)))
        })?;
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(pattern)
            .map_err(|e| {
                // croner's text may hold the pattern or a part of it.
                let why = quoted(&e.to_string());
                QueueError::invalid(
                    "cron",
                    format!("{} is not a cron pattern: {why}", quoted(pattern)),
                )
            })?;
        Ok(Schedule { cron, zone })
    }

    /// The first fire time strictly after `after`, or None when the pattern
    /// never matches again (such as 30 February).
    pub fn next_after(&self, after: i64) -> Option<i64> {
        let start = self.zone.from_utc_datetime(&utc(after)?.naive_utc());
        let next = self.cron.find_next_occurrence(&start, false).ok()?;
        Some(next.with_timezone(&Utc).timestamp_micros())
    }

    /// Up to `n` fire times strictly after `after`, in order.
    pub fn upcoming(&self, after: i64, n: usize) -> Vec<i64> {
        let mut times = Vec::with_capacity(n.min(MAX_CATCH_UP as usize));
        let mut at = after;
        while times.len() < n {
            match self.next_after(at) {
                Some(next) => times.push(next),
                None => break,
            }
            at = times[times.len() - 1];
        }
        times
    }

    /// The fire times a firer at `now` owes, oldest first: those after
    /// `fired_up_to` (the last fire time that got a task, or the schedule's
    /// creation) and at or before `now`, of which `missed` keeps the latest.
    pub fn due(&self, fired_up_to: i64, now: i64, missed: Missed) -> Vec<i64> {
        let keep = missed.limit();
        // Forward from `fired_up_to`, the usual case (a fire time or two
        // owed); a walk that goes on past twice what is kept starts over
        // from the last `keep` fire times before now, counted back: a
        // per-second schedule left unfired for a year owes 31 million.
        let mut due = std::collections::VecDeque::with_capacity(keep.min(16));
        let mut at = fired_up_to;
        let mut steps = 0;
        while let Some(next) = self.next_after(at).filter(|&t| t <= now) {
            steps += 1;
            if steps > 2 * keep + 1 {
                let start = self.back_from(now, keep).map_or(at, |t| t.max(at));
                return self.walk(start, now, keep);
            }
            if due.len() == keep {
                due.pop_front();
            }
            due.push_back(next);
            at = next;
        }
        due.into()
    }

    /// The fire times after `from` and at or before `now`, the latest `keep`.
    fn walk(&self, from: i64, now: i64, keep: usize) -> Vec<i64> {
        let mut due = std::collections::VecDeque::with_capacity(keep.min(16));
        let mut at = from;
        while let Some(next) = self.next_after(at).filter(|&t| t <= now) {
            if due.len() == keep {
                due.pop_front();
            }
            due.push_back(next);
            at = next;
        }
        due.into()
    }
}

impl Schedule {
    /// Just before the `n`th fire time at or before `now`, counting back;
    /// None when there are fewer. Only a starting point for the forward
    /// walk, whose daylight-saving rules decide what fires.
    fn back_from(&self, now: i64, n: usize) -> Option<i64> {
        let mut at = self.zone.from_utc_datetime(&utc(now)?.naive_utc());
        let mut inclusive = true;
        for _ in 0..n {
            at = self.cron.find_previous_occurrence(&at, inclusive).ok()?;
            inclusive = false;
        }
        Some(at.with_timezone(&Utc).timestamp_micros() - 1)
    }
}

/// A fire time as a task's payload carries it: RFC 3339 in UTC, with a
/// fraction only when the time has one (`2026-03-29T01:00:00Z`).
pub fn fire_time_text(micros: i64) -> String {
    utc(micros).map_or_else(
        || micros.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
    )
}

fn utc(micros: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(micros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    const MICROS: i64 = 1_000_000;

    /// Microseconds of a UTC wall time.
    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
        NaiveDate::from_ymd_opt(y, mo, d)
            .and_then(|date| date.and_hms_opt(h, mi, s))
            .expect("a valid time")
            .and_utc()
            .timestamp_micros()
    }

    fn fires(schedule: &Schedule, from: i64, to: i64) -> Vec<i64> {
        schedule.due(from, to, Missed::CatchUp(MAX_CATCH_UP))
    }

    #[test]
    fn five_and_six_fields_both_parse() {
        let minutely = Schedule::parse("*/15 * * * *", "UTC").unwrap();
        assert_eq!(
            minutely.next_after(at(2026, 1, 1, 10, 7, 0)),
            Some(at(2026, 1, 1, 10, 15, 0))
        );
        let secondly = Schedule::parse("*/10 * * * * *", "UTC").unwrap();
        assert_eq!(
            secondly.next_after(at(2026, 1, 1, 10, 0, 3)),
            Some(at(2026, 1, 1, 10, 0, 10))
        );
    }

    #[test]
    fn next_is_strictly_after() {
        let hourly = Schedule::parse("0 * * * *", "UTC").unwrap();
        let t = at(2026, 1, 1, 10, 0, 0);
        assert_eq!(hourly.next_after(t), Some(t + 3_600 * MICROS));
        assert_eq!(hourly.next_after(t - 1), Some(t));
    }

    #[test]
    fn bad_patterns_and_zones_name_their_argument() {
        for pattern in ["", "* * *", "61 * * * *", "* * * * * * * *", "nonsense"] {
            match Schedule::parse(pattern, "UTC") {
                Err(QueueError::InvalidArgument { arg, .. }) => {
                    assert_eq!(arg, "cron", "{pattern:?}")
                }
                other => panic!("{pattern:?}: {other:?}"),
            }
        }
        match Schedule::parse("* * * * *", "Mars/Olympus_Mons") {
            Err(QueueError::InvalidArgument { arg, .. }) => assert_eq!(arg, "time_zone"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_zone_sets_the_wall_clock() {
        // 09:00 in New York is 14:00 UTC in winter, 13:00 in summer.
        let daily = Schedule::parse("0 9 * * *", "America/New_York").unwrap();
        assert_eq!(
            daily.next_after(at(2026, 1, 10, 0, 0, 0)),
            Some(at(2026, 1, 10, 14, 0, 0))
        );
        assert_eq!(
            daily.next_after(at(2026, 7, 10, 0, 0, 0)),
            Some(at(2026, 7, 10, 13, 0, 0))
        );
    }

    #[test]
    fn spring_forward_fires_a_missing_wall_time_once_after_the_gap() {
        // Berlin, 29 March 2026: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
        let daily = Schedule::parse("30 2 * * *", "Europe/Berlin").unwrap();
        let day = fires(&daily, at(2026, 3, 28, 12, 0, 0), at(2026, 3, 30, 12, 0, 0));
        assert_eq!(
            day,
            vec![at(2026, 3, 29, 1, 0, 0), at(2026, 3, 30, 0, 30, 0)],
            "03:00 CEST on the day of the gap, 02:30 CEST the day after"
        );
    }

    #[test]
    fn fall_back_fires_a_repeated_wall_time_once() {
        // Berlin, 25 October 2026: 03:00 CEST falls back to 02:00 CET, so
        // 02:30 happens at 00:30 UTC and again at 01:30 UTC.
        let daily = Schedule::parse("30 2 * * *", "Europe/Berlin").unwrap();
        let day = fires(
            &daily,
            at(2026, 10, 24, 12, 0, 0),
            at(2026, 10, 26, 12, 0, 0),
        );
        assert_eq!(
            day,
            vec![at(2026, 10, 25, 0, 30, 0), at(2026, 10, 26, 1, 30, 0)]
        );
    }

    #[test]
    fn an_hourly_schedule_fires_in_both_passes_of_a_repeated_hour() {
        // Real hours, not wall hours: 25 fires on the 25-hour day.
        let hourly = Schedule::parse("0 * * * *", "Europe/Berlin").unwrap();
        let from = at(2026, 10, 24, 22, 0, 0); // midnight CEST
        let to = at(2026, 10, 25, 23, 0, 0) - 1; // just before the next midnight CET
        let day = fires(&hourly, from, to);
        assert_eq!(
            day.len(),
            24,
            "00:00 excluded, 01:00 ... 23:00 with 02:00 twice"
        );
        assert!(day.windows(2).all(|w| w[1] - w[0] == 3_600 * MICROS));
    }

    #[test]
    fn skip_keeps_only_the_latest_passed_fire_time() {
        let minutely = Schedule::parse("* * * * *", "UTC").unwrap();
        let from = at(2026, 1, 1, 10, 0, 0);
        let now = at(2026, 1, 1, 10, 5, 30);
        assert_eq!(
            minutely.due(from, now, Missed::Skip),
            vec![at(2026, 1, 1, 10, 5, 0)]
        );
        assert_eq!(
            minutely.due(from, now, Missed::CatchUp(3)),
            vec![
                at(2026, 1, 1, 10, 3, 0),
                at(2026, 1, 1, 10, 4, 0),
                at(2026, 1, 1, 10, 5, 0)
            ]
        );
        assert_eq!(minutely.due(from, now, Missed::CatchUp(100)).len(), 5);
    }

    #[test]
    fn a_long_gap_costs_only_the_fire_times_kept() {
        // Ten years of a per-second schedule: 315 million fire times.
        let secondly = Schedule::parse("* * * * * *", "UTC").unwrap();
        let now = at(2036, 1, 1, 0, 0, 0);
        assert_eq!(
            secondly.due(at(2026, 1, 1, 0, 0, 0), now, Missed::Skip),
            vec![now]
        );
        let owed = secondly.due(at(2026, 1, 1, 0, 0, 0), now, Missed::CatchUp(3));
        assert_eq!(owed, vec![now - 2 * MICROS, now - MICROS, now]);
        // Fewer fire times than kept since `fired_up_to`: all of them.
        let daily = Schedule::parse("0 12 * * *", "UTC").unwrap();
        assert_eq!(
            daily.due(
                at(2026, 1, 1, 0, 0, 0),
                at(2026, 1, 3, 0, 0, 0),
                Missed::CatchUp(10)
            ),
            vec![at(2026, 1, 1, 12, 0, 0), at(2026, 1, 2, 12, 0, 0)]
        );
    }

    #[test]
    fn upcoming_lists_the_next_fire_times_in_order() {
        let daily = Schedule::parse("30 2 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            daily.upcoming(at(2026, 3, 28, 12, 0, 0), 3),
            vec![
                at(2026, 3, 29, 1, 0, 0),
                at(2026, 3, 30, 0, 30, 0),
                at(2026, 3, 31, 0, 30, 0)
            ]
        );
        let never = Schedule::parse("0 0 30 2 *", "UTC").unwrap();
        assert!(never.upcoming(at(2026, 1, 1, 0, 0, 0), 3).is_empty());
    }

    #[test]
    fn fire_times_are_searched_from_the_years_1_to_4999_only() {
        assert_eq!(SEARCH_FROM, at(1, 1, 1, 0, 0, 0));
        assert_eq!(SEARCH_UNTIL, at(5000, 1, 1, 0, 0, 0));
        for ok in [SEARCH_FROM, 0, SEARCH_UNTIL - 1] {
            assert_eq!(search_start("after", ok), Ok(ok));
        }
        for bad in [i64::MIN, SEARCH_FROM - 1, SEARCH_UNTIL, i64::MAX] {
            let e = search_start("after", bad).unwrap_err();
            assert_eq!(e.sqlstate(), "22008");
            assert!(
                e.to_string()
                    .starts_with("argument \"after\" must be in the years 1 to 4999"),
                "{e}"
            );
        }
        // Just inside the range the search ends quietly at croner's limit.
        let every_minute = Schedule::parse("* * * * *", "UTC").unwrap();
        assert_eq!(
            every_minute.upcoming(SEARCH_UNTIL - 60 * MICROS, 5),
            vec![SEARCH_UNTIL]
        );
    }

    #[test]
    fn fire_times_print_as_rfc_3339_utc() {
        assert_eq!(
            fire_time_text(at(2026, 3, 29, 1, 0, 0)),
            "2026-03-29T01:00:00Z"
        );
        assert_eq!(
            fire_time_text(at(2026, 3, 29, 1, 0, 0) + 250_000),
            "2026-03-29T01:00:00.250Z"
        );
    }

    #[test]
    fn nothing_is_due_before_the_next_fire_time() {
        let minutely = Schedule::parse("* * * * *", "UTC").unwrap();
        let from = at(2026, 1, 1, 10, 0, 0);
        assert!(minutely
            .due(from, from + 59 * MICROS, Missed::Skip)
            .is_empty());
        assert_eq!(
            minutely.due(from, from + 60 * MICROS, Missed::Skip),
            vec![from + 60 * MICROS]
        );
    }

    #[test]
    fn a_pattern_that_never_matches_has_no_next_fire_time() {
        let never = Schedule::parse("0 0 30 2 *", "UTC").unwrap();
        assert_eq!(never.next_after(at(2026, 1, 1, 0, 0, 0)), None);
    }

    #[test]
    fn the_missed_policy_is_checked() {
        assert_eq!(Missed::parse("skip", None).unwrap(), Missed::Skip);
        assert_eq!(
            Missed::parse("catch_up", Some(5)).unwrap(),
            Missed::CatchUp(5)
        );
        for (policy, limit, arg) in [
            ("skip", Some(3), "catch_up_limit"),
            ("catch_up", None, "catch_up_limit"),
            ("catch_up", Some(0), "catch_up_limit"),
            ("catch_up", Some(MAX_CATCH_UP as i32 + 1), "catch_up_limit"),
            ("sometimes", None, "missed"),
        ] {
            match Missed::parse(policy, limit) {
                Err(QueueError::InvalidArgument { arg: got, .. }) => assert_eq!(got, arg),
                other => panic!("{policy} {limit:?}: {other:?}"),
            }
        }
    }
}
