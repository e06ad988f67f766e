//! Waits between retries after a connection failure: 50 ms doubling to 5 s.

use std::time::Duration;

pub(crate) struct Backoff {
    next: Duration,
}

const FIRST: Duration = Duration::from_millis(50);
const MAX: Duration = Duration::from_secs(5);

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: FIRST }
    }
}

impl Backoff {
    pub fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(MAX);
        now
    }

    pub fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::default();
        let waits: Vec<u128> = (0..9).map(|_| b.next().as_millis()).collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        b.reset();
        assert_eq!(b.next(), FIRST);
    }
}
