//! Harness of the chaos tests (`tests/chaos.rs`, docs/chaos.md): faults
//! injected under load, and what must hold afterwards.
//!
//! - [`worker`]: the worker *process* (`src/bin/chaos_worker.rs`) that the
//!   tests SIGKILL, and the line protocol it reports its phases with;
//! - [`pool`]: the parent's side: spawning, killing in a phase, respawning;
//! - [`load`]: producers in the test process, and the names a run uses;
//! - [`ledger`]: the application's ledger tables and the full check of
//!   them, the drain, amcheck over every index of the extension;
//! - [`recovery`]: completion rates from the ledger, recovery times, the
//!   report file;
//! - [`tmpfs`]: a small tmpfs mounted for a tablespace, unmounted on drop.

pub mod ledger;
pub mod load;
pub mod pool;
pub mod recovery;
pub mod tmpfs;
pub mod worker;

/// Whether a client error means the connection is gone (killed backend,
/// server crash or restart, refused connection): a worker reconnects.
/// Anything else is a finding.
pub fn is_connection_fault(e: &postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(c) => {
            let code = c.code();
            code.starts_with("57P") || code.starts_with("08")
        }
    }
}

/// Long variants (more kills, more workers, longer storms): `AEDB_CHAOS_LONG=1`.
pub fn long_run() -> bool {
    std::env::var("AEDB_CHAOS_LONG").is_ok_and(|v| v == "1")
}
