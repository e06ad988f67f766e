//! Whether a reap pass left due work behind that its budget did not
//! cover (retention beyond its deletions, schedules beyond its fire
//! times): the background reaper in this backend then passes again at
//! once, as it does when timers or leases used a whole budget
//! (queue_reap's columns don't say).

use std::cell::Cell;

thread_local! {
    static BEHIND: Cell<bool> = const { Cell::new(false) };
}

/// Notes that due work was left for the next pass.
pub(super) fn note() {
    BEHIND.with(|behind| behind.set(true));
}

/// Whether a pass since the last call left due work behind (and forgets it).
pub fn take() -> bool {
    BEHIND.with(|behind| behind.replace(false))
}
