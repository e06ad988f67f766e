//! Statements on pg_cron's job table: the one job that runs
//! `queue_reap()`. They run as the extension's owner (so the job belongs
//! to, and runs as, the owner whoever schedules it, and there is only ever
//! one), and are prepared only after `pg_cron_state` found pg_cron here.

use super::{execute, first_i64, with_client, Statement, INT8, TEXT};
use crate::errors::{internal, Result};

/// (cron.database_name if pg_cron is preloaded, this database, whether
/// the pg_cron extension exists here).
static PG_CRON_STATE: Statement = Statement {
    sql: "SELECT pg_catalog.current_setting('cron.database_name', true), pg_catalog.current_database()::text,
                 EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron')",
    args: &[],
    clock: false,
};

/// Creates the job or updates its schedule (pg_cron upserts by job name).
static SCHEDULE: Statement = Statement {
    sql: "SELECT cron.schedule('aedb_queue_reaper'::text, $1, 'SELECT aedb_queue.queue_reap()'::text)",
    args: &[TEXT],
    clock: false,
};

/// The job, locked: of two concurrent unschedules, the second waits and
/// then finds none instead of failing in cron.unschedule.
static LOCK_JOB: Statement = Statement {
    sql: "SELECT jobid FROM cron.job
          WHERE jobname = 'aedb_queue_reaper' AND username = pg_catalog.current_user() FOR UPDATE",
    args: &[],
    clock: false,
};

static UNSCHEDULE: Statement = Statement {
    sql: "SELECT cron.unschedule($1)",
    args: &[INT8],
    clock: false,
};

pub struct PgCronState {
    pub cron_database: Option<String>,
    pub database: String,
    pub extension: bool,
}

pub fn pg_cron_state() -> Result<PgCronState> {
    with_client(|client| {
        execute(client, &PG_CRON_STATE, &[])?
            .first(|row| {
                Ok(PgCronState {
                    cron_database: row.get(1)?,
                    database: row.get(2)?.unwrap_or_default(),
                    extension: row.get(3)?.unwrap_or(false),
                })
            })?
            .ok_or_else(|| internal("PG_CRON_STATE returned no row"))
    })
}

/// Creates or reschedules the reaper job; returns its id.
pub fn schedule_reaper(cron_expression: &str) -> Result<i64> {
    with_client(|client| {
        first_i64(execute(client, &SCHEDULE, &[cron_expression.into()])?)?
            .ok_or_else(|| internal("cron.schedule returned no job id"))
    })
}

/// Removes the reaper job; false if there was none.
pub fn unschedule_reaper() -> Result<bool> {
    with_client(|client| {
        let Some(job) = first_i64(execute(client, &LOCK_JOB, &[])?)? else {
            return Ok(false);
        };
        let rows = execute(client, &UNSCHEDULE, &[job.into()])?;
        Ok(rows.first(|row| row.get::<bool>(1))?.flatten() == Some(true))
    })
}
