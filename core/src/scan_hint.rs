//! Where a backend's next claim on a queue may start reading its indexes.
//!
//! While any snapshot in the cluster is old (a forgotten `BEGIN` in psql, a
//! long report), VACUUM cannot remove the index entries of tasks that were
//! claimed or completed since. They sit at the head of the ready and
//! in-flight indexes, so a scan from the head walks all of them and every
//! claim gets slower the longer the snapshot is held.
//!
//! So each backend remembers, per queue, how far its last scans got and
//! resumes there. A task can become due behind that point (a late-committing
//! enqueue, a lease reclaimed or a timer promoted by another backend, a
//! rolled-back claim), so the hints are dropped and the scans start from the
//! head again: when they are older than the rescan interval, when a resumed
//! claim comes up short, and after this backend reaped anything. A task
//! with a higher priority than the hint is never skipped. A task behind the
//! hint therefore waits at most one rescan interval, and only while the
//! queue has enough ready tasks past the hint to fill the claims.

use std::time::{Duration, Instant};

/// A position in the ready index, in service order: (priority, task_id).
/// Service order is priority descending, then task id ascending.
pub type ReadyPosition = (i64, i64);

/// One backend's hints for one queue. `T` is the server's timestamp type.
#[derive(Clone, Copy, Debug)]
pub struct ScanHints<T> {
    /// Ready tasks at or before this position were claimed by this backend.
    ready_after: Option<ReadyPosition>,
    /// No due timer or expired lease was left before this time.
    due_after: Option<T>,
    /// When these hints stop being trusted and the scans restart at the head.
    expires: Instant,
}

impl<T: Copy> ScanHints<T> {
    /// No hints: the first scans read from the head.
    pub fn new(now: Instant) -> Self {
        ScanHints {
            ready_after: None,
            due_after: None,
            expires: now,
        }
    }

    /// The hints to use for a claim at `now`; expired hints are dropped and
    /// the next `lifetime` starts. A zero `lifetime` disables hints, and a
    /// shorter one than before takes effect at once.
    pub fn refresh(&mut self, now: Instant, lifetime: Duration) {
        if now >= self.expires || self.expires > now + lifetime {
            *self = ScanHints {
                ready_after: None,
                due_after: None,
                expires: now + lifetime,
            };
        }
    }

    pub fn ready_after(&self) -> Option<ReadyPosition> {
        self.ready_after
    }

    pub fn due_after(&self) -> Option<T> {
        self.due_after
    }

    /// After looking for due timers and expired leases at `checked_at`:
    /// `cleared` when every one found was handled (the reap was not cut short
    /// by its limits), `moved` when any task became ready behind the ready hint.
    pub fn reaped(&mut self, checked_at: T, cleared: bool, moved: bool) {
        if cleared {
            self.due_after = Some(checked_at);
        }
        if moved {
            self.ready_after = None;
        }
    }

    /// After a claim: `last` is the last task handed out in service order.
    pub fn claimed(&mut self, last: Option<ReadyPosition>) {
        if last.is_some() {
            self.ready_after = last;
        }
    }

    /// A resumed claim came up short: tasks may wait behind the hint.
    pub fn came_up_short(&mut self) {
        self.ready_after = None;
    }
}

/// The default dead rows in the task table awaiting VACUUM past which
/// resuming pays even with no lagging snapshot. Entries a scan has marked
/// dead stay on their pages until VACUUM, and a scan from the head still
/// steps over each (about 23 instructions an entry), while resuming costs
/// about 25,000 more a claim (`bench/results/icount-parked`): about 1,000
/// entries break even, and a claim and its completion leave about two dead
/// rows for each entry left in the ready index.
pub const RESUME_DEAD_ROWS: i64 = 2_000;

/// Whether a claim resumes after its hint: always with `lag_setting` 0,
/// else while the oldest snapshot lags `lag_setting` transactions or more
/// (entries nobody may remove yet) or the table holds `dead_setting` dead
/// rows awaiting VACUUM (entries marked dead but still in the pages; None:
/// not a reason).
pub fn resume_pays(
    lag_setting: u32,
    dead_setting: Option<i64>,
    xids_behind: impl FnOnce() -> u32,
    dead_rows: impl FnOnce() -> i64,
) -> bool {
    lag_setting == 0
        || xids_behind() >= lag_setting
        || dead_setting.is_some_and(|setting| dead_rows() >= setting)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn resuming_pays_behind_a_lagging_snapshot_or_a_pile_awaiting_vacuum() {
        let unread = || -> u32 { panic!("the lag need not be read") };
        let dead = Some(RESUME_DEAD_ROWS);
        assert!(resume_pays(0, dead, unread, || panic!("nor the dead rows")));
        assert!(!resume_pays(128, dead, || 127, || RESUME_DEAD_ROWS - 1));
        assert!(resume_pays(128, dead, || 128, || panic!("the lag decides")));
        assert!(resume_pays(128, dead, || 0, || RESUME_DEAD_ROWS));
        assert!(!resume_pays(128, None, || 0, || panic!("dead rows are no reason")));
    }

    #[test]
    fn new_hints_read_from_the_head() {
        let mut h = ScanHints::<i64>::new(Instant::now());
        h.refresh(Instant::now(), SECOND);
        assert_eq!(h.ready_after(), None);
        assert_eq!(h.due_after(), None);
    }

    #[test]
    fn hints_last_until_the_rescan_interval() {
        let t0 = Instant::now();
        let mut h = ScanHints::<i64>::new(t0);
        h.refresh(t0, SECOND);
        h.reaped(100, true, false);
        h.claimed(Some((0, 42)));
        h.refresh(t0 + SECOND / 2, SECOND);
        assert_eq!((h.ready_after(), h.due_after()), (Some((0, 42)), Some(100)));
        h.refresh(t0 + SECOND, SECOND);
        assert_eq!((h.ready_after(), h.due_after()), (None, None));
    }

    #[test]
    fn zero_interval_disables_hints() {
        let t0 = Instant::now();
        let mut h = ScanHints::<i64>::new(t0);
        h.refresh(t0, Duration::ZERO);
        h.reaped(100, true, false);
        h.claimed(Some((0, 42)));
        h.refresh(t0, Duration::ZERO);
        assert_eq!((h.ready_after(), h.due_after()), (None, None));
    }

    #[test]
    fn a_shorter_interval_takes_effect_at_once() {
        let t0 = Instant::now();
        let mut h = ScanHints::<i64>::new(t0);
        h.refresh(t0, 3600 * SECOND);
        h.claimed(Some((0, 42)));
        h.refresh(t0 + SECOND, Duration::ZERO);
        assert_eq!(h.ready_after(), None);
    }

    #[test]
    fn an_unfinished_reap_keeps_the_old_due_hint() {
        let t0 = Instant::now();
        let mut h = ScanHints::<i64>::new(t0);
        h.refresh(t0, SECOND);
        h.reaped(100, true, false);
        h.reaped(200, false, true);
        assert_eq!(h.due_after(), Some(100));
    }

    #[test]
    fn reaping_anything_drops_the_ready_hint() {
        let t0 = Instant::now();
        let mut h = ScanHints::<i64>::new(t0);
        h.refresh(t0, SECOND);
        h.claimed(Some((0, 42)));
        h.reaped(100, true, true);
        assert_eq!(h.ready_after(), None);
        assert_eq!(h.due_after(), Some(100));
    }

    #[test]
    fn an_empty_claim_keeps_the_hint_and_a_short_one_drops_it() {
        let t0 = Instant::now();
        let mut h = ScanHints::<i64>::new(t0);
        h.refresh(t0, SECOND);
        h.claimed(Some((0, 42)));
        h.claimed(None);
        assert_eq!(h.ready_after(), Some((0, 42)));
        h.came_up_short();
        assert_eq!(h.ready_after(), None);
    }
}
