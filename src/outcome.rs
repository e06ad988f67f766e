//! `aedb_queue.outcome`, the result of a fenced call.
//!
//! The enum type is created in `sql/schema.sql` inside the extension schema;
//! it is looked up by its qualified name because callers rarely have
//! `aedb_queue` on their search_path.

use pgrx::callconv::{BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::enum_helper::lookup_enum_by_label;
use pgrx::{pg_sys, regtypein, IntoDatum};

const TYPE_NAME: &str = "aedb_queue.outcome";

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

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::LeaseLost => "lease_lost",
        }
    }
}

impl IntoDatum for Outcome {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(lookup_enum_by_label(TYPE_NAME, self.label()))
    }

    fn type_oid() -> pg_sys::Oid {
        regtypein(TYPE_NAME)
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
