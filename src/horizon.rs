//! How far the cluster's oldest snapshot lags behind new transactions.
//!
//! While a snapshot older than a task's claim is alive, VACUUM (and index
//! scans, which mark dead entries as they pass) cannot remove the ready
//! index entry the claim left behind. A claim that reads from the head then
//! walks every such entry; one that resumes after its last position (see
//! `aedb_queue_core::scan_hint`) does not, but its statement costs more.
//! The lag, in transaction ids, says which of the two is cheaper now; so
//! does the count of dead rows awaiting VACUUM, because entries a scan has
//! marked dead stay in the index pages, and a scan still steps over them.

use std::cell::Cell;
use std::time::{Duration, Instant};

use pgrx::pg_sys;

/// Transactions started since the oldest one whose snapshot still keeps
/// dead rows of `relid` from being removed (0 when `relid` is unknown).
pub fn xids_behind(relid: pg_sys::Oid) -> u32 {
    // SAFETY: a relcache reference held only for the call; both functions
    // take ProcArrayLock / XidGenLock themselves.
    unsafe {
        let rel = pg_sys::RelationIdGetRelation(relid);
        if rel.is_null() {
            return 0;
        }
        let oldest = pg_sys::GetOldestNonRemovableTransactionId(rel);
        pg_sys::RelationClose(rel);
        let next = pg_sys::ReadNextFullTransactionId().value as u32;
        // Transaction ids wrap around modulo 2^32; the difference does too.
        next.wrapping_sub(oldest.into_inner())
    }
}

thread_local! {
    /// The last `dead_rows` read: when, of which table, how many.
    static DEAD_ROWS: Cell<Option<(Instant, pg_sys::Oid, i64)>> = const { Cell::new(None) };
}

/// `dead_rows`, read at most once a second per backend: a read costs about
/// 26,000 instructions (7% of a claim), and backends send their counts to
/// the statistics only about once a second anyway.
pub fn dead_rows_recent(relid: pg_sys::Oid) -> i64 {
    let now = Instant::now();
    DEAD_ROWS.with(|last| match last.get() {
        Some((at, rel, n)) if rel == relid && now.duration_since(at) < Duration::from_secs(1) => n,
        _ => {
            let n = dead_rows(relid);
            last.set(Some((now, relid, n)));
            n
        }
    })
}

/// Dead rows of `relid` since its last vacuum, as the cumulative statistics
/// count them (0 when unknown). Under `stats_fetch_consistency = snapshot`
/// a fetch would copy the statistics of every table, so it is not read.
fn dead_rows(relid: pg_sys::Oid) -> i64 {
    // SAFETY: the entry is a copy in the statistics' transaction-lifetime
    // cache (or NULL), read at once.
    unsafe {
        if pg_sys::pgstat_fetch_consistency
            == pg_sys::PgStat_FetchConsistency::PGSTAT_FETCH_CONSISTENCY_SNAPSHOT as i32
        {
            return 0;
        }
        let entry = pg_sys::pgstat_fetch_stat_tabentry(relid);
        if entry.is_null() {
            return 0;
        }
        #[cfg(feature = "pg15")]
        let dead = (*entry).n_dead_tuples;
        #[cfg(not(feature = "pg15"))]
        let dead = (*entry).dead_tuples;
        dead
    }
}
