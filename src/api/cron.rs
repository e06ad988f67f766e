//! `schedule_reaper` / `unschedule_reaper`: one pg_cron job that runs
//! `queue_reap()` in this database (docs/pg_cron.md). The job spans every
//! queue, so only unconfined admins may change it.

use aedb_queue_core::error::quoted;
use aedb_queue_core::{reaper, QueueError};
use pgrx::datum::Interval;
use pgrx::prelude::*;
use pgrx::{pg_sys, IntoDatum};

use crate::duration::micros;
use crate::errors::{run, Result};
use crate::security;
use crate::store;

/// The interval as Postgres prints it (IntervalStyle applies), for errors.
fn shown(every: Option<Interval>) -> String {
    let Some(datum) = every.and_then(IntoDatum::into_datum) else {
        return "NULL".to_string();
    };
    // SAFETY: the interval type's output function, called on an interval.
    unsafe {
        let text = pg_sys::OidOutputFunctionCall(interval_output_function(), datum);
        std::ffi::CStr::from_ptr(text)
            .to_string_lossy()
            .into_owned()
    }
}

fn interval_output_function() -> pg_sys::Oid {
    let mut function = pg_sys::InvalidOid;
    let mut varlena = false;
    // SAFETY: a catalog lookup of a built-in type.
    unsafe { pg_sys::getTypeOutputInfo(pg_sys::INTERVALOID, &mut function, &mut varlena) };
    function
}

/// The cron expression for `every`, checked before pg_cron is looked for
/// (a bad argument is reported as such whether or not pg_cron is there).
fn cron_expression(every: Option<Interval>) -> Result<String> {
    let total = every.map(micros).unwrap_or(-1);
    reaper::cron_expression(total / 1_000_000, total % 1_000_000 == 0, &shown(every))
}

/// Raises 55000, saying what is missing, unless pg_cron can run a job here:
/// its library is preloaded (only then does cron.database_name exist and
/// the scheduler run), it serves this database, and its extension exists
/// in it (pg_cron keeps its jobs in that one database).
fn require_pg_cron() -> Result<()> {
    let state = store::pg_cron_state()?;
    let db = &state.database;
    let shown_db = quoted(db);
    let problem = match &state.cron_database {
        None => Some((
            format!("pg_cron is not installed in database {shown_db}: install pg_cron and add it to shared_preload_libraries"),
            format!("On Debian: apt-get install postgresql-15-cron; in postgresql.conf: shared_preload_libraries = 'pg_cron' and cron.database_name = '{db}'; restart PostgreSQL; then CREATE EXTENSION pg_cron in this database."),
        )),
        Some(cron_db) if cron_db != db => Some((
            format!("pg_cron serves database {} (cron.database_name), not {shown_db}", quoted(cron_db)),
            format!("Set cron.database_name = '{db}' in postgresql.conf, restart PostgreSQL, then CREATE EXTENSION pg_cron in this database."),
        )),
        Some(_) if !state.extension => Some((
            format!("pg_cron is not installed in database {shown_db}: run CREATE EXTENSION pg_cron"),
            "CREATE EXTENSION pg_cron".to_string(),
        )),
        Some(_) => None,
    };
    match problem {
        Some((message, hint)) => Err(QueueError::Prerequisite { message, hint }),
        None => Ok(()),
    }
}

/// Creates (or reschedules) the reaper job; returns its pg_cron job id.
#[pg_extern]
fn schedule_reaper(every: default!(Option<Interval>, "'1 minute'")) -> i64 {
    run(|| {
        // Rights first: the interval's error echoes it.
        security::require_unconfined("schedule the reaper")?;
        let expression = cron_expression(every)?;
        require_pg_cron()?;
        store::schedule_reaper(&expression)
    })
}

/// Removes the reaper job; false if there was none.
#[pg_extern]
fn unschedule_reaper() -> bool {
    run(|| {
        security::require_unconfined("unschedule the reaper")?;
        require_pg_cron()?;
        store::unschedule_reaper()
    })
}
