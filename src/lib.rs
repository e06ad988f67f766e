//! aedb_queue: a durable task and timer queue inside PostgreSQL.
//!
//! Layers, from the inside out:
//! - `aedb_queue_core` (crate `core/`): pure rules — validation, backoff,
//!   state transitions, follow-up specs, the error enum. No Postgres.
//! - [`store`]: every SQL statement the extension runs, prepared once per
//!   backend, all values passed as parameters, run as the tables' owner.
//! - [`security`]: who is calling and what per-queue grants allow them;
//!   [`cache`]: per-backend copies of settings and grants.
//! - [`api`]: the `#[pg_extern]` entry points, thin glue between the two.
//! - `sql/`: schema DDL and the SQL-language inspection functions.

use pgrx::prelude::*;

mod api;
mod bgworker;
mod cache;
mod catalog;
mod clock;
mod counters;
mod datum;
mod duration;
mod enqueued;
mod errors;
mod guc;
mod horizon;
mod lock_wait;
mod oids;
mod outcome;
mod pg_compat;
mod security;
mod srf;
mod store;
mod subtransaction;
#[cfg(any(test, feature = "pg_test"))]
mod tests;
#[cfg(any(test, feature = "pg_test"))]
mod tests_bounded;
#[cfg(any(test, feature = "pg_test"))]
mod tests_bulk;
#[cfg(any(test, feature = "pg_test"))]
mod tests_cron;
#[cfg(any(test, feature = "pg_test"))]
mod tests_dependency;
#[cfg(any(test, feature = "pg_test"))]
mod tests_direct_delete;
#[cfg(any(test, feature = "pg_test"))]
mod tests_direct_update;
#[cfg(any(test, feature = "pg_test"))]
mod tests_errors;
#[cfg(any(test, feature = "pg_test"))]
mod tests_flow;
#[cfg(any(test, feature = "pg_test"))]
mod tests_lifecycle;
#[cfg(any(test, feature = "pg_test"))]
mod tests_ops;
#[cfg(any(test, feature = "pg_test"))]
mod tests_overview;
#[cfg(any(test, feature = "pg_test"))]
mod tests_paging;
#[cfg(any(test, feature = "pg_test"))]
mod tests_plans;
#[cfg(any(test, feature = "pg_test"))]
mod tests_release;
#[cfg(any(test, feature = "pg_test"))]
mod tests_schedule;
#[cfg(any(test, feature = "pg_test"))]
mod tests_schedule_limits;
#[cfg(any(test, feature = "pg_test"))]
mod tests_security;
#[cfg(any(test, feature = "pg_test"))]
mod tests_settle_and_claim;
#[cfg(any(test, feature = "pg_test"))]
mod tests_workflow;
#[cfg(any(test, feature = "pg_test"))]
mod tests_write_path;

::pgrx::pg_module_magic!();

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
// Shard numbers for the router (docs/scale-out.md): SQL over the task id sequence.
extension_sql_file!("../sql/shard.sql", name = "shard", requires = ["schema"]);
extension_sql_file!("../sql/security.sql", name = "security", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    guc::register();
    cache::register();
    store::planner::register();
    store::am::register();
    bgworker::register();
    counters::register();
}

/// Hooks for `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
