//! The oids of the extension's own objects (tables, types, enum labels),
//! looked up through the system caches once per catalog generation
//! (`cache::Topic::Catalog`: our DDL or an upgrade drops them). Every
//! enqueue names the task table, its sequence and a `task_state`, and a
//! fenced call returns an `outcome` per task: a cache search each time was
//! a tenth of a batch settle.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;

use pgrx::pg_sys::Oid;

use crate::cache::{self, Topic};
use crate::catalog;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Relation(&'static CStr),
    Type(&'static CStr),
    Label(&'static CStr, &'static CStr),
}

/// The catalog generation the oids were looked up at, and the oids.
type Cached = ((u64, u64), HashMap<Key, Option<Oid>>);

thread_local! {
    static OIDS: RefCell<Cached> = RefCell::new(((u64::MAX, u64::MAX), HashMap::new()));
}

fn cached(key: Key, look_up: impl FnOnce() -> Option<Oid>) -> Option<Oid> {
    let generation = cache::generation(Topic::Catalog);
    let found = OIDS.with(|o| {
        let o = o.borrow();
        (o.0 == generation)
            .then(|| o.1.get(&key).copied())
            .flatten()
    });
    if let Some(oid) = found {
        return oid;
    }
    let oid = look_up();
    OIDS.with(|o| {
        let mut o = o.borrow_mut();
        if o.0 != generation {
            *o = (generation, HashMap::new());
        }
        o.1.insert(key, oid);
    });
    oid
}

/// The oid of relation `aedb_queue.<name>`, if it exists.
pub(crate) fn relation_oid(name: &'static CStr) -> Option<Oid> {
    cached(Key::Relation(name), || catalog::relation_oid(name))
}

/// The oid of type `aedb_queue.<name>`.
pub(crate) fn type_oid(name: &'static CStr) -> Oid {
    cached(Key::Type(name), || Some(catalog::type_oid(name))).unwrap_or(Oid::INVALID)
}

/// The value of `label` of the extension's enum type `type_name`.
pub(crate) fn enum_label_oid(type_name: &'static CStr, label: &'static CStr) -> Oid {
    cached(Key::Label(type_name, label), || {
        Some(catalog::enum_label_oid(type_name, label))
    })
    .unwrap_or(Oid::INVALID)
}
