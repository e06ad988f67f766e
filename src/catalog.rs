//! Lookups of the extension's own catalog objects by name, through the
//! system caches (never through SQL, which a caller's search_path could
//! redirect).

use std::ffi::CStr;

use pgrx::pg_sys::{self, Oid, SysCacheIdentifier};

fn schema_oid(missing_ok: bool) -> Oid {
    named_schema_oid(c"aedb_queue", missing_ok)
}

fn named_schema_oid(schema: &CStr, missing_ok: bool) -> Oid {
    // SAFETY: a catalog lookup by name.
    unsafe { pg_sys::get_namespace_oid(schema.as_ptr(), missing_ok) }
}

/// The oid of relation `aedb_queue.<name>`, if it exists.
pub(crate) fn relation_oid(name: &CStr) -> Option<Oid> {
    let schema = schema_oid(true);
    if schema == pg_sys::InvalidOid {
        return None;
    }
    // SAFETY: a catalog lookup by name; a missing relation gives InvalidOid.
    let relid = unsafe { pg_sys::get_relname_relid(name.as_ptr(), schema) };
    (relid != pg_sys::InvalidOid).then_some(relid)
}

/// The schema's oid and the owner of `aedb_queue.task` (the tables' owner).
pub(crate) fn schema_and_tables_owner() -> Option<(Oid, Oid)> {
    let relid = relation_oid(c"task")?;
    // SAFETY: the cache entry is released before returning.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(
            SysCacheIdentifier::RELOID as i32,
            pg_sys::Datum::from(relid),
        );
        if tuple.is_null() {
            return None;
        }
        let owner = (*(pg_sys::GETSTRUCT(tuple) as pg_sys::Form_pg_class)).relowner;
        pg_sys::ReleaseSysCache(tuple);
        Some((schema_oid(false), owner))
    }
}

/// The oid of type `name` in the extension's schema.
pub(crate) fn type_oid(name: &CStr) -> Oid {
    // SAFETY: a catalog lookup by name and namespace.
    unsafe {
        pg_sys::GetSysCacheOid(
            SysCacheIdentifier::TYPENAMENSP as i32,
            pg_sys::Anum_pg_type_oid as pg_sys::AttrNumber,
            pg_sys::Datum::from(name.as_ptr()),
            pg_sys::Datum::from(schema_oid(false)),
            pg_sys::Datum::from(0usize),
            pg_sys::Datum::from(0usize),
        )
    }
}

/// The value of `label` of the extension's enum type `type_name`.
pub(crate) fn enum_label_oid(type_name: &CStr, label: &CStr) -> Oid {
    // SAFETY: the cache entry is released before returning.
    unsafe {
        let tuple = pg_sys::SearchSysCache(
            SysCacheIdentifier::ENUMTYPOIDNAME as i32,
            pg_sys::Datum::from(type_oid(type_name)),
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

/// The oid of function `aedb_queue.<name>` (the first overload found).
pub(crate) fn function_oid(name: &CStr) -> Option<Oid> {
    function_oid_in(c"aedb_queue", name)
}

/// The oid of function `<schema>.<name>` (the first overload found).
pub(crate) fn function_oid_in(schema: &CStr, name: &CStr) -> Option<Oid> {
    let schema = named_schema_oid(schema, true);
    if schema == pg_sys::InvalidOid {
        return None;
    }
    // SAFETY: a catalog list lookup by name; the list is released before returning.
    unsafe {
        let list = pg_sys::SearchSysCacheList(
            SysCacheIdentifier::PROCNAMEARGSNSP as i32,
            1,
            pg_sys::Datum::from(name.as_ptr()),
            pg_sys::Datum::from(0usize),
            pg_sys::Datum::from(0usize),
        );
        let mut found = None;
        let members = (*list).members.as_slice((*list).n_members as usize);
        for &member in members {
            let form = pg_sys::GETSTRUCT(&mut (*member).tuple) as pg_sys::Form_pg_proc;
            if (*form).pronamespace == schema {
                found = Some((*form).oid);
                break;
            }
        }
        pg_sys::ReleaseCatCacheList(list);
        found
    }
}
