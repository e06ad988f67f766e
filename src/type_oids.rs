//! The oids of the extension's types and enum labels, looked up through the
//! system caches once per catalog generation (`cache::Topic::Catalog`: our
//! DDL or an upgrade drops them). A fenced call returns an `outcome` per
//! task and every enqueue writes a `task_state`: a cache lookup each time
//! was a tenth of a batch settle.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;

use pgrx::pg_sys::Oid;

use crate::cache::{self, Topic};
use crate::catalog;

type Key = (&'static CStr, Option<&'static CStr>);

thread_local! {
    static OIDS: RefCell<((u64, u64), HashMap<Key, Oid>)> = RefCell::new(((u64::MAX, u64::MAX), HashMap::new()));
}

fn cached(key: Key, look_up: impl FnOnce() -> Oid) -> Oid {
    let generation = cache::generation(Topic::Catalog);
    let found = OIDS.with(|o| {
        let o = o.borrow();
        if o.0 == generation {
            o.1.get(&key).copied()
        } else {
            None
        }
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

/// The oid of type `aedb_queue.<name>`.
pub(crate) fn type_oid(name: &'static CStr) -> Oid {
    cached((name, None), || catalog::type_oid(name))
}

/// The value of `label` of the extension's enum type `type_name`.
pub(crate) fn enum_label_oid(type_name: &'static CStr, label: &'static CStr) -> Oid {
    cached((type_name, Some(label)), || {
        catalog::enum_label_oid(type_name, label)
    })
}
