//! The reaper never waits on a lock a tenant can hold: one
//! tenant's open transaction must not stop every tenant's timers, leases
//! and schedules. Everything a reap of every queue does runs with a short
//! `lock_timeout`; a queue or schedule whose lock is not granted in time is
//! skipped (`Failed::lock_wait`) and handled by a later pass.

use std::ffi::CStr;

use crate::guc::SetClause;

/// How long the reaper waits for any one lock. Long enough for the locks
/// a claim or settle holds for a moment, far too short to stall a pass.
const REAPER_LOCK_TIMEOUT: &CStr = c"10ms";

/// Runs `body` with `lock_timeout` at [`REAPER_LOCK_TIMEOUT`]; the caller's
/// setting is back afterwards, as after a function with a SET clause (and
/// at the abort of the (sub)transaction, should `body` raise).
pub(crate) fn with_short_lock_waits<T>(body: impl FnOnce() -> T) -> T {
    let _set = SetClause::enter(&[(c"lock_timeout", REAPER_LOCK_TIMEOUT)]);
    body()
}
