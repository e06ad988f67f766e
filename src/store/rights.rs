//! Statements on confinement and per-queue grants, and this backend's
//! copies of each role's rights.

use std::cell::RefCell;

use aedb_queue_core::grants::{Grant, Pattern, Privilege, Rights};
use pgrx::pg_sys::Oid;

use super::latest::read_latest;
use super::{execute, schema_level, with_client, SchemaLevel, Statement, INT8, TEXT};
use crate::cache::{self, Copies, Topic};
use crate::errors::Result;

/// The roles `$1` belongs to, through any chain of memberships (with or
/// without INHERIT: a member can always SET ROLE to them), itself included.
macro_rules! member_of {
    () => {
        "WITH RECURSIVE member_of(r) AS (
             SELECT $1::oid
             UNION
             SELECT m.roleid FROM pg_catalog.pg_auth_members m JOIN member_of ON m.member = member_of.r)"
    };
}

/// Whether any role `$1` belongs to has a row in `$table`.
macro_rules! any_member_in {
    ($table:literal) => {
        concat!(
            member_of!(),
            " SELECT EXISTS (SELECT 1 FROM aedb_queue.",
            $table,
            " c
                              WHERE c.role::oid IN (SELECT r FROM member_of))"
        )
    };
}

/// Whether any role `$1` belongs to is confined.
pub(crate) static CONFINED: Statement = Statement {
    sql: any_member_in!("confined_role"),
    args: &[INT8],
    clock: false,
};

/// The 0.2.0 schema has no confinement rows: holding a grant confined.
static CONFINED_0_2_0: Statement = Statement {
    sql: any_member_in!("queue_grant"),
    args: &[INT8],
    clock: false,
};

/// The grants of every role `$1` belongs to.
pub(crate) static GRANTS: Statement = Statement {
    sql: concat!(
        member_of!(),
        " SELECT g.pattern, g.privilege FROM aedb_queue.queue_grant g
           WHERE g.role::oid IN (SELECT r FROM member_of)"
    ),
    args: &[INT8],
    clock: false,
};

/// Returns a row when the role was not confined before.
static CONFINE: Statement = Statement {
    sql: "INSERT INTO aedb_queue.confined_role (role, confined_at)
          VALUES ($1::oid::regrole, pg_catalog.clock_timestamp())
          ON CONFLICT DO NOTHING RETURNING 1",
    args: &[INT8],
    clock: false,
};

/// Lifts the confinement and drops the role's grants; a row per change.
static UNCONFINE: Statement = Statement {
    sql: "WITH grants AS (DELETE FROM aedb_queue.queue_grant WHERE role = $1::oid::regrole RETURNING 1),
               confinement AS (DELETE FROM aedb_queue.confined_role WHERE role = $1::oid::regrole RETURNING 1)
          SELECT 1 FROM confinement UNION ALL SELECT 1 FROM grants",
    args: &[INT8],
    clock: false,
};

static INSERT_GRANT: Statement = Statement {
    sql: "INSERT INTO aedb_queue.queue_grant (role, pattern, privilege) VALUES ($1::oid::regrole, $2, $3)
          ON CONFLICT DO NOTHING RETURNING 1",
    args: &[INT8, TEXT, TEXT],
    clock: false,
};

static DELETE_GRANT: Statement = Statement {
    sql: "DELETE FROM aedb_queue.queue_grant
          WHERE role = $1::oid::regrole AND pattern = $2 AND privilege = $3 RETURNING 1",
    args: &[INT8, TEXT, TEXT],
    clock: false,
};

thread_local! {
    static RIGHTS: RefCell<Copies<Oid, Rights>> = RefCell::new(Copies::new(Topic::Rights));
}

fn oid_arg(role: Oid) -> i64 {
    i64::from(u32::from(role))
}

/// What the confinement rows and grants say of `role` (superusers are the
/// caller's business), from this backend's copy while nothing changed.
/// The cost grows with the role's own memberships and grants, not with
/// anyone else's.
pub fn rights_of(role: Oid) -> Result<Rights> {
    let level = schema_level();
    if level == SchemaLevel::V010 {
        return Ok(Rights::Unconfined);
    }
    if let Some(found) = RIGHTS.with(|r| r.borrow_mut().get(&role)) {
        return Ok(found);
    }
    let generation = cache::generation(Topic::Rights);
    // The newest rights, not the transaction snapshot's: a revoke committed
    // elsewhere applies to the next call of an open REPEATABLE READ or
    // SERIALIZABLE transaction too (`latest`, inside the SPI connection
    // and owner scope `with_client` opens).
    let rights = with_client(|_connected| {
        let confined_statement = if level == SchemaLevel::V020 {
            &CONFINED_0_2_0
        } else {
            &CONFINED
        };
        let role_arg = [oid_arg(role).into()];
        let confined = read_latest(confined_statement, &role_arg)?
            .first()
            .and_then(|row| row.first().cloned().flatten())
            == Some("t".to_string());
        if !confined {
            return Ok(Rights::Unconfined);
        }
        let grants = read_latest(&GRANTS, &role_arg)?
            .into_iter()
            .map(|row| {
                let column = |i: usize| {
                    row.get(i).cloned().flatten().ok_or_else(|| {
                        crate::errors::internal("a grant without pattern or privilege")
                    })
                };
                Ok(Grant {
                    pattern: Pattern::parse("pattern", &column(0)?)?,
                    privilege: Privilege::parse("privilege", &column(1)?)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Rights::Confined(grants))
    })?;
    RIGHTS.with(|r| r.borrow_mut().put(role, rights.clone(), generation));
    Ok(rights)
}

/// Marks the role confined; true if it was not.
pub fn confine(role: Oid) -> Result<bool> {
    with_client(|client| Ok(!execute(client, &CONFINE, &[oid_arg(role).into()])?.is_empty()))
}

/// Lifts the role's confinement and drops its grants; true if anything changed.
pub fn unconfine(role: Oid) -> Result<bool> {
    with_client(|client| Ok(!execute(client, &UNCONFINE, &[oid_arg(role).into()])?.is_empty()))
}

/// Adds (or with `revoke`, removes) a grant; true if that changed anything.
pub fn change_grant(role: Oid, pattern: &str, privilege: Privilege, revoke: bool) -> Result<bool> {
    let statement = if revoke { &DELETE_GRANT } else { &INSERT_GRANT };
    let changed = with_client(|client| {
        let args = [
            oid_arg(role).into(),
            pattern.into(),
            privilege.as_str().into(),
        ];
        Ok(!execute(client, statement, &args)?.is_empty())
    })?;
    super::copies_stale_without_trigger(c"queue_grant");
    Ok(changed)
}
