//! Server settings of the extension.

use std::ffi::{c_int, CStr};

use pgrx::pg_sys;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Largest payload, progress or result accepted, in bytes of the jsonb value.
/// Superuser-only, so an application cannot lift the limit an operator set.
pub static MAX_PAYLOAD_BYTES: GucSetting<i32> = GucSetting::<i32>::new(1024 * 1024);

/// How long, in seconds, the tasks of a finished workflow or DAG stay in
/// the archive with their results and steps (completed_task.in_workflow),
/// at least: a queue's longer keep_completed wins. Superuser-only: it is
/// the operator's retention, read by whoever reaps.
pub static KEEP_WORKFLOWS_S: GucSetting<i32> = GucSetting::<i32>::new(7 * 24 * 3600);

/// Whether claims promote due timers and reclaim expired leases of their
/// queue before serving. Off saves work on every claim when a frequent
/// `queue_reap()` (pg_cron) does that instead.
pub static INLINE_REAP: GucSetting<bool> = GucSetting::<bool>::new(true);

/// How long a backend's claims may resume their index scans where its last
/// claim on the queue stopped (see `aedb_queue_core::scan_hint`), in ms.
/// 0 makes every claim read its indexes from the head.
pub static CLAIM_RESCAN_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(1000);

/// Claims resume after their last position (`claim_rescan_interval`) only
/// while the oldest snapshot lags this many transactions behind (see
/// `horizon`); below it, the ready index's head holds few entries a scan
/// cannot skip and the plain claim is cheaper. 0: resume whenever possible.
pub static CLAIM_RESUME_LAG: GucSetting<i32> = GucSetting::<i32>::new(128);

/// Claims also resume while the task table holds this many dead rows
/// awaiting VACUUM (see `horizon`): entries scans have marked dead stay on
/// their index pages, and a claim from the head steps over each. 0: never
/// for this reason.
pub static CLAIM_RESUME_DEAD_ROWS: GucSetting<i32> =
    GucSetting::<i32>::new(aedb_queue_core::scan_hint::RESUME_DEAD_ROWS as i32);

/// How often the background-worker reaper runs `queue_reap()` in each
/// database, in ms; 0 stops it (only with `shared_preload_libraries`).
pub static REAPER_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(1000);

/// Whether completions send `NOTIFY aedb_queue_completed` (for `tail`,
/// dashboards). Off by default: a notifying commit takes NOTIFY's
/// cluster-wide lock.
pub static NOTIFY_COMPLETIONS: GucSetting<bool> = GucSetting::<bool>::new(false);

/// Whether calls count their events for `queue_counters()` (only with
/// `shared_preload_libraries`). Superuser-only: off is for measuring what
/// counting costs, not for hiding work from the operators' dashboards.
pub static TRACK_COUNTERS: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Longest cron pattern a schedule or preview accepts, in bytes. A
/// pattern's fields are short; the bound keeps parsing and storing one
/// small whatever a caller sends.
pub static MAX_CRON_PATTERN_BYTES: GucSetting<i32> = GucSetting::<i32>::new(256);

/// Most schedules one queue may have: each due schedule costs every
/// reaper pass, and a tenant's queues must not take them all.
pub static MAX_SCHEDULES_PER_QUEUE: GucSetting<i32> = GucSetting::<i32>::new(1000);

/// Whether the hot calls write the task table through its access method
/// (`store::am`) or run their statements (`store::direct` decides).
#[derive(Clone, Copy, Debug, PartialEq, Eq, pgrx::PostgresGucEnum)]
pub enum DirectWrites {
    /// Direct writes where the table allows them, except while an executor
    /// hook is installed (pg_stat_statements, pgaudit, auto_explain, ...):
    /// those hooks would not see the writes.
    #[name = c"auto"]
    Auto,
    /// Direct writes where the table allows them, hooks or not.
    #[name = c"on"]
    On,
    /// Every write runs its statement.
    #[name = c"off"]
    Off,
}

/// Superuser-only: `on` hides writes from executor hooks (audit), which an
/// application must not choose for itself.
pub static DIRECT_WRITES: GucSetting<DirectWrites> =
    GucSetting::<DirectWrites>::new(DirectWrites::Auto);

pub fn register() {
    GucRegistry::define_enum_guc(
        c"aedb_queue.direct_writes",
        c"Whether enqueue, claim and complete write the task table through its access method or run INSERT, UPDATE and DELETE statements.",
        c"auto: direct where the table allows it (docs/write-path.md) and no executor hook is installed; on: also under executor hooks, which then do not see the writes; off: always the statements (about half again as many instructions per claim, twice as many per enqueue).",
        &DIRECT_WRITES,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"aedb_queue.max_cron_pattern_bytes",
        c"Longest cron pattern queue_schedule_upsert and queue_cron_preview accept, in bytes.",
        c"Longer patterns are rejected with SQLSTATE 54000.",
        &MAX_CRON_PATTERN_BYTES,
        16,
        65_536,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"aedb_queue.max_schedules_per_queue",
        c"Most schedules one queue may have.",
        c"queue_schedule_upsert refuses a new schedule beyond it with SQLSTATE 54000; existing schedules may still be replaced.",
        &MAX_SCHEDULES_PER_QUEUE,
        1,
        1_000_000,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"aedb_queue.track_counters",
        c"Calls count enqueued, completed, failed, dead-lettered, reclaimed and cancelled tasks per queue in shared memory (queue_counters()).",
        c"Needs aedb_queue in shared_preload_libraries. Counts are added at commit; off stops counting in the sessions where it is off.",
        &TRACK_COUNTERS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"aedb_queue.reaper_interval",
        c"How often the background-worker reaper fires schedules, promotes timers, reclaims leases and applies retention in each database.",
        c"Runs only when aedb_queue is in shared_preload_libraries. Sub-second values are accepted (250ms). 0 stops the reaper; pg_cron or queue_reap() calls can reap instead.",
        &REAPER_INTERVAL_MS,
        0,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"aedb_queue.claim_resume_lag",
        c"Claims resume where this session's last claim stopped only while the oldest snapshot lags this many transactions behind.",
        c"A lagging snapshot keeps claimed tasks' index entries from being removed, and a claim from the head walks them. Below the lag the plain claim is cheaper. 0 resumes whenever a position is known.",
        &CLAIM_RESUME_LAG,
        0,
        i32::MAX,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"aedb_queue.claim_resume_dead_rows",
        c"Claims also resume where this session's last claim stopped while the task table holds this many dead rows awaiting VACUUM.",
        c"Index entries that scans have marked dead stay on their pages until VACUUM, and a claim from the head steps over each of them. 0 never resumes for this reason.",
        &CLAIM_RESUME_DEAD_ROWS,
        0,
        i32::MAX,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"aedb_queue.claim_rescan_interval",
        c"How long claims may resume their index scans where this session's last claim stopped.",
        c"Under a long-held snapshot, skips index entries of claimed and completed tasks that VACUUM cannot remove yet. A task that becomes due behind the resume point waits at most this long while the queue has other ready tasks. 0 reads from the head on every claim.",
        &CLAIM_RESCAN_INTERVAL_MS,
        0,
        3_600_000,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_bool_guc(
        c"aedb_queue.inline_reap",
        c"Claims promote due timers and reclaim expired leases of their queue first.",
        c"Turn off only when queue_reap() runs often (pg_cron): then due timers and expired leases wait for it.",
        &INLINE_REAP,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"aedb_queue.notify_completions",
        c"Completions send NOTIFY aedb_queue_completed with the queue, the tasks completed and the first task's id.",
        c"For live views of completions (aedb-queue tail). Set it where the workers run, e.g. ALTER DATABASE ... SET; each notifying commit takes NOTIFY's cluster-wide lock.",
        &NOTIFY_COMPLETIONS,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"aedb_queue.keep_workflows",
        c"How long the tasks of a finished workflow or DAG of dependencies stay readable, with their results and steps, after they completed.",
        c"Tasks that recorded a step or are linked by dependencies are archived on completion; queue_reap() deletes them (and then their steps) once completed longer than this and than the queue's keep_completed, and no task waiting for them is left. 0: as soon as nothing waits for them. Set it where queue_reap() runs (postgresql.conf, ALTER DATABASE ... SET).",
        &KEEP_WORKFLOWS_S,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"aedb_queue.max_payload_bytes",
        c"Largest jsonb payload, progress or result aedb_queue accepts, in bytes.",
        c"Measured on the uncompressed jsonb value. Larger values are rejected with SQLSTATE 54000.",
        &MAX_PAYLOAD_BYTES,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
}

pub fn direct_writes() -> DirectWrites {
    DIRECT_WRITES.get()
}

pub fn max_payload_bytes() -> usize {
    MAX_PAYLOAD_BYTES.get().max(1) as usize
}

/// `aedb_queue.keep_workflows`.
pub fn keep_workflows() -> pgrx::datum::Interval {
    crate::duration::interval(i64::from(KEEP_WORKFLOWS_S.get().max(0)) * 1_000_000)
}

pub fn inline_reap() -> bool {
    INLINE_REAP.get()
}

pub fn claim_rescan_interval() -> std::time::Duration {
    std::time::Duration::from_millis(CLAIM_RESCAN_INTERVAL_MS.get().max(0) as u64)
}

pub fn claim_resume_lag() -> u32 {
    CLAIM_RESUME_LAG.get().max(0) as u32
}

/// None: dead rows never make claims resume.
pub fn claim_resume_dead_rows() -> Option<i64> {
    let rows = CLAIM_RESUME_DEAD_ROWS.get();
    (rows > 0).then_some(i64::from(rows))
}

/// None when the reaper is off.
pub fn reaper_interval() -> Option<std::time::Duration> {
    let ms = REAPER_INTERVAL_MS.get();
    (ms > 0).then(|| std::time::Duration::from_millis(ms as u64))
}

pub fn notify_completions() -> bool {
    NOTIFY_COMPLETIONS.get()
}

pub fn track_counters() -> bool {
    TRACK_COUNTERS.get()
}

pub fn max_cron_pattern_bytes() -> usize {
    MAX_CRON_PATTERN_BYTES.get().max(1) as usize
}

pub fn max_schedules_per_queue() -> i64 {
    MAX_SCHEDULES_PER_QUEUE.get().max(1) as i64
}

/// A GUC nest level with the given settings, as fmgr opens one for a
/// function's `SET` clause; closed when dropped, or by the (sub)transaction
/// abort on error.
pub(crate) struct SetClause {
    nest_level: c_int,
}

impl SetClause {
    pub(crate) fn enter(settings: &[(&CStr, &CStr)]) -> Self {
        // SAFETY: what fmgr_security_definer does for a function's SET clause.
        unsafe {
            let nest_level = pg_sys::NewGUCNestLevel();
            for (name, value) in settings {
                pg_sys::set_config_option(
                    name.as_ptr(),
                    value.as_ptr(),
                    pg_sys::GucContext::PGC_USERSET,
                    pg_sys::GucSource::PGC_S_SESSION,
                    pg_sys::GucAction::GUC_ACTION_SAVE,
                    true,
                    0,
                    false,
                );
            }
            SetClause { nest_level }
        }
    }
}

impl Drop for SetClause {
    fn drop(&mut self) {
        // While unwinding, the abort restores them (and raising now would
        // abort the backend).
        if !std::thread::panicking() {
            // SAFETY: closes the nest level `enter` opened.
            unsafe { pg_sys::AtEOXact_GUC(true, self.nest_level) };
        }
    }
}
