//! Per-backend copies of small, rarely written tables (queue settings and
//! grants), read on every call.
//!
//! Writers (`queue_configure`, `queue_grant`, …) send a relcache
//! invalidation for the table they changed; Postgres delivers it to every
//! backend before that backend's next statement (and locally at once, and
//! again on rollback), and our callback then drops the copies. So a cached
//! value is never older than the last committed change a new statement
//! could see.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use std::ffi::CStr;

use pgrx::pg_sys::{self, Oid, SysCacheIdentifier};

thread_local! {
    /// Bumped by every invalidation that may touch our tables.
    static GENERATION: Cell<u64> = const { Cell::new(0) };
    /// Relations whose invalidation drops the copies, looked up again after
    /// every invalidation (an upgrade may have created one): (generation, oids).
    static WATCHED: RefCell<(u64, Vec<Oid>)> = const { RefCell::new((u64::MAX, Vec::new())) };
}

/// Tables whose writes (or, for task, whose owner or definition changing)
/// invalidate the copies.
const WATCHED_TABLES: [&std::ffi::CStr; 3] = [c"queue", c"queue_grant", c"task"];

pub fn register() {
    // SAFETY: called once from _PG_init; the callback only touches thread-locals.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(
            Some(on_relcache_invalidation),
            pg_sys::Datum::from(0),
        )
    };
}

unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: Oid) {
    let ours = relid == pg_sys::InvalidOid
        || WATCHED.with(|w| {
            w.try_borrow()
                .map(|w| w.1.is_empty() || w.1.contains(&relid))
                .unwrap_or(true)
        });
    if ours {
        GENERATION.with(|g| g.set(g.get() + 1));
    }
}

/// Sends the invalidation that drops every backend's copies of `table`.
pub fn invalidate(table: &std::ffi::CStr) {
    if let Some(relid) = relation_oid(table) {
        // SAFETY: registers an invalidation message for an existing relation.
        unsafe { pg_sys::CacheInvalidateRelcacheByRelid(relid) };
    }
}

pub(crate) fn relation_oid(table: &std::ffi::CStr) -> Option<Oid> {
    // SAFETY: catalog lookups by name; missing objects give InvalidOid.
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"aedb_queue".as_ptr(), true);
        if schema == pg_sys::InvalidOid {
            return None;
        }
        let relid = pg_sys::get_relname_relid(table.as_ptr(), schema);
        (relid != pg_sys::InvalidOid).then_some(relid)
    }
}

/// The oid of enum type `name` in the extension's schema.
pub(crate) fn enum_type_oid(name: &CStr) -> Oid {
    unsafe {
        let namespace = pg_sys::get_namespace_oid(c"aedb_queue".as_ptr(), false);
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
pub(crate) fn enum_label_oid(type_name: &CStr, label: &CStr) -> Oid {
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

/// The current generation (take it before reading a value to cache), with
/// the watched relations looked up for it.
pub fn generation() -> u64 {
    let current = GENERATION.with(Cell::get);
    WATCHED.with(|w| {
        if let Ok(mut w) = w.try_borrow_mut() {
            if w.0 != current {
                *w = (
                    current,
                    WATCHED_TABLES
                        .iter()
                        .filter_map(|t| relation_oid(t))
                        .collect(),
                );
            }
        }
    });
    current
}

/// A map whose entries last until the next invalidation of our tables.
pub struct Copies<K, V> {
    generation: u64,
    entries: HashMap<K, V>,
}

impl<K: std::hash::Hash + Eq, V: Clone> Copies<K, V> {
    pub fn new() -> Self {
        Copies {
            generation: u64::MAX,
            entries: HashMap::new(),
        }
    }

    /// The cached value of `key`, or `None` after an invalidation.
    pub fn get(&mut self, key: &K) -> Option<V> {
        let current = generation();
        if self.generation != current {
            self.entries.clear();
            self.generation = current;
        }
        self.entries.get(key).cloned()
    }

    /// Keeps `value` unless an invalidation arrived while it was being read.
    pub fn put(&mut self, key: K, value: V, read_at_generation: u64) {
        if read_at_generation == self.generation && self.entries.len() < 10_000 {
            self.entries.insert(key, value);
        }
    }
}
