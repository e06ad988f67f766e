//! Writes through the table and index access methods, without statements:
//! what `INSERT`, `UPDATE ... RETURNING` over `FOR UPDATE SKIP LOCKED` and
//! `DELETE ... RETURNING` do to a plain heap table, for the hot calls. It
//! knows nothing of tasks: callers name columns and judge rows (`Row`).
//!
//! Every write first passes `guards`, which declines whatever the executor
//! would do differently (`steps` lists each executor step and what the
//! direct path does about it); the caller then runs its statement.

pub mod delete;
pub(crate) mod guards;
pub(crate) mod index_cache;
pub mod insert;
mod memory;
pub(crate) mod refute;
pub mod row;
pub(crate) mod steps;
pub mod target;
mod tm_result;
pub mod update;

use pgrx::pg_sys::{self, Oid};

pub use guards::{Decline, Write};
pub use row::Row;

/// What a caller requires of a write beyond `guards`' generic checks.
pub struct Admission<'a> {
    /// The role the statement would run as: the write needs its privileges.
    pub role: Oid,
    /// The caller's checks of the locked table and of the index the write
    /// reads (None for an insert), such as the column types it assumes.
    pub shape: &'a dyn Fn(pg_sys::Relation, Option<pg_sys::Relation>) -> Result<(), Decline>,
}

impl Admission<'static> {
    /// As the current user, with no description of the table: for tests
    /// of the toolkit on tables of their own.
    #[cfg(any(test, feature = "pg_test"))]
    pub fn any() -> Admission<'static> {
        // SAFETY: reads the backend's current user.
        let role = unsafe { pg_sys::GetUserId() };
        Admission {
            role,
            shape: &|_, _| Ok(()),
        }
    }
}

/// Registers the relation-cache callback that keeps the index sets and
/// verdicts current; once, from `_PG_init`.
pub fn register() {
    index_cache::register();
}
