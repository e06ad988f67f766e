//! The reaper of one database: `queue_reap()` every
//! `aedb_queue.reaper_interval`, and at a schedule's next fire time when
//! that comes sooner, in a transaction of its own, as the bootstrap
//! superuser (the function itself runs its statements as the extension's
//! owner).

use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::Spi;

use super::{in_transaction, reload_if_asked, REAPER_TYPE};
use crate::guc;

/// Passes in a row without sleeping while each used a whole budget.
const MAX_PASSES_IN_A_ROW: usize = 10;
/// The budget of one pass, queue_reap's default.
const MAX_PER_PASS: i32 = 1000;

/// What a pass found.
enum Pass {
    /// Work done; `more` when a budget was used up; `next_fire` the time
    /// until the earliest schedule's next fire time, if any.
    Reaped {
        more: bool,
        next_fire: Option<Duration>,
    },
    /// Someone waits to have the database alone: the reaper leaves (the
    /// launcher starts another on its next look, if the database is left).
    Leave,
    /// The extension is not installed here: the reaper leaves, and the
    /// launcher looks again only after a while.
    NotInstalled,
}

#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn aedb_queue_reaper_main(arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let db = pg_sys::Oid::from(arg.value() as u32);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(db), None);
    in_transaction("setting up the reaper", || {
        Spi::run(&format!(
            "SELECT pg_catalog.set_config('application_name', '{REAPER_TYPE}', false),
                    pg_catalog.set_config('search_path', 'pg_catalog', false)"
        ))
    });
    let mut wait = Duration::ZERO;
    while BackgroundWorker::wait_latch(Some(wait)) {
        reload_if_asked();
        let Some(every) = guc::reaper_interval() else {
            return;
        };
        // Every interval, and at a schedule's fire time if that comes first.
        wait = every;
        for _ in 0..MAX_PASSES_IN_A_ROW {
            match in_transaction("reaping", pass) {
                Some(Pass::Leave) => return,
                Some(Pass::NotInstalled) => return super::note_left_uninstalled(db),
                Some(Pass::Reaped { more, next_fire }) => {
                    wait = next_fire.map_or(every, |next| next.min(every));
                    if !more {
                        break;
                    }
                }
                None => break,
            }
        }
    }
}

fn pass() -> Pass {
    if wanted_alone() {
        return Pass::Leave;
    }
    if !installed() {
        return Pass::NotInstalled;
    }
    let budget_used = Spi::get_one_with_args::<bool>(
        "SELECT r.promoted >= $1 OR r.reclaimed + r.dead_lettered >= $1
                OR coalesce((pg_catalog.to_jsonb(r) ->> 'fired')::bigint, 0) >= $1
         FROM aedb_queue.queue_reap(NULL, $1::integer) r",
        &[(MAX_PER_PASS as i64).into()],
    );
    // Taken whatever the pass returned, so a failed pass leaves no flag.
    let behind = crate::api::take_behind();
    Pass::Reaped {
        more: budget_used.ok().flatten() == Some(true) || behind,
        next_fire: next_fire(),
    }
}

/// Until the earliest fire time to come of the schedules not paused (none
/// on schemas before 0.5.0, or without schedules). One already due was
/// left by the pass (another transaction holds it, or the pass's budget
/// ran out, which passes again at once): waking for it every millisecond
/// would spin.
fn next_fire() -> Option<Duration> {
    let has_schedules =
        Spi::get_one::<bool>("SELECT pg_catalog.to_regclass('aedb_queue.schedule') IS NOT NULL");
    if has_schedules.ok().flatten() != Some(true) {
        return None;
    }
    let seconds = Spi::get_one::<f64>(
        "SELECT extract(epoch FROM min(next_fire_at) - pg_catalog.clock_timestamp())::float8
         FROM aedb_queue.schedule
         WHERE NOT paused AND next_fire_at > pg_catalog.clock_timestamp()",
    );
    // A millisecond late rather than early: the latch counts whole ones.
    seconds
        .ok()
        .flatten()
        .map(|s| Duration::from_secs_f64(s.clamp(0.0, 3_600.0)) + Duration::from_millis(1))
}

fn installed() -> bool {
    Spi::get_one::<bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'aedb_queue')",
    )
    .ok()
    .flatten()
        == Some(true)
}

/// Whether a session holds or awaits the exclusive lock on this database
/// (DROP DATABASE, ALTER DATABASE RENAME or SET TABLESPACE): they wait
/// only a few seconds for other sessions to leave, then fail.
fn wanted_alone() -> bool {
    Spi::get_one::<bool>(
        "SELECT EXISTS (
             SELECT 1 FROM pg_catalog.pg_locks l
             WHERE l.locktype = 'object' AND l.database = 0
               AND l.classid = 'pg_catalog.pg_database'::pg_catalog.regclass
               AND l.objid = (SELECT d.oid FROM pg_catalog.pg_database d
                              WHERE d.datname = pg_catalog.current_database())
               AND l.mode = 'AccessExclusiveLock')",
    )
    .ok()
    .flatten()
        == Some(true)
}
