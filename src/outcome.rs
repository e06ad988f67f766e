//! `aedb_queue.outcome`, the result of a fenced call.
//!
//! The enum type is created in `sql/schema.sql` inside the extension schema.
//! Its labels are found through the system caches by schema and name: callers
//! rarely have `aedb_queue` on their search_path, and parsing a qualified
//! type name on every fenced call would cost more than the call's own lookup.

use std::ffi::CStr;

use pgrx::callconv::{BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::pg_sys::{self, SysCacheIdentifier};
use pgrx::IntoDatum;

const SCHEMA: &CStr = c"aedb_queue";
const TYPE_NAME: &CStr = c"outcome";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    LeaseLost,
}

impl Outcome {
    pub fn from_applied(applied: bool) -> Self {
        if applied {
            Outcome::Applied
        } else {
            Outcome::LeaseLost
        }
    }

    fn label(self) -> &'static CStr {
        match self {
            Outcome::Applied => c"applied",
            Outcome::LeaseLost => c"lease_lost",
        }
    }
}

fn type_oid() -> pg_sys::Oid {
    enum_type_oid(TYPE_NAME)
}

/// The oid of enum type `name` in the extension's schema.
pub(crate) fn enum_type_oid(name: &CStr) -> pg_sys::Oid {
    unsafe {
        let namespace = pg_sys::get_namespace_oid(SCHEMA.as_ptr(), false);
        pg_sys::GetSysCacheOid(
            SysCacheIdentifier::TYPENAMENSP as i32,
            pg_sys::Anum_pg_type_oid as pg_sys::AttrNumber,
            pg_sys::Datum::from(name.as_ptr()),
            pg_sys::Datum::from(namespace),
            pg_sys::Datum::from(0usize),
            pg_sys::Datum::from(0usize),
        )
    }
}

/// The value of `label` of the extension's enum type `type_name`.
pub(crate) fn enum_label_oid(type_name: &CStr, label: &CStr) -> pg_sys::Oid {
    unsafe {
        let tuple = pg_sys::SearchSysCache(
            SysCacheIdentifier::ENUMTYPOIDNAME as i32,
            pg_sys::Datum::from(enum_type_oid(type_name)),
            pg_sys::Datum::from(label.as_ptr()),
            pg_sys::Datum::from(0usize),
            pg_sys::Datum::from(0usize),
        );
        assert!(
            !tuple.is_null(),
            "aedb_queue.{type_name:?} has no label {label:?}"
        );
        let oid = (*(pg_sys::GETSTRUCT(tuple) as pg_sys::Form_pg_enum)).oid;
        pg_sys::ReleaseSysCache(tuple);
        oid
    }
}

impl IntoDatum for Outcome {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(pg_sys::Datum::from(enum_label_oid(TYPE_NAME, self.label())))
    }

    fn type_oid() -> pg_sys::Oid {
        type_oid()
    }
}

unsafe impl BoxRet for Outcome {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        match self.into_datum() {
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

pgrx::impl_sql_translatable!(Outcome, "aedb_queue.outcome");
