//! What a reported failure does to an in-flight task.

use crate::backoff::retry_delay_micros;

/// The task's retry budget and backoff, as stored on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub attempts: i32,
    pub max_attempts: i32,
    pub backoff_base_micros: i64,
    pub backoff_max_micros: i64,
}

/// What the worker asked for when it reported the failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailRequest {
    /// Overrides the backoff for this retry.
    pub retry_in_micros: Option<i64>,
    /// A non-retryable error: dead-letter now.
    pub dead_letter: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// Back to `scheduled`, due after this many microseconds.
    RetryAfter(i64),
    /// To `dead`; the error is kept on the task.
    DeadLetter,
}

pub fn on_failure(policy: RetryPolicy, request: FailRequest) -> FailOutcome {
    if request.dead_letter || policy.attempts >= policy.max_attempts {
        return FailOutcome::DeadLetter;
    }
    FailOutcome::RetryAfter(request.retry_in_micros.unwrap_or_else(|| {
        retry_delay_micros(
            policy.attempts,
            policy.backoff_base_micros,
            policy.backoff_max_micros,
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MICROS_PER_SECOND as S;

    fn policy(attempts: i32, max_attempts: i32) -> RetryPolicy {
        RetryPolicy {
            attempts,
            max_attempts,
            backoff_base_micros: S,
            backoff_max_micros: 60 * S,
        }
    }

    #[test]
    fn retries_with_backoff_while_attempts_remain() {
        assert_eq!(
            on_failure(policy(1, 5), FailRequest::default()),
            FailOutcome::RetryAfter(S)
        );
        assert_eq!(
            on_failure(policy(4, 5), FailRequest::default()),
            FailOutcome::RetryAfter(8 * S)
        );
    }

    #[test]
    fn dead_letters_when_attempts_are_exhausted() {
        assert_eq!(
            on_failure(policy(5, 5), FailRequest::default()),
            FailOutcome::DeadLetter
        );
        assert_eq!(
            on_failure(policy(1, 1), FailRequest::default()),
            FailOutcome::DeadLetter
        );
    }

    #[test]
    fn retry_in_overrides_the_backoff() {
        let req = FailRequest {
            retry_in_micros: Some(0),
            dead_letter: false,
        };
        assert_eq!(on_failure(policy(3, 5), req), FailOutcome::RetryAfter(0));
    }

    #[test]
    fn retry_in_does_not_extend_the_budget() {
        let req = FailRequest {
            retry_in_micros: Some(S),
            dead_letter: false,
        };
        assert_eq!(on_failure(policy(5, 5), req), FailOutcome::DeadLetter);
    }

    #[test]
    fn dead_letter_wins_over_remaining_attempts() {
        let req = FailRequest {
            retry_in_micros: Some(S),
            dead_letter: true,
        };
        assert_eq!(on_failure(policy(1, 5), req), FailOutcome::DeadLetter);
    }
}
