//! Who is calling, what they may do, and how our statements run.
//!
//! Entry points keep the caller's identity (so per-queue grants apply to
//! the role that really calls, SET ROLE included), check it against the
//! grants, and then run their own statements as the owner of the
//! extension's tables with `search_path = aedb_queue, pg_catalog, pg_temp`
//! (what `SECURITY DEFINER ... SET search_path` does for SQL functions):
//! application roles need no rights on the tables, and no function,
//! operator or table they create can stand in for one our statements use.

use aedb_queue_core::grants::{self, Action, Grant, Pattern};
use aedb_queue_core::QueueError;
use pgrx::pg_sys::{self, Oid};

use crate::cache;
use crate::errors::{internal, Result};
use crate::store;

/// Checks that the calling role may do `action` on `queue`.
pub fn authorize(action: Action, queue: &str) -> Result<()> {
    authorize_pattern(action, &Pattern::Exact(queue.to_string()), queue)
}

/// Checks that the calling role may do `action` on every queue `target`
/// matches; `shown` is how the target appears in the error.
pub fn authorize_pattern(action: Action, target: &Pattern, shown: &str) -> Result<()> {
    if may(action, target)? {
        Ok(())
    } else {
        Err(QueueError::PermissionDenied {
            action: action.verb().to_string(),
            queue: shown.to_string(),
        })
    }
}

/// Whether the calling role may do `action` on `target`.
pub fn may(action: Action, target: &Pattern) -> Result<bool> {
    let caller = caller();
    // SAFETY: plain catalog checks on role oids.
    if unsafe { pg_sys::superuser_arg(caller) } {
        return Ok(true);
    }
    let held: Vec<Grant> = store::all_grants()?
        .iter()
        .filter(|(role, _)| unsafe { pg_sys::has_privs_of_role(caller, *role) })
        .map(|(_, grant)| grant.clone())
        .collect();
    Ok(grants::allowed(&held, action, target))
}

/// The role the statement runs as right now: the caller, at entry points.
fn caller() -> Oid {
    // SAFETY: reads the backend's current user id.
    unsafe { pg_sys::GetUserId() }
}

/// While alive, the backend runs as the owner of the extension's tables and
/// resolves names in pg_catalog, then aedb_queue (never pg_temp, never the
/// caller's schemas); dropping it (also when an error unwinds) restores the
/// caller's user and search path. Transaction abort restores both too.
///
/// The search path is pushed as an override (PostgreSQL 15's
/// `PushOverrideSearchPath`) rather than set through the `search_path`
/// setting: the same effect for name lookup, without the setting's
/// save/parse/restore work on every call.
pub struct OwnerRights {
    user: Oid,
    security_context: i32,
}

impl OwnerRights {
    pub fn enter() -> Result<OwnerRights> {
        let (owner, schema) = tables_owner_and_schema()?;
        // SAFETY: the save/switch/restore sequence fmgr uses for SECURITY
        // DEFINER functions; the override path is copied by Postgres.
        unsafe {
            let mut user = pg_sys::InvalidOid;
            let mut security_context = 0;
            pg_sys::GetUserIdAndSecContext(&mut user, &mut security_context);
            pg_sys::SetUserIdAndSecContext(
                owner,
                security_context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
            );
            let mut path = pg_sys::OverrideSearchPath {
                schemas: pg_sys::lappend_oid(std::ptr::null_mut(), schema),
                addCatalog: true,
                addTemp: false,
                generation: 0,
            };
            pg_sys::PushOverrideSearchPath(&mut path);
            Ok(OwnerRights {
                user,
                security_context,
            })
        }
    }
}

impl Drop for OwnerRights {
    fn drop(&mut self) {
        // SAFETY: undoes exactly what `enter` did, in reverse order.
        unsafe {
            pg_sys::PopOverrideSearchPath();
            pg_sys::SetUserIdAndSecContext(self.user, self.security_context);
        }
    }
}

thread_local! {
    /// (cache generation, owner, schema) of the last lookup.
    static OWNER: std::cell::Cell<Option<(u64, Oid, Oid)>> = const { std::cell::Cell::new(None) };
}

/// The owner of `aedb_queue.task` and the schema's oid, looked up once per
/// invalidation of our tables (see `cache`).
fn tables_owner_and_schema() -> Result<(Oid, Oid)> {
    let generation = cache::generation();
    if let Some((seen, owner, schema)) = OWNER.with(|o| o.get()) {
        if seen == generation {
            return Ok((owner, schema));
        }
    }
    let (owner, schema) = look_up_tables_owner_and_schema()?;
    OWNER.with(|o| o.set(Some((generation, owner, schema))));
    Ok((owner, schema))
}

/// Read from the system caches, never through SQL (which the caller's
/// search_path could redirect).
fn look_up_tables_owner_and_schema() -> Result<(Oid, Oid)> {
    // SAFETY: catalog lookups; the cache entry is released before returning.
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"aedb_queue".as_ptr(), false);
        let relid = pg_sys::get_relname_relid(c"task".as_ptr(), schema);
        if relid == pg_sys::InvalidOid {
            return Err(internal("table aedb_queue.task is missing"));
        }
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::RELOID as i32,
            pg_sys::Datum::from(relid),
        );
        if tuple.is_null() {
            return Err(internal("aedb_queue.task has no pg_class entry"));
        }
        let owner = (*(pg_sys::GETSTRUCT(tuple) as pg_sys::Form_pg_class)).relowner;
        pg_sys::ReleaseSysCache(tuple);
        Ok((owner, schema))
    }
}

/// The oid of the role named `name` (an error naming it when there is none).
pub fn role_oid(name: &str) -> Result<Oid> {
    let name = std::ffi::CString::new(name)
        .map_err(|_| QueueError::invalid("role", "must not contain NUL bytes"))?;
    // SAFETY: a catalog lookup; with missing_ok false it raises 42704 itself.
    Ok(unsafe { pg_sys::get_role_oid(name.as_ptr(), false) })
}
