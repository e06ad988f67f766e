//! Durations as the SQL statements take them: whole microseconds.

use std::time::Duration;

use crate::error::{Error, Result};

/// `d` in microseconds, refused (naming `arg`) if it does not fit in an int8.
pub(crate) fn micros(arg: &'static str, d: Duration) -> Result<i64> {
    i64::try_from(d.as_micros()).map_err(|_| Error::invalid(arg, "is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_are_exact_and_overflow_is_refused() {
        assert_eq!(
            micros("delay", Duration::from_millis(1500)).unwrap(),
            1_500_000
        );
        assert_eq!(micros("delay", Duration::ZERO).unwrap(), 0);
        let err = micros("delay", Duration::MAX).unwrap_err();
        assert_eq!(err.to_string(), "invalid argument \"delay\": is too long");
    }
}
