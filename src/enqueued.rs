//! `aedb_queue.enqueued`, what `queue_enqueue` returns: one row of
//! (task_id, deduplicated).
//!
//! A plain composite rather than `RETURNS TABLE`: a set-returning function
//! makes the caller's plan rebuild the result's row type from pg_proc on
//! every call, twice (PostgreSQL's and pgrx's), and run the function twice
//! (the row, then the end of the set). The composite type is defined in
//! `sql/schema.sql`; its row type comes from the type cache.

use pgrx::callconv::{BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::pg_sys;
use pgrx::IntoDatum;

#[derive(Debug, Clone, Copy)]
pub struct Enqueued {
    pub task_id: i64,
    pub deduplicated: bool,
}

impl IntoDatum for Enqueued {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        let mut values = [
            pg_sys::Datum::from(self.task_id),
            pg_sys::Datum::from(self.deduplicated),
        ];
        let mut nulls = [false, false];
        // SAFETY: the type cache's row type of aedb_queue.enqueued, whose two
        // columns are bigint and boolean (by value). It is used unpinned:
        // forming the tuple (in the current memory context) reads no
        // catalog, so no invalidation can replace it meanwhile, and the
        // pin's resource-owner bookkeeping cost more than the rest.
        unsafe {
            let entry =
                pg_sys::lookup_type_cache(Self::type_oid(), pg_sys::TYPECACHE_TUPDESC as i32);
            let desc = (*entry).tupDesc;
            if desc.is_null() {
                pgrx::error!("aedb_queue.enqueued is not a composite type");
            }
            let tuple = pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr());
            // By-value columns only: nothing toasted for
            // HeapTupleHeaderGetDatum to flatten.
            Some(pg_sys::Datum::from((*tuple).t_data))
        }
    }

    fn type_oid() -> pg_sys::Oid {
        crate::oids::type_oid(c"enqueued")
    }
}

unsafe impl BoxRet for Enqueued {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        match self.into_datum() {
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

pgrx::impl_sql_translatable!(Enqueued, "aedb_queue.enqueued");
