//! Per-backend copies of small, rarely written tables (queue settings,
//! confinement and grants), read on every call, and when they go stale.
//!
//! Every write to `queue`, `queue_grant` or `confined_role` (through our
//! functions or by direct DML: a restore, a manual fix) fires a statement
//! trigger that sends a relcache invalidation for the table
//! (`invalidate_copies` in `store`). Postgres delivers it to every backend
//! before that backend's next statement (and locally at once, and again on
//! rollback), and our callback then drops the copies of that topic only: a
//! new queue name drops settings, never rights. Role membership and role
//! attributes (GRANT role TO, ALTER ROLE ... SUPERUSER) arrive as syscache
//! invalidations of pg_auth_members and pg_authid and drop rights. Anything
//! else of ours (DDL, an upgrade) drops everything.

use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};

use pgrx::pg_sys::{self, Oid, SysCacheIdentifier};

use crate::catalog;

/// What a cached value depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// The `queue` table: settings, pause, registration.
    Settings,
    /// `queue_grant`, `confined_role`, role memberships and attributes.
    Rights,
    /// Our catalog objects themselves: owner, oids, schema version.
    Catalog,
}

const TOPICS: usize = 3;

struct Watched {
    /// The catalog generation they were looked up at.
    catalog: u64,
    settings: Vec<Oid>,
    rights: Vec<Oid>,
    /// The task table and its sequence: owner and definition changes.
    others: Vec<Oid>,
}

thread_local! {
    /// Bumped by every invalidation of a topic.
    static GENERATIONS: [Cell<u64>; TOPICS] = const { [Cell::new(0), Cell::new(0), Cell::new(0)] };
    /// The relations whose invalidations drop copies, looked up again after
    /// every catalog invalidation (an upgrade may have created one).
    static WATCHED: RefCell<Watched> = const { RefCell::new(Watched { catalog: u64::MAX, settings: Vec::new(), rights: Vec::new(), others: Vec::new() }) };
}

pub fn register() {
    // SAFETY: called once from _PG_init; the callbacks only touch thread-locals.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache), pg_sys::Datum::from(0));
        for cache in [
            SysCacheIdentifier::AUTHMEMMEMROLE,
            SysCacheIdentifier::AUTHMEMROLEMEM,
            SysCacheIdentifier::AUTHOID,
        ] {
            pg_sys::CacheRegisterSyscacheCallback(
                cache as i32,
                Some(on_role_change),
                pg_sys::Datum::from(0),
            );
        }
    }
}

fn bump(topic: Topic) {
    GENERATIONS.with(|g| {
        let cell = &g[topic as usize];
        cell.set(cell.get() + 1);
    });
}

fn bump_all() {
    for topic in [Topic::Settings, Topic::Rights, Topic::Catalog] {
        bump(topic);
    }
}

unsafe extern "C-unwind" fn on_relcache(_arg: pg_sys::Datum, relid: Oid) {
    if relid == pg_sys::InvalidOid {
        bump_all();
        return;
    }
    // No catalog lookups here: callbacks may run outside a transaction.
    WATCHED.with(|w| match w.try_borrow() {
        Ok(w) if w.catalog != u64::MAX => {
            if w.settings.contains(&relid) {
                bump(Topic::Settings);
            } else if w.rights.contains(&relid) {
                bump(Topic::Rights);
            } else if w.others.contains(&relid) {
                bump_all();
            }
        }
        // Not looked up yet (or being looked up): assume it is ours.
        _ => {
            bump_all();
        }
    });
}

unsafe extern "C-unwind" fn on_role_change(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    bump(Topic::Rights);
}

/// Takes in the invalidations other sessions committed, at the start of
/// every call (`errors::run`). Postgres does so at transaction start and
/// when a lock is first taken, not at every statement: a call in a
/// transaction that already holds every lock it needs would otherwise keep
/// using a copy another session changed since (a revoked grant, a pause).
/// Cheap when nothing is pending.
pub fn catch_up() {
    // SAFETY: processes pending invalidation messages (our callbacks run).
    unsafe { pg_sys::AcceptInvalidationMessages() };
}

/// Sends the invalidation that drops every backend's copies of `table`.
pub fn invalidate_relation(relid: Oid) {
    // SAFETY: registers an invalidation message for an existing relation.
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid(relid) };
}

/// The current generation of `topic` (take it before reading a value to
/// cache), with the watched relations looked up first.
pub fn generation(topic: Topic) -> (u64, u64) {
    let catalog = GENERATIONS.with(|g| g[Topic::Catalog as usize].get());
    WATCHED.with(|w| {
        if let Ok(mut w) = w.try_borrow_mut() {
            if w.catalog != catalog {
                let look_up = |names: &[&std::ffi::CStr]| {
                    names
                        .iter()
                        .filter_map(|t| catalog::relation_oid(t))
                        .collect()
                };
                *w = Watched {
                    catalog,
                    settings: look_up(&[c"queue"]),
                    rights: look_up(&[c"queue_grant", c"confined_role"]),
                    others: look_up(&[c"task", c"task_id_seq", c"completed_task"]),
                };
            }
        }
    });
    let own = GENERATIONS.with(|g| g[topic as usize].get());
    (own, catalog)
}

/// A map whose entries last until the next invalidation of their topic.
/// Hashed with FxHash, not SipHash: its keys are role oids and queue names
/// of the session's own calls, looked up on every call, and SipHash's
/// defence against chosen colliding keys costs more here than the lookup.
pub struct Copies<K, V> {
    topic: Topic,
    generation: (u64, u64),
    entries: FxHashMap<K, V>,
}

impl<K: std::hash::Hash + Eq, V: Clone> Copies<K, V> {
    pub fn new(topic: Topic) -> Self {
        Copies {
            topic,
            generation: (u64::MAX, u64::MAX),
            entries: FxHashMap::default(),
        }
    }

    /// The cached value of `key` (or of what borrows as it, such as a
    /// `&str` for a `String`), or `None` after an invalidation.
    pub fn get<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        let current = generation(self.topic);
        if self.generation != current {
            self.entries.clear();
            self.generation = current;
        }
        self.entries.get(key).cloned()
    }

    /// Keeps `value` unless an invalidation arrived while it was being read.
    pub fn put(&mut self, key: K, value: V, read_at: (u64, u64)) {
        if read_at == self.generation && self.entries.len() < 10_000 {
            self.entries.insert(key, value);
        }
    }
}
