//! The in-memory history behind the charts: every `--sample-every` seconds
//! one `queue_overview()` and one `queue_counters()`, kept per queue in a
//! ring buffer of `--history` minutes.
//!
//! Memory is bounded twice: points per queue (the ring's capacity, at most
//! [`MAX_POINTS`]) and queues (the first `--max-queues` by name; the rest
//! are not kept). Counters are monotonic since the database server started
//! and reset when it restarts, so rates are deltas between samples, clamped
//! at a reset (the new value is what happened since).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::queries::{self, Counter, Counts, Overview, COUNTERS_UNAVAILABLE};
use super::{Shared, View};

/// The most points kept per queue, whatever --history and --sample-every
/// ask for (about 100 bytes each).
pub const MAX_POINTS: usize = 2_000;

/// Depth by state at one sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Depth {
    pub ready: i64,
    pub in_flight: i64,
    pub scheduled: i64,
    pub dead: i64,
}

/// One sample of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Point {
    /// Unix time in seconds.
    pub at: f64,
    pub depth: Depth,
    /// None when the counters could not be read at that sample.
    pub counts: Option<Counts>,
    /// The counters restarted before this sample (their `since` moved).
    pub reset: bool,
}

/// Whether `queue_counters()` answered at the last sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountersState {
    /// No sample has run yet.
    Unknown,
    Available,
    /// SQLSTATE 55000: the library is not in shared_preload_libraries.
    Unavailable(String),
}

#[derive(Debug)]
pub struct History {
    capacity: usize,
    max_queues: usize,
    queues: BTreeMap<String, VecDeque<Point>>,
    /// The counters' `since` per queue at the last sample (reset detection).
    since: BTreeMap<String, Option<String>>,
    pub counters: CountersState,
    /// The last sample's failure, if it failed.
    pub last_error: Option<String>,
}

/// Points per queue for `history_minutes` at one every `every_secs`.
pub fn capacity(history_minutes: u32, every_secs: f64) -> usize {
    let n = (f64::from(history_minutes) * 60.0 / every_secs).ceil() as usize + 1;
    n.clamp(2, MAX_POINTS)
}

impl History {
    pub fn new(capacity: usize, max_queues: usize) -> History {
        History {
            capacity: capacity.max(2),
            max_queues,
            queues: BTreeMap::new(),
            since: BTreeMap::new(),
            counters: CountersState::Unknown,
            last_error: None,
        }
    }

    /// Adds one sample taken at `at`. `overview` is by queue name; queues
    /// past `max_queues`, and queues gone from it, leave the history.
    pub fn record(&mut self, at: f64, overview: &[Overview], counters: Option<&[Counter]>) {
        let kept: Vec<&Overview> = overview.iter().take(self.max_queues).collect();
        self.queues
            .retain(|q, _| kept.iter().any(|o| &o.queue == q));
        self.since.retain(|q, _| kept.iter().any(|o| &o.queue == q));
        for o in kept {
            let counter =
                counters.and_then(|cs| cs.iter().find(|c| c.queue.as_deref() == Some(&o.queue)));
            // A readable queue without a counters row has counted nothing yet.
            let (counts, since) = match (counters, counter) {
                (None, _) => (None, None),
                (Some(_), None) => (Some(Counts::default()), None),
                (Some(_), Some(c)) => (Some(c.counts), c.since.clone()),
            };
            let reset = counts.is_some()
                && since.is_some()
                && matches!(self.since.get(&o.queue), Some(Some(prev)) if Some(prev) != since.as_ref());
            if counts.is_some() {
                self.since.insert(o.queue.clone(), since);
            }
            let ring = self.queues.entry(o.queue.clone()).or_default();
            if ring.len() == self.capacity {
                ring.pop_front();
            }
            ring.push_back(Point {
                at,
                depth: Depth {
                    ready: o.ready,
                    in_flight: o.in_flight,
                    scheduled: o.scheduled,
                    dead: o.dead,
                },
                counts,
                reset,
            });
        }
    }

    /// The queue's points, oldest first (empty when it is not kept).
    pub fn points(&self, queue: &str) -> Vec<Point> {
        self.queues
            .get(queue)
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default()
    }

    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }
}

/// What happened between two samples, per counter. A counter that went
/// down, or a reset between them, means the counters restarted: the new
/// value is all that happened since, so that is the delta (never negative).
pub fn delta(prev: &Point, cur: &Point) -> Option<Counts> {
    let (p, c) = (prev.counts?, cur.counts?);
    let d = |a: i64, b: i64| if cur.reset || b < a { b } else { b - a };
    Some(Counts {
        enqueued: d(p.enqueued, c.enqueued),
        completed: d(p.completed, c.completed),
        failed: d(p.failed, c.failed),
        dead_lettered: d(p.dead_lettered, c.dead_lettered),
        reclaimed: d(p.reclaimed, c.reclaimed),
        cancelled: d(p.cancelled, c.cancelled),
    })
}

/// The delta ending at each point (None for the first point and around
/// samples without counters), aligned with `points`.
pub fn deltas(points: &[Point]) -> Vec<Option<Counts>> {
    let mut out = Vec::with_capacity(points.len());
    out.push(None);
    out.extend(points.windows(2).map(|w| delta(&w[0], &w[1])));
    out.truncate(points.len());
    out
}

/// Counts over the last `window_secs` (at least the last interval) and
/// the seconds they cover; intervals without counters on both ends are
/// left out. None when no interval has counters.
pub fn recent(points: &[Point], window_secs: f64) -> Option<(Counts, f64)> {
    let last = points.last()?;
    let prev = points.get(points.len().checked_sub(2)?)?;
    let window = window_secs.max(last.at - prev.at);
    let start = points
        .iter()
        .position(|p| last.at - p.at <= window + 1e-9)?;
    let mut total = Counts::default();
    let mut secs = 0.0;
    let mut any = false;
    for w in points[start..].windows(2) {
        if let Some(d) = delta(&w[0], &w[1]) {
            total.add(&d);
            secs += w[1].at - w[0].at;
            any = true;
        }
    }
    any.then_some((total, secs))
}

/// Completed tasks per minute over the last `window_secs`.
pub fn completed_per_minute(points: &[Point], window_secs: f64) -> Option<f64> {
    let (c, secs) = recent(points, window_secs)?;
    (secs > 0.0).then(|| c.completed as f64 * 60.0 / secs)
}

/// failed / (completed + failed) over the last `window_secs`; None when
/// nothing was settled.
pub fn failure_rate(points: &[Point], window_secs: f64) -> Option<f64> {
    let (c, _) = recent(points, window_secs)?;
    let settled = c.completed + c.failed;
    (settled > 0).then(|| c.failed as f64 / settled as f64)
}

pub fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// One sample into `history`; a failure is kept in `last_error` (the
/// previous points stay).
/// The overview read here is kept as the latest snapshot for the pages.
/// Runs as the view's role: each role's history holds only its queues.
pub async fn sample_once(view: &View) {
    let result = async {
        let overview = view.overview.read().await.map_err(|e| e.message)?;
        let c = view.db.conn().await.map_err(|e| e.message)?;
        let counters = match queries::counters(&c).await {
            Ok(rows) => Ok(rows),
            Err(e) if super::sqlstate(&e).as_deref() == Some(COUNTERS_UNAVAILABLE) => {
                Err(super::describe_db(&e))
            }
            Err(e) => return Err(super::describe_db(&e)),
        };
        Ok::<_, String>((overview, counters))
    }
    .await;
    let mut h = view.history.lock().unwrap_or_else(|p| p.into_inner());
    match result {
        Ok((overview, counters)) => {
            h.record(now_secs(), &overview, counters.as_deref().ok());
            h.counters = match counters {
                Ok(_) => CountersState::Available,
                Err(msg) => CountersState::Unavailable(msg),
            };
            h.last_error = None;
        }
        Err(msg) => h.last_error = Some(msg),
    }
}

/// Samples every view every `every` until the process ends.
pub fn spawn(app: Shared, every: Duration) {
    tokio::spawn(async move {
        // The first sample was taken before serving (`sample_once`): the
        // next one is due a period later, not at once (an immediate tick
        // replaced the snapshot a moment after the first page had read it).
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for view in app.views.values() {
                sample_once(view).await;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ov(queue: &str, ready: i64) -> Overview {
        Overview {
            queue: queue.into(),
            ready,
            ..Overview::default()
        }
    }

    fn counter(queue: &str, completed: i64, failed: i64, since: &str) -> Counter {
        Counter {
            queue: Some(queue.into()),
            counts: Counts {
                completed,
                failed,
                ..Counts::default()
            },
            since: Some(since.into()),
        }
    }

    #[test]
    fn the_ring_keeps_its_capacity_and_the_newest_points() {
        let mut h = History::new(3, 10);
        for i in 0..5 {
            h.record(i as f64, &[ov("a", i)], None);
        }
        let pts = h.points("a");
        assert_eq!(pts.len(), 3);
        assert_eq!(
            pts.iter().map(|p| p.depth.ready).collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
        assert_eq!(capacity(60, 10.0), 361);
        assert_eq!(capacity(1440, 0.5), MAX_POINTS);
    }

    #[test]
    fn queues_past_the_cap_and_queues_gone_are_not_kept() {
        let mut h = History::new(10, 2);
        h.record(0.0, &[ov("a", 1), ov("b", 1), ov("c", 1)], None);
        assert_eq!(h.queue_count(), 2);
        assert!(h.points("c").is_empty());
        h.record(1.0, &[ov("b", 1)], None);
        assert!(h.points("a").is_empty());
        assert_eq!(h.points("b").len(), 2);
    }

    #[test]
    fn rates_are_deltas_between_samples() {
        let mut h = History::new(100, 10);
        for (i, done) in [0, 10, 30, 60].iter().enumerate() {
            h.record(
                i as f64 * 10.0,
                &[ov("a", 0)],
                Some(&[counter("a", *done, 0, "t0")]),
            );
        }
        let pts = h.points("a");
        let d: Vec<Option<i64>> = deltas(&pts)
            .iter()
            .map(|d| d.map(|c| c.completed))
            .collect();
        assert_eq!(d, vec![None, Some(10), Some(20), Some(30)]);
        // 60 completed over 30 s: 120 a minute.
        assert_eq!(completed_per_minute(&pts, 60.0), Some(120.0));
        // Only the last 10 s window: 30 in 10 s.
        assert_eq!(completed_per_minute(&pts, 10.0), Some(180.0));
        assert_eq!(completed_per_minute(&pts[..1], 60.0), None);
    }

    #[test]
    fn a_reset_is_clamped_not_negative() {
        let mut h = History::new(100, 10);
        h.record(0.0, &[ov("a", 0)], Some(&[counter("a", 500, 0, "t0")]));
        // The server restarted: the counter starts again from 0.
        h.record(10.0, &[ov("a", 0)], Some(&[counter("a", 7, 0, "t1")]));
        // And a restart whose new count already passed the old one.
        h.record(20.0, &[ov("a", 0)], Some(&[counter("a", 900, 0, "t2")]));
        h.record(30.0, &[ov("a", 0)], Some(&[counter("a", 910, 0, "t2")]));
        let pts = h.points("a");
        assert!(pts[1].reset && pts[2].reset && !pts[3].reset);
        let d: Vec<Option<i64>> = deltas(&pts)
            .iter()
            .map(|d| d.map(|c| c.completed))
            .collect();
        assert_eq!(d, vec![None, Some(7), Some(900), Some(10)]);
        // A counter that went down without a new `since` is a reset too.
        let a = Point {
            counts: Some(Counts {
                failed: 9,
                ..Counts::default()
            }),
            ..Point::default()
        };
        let b = Point {
            counts: Some(Counts {
                failed: 2,
                ..Counts::default()
            }),
            ..Point::default()
        };
        assert_eq!(delta(&a, &b).unwrap().failed, 2);
    }

    #[test]
    fn failure_rate_is_failed_over_settled() {
        let mut h = History::new(100, 10);
        h.record(0.0, &[ov("a", 0)], Some(&[counter("a", 0, 0, "t")]));
        h.record(10.0, &[ov("a", 0)], Some(&[counter("a", 3, 1, "t")]));
        assert_eq!(failure_rate(&h.points("a"), 60.0), Some(0.25));
        h.record(20.0, &[ov("b", 0)], Some(&[]));
        assert_eq!(failure_rate(&h.points("b"), 60.0), None);
    }

    #[test]
    fn samples_without_counters_leave_gaps() {
        let mut h = History::new(100, 10);
        h.record(0.0, &[ov("a", 0)], Some(&[counter("a", 1, 0, "t")]));
        h.record(10.0, &[ov("a", 0)], None);
        h.record(20.0, &[ov("a", 0)], Some(&[counter("a", 4, 0, "t")]));
        assert_eq!(
            deltas(&h.points("a"))
                .iter()
                .filter(|d| d.is_some())
                .count(),
            0
        );
        assert_eq!(completed_per_minute(&h.points("a"), 60.0), None);
    }
}
