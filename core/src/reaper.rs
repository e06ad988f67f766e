//! Rules of `queue_reap()` over every queue and of its pg_cron schedule.

use crate::QueueError;

/// How much of what is left of a run's budget the next queue may use:
/// an equal part for each queue still to go, and at least one, so every
/// queue with due work makes progress in every run (when more queues are
/// due than the budget allows, the run goes over it by at most one per
/// queue).
pub fn share(budget_left: i64, queues_left: usize) -> i32 {
    let queues = queues_left.max(1) as i64;
    (budget_left / queues).clamp(1, i32::MAX as i64) as i32
}

/// The pg_cron expression that runs a job every `seconds`. pg_cron 1.4
/// (Debian 12) takes 5-field expressions only, so only intervals that map
/// onto one field's step are accepted: 1-59 whole minutes, 1-23 whole
/// hours, or one day. `shown` is the interval as the caller wrote it.
pub fn cron_expression(seconds: i64, exact: bool, shown: &str) -> Result<String, QueueError> {
    if exact {
        if seconds % 60 == 0 && (1..=59).contains(&(seconds / 60)) {
            return Ok(format!("*/{} * * * *", seconds / 60));
        }
        if seconds % 3600 == 0 && (1..=23).contains(&(seconds / 3600)) {
            return Ok(format!("0 */{} * * *", seconds / 3600));
        }
        if seconds == 86_400 {
            return Ok("0 0 * * *".to_string());
        }
    }
    Err(QueueError::invalid(
        "every",
        format!("must be 1 to 59 whole minutes, 1 to 23 whole hours, or 1 day; got {shown}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_queue_gets_a_part_and_at_least_one() {
        assert_eq!(share(1000, 4), 250);
        assert_eq!(share(1000, 1), 1000);
        assert_eq!(share(3, 10), 1);
        assert_eq!(share(0, 10), 1);
        assert_eq!(share(-5, 2), 1);
        assert_eq!(share(i64::MAX, 1), i32::MAX);
    }

    #[test]
    fn cron_expressions_for_field_steps_only() {
        assert_eq!(
            cron_expression(60, true, "1 minute").unwrap(),
            "*/1 * * * *"
        );
        assert_eq!(
            cron_expression(300, true, "5 minutes").unwrap(),
            "*/5 * * * *"
        );
        assert_eq!(
            cron_expression(3600, true, "1 hour").unwrap(),
            "0 */1 * * *"
        );
        assert_eq!(
            cron_expression(7200, true, "2 hours").unwrap(),
            "0 */2 * * *"
        );
        assert_eq!(cron_expression(86_400, true, "1 day").unwrap(), "0 0 * * *");
        for bad in [0, 30, 90, 61 * 60, 25 * 3600, 2 * 86_400, -60] {
            let e = cron_expression(bad, true, "x").unwrap_err();
            assert_eq!(e.sqlstate(), "22023");
            assert!(e.to_string().contains("\"every\""));
        }
        assert!(cron_expression(60, false, "1 minute 0.5 s").is_err());
    }
}
