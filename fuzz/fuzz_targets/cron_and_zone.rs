//! A cron pattern and a time zone (the input split at its first newline):
//! never panics, refuses as `cron` or `time_zone` (22023), and an accepted
//! schedule's fire times go forward from any instant.
#![no_main]

use aedb_queue_core::schedule::{Missed, Schedule};
use aedb_queue_core::QueueError;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&str, i64)| {
    let (text, after) = input;
    let (pattern, zone) = text.split_once('\n').unwrap_or((text, "UTC"));
    match Schedule::parse(pattern, zone) {
        Err(QueueError::InvalidArgument { arg, .. }) => {
            assert!(arg == "cron" || arg == "time_zone", "{arg}")
        }
        Err(other) => panic!("not a typed refusal: {other:?}"),
        Ok(schedule) => {
            let times = schedule.upcoming(after, 3);
            assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
            assert!(times.iter().all(|&t| t > after));
            let due = schedule.due(after, after.saturating_add(1 << 36), Missed::CatchUp(5));
            assert!(due.len() <= 5);
        }
    }
});
