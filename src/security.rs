//! Who is calling, and what the per-queue rights of every identity of the
//! session allow (the model and threat model: docs/security.md).
//!
//! A call is checked against each identity the session has: the current
//! role, the role chosen by SET ROLE, and the login (session) role. Each
//! must allow it (superusers allow everything). So neither SET ROLE to an
//! unconfined role (one of the extension's group roles, say), nor a
//! `role` option at connect time, nor calling through someone else's
//! SECURITY DEFINER function sheds a confinement.

use aedb_queue_core::error::{clipped, quoted};
use aedb_queue_core::grants::{self, Action, Pattern, Rights};
use aedb_queue_core::QueueError;
use pgrx::pg_sys::{self, Oid};

use crate::catalog;
use crate::errors::Result;
use crate::store;

/// The roles the extension creates: never confined, never given grants,
/// since every application role is a member of one.
pub const GROUP_ROLES: [&str; 3] = [
    "aedb_queue_producer",
    "aedb_queue_worker",
    "aedb_queue_admin",
];

/// Checks that the session may do `action` on `queue`.
pub fn authorize(action: Action, queue: &str) -> Result<()> {
    authorize_pattern(action, &Pattern::Exact(queue.to_string()), queue)
}

/// Checks that the session may do `action` on every queue `target`
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

/// Whether every identity of the session may do `action` on `target`.
pub fn may(action: Action, target: &Pattern) -> Result<bool> {
    Ok(grants::all_allow(&identity_rights()?, action, target))
}

/// Checks that no identity of the session is confined: what spans every
/// queue (reaping them all, the pg_cron job, confining roles) is for
/// unconfined admins and superusers only.
pub fn require_unconfined(operation: &str) -> Result<()> {
    if identity_rights()?.iter().any(Rights::is_confined) {
        return Err(QueueError::Confined {
            operation: operation.to_string(),
        });
    }
    Ok(())
}

/// The rights of each identity of the session; a check passes only when
/// each of them passes it on its own.
pub fn identity_rights() -> Result<Vec<Rights>> {
    identities().into_iter().map(rights_of).collect()
}

/// Follow-ups are enqueues: the calling role needs what `queue_enqueue`
/// needs, EXECUTE on it (normally through aedb_queue_producer).
pub fn require_enqueue_right(arg: &'static str) -> Result<()> {
    let Some(function) = catalog::function_oid(c"queue_enqueue") else {
        return Ok(());
    };
    // SAFETY: an ACL check of an existing function for a role.
    let executable =
        unsafe { crate::pg_compat::function_executable(function, pg_sys::GetUserId()) };
    if executable {
        Ok(())
    } else {
        Err(QueueError::NoEnqueueRight { arg })
    }
}

/// The current role, the role outside any SECURITY DEFINER function (what
/// SET ROLE chose), and the login role, without repeats.
fn identities() -> Vec<Oid> {
    // SAFETY: reads the backend's user ids.
    let all = unsafe {
        [
            pg_sys::GetUserId(),
            pg_sys::GetOuterUserId(),
            pg_sys::GetSessionUserId(),
        ]
    };
    let mut roles = Vec::with_capacity(3);
    for role in all {
        if role != pg_sys::InvalidOid && !roles.contains(&role) {
            roles.push(role);
        }
    }
    roles
}

/// What `role` may do: unconfined for superusers, otherwise what the
/// confinement rows and grants of the roles it belongs to say.
pub fn rights_of(role: Oid) -> Result<Rights> {
    // SAFETY: a catalog check on a role oid.
    if unsafe { pg_sys::superuser_arg(role) } {
        return Ok(Rights::Unconfined);
    }
    store::rights_of(role)
}

/// The oid of the role named `name`; 42704 naming it (quoted, so bounded:
/// PostgreSQL's own message would echo all of it) when there is none.
pub fn role_oid(name: &str) -> Result<Oid> {
    let unknown = || QueueError::UnknownRole {
        role: clipped(name).to_string(),
    };
    if name.len() >= pg_sys::NAMEDATALEN as usize {
        return Err(unknown());
    }
    let c_name = std::ffi::CString::new(name)
        .map_err(|_| QueueError::invalid("role", "must not contain NUL bytes"))?;
    // SAFETY: a catalog lookup; with missing_ok true it returns InvalidOid.
    let oid = unsafe { pg_sys::get_role_oid(c_name.as_ptr(), true) };
    if oid == pg_sys::InvalidOid {
        return Err(unknown());
    }
    Ok(oid)
}

/// Refuses roles that may never hold grants or be confined: the
/// extension's group roles (confining one would confine every member) and
/// superusers (never confined).
pub fn check_grantee(name: &str, role: Oid) -> Result<()> {
    if GROUP_ROLES.contains(&name) {
        return Err(QueueError::invalid(
            "role",
            format!("{} is one of the extension's roles, which every application role is a member of; confine a role of your own", quoted(name)),
        ));
    }
    // SAFETY: a catalog check on a role oid.
    if unsafe { pg_sys::superuser_arg(role) } {
        return Err(QueueError::invalid(
            "role",
            format!("{} is a superuser, which is never confined", quoted(name)),
        ));
    }
    Ok(())
}
