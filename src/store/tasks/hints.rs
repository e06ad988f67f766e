//! A backend's scan hints per queue (where its last claim stopped, and up
//! to when due work was checked), whether resuming after them pays, and the
//! cheap check for due work a claim runs once per hint lifetime.

use std::cell::RefCell;
use std::collections::HashMap;

use aedb_queue_core::scan_hint::{resume_pays, ScanHints};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::spi::SpiClient;

use super::reap::reap_in;
use crate::errors::{internal, Result};
use crate::guc;
use crate::store::{execute, Statement, TEXT, TIMESTAMPTZ};

pub(super) type Hints = ScanHints<TimestampWithTimeZone>;

/// Queues whose hints one backend keeps; past this many, it starts over.
pub(super) const HINTED_QUEUES_MAX: usize = 1024;

thread_local! {
    /// This backend's scan hints, per queue.
    pub(super) static HINTS: RefCell<HashMap<String, Hints>> = RefCell::new(HashMap::new());
}

/// Whether the queue has a due timer or an expired lease from $2 on, so a
/// claim can skip the heavier REAP when there is nothing to do, and the time
/// of the check. Each side reads one range of its index in index order: an
/// `EXISTS` may be planned as a table scan that stops at the first match, and
/// with many future timers and no match that scan reads the whole table. The
/// upper bound keeps the in-flight scan off the entries of completed tasks,
/// whose deadlines lie in the future.
pub(super) static REAP_NEEDED: Statement = Statement {
    sql: "SELECT (SELECT not_before FROM aedb_queue.task
                  WHERE queue = $1 AND state = 'scheduled'
                    AND not_before >= $2 AND not_before <= $3
                  ORDER BY not_before LIMIT 1) IS NOT NULL
              OR (SELECT lease_deadline FROM aedb_queue.task
                  WHERE queue = $1 AND state = 'in_flight' AND lease_deadline IS NOT NULL
                    AND lease_deadline >= $2 AND lease_deadline < $3
                  ORDER BY lease_deadline LIMIT 1) IS NOT NULL,
             $3",
    args: &[TEXT, TIMESTAMPTZ],
    clock: true,
};

/// Whether dead index entries pile up at the head of the ready index: the
/// oldest snapshot lags, or many dead rows await VACUUM (see `horizon`).
pub(super) fn resuming_pays() -> bool {
    let lag = guc::claim_resume_lag();
    if lag == 0 {
        return true;
    }
    crate::catalog::relation_oid(c"task").is_some_and(|relid| {
        resume_pays(
            lag,
            guc::claim_resume_dead_rows(),
            || crate::horizon::xids_behind(relid),
            || crate::horizon::dead_rows_recent(relid),
        )
    })
}

/// Runs REAP when the cheap check finds a due timer or an expired lease past
/// the hint; moves the hint when everything due was handled. True when it
/// made any task ready.
pub(super) fn reap_if_due(
    client: &mut SpiClient<'_>,
    queue: &str,
    limit: i32,
    hints: &mut Hints,
) -> Result<bool> {
    let due_after = hints
        .due_after()
        .unwrap_or_else(TimestampWithTimeZone::negative_infinity);
    let (needed, checked_at) = execute(client, &REAP_NEEDED, &[queue.into(), due_after.into()])?
        .first(|row| Ok((row.get::<bool>(1)? == Some(true), row.required(2)?)))?
        .ok_or_else(|| internal("REAP_NEEDED returned no row"))?;
    let checked_at: TimestampWithTimeZone = checked_at;
    if !needed {
        hints.reaped(checked_at, true, false);
        return Ok(false);
    }
    let reaped = reap_in(client, queue, limit, limit, due_after)?;
    let cut_short =
        reaped.promoted >= limit as i64 || reaped.reclaimed + reaped.dead_lettered >= limit as i64;
    let moved = reaped.promoted + reaped.reclaimed > 0;
    hints.reaped(checked_at, !cut_short, moved);
    Ok(moved)
}
