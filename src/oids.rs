//! The oids of the extension's own objects (tables, types, enum labels),
//! looked up through the system caches once per catalog generation
//! (`cache::Topic::Catalog`: our DDL or an upgrade drops them). Every
//! enqueue names the task table, its sequence and a `task_state`, and a
//! fenced call returns an `outcome` per task: a cache search each time was
//! a tenth of a batch settle.

use std::cell::RefCell;
use std::ffi::CStr;

use pgrx::pg_sys::Oid;

use crate::cache::{self, Topic};
use crate::catalog;

/// What an oid is cached under: the kind and the address of its static
/// name (two literals of one name at two call sites are two entries, which
/// is harmless; comparing addresses is what makes a hit cheap).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Relation(usize),
    Type(usize),
    Label(usize, usize),
}

fn address(name: &'static CStr) -> usize {
    name.as_ptr() as usize
}

/// The catalog generation the oids were looked up at, and the oids: a few
/// dozen at most, searched in order.
type Cached = ((u64, u64), Vec<(Key, Option<Oid>)>);

thread_local! {
    static OIDS: RefCell<Cached> = const { RefCell::new(((u64::MAX, u64::MAX), Vec::new())) };
}

fn cached(key: Key, look_up: impl FnOnce() -> Option<Oid>) -> Option<Oid> {
    let generation = cache::generation(Topic::Catalog);
    let found = OIDS.with(|o| {
        let o = o.borrow();
        (o.0 == generation)
            .then(|| o.1.iter().find(|(k, _)| *k == key).map(|(_, oid)| *oid))
            .flatten()
    });
    if let Some(oid) = found {
        return oid;
    }
    let oid = look_up();
    OIDS.with(|o| {
        let mut o = o.borrow_mut();
        if o.0 != generation {
            *o = (generation, Vec::new());
        }
        o.1.push((key, oid));
    });
    oid
}

/// The oid of relation `aedb_queue.<name>`, if it exists.
pub(crate) fn relation_oid(name: &'static CStr) -> Option<Oid> {
    cached(Key::Relation(address(name)), || catalog::relation_oid(name))
}

/// The oid of type `aedb_queue.<name>`.
pub(crate) fn type_oid(name: &'static CStr) -> Oid {
    cached(Key::Type(address(name)), || Some(catalog::type_oid(name))).unwrap_or(Oid::INVALID)
}

/// The value of `label` of the extension's enum type `type_name`.
pub(crate) fn enum_label_oid(type_name: &'static CStr, label: &'static CStr) -> Oid {
    cached(Key::Label(address(type_name), address(label)), || {
        Some(catalog::enum_label_oid(type_name, label))
    })
    .unwrap_or(Oid::INVALID)
}
