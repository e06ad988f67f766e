//! The latest `queue_overview()` of every queue, shared by the overview
//! page, /metrics and the sampler (a queue page reads its one queue live).
//!
//! One overview reads a bounded range of every state of every queue: about
//! 70 ms for 100 queues holding 1,000,000 tasks. Read once per request it
//! would be most of every page's time, and N open dashboards plus a
//! scraper would multiply the database's load. So a snapshot younger than
//! `--max-age` is served as it is; an older one (while younger than
//! [`STALE_LIMIT`] times that) is still served while one background read
//! replaces it; past that, or with `--max-age 0`, the request reads it
//! itself (one read at a time: concurrent requests wait for it). Actions
//! of this server drop the snapshot, so their effect shows at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::db::Db;

use super::pages::PageError;
use super::queries::{self, Overview};

/// How many times `--max-age` a snapshot may still be served while it is
/// being replaced.
pub const STALE_LIMIT: u32 = 10;

pub struct OverviewCache {
    db: Db,
    exact_limit: i32,
    max_age: Duration,
    latest: Mutex<Option<(Instant, Arc<Vec<Overview>>)>>,
    refreshing: AtomicBool,
    /// Held while a request reads the overview itself.
    reading: tokio::sync::Mutex<()>,
}

/// What a snapshot of `age` is good for.
#[derive(Debug, PartialEq, Eq)]
pub enum Freshness {
    Fresh,
    /// Serve it, and replace it in the background.
    Stale,
    /// Read a new one first.
    Expired,
}

pub fn freshness(age: Duration, max_age: Duration) -> Freshness {
    if max_age.is_zero() || age > max_age * STALE_LIMIT {
        Freshness::Expired
    } else if age > max_age {
        Freshness::Stale
    } else {
        Freshness::Fresh
    }
}

impl OverviewCache {
    pub fn new(db: Db, exact_limit: i32, max_age: Duration) -> Arc<OverviewCache> {
        Arc::new(OverviewCache {
            db,
            exact_limit,
            max_age,
            latest: Mutex::new(None),
            refreshing: AtomicBool::new(false),
            reading: tokio::sync::Mutex::new(()),
        })
    }

    fn current(&self) -> Option<(Instant, Arc<Vec<Overview>>)> {
        self.latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Keeps `rows` as the latest snapshot (the sampler's reads too).
    pub fn store(&self, rows: Vec<Overview>) -> Arc<Vec<Overview>> {
        let rows = Arc::new(rows);
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), rows.clone()));
        rows
    }

    /// Forgets the snapshot: the next request reads a new one.
    pub fn invalidate(&self) {
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Reads the overview now and keeps it.
    pub async fn read(&self) -> Result<Arc<Vec<Overview>>, PageError> {
        let c = self.db.conn().await?;
        let rows = queries::overview(&c, self.exact_limit).await?;
        Ok(self.store(rows))
    }

    fn refresh_in_background(self: &Arc<Self>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let _ = me.read().await;
            me.refreshing.store(false, Ordering::Release);
        });
    }

    /// The overview of every queue this role may read, by name.
    pub async fn get(self: &Arc<Self>) -> Result<Arc<Vec<Overview>>, PageError> {
        if let Some((at, rows)) = self.current() {
            match freshness(at.elapsed(), self.max_age) {
                Freshness::Fresh => return Ok(rows),
                Freshness::Stale => {
                    self.refresh_in_background();
                    return Ok(rows);
                }
                Freshness::Expired => {}
            }
        }
        let _one_at_a_time = self.reading.lock().await;
        // Another request may have read it while this one waited.
        if let Some((at, rows)) = self.current() {
            if !self.max_age.is_zero() && freshness(at.elapsed(), self.max_age) == Freshness::Fresh
            {
                return Ok(rows);
            }
        }
        self.read().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_age_from_fresh_to_stale_to_expired() {
        let s = Duration::from_secs;
        assert_eq!(freshness(s(1), s(2)), Freshness::Fresh);
        assert_eq!(freshness(s(3), s(2)), Freshness::Stale);
        assert_eq!(freshness(s(20), s(2)), Freshness::Stale);
        assert_eq!(freshness(s(21), s(2)), Freshness::Expired);
        assert_eq!(
            freshness(Duration::ZERO, Duration::ZERO),
            Freshness::Expired,
            "0: always read"
        );
    }
}
