//! Flow control rules, pure: the token bucket behind a queue's
//! rate limit. A bucket holds at most `burst` tokens and gains `rate`
//! tokens per `per` of time; a claim takes at most what it holds and never
//! waits for more.

use crate::QueueError;

/// A queue's rate limit: `rate` task starts per `per_micros`, at most
/// `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub rate: u32,
    pub per_micros: i64,
    pub burst: u32,
}

/// A bucket's state as stored: tokens (in millionths of a token, so that
/// refills of a fraction of a token add up exactly) at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub micro_tokens: i64,
    pub at: i64,
}

const MICRO: i64 = 1_000_000;

impl RateLimit {
    /// Checks a setting as `queue_configure` takes it (argument names
    /// `rate_limit`, `rate_interval`, `rate_burst`); burst defaults to rate.
    pub fn checked(
        rate: i32,
        per_micros: i64,
        burst: Option<i32>,
    ) -> Result<RateLimit, QueueError> {
        if rate < 1 {
            return Err(QueueError::invalid(
                "rate_limit",
                format!("must be at least 1, got {rate}"),
            ));
        }
        if per_micros <= 0 {
            return Err(QueueError::invalid(
                "rate_interval",
                "must be a positive interval",
            ));
        }
        let burst = burst.unwrap_or(rate);
        if burst < 1 {
            return Err(QueueError::invalid(
                "rate_burst",
                format!("must be at least 1, got {burst}"),
            ));
        }
        Ok(RateLimit {
            rate: rate as u32,
            per_micros,
            burst: burst as u32,
        })
    }

    /// A full bucket at `now` (a queue just limited may start a burst).
    pub fn full(&self, now: i64) -> Bucket {
        Bucket {
            micro_tokens: self.burst as i64 * MICRO,
            at: now,
        }
    }

    /// The bucket refilled up to `now` (time never runs backwards here: a
    /// clock behind the bucket's refills nothing).
    pub fn refilled(&self, bucket: Bucket, now: i64) -> Bucket {
        let elapsed = (now - bucket.at).max(0) as i128;
        let gained = elapsed * self.rate as i128 * MICRO as i128 / self.per_micros as i128;
        let cap = self.burst as i128 * MICRO as i128;
        Bucket {
            micro_tokens: (bucket.micro_tokens as i128 + gained).min(cap) as i64,
            at: bucket.at.max(now),
        }
    }

    /// Takes up to `want` whole tokens at `now`: how many it got, and the
    /// bucket after.
    pub fn take(&self, bucket: Bucket, now: i64, want: u32) -> (u32, Bucket) {
        let bucket = self.refilled(bucket, now);
        let whole = (bucket.micro_tokens / MICRO).max(0) as u32;
        let got = whole.min(want);
        (
            got,
            Bucket {
                micro_tokens: bucket.micro_tokens - got as i64 * MICRO,
                at: bucket.at,
            },
        )
    }

    /// Gives back `unused` tokens taken but not used (a claim that found
    /// fewer tasks than it took tokens for), up to the burst.
    pub fn give_back(&self, bucket: Bucket, unused: u32) -> Bucket {
        Bucket {
            micro_tokens: (bucket.micro_tokens + unused as i64 * MICRO)
                .min(self.burst as i64 * MICRO),
            at: bucket.at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000;

    #[test]
    fn a_full_bucket_gives_a_burst_then_refills_at_the_rate() {
        let limit = RateLimit::checked(10, SECOND, Some(5)).unwrap();
        let b = limit.full(0);
        let (got, b) = limit.take(b, 0, 100);
        assert_eq!(got, 5, "the burst");
        let (got, b) = limit.take(b, 0, 1);
        assert_eq!(got, 0, "empty: no waiting");
        let (got, b) = limit.take(b, SECOND / 10, 100);
        assert_eq!(got, 1, "one token per 100 ms");
        let (got, _) = limit.take(b, SECOND / 10 + 10 * SECOND, 100);
        assert_eq!(got, 5, "never more than the burst");
    }

    #[test]
    fn fractions_of_a_token_add_up() {
        // 3 per second: a token every 333,333.3 µs; the bucket never
        // fills (a full one drops what it would gain).
        let limit = RateLimit::checked(3, SECOND, Some(3)).unwrap();
        let (_, mut b) = limit.take(limit.full(0), 0, 3);
        let mut started = 0;
        for step in 1..=300 {
            let (got, next) = limit.take(b, step * SECOND / 100, 1);
            started += got;
            b = next;
        }
        assert_eq!(started, 9, "three a second over three seconds");
    }

    #[test]
    fn over_any_window_at_most_one_burst_more_than_the_rate() {
        let limit = RateLimit::checked(50, SECOND, Some(10)).unwrap();
        let mut b = limit.full(0);
        let mut starts = Vec::new();
        for step in 0..2_000 {
            let now = step * 1_000; // every ms, a claim wanting 3
            let (got, next) = limit.take(b, now, 3);
            b = next;
            starts.extend(std::iter::repeat_n(now, got as usize));
        }
        for window in [SECOND / 10, SECOND / 2, SECOND] {
            for (i, &from) in starts.iter().enumerate() {
                let within = starts[i..]
                    .iter()
                    .take_while(|&&t| t < from + window)
                    .count() as i64;
                let allowed = 10 + 50 * window / SECOND + 1;
                assert!(
                    within <= allowed,
                    "{within} starts in {window} µs from {from}"
                );
            }
        }
    }

    #[test]
    fn a_clock_behind_the_bucket_refills_nothing() {
        let limit = RateLimit::checked(10, SECOND, None).unwrap();
        let (_, b) = limit.take(limit.full(5 * SECOND), 5 * SECOND, 10);
        let (got, b2) = limit.take(b, 4 * SECOND, 10);
        assert_eq!(got, 0);
        assert_eq!(b2.at, 5 * SECOND);
    }

    #[test]
    fn unused_tokens_go_back_up_to_the_burst() {
        let limit = RateLimit::checked(10, SECOND, Some(4)).unwrap();
        let (got, b) = limit.take(limit.full(0), 0, 4);
        assert_eq!(got, 4);
        let b = limit.give_back(b, 3);
        assert_eq!(limit.take(b, 0, 10).0, 3);
        assert_eq!(limit.give_back(limit.full(0), 5).micro_tokens, 4 * MICRO);
    }

    #[test]
    fn settings_are_checked_naming_their_argument() {
        for (rate, per, burst, arg) in [
            (0, SECOND, None, "rate_limit"),
            (1, 0, None, "rate_interval"),
            (1, SECOND, Some(0), "rate_burst"),
        ] {
            match RateLimit::checked(rate, per, burst) {
                Err(QueueError::InvalidArgument { arg: got, .. }) => assert_eq!(got, arg),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(RateLimit::checked(7, SECOND, None).unwrap().burst, 7);
    }
}
