//! Per-queue event counters kept in a fixed table (the extension places it
//! in shared memory): enqueued, completed, failed, dead-lettered,
//! reclaimed and cancelled tasks per (database, queue) since the server
//! started.
//!
//! The table never allocates and never forgets a queue: a slot, once
//! taken, belongs to its queue until restart. Slots are found by open
//! addressing (linear probing from a hash of database and name). The last
//! [`OVERFLOW_RESERVE`] free slots are kept for the databases' overflow
//! buckets, so a database with more queues than the table holds still
//! counts everything: the queues without a slot add to its bucket.
//! Counts are atomic, so adding to a slot needs only the shared lock;
//! taking a slot needs the exclusive one (the caller's lock discipline).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::validate::MAX_NAME_BYTES;

/// What is counted; the column order of `queue_counters()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Enqueued,
    Completed,
    Failed,
    DeadLettered,
    Reclaimed,
    Cancelled,
}

pub const COUNTERS: usize = 6;

/// Slots in the table: queues of every database, plus overflow buckets.
pub const SLOTS: usize = 1024;

/// Free slots only an overflow bucket may take.
pub const OVERFLOW_RESERVE: usize = 64;

/// Queue slots one role may take once half the queue slots are used: one
/// tenant's thousands of queues must not leave every other tenant's new
/// queues in the overflow bucket. A deployment with one role still gets
/// half the table, and more while others leave it free.
pub const ROLE_SHARE: usize = (SLOTS - OVERFLOW_RESERVE) / 4;

/// Who takes a slot: the session's login role (a tenant cannot change it
/// with SET ROLE), and whether it is exempt from [`ROLE_SHARE`]
/// (superusers, the reapers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taker {
    pub role: u32,
    pub exempt: bool,
}

/// Counts of one transaction (or one slot), by [`Counter`].
pub type Counts = [u64; COUNTERS];

impl Counter {
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Whom a slot counts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner<'a> {
    Queue(&'a str),
    /// A database's queues that found no slot.
    Overflow,
}

#[repr(C)]
pub struct Slot {
    /// 0: free.
    database: u32,
    /// 0 for an overflow bucket.
    name_len: u32,
    name: [u8; MAX_NAME_BYTES],
    /// When the slot was taken (microseconds since the PostgreSQL epoch).
    since: i64,
    /// The login role that took it (0: exempt, or an overflow bucket).
    role: u32,
    counts: [AtomicU64; COUNTERS],
}

#[repr(C)]
pub struct Table {
    slots: [Slot; SLOTS],
    used: u32,
}

/// One slot as read out of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// None: the overflow bucket.
    pub queue: Option<String>,
    pub since: i64,
    pub counts: Counts,
}

/// Where `owner` of `database` is, or where it would go.
enum Probe {
    Found(usize),
    Free(usize),
    Full,
}

impl Table {
    /// An empty table, built in place: it is too large for some stacks.
    pub fn new_boxed() -> Box<Table> {
        // SAFETY: every field is an integer, an integer array or an atomic
        // integer, for which all-zero bytes are a valid (free, zero) value.
        unsafe {
            let layout = std::alloc::Layout::new::<Table>();
            let raw = std::alloc::alloc_zeroed(layout) as *mut Table;
            if raw.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Box::from_raw(raw)
        }
    }

    fn key<'a>(owner: &Owner<'a>) -> &'a [u8] {
        match owner {
            Owner::Queue(name) => name.as_bytes(),
            Owner::Overflow => b"",
        }
    }

    fn probe(&self, database: u32, owner: &Owner<'_>) -> Probe {
        let key = Self::key(owner);
        let start = hash(database, key) as usize % SLOTS;
        for step in 0..SLOTS {
            let i = (start + step) % SLOTS;
            let slot = &self.slots[i];
            if slot.database == 0 {
                return Probe::Free(i);
            }
            if slot.database == database && &slot.name[..slot.name_len as usize] == key {
                return Probe::Found(i);
            }
        }
        Probe::Full
    }

    /// Adds `counts` to the slot of `owner` if it has one; false if not
    /// (then [`Table::add_new`] under the exclusive lock). Shared lock.
    pub fn add_existing(&self, database: u32, owner: &Owner<'_>, counts: &Counts) -> bool {
        match self.probe(database, owner) {
            Probe::Found(i) => {
                self.slots[i].add(counts);
                true
            }
            _ => false,
        }
    }

    /// Adds `counts` to `owner`'s slot, taking one (stamped `now`) when
    /// there is room; a queue that finds none adds to its database's
    /// overflow bucket. False only when even that found no room (then the
    /// counts are dropped). Exclusive lock.
    pub fn add_new(
        &mut self,
        database: u32,
        owner: &Owner<'_>,
        counts: &Counts,
        now: i64,
        taker: Taker,
    ) -> bool {
        let key = Self::key(owner);
        let room = match owner {
            Owner::Queue(name) if name.len() > MAX_NAME_BYTES => false,
            Owner::Queue(_) => {
                (self.used as usize) < SLOTS - OVERFLOW_RESERVE && self.within_share(taker)
            }
            Owner::Overflow => (self.used as usize) < SLOTS,
        };
        match self.probe(database, owner) {
            Probe::Found(i) => {
                self.slots[i].add(counts);
                true
            }
            Probe::Free(i) if room && database != 0 => {
                let slot = &mut self.slots[i];
                slot.database = database;
                slot.name_len = key.len() as u32;
                slot.name[..key.len()].copy_from_slice(key);
                slot.since = now;
                slot.role = match owner {
                    Owner::Queue(_) if !taker.exempt => taker.role,
                    _ => 0,
                };
                slot.add(counts);
                self.used += 1;
                true
            }
            _ if *owner != Owner::Overflow => {
                self.add_new(database, &Owner::Overflow, counts, now, taker)
            }
            _ => false,
        }
    }

    /// Whether `taker` may take one more queue slot: always while half the
    /// queue slots are free, then while it holds fewer than [`ROLE_SHARE`].
    fn within_share(&self, taker: Taker) -> bool {
        if taker.exempt || (self.used as usize) < (SLOTS - OVERFLOW_RESERVE) / 2 {
            return true;
        }
        let held = self
            .slots
            .iter()
            .filter(|s| s.database != 0 && s.role == taker.role)
            .count();
        held < ROLE_SHARE
    }

    /// Every slot of `database`, in no particular order. Shared lock.
    pub fn snapshot(&self, database: u32) -> Vec<Snapshot> {
        self.slots
            .iter()
            .filter(|s| s.database == database && database != 0)
            .map(|s| Snapshot {
                queue: (s.name_len > 0)
                    .then(|| String::from_utf8_lossy(&s.name[..s.name_len as usize]).into_owned()),
                since: s.since,
                counts: std::array::from_fn(|c| s.counts[c].load(Ordering::Relaxed)),
            })
            .collect()
    }
}

impl Slot {
    fn add(&self, counts: &Counts) {
        for (total, &n) in self.counts.iter().zip(counts) {
            if n > 0 {
                total.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

/// FNV-1a of the database and the name: stable across processes, which a
/// table in shared memory needs (std's hasher is seeded per process).
fn hash(database: u32, key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in database.to_le_bytes().iter().chain(key) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A transaction's counts not yet added to the table: per queue, tagged
/// with the subtransaction that counted them, so a rolled-back
/// subtransaction takes its counts with it.
#[derive(Debug, Default)]
pub struct Pending {
    entries: Vec<(u32, String, Counts)>,
}

impl Pending {
    pub fn add(&mut self, subtransaction: u32, queue: &str, counter: Counter, n: u64) {
        if n == 0 {
            return;
        }
        match self.entries.last_mut() {
            Some((sub, q, counts)) if *sub == subtransaction && q == queue => {
                counts[counter.index()] += n;
            }
            _ => {
                let mut counts = [0; COUNTERS];
                counts[counter.index()] = n;
                self.entries
                    .push((subtransaction, queue.to_string(), counts));
            }
        }
    }

    /// Subtransaction `sub` rolled back: every subtransaction started after
    /// it is its descendant (ids only grow), so their counts go too.
    pub fn roll_back_to(&mut self, sub: u32) {
        self.entries.retain(|(s, _, _)| *s < sub);
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The counts per queue, merged, leaving this empty.
    pub fn take(&mut self) -> Vec<(String, Counts)> {
        let mut merged: Vec<(String, Counts)> = Vec::new();
        for (_, queue, counts) in self.entries.drain(..) {
            match merged.iter_mut().find(|(q, _)| *q == queue) {
                Some((_, total)) => {
                    for (t, n) in total.iter_mut().zip(counts) {
                        *t += n;
                    }
                }
                None => merged.push((queue, counts)),
            }
        }
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: Taker = Taker {
        role: 10,
        exempt: true,
    };

    fn tenant(role: u32) -> Taker {
        Taker {
            role,
            exempt: false,
        }
    }

    fn one(counter: Counter, n: u64) -> Counts {
        let mut c = [0; COUNTERS];
        c[counter.index()] = n;
        c
    }

    fn counts_of(table: &Table, db: u32, queue: Option<&str>) -> Option<Counts> {
        table
            .snapshot(db)
            .into_iter()
            .find(|s| s.queue.as_deref() == queue)
            .map(|s| s.counts)
    }

    #[test]
    fn a_queue_gets_a_slot_then_adds_under_the_shared_lock() {
        let mut t = Table::new_boxed();
        assert!(!t.add_existing(5, &Owner::Queue("a"), &one(Counter::Enqueued, 1)));
        assert!(t.add_new(5, &Owner::Queue("a"), &one(Counter::Enqueued, 1), 42, ROOT));
        assert!(t.add_existing(5, &Owner::Queue("a"), &one(Counter::Completed, 3)));
        let snap = t.snapshot(5);
        assert_eq!(snap.len(), 1);
        assert_eq!(snap[0].queue.as_deref(), Some("a"));
        assert_eq!(snap[0].since, 42);
        assert_eq!(snap[0].counts, [1, 3, 0, 0, 0, 0]);
    }

    #[test]
    fn databases_and_names_are_kept_apart() {
        let mut t = Table::new_boxed();
        t.add_new(1, &Owner::Queue("a"), &one(Counter::Failed, 1), 0, ROOT);
        t.add_new(2, &Owner::Queue("a"), &one(Counter::Failed, 2), 0, ROOT);
        t.add_new(1, &Owner::Queue("ab"), &one(Counter::Failed, 4), 0, ROOT);
        assert_eq!(counts_of(&t, 1, Some("a")).unwrap()[2], 1);
        assert_eq!(counts_of(&t, 2, Some("a")).unwrap()[2], 2);
        assert_eq!(counts_of(&t, 1, Some("ab")).unwrap()[2], 4);
        assert_eq!(t.snapshot(3), vec![]);
    }

    #[test]
    fn queues_beyond_the_table_count_in_their_databases_overflow_bucket() {
        let mut t = Table::new_boxed();
        let named = SLOTS - OVERFLOW_RESERVE;
        for i in 0..named + 10 {
            assert!(t.add_new(
                1,
                &Owner::Queue(&format!("q{i}")),
                &one(Counter::Enqueued, 1),
                0,
                ROOT
            ));
        }
        let snap = t.snapshot(1);
        assert_eq!(snap.iter().filter(|s| s.queue.is_some()).count(), named);
        assert_eq!(counts_of(&t, 1, None), Some(one(Counter::Enqueued, 10)));
        // Every count is somewhere: nothing dropped.
        let total: u64 = snap.iter().map(|s| s.counts[0]).sum();
        assert_eq!(total as usize, named + 10);
        // Another database still gets its bucket from the reserve.
        assert!(t.add_new(2, &Owner::Queue("x"), &one(Counter::Cancelled, 1), 0, ROOT));
        assert_eq!(counts_of(&t, 2, None), Some(one(Counter::Cancelled, 1)));
        assert_eq!(counts_of(&t, 2, Some("x")), None);
    }

    /// One tenant's thousands of queues take at most half the queue slots
    /// and its share of the rest; another tenant's new queue still gets a
    /// slot of its own, and the hog's further queues count in the bucket.
    #[test]
    fn one_role_cannot_take_every_other_roles_slots() {
        let mut t = Table::new_boxed();
        for i in 0..1000 {
            let queue = format!("hog{i}");
            assert!(t.add_new(
                1,
                &Owner::Queue(&queue),
                &one(Counter::Enqueued, 1),
                0,
                tenant(100)
            ));
        }
        let named = |t: &Table| t.snapshot(1).iter().filter(|s| s.queue.is_some()).count();
        let held = named(&t);
        assert_eq!(held, (SLOTS - OVERFLOW_RESERVE) / 2);
        assert!(held < SLOTS - OVERFLOW_RESERVE);
        assert!(t.add_new(
            1,
            &Owner::Queue("other"),
            &one(Counter::Enqueued, 1),
            0,
            tenant(200)
        ));
        assert_eq!(
            counts_of(&t, 1, Some("other")),
            Some(one(Counter::Enqueued, 1))
        );
        assert_eq!(
            counts_of(&t, 1, None),
            Some(one(Counter::Enqueued, 1000 - held as u64))
        );
        // Exempt takers (superusers, the reapers) are not held to a share.
        assert!(t.add_new(
            1,
            &Owner::Queue("root"),
            &one(Counter::Enqueued, 1),
            0,
            ROOT
        ));
        assert_eq!(
            counts_of(&t, 1, Some("root")),
            Some(one(Counter::Enqueued, 1))
        );
        // Below half the table, a role takes what it needs.
        let mut t = Table::new_boxed();
        for i in 0..ROLE_SHARE + 10 {
            t.add_new(
                1,
                &Owner::Queue(&format!("q{i}")),
                &one(Counter::Enqueued, 1),
                0,
                tenant(100),
            );
        }
        assert_eq!(named(&t), ROLE_SHARE + 10);
    }

    #[test]
    fn a_full_table_drops_counts_instead_of_looping() {
        let mut t = Table::new_boxed();
        for db in 1..=SLOTS as u32 {
            t.add_new(db, &Owner::Overflow, &one(Counter::Enqueued, 1), 0, ROOT);
        }
        assert!(!t.add_new(
            SLOTS as u32 + 1,
            &Owner::Queue("a"),
            &one(Counter::Enqueued, 1),
            0,
            ROOT
        ));
        // Slots already taken still count.
        assert!(t.add_existing(1, &Owner::Overflow, &one(Counter::Enqueued, 1)));
    }

    #[test]
    fn pending_counts_merge_per_queue_and_roll_back_with_their_subtransaction() {
        let mut p = Pending::default();
        p.add(1, "a", Counter::Enqueued, 2);
        p.add(1, "a", Counter::Completed, 1);
        p.add(2, "b", Counter::Enqueued, 5);
        p.add(3, "a", Counter::Enqueued, 7);
        p.add(3, "a", Counter::Failed, 0);
        p.roll_back_to(3);
        assert_eq!(
            p.take(),
            vec![
                ("a".to_string(), [2, 1, 0, 0, 0, 0]),
                ("b".to_string(), [5, 0, 0, 0, 0, 0])
            ]
        );
        assert!(p.is_empty());
        p.add(4, "a", Counter::Enqueued, 1);
        p.roll_back_to(2);
        assert!(p.take().is_empty());
    }
}
