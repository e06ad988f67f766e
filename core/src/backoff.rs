//! Retry delays: `base * 2^(attempts-1)`, clamped to the ceiling.

use crate::MICROS_PER_SECOND;

pub const DEFAULT_MAX_ATTEMPTS: i32 = 5;
pub const DEFAULT_BACKOFF_BASE_MICROS: i64 = MICROS_PER_SECOND;
pub const DEFAULT_BACKOFF_MAX_MICROS: i64 = 60 * MICROS_PER_SECOND;

/// Delay before the retry that follows failed attempt number `attempts` (1-based).
pub fn retry_delay_micros(attempts: i32, base_micros: i64, max_micros: i64) -> i64 {
    // Past 2^62 every positive base saturates anyway.
    let exponent = attempts.saturating_sub(1).clamp(0, 62) as u32;
    base_micros.saturating_mul(1i64 << exponent).min(max_micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = MICROS_PER_SECOND;

    #[test]
    fn doubles_per_attempt_from_the_base() {
        assert_eq!(retry_delay_micros(1, S, 60 * S), S);
        assert_eq!(retry_delay_micros(2, S, 60 * S), 2 * S);
        assert_eq!(retry_delay_micros(3, S, 60 * S), 4 * S);
        assert_eq!(retry_delay_micros(6, S, 60 * S), 32 * S);
    }

    #[test]
    fn clamps_to_the_ceiling() {
        assert_eq!(retry_delay_micros(7, S, 60 * S), 60 * S);
        assert_eq!(retry_delay_micros(2, S, 3 * S / 2), 3 * S / 2);
    }

    #[test]
    fn never_overflows() {
        assert_eq!(
            retry_delay_micros(i32::MAX, i64::MAX / 2, i64::MAX),
            i64::MAX
        );
        assert_eq!(retry_delay_micros(200, S, 60 * S), 60 * S);
    }

    #[test]
    fn attempt_zero_behaves_like_the_first() {
        assert_eq!(retry_delay_micros(0, S, 60 * S), S);
    }
}
