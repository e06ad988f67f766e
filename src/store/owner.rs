//! How our statements run: as the owner of the extension's tables, with
//! names resolved in `pg_catalog` only (every other name in our SQL is
//! schema-qualified), never in `pg_temp` or the caller's schemas. That is
//! what `SECURITY DEFINER ... SET search_path = pg_catalog` does for a SQL
//! function: application roles need no rights on our tables, and no
//! function, operator or table they create (even in schema aedb_queue, had
//! they a way to) can stand in for one our statements use.

use std::cell::Cell;

use pgrx::pg_sys::{self, Oid};

use crate::cache::{self, Topic};
use crate::catalog;
use crate::errors::{internal, Result};
use crate::pg_compat::{self, SearchPathLevel};

/// While alive, the backend runs as the tables' owner with names resolved
/// in `pg_catalog` (`pg_compat::restrict_search_path`); dropping it
/// restores the caller's user and path.
///
/// On an error, Postgres' own abort (of the transaction, or of the
/// subtransaction a PL/pgSQL EXCEPTION block opened) restores both: it
/// resets the user to the one saved at (sub)transaction start and pops
/// the search path set inside it. So while unwinding, `Drop` leaves them
/// to it and does nothing that could raise, since a second panic during
/// unwinding would abort the backend.
pub(crate) struct OwnerRights {
    user: Oid,
    security_context: i32,
    switched: bool,
    path: Option<SearchPathLevel>,
}

impl OwnerRights {
    pub(crate) fn enter() -> Result<OwnerRights> {
        let owner = tables_owner()?;
        let mut rights = OwnerRights {
            user: pg_sys::InvalidOid,
            security_context: 0,
            switched: false,
            path: None,
        };
        // SAFETY: the save/switch sequence fmgr uses for SECURITY DEFINER
        // functions; the search path is set by Postgres. The guard
        // exists before anything changes, and records each step.
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut rights.user, &mut rights.security_context);
            pg_sys::SetUserIdAndSecContext(
                owner,
                rights.security_context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
            );
            rights.switched = true;
            rights.path = Some(pg_compat::restrict_search_path());
        }
        Ok(rights)
    }
}

impl Drop for OwnerRights {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        // SAFETY: undoes exactly what `enter` did, in reverse order.
        unsafe {
            if let Some(path) = self.path.take() {
                pg_compat::restore_search_path(path);
            }
            if self.switched {
                pg_sys::SetUserIdAndSecContext(self.user, self.security_context);
            }
        }
    }
}

thread_local! {
    /// (catalog generation, owner) of the last lookup.
    static OWNER: Cell<Option<((u64, u64), Oid)>> = const { Cell::new(None) };
}

/// The owner of `aedb_queue.task`, looked up once per catalog invalidation.
pub(super) fn tables_owner() -> Result<Oid> {
    let generation = cache::generation(Topic::Catalog);
    if let Some((seen, owner)) = OWNER.with(Cell::get) {
        if seen == generation {
            return Ok(owner);
        }
    }
    let (_, owner) = catalog::schema_and_tables_owner()
        .ok_or_else(|| internal("table aedb_queue.task is missing"))?;
    OWNER.with(|o| o.set(Some((generation, owner))));
    Ok(owner)
}
