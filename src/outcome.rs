//! `aedb_queue.outcome`, the result of a fenced call.
//!
//! The enum type is created in `sql/schema.sql` inside the extension schema.
//! Its labels are found through the system caches by schema and name: callers
//! rarely have `aedb_queue` on their search_path, and parsing a qualified
//! type name on every fenced call would cost more than the call's own lookup.

use std::ffi::CStr;

use pgrx::callconv::{BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::pg_sys;
use pgrx::IntoDatum;

use crate::oids;

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
    oids::type_oid(TYPE_NAME)
}

impl IntoDatum for Outcome {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(pg_sys::Datum::from(oids::enum_label_oid(
            TYPE_NAME,
            self.label(),
        )))
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
