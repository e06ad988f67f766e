//! Flow control's statements (docs/flow-control.md): concurrency keys'
//! slots (`slots`), ordering keys' lines (`lines`), rate limits' buckets
//! (`rate`), fair share's virtual times (`fair`).
//!
//! A task with a concurrency or ordering key that becomes due (enqueued,
//! its timer or retry delay passed, its parents completed, re-driven)
//! enters `blocked`, and a task that stops holding its key (completed,
//! cancelled, retried later, dead) frees it. Every statement that does
//! either returns the keys it touched; `settle_in` then locks those keys'
//! rows and hands what was freed to the keys' first blocked tasks. A claim
//! never looks at keys: it finds only ready tasks, each of which holds its
//! key, so a key's blocked tasks cost a claim nothing.

/// The order of a key's blocked tasks, as `task_blocked_idx` holds them:
/// a concurrency key's in service order, an ordering key's line by id. A
/// statement reading one key's range (`queue = .. AND <key> = .. AND
/// <other key> IS NULL`) names both keys' columns so the planner sees the
/// index's order: the one it fixed drops out, the other is NULL throughout.
macro_rules! blocked_order {
    () => {
        "concurrency_key, ordering_key, (CASE WHEN ordering_key IS NULL THEN priority END) DESC, task_id"
    };
}

/// Takes the rows of keys `($1[i], $2[i])` of `$table`, in that order
/// (sorted, so two transactions never wait for each other's keys in a
/// cycle), creating the missing ones with `$column` = `$initial`. `WHERE
/// false` locks an existing row without writing it.
macro_rules! lock_key_rows {
    ($table:literal, $column:literal, $initial:literal) => {
        concat!(
            "INSERT INTO aedb_queue.",
            $table,
            " AS k (queue, key, ",
            $column,
            ")
             SELECT r.queue, r.key, ",
            $initial,
            "
             FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS r(queue, key, i)
             ORDER BY r.i
             ON CONFLICT (queue, key) DO UPDATE SET ",
            $column,
            " = k.",
            $column,
            " WHERE false"
        )
    };
}

mod changed;
mod fair;
mod lines;
mod lock;
mod rate;
mod slots;

pub(crate) use changed::{limits_changed_in, release_dead_heads_in, set_key_limit};
pub(crate) use fair::{
    backfill_virtual_times_in, clear_virtual_times_in, set_fair_weight, take_virtual_times,
};
#[cfg(any(test, feature = "pg_test"))]
pub(crate) use lines::{LOCK_LINES, SETTLE_LINES};
pub(crate) use rate::{claim_with_tokens, rate_changed_in};
#[cfg(any(test, feature = "pg_test"))]
pub(crate) use slots::{LOCK_SLOTS, SETTLE_ONE_SLOT, SETTLE_SLOTS};

use std::collections::BTreeMap;

use pgrx::spi::SpiClient;

use crate::errors::Result;
use lines::settle_lines_in;
use slots::settle_slots_in;

/// The keys of every queue a statement touched: per (queue, key), how many
/// slots it freed (0: it only made tasks of the key blocked); per ordering
/// key, the head that left (None: tasks only joined its line).
#[derive(Debug, Default)]
pub(crate) struct SlotChanges {
    freed: BTreeMap<(String, String), i32>,
    left: BTreeMap<(String, String), Option<i64>>,
}

impl SlotChanges {
    /// Nothing to settle: no key's slots or lines changed.
    pub(crate) fn is_empty(&self) -> bool {
        self.freed.is_empty() && self.left.is_empty()
    }

    /// Tasks of the key became due (blocked, waiting for a slot).
    pub(crate) fn arrived(&mut self, queue: &str, key: &str) {
        self.freed
            .entry((queue.to_owned(), key.to_owned()))
            .or_insert(0);
    }

    /// A task of the key stopped holding one of its slots.
    /// Task `task_id` of `queue` settled holding these keys: its
    /// concurrency key's slot is freed when `frees`, and its ordering key's
    /// line moves on past it.
    pub(crate) fn settled(
        &mut self,
        queue: &str,
        task_id: i64,
        concurrency_key: Option<String>,
        ordering_key: Option<String>,
        frees: bool,
    ) {
        if let (Some(key), true) = (concurrency_key, frees) {
            self.freed(queue, &key);
        }
        if let Some(key) = ordering_key {
            self.head_left(queue, &key, task_id);
        }
    }

    pub(crate) fn freed(&mut self, queue: &str, key: &str) {
        *self
            .freed
            .entry((queue.to_owned(), key.to_owned()))
            .or_insert(0) += 1;
    }

    /// Every key of `keys` (one queue's) arrived, or freed a slot.
    pub(crate) fn all(&mut self, queue: &str, keys: &[String], freed: bool) {
        for key in keys {
            if freed {
                self.freed(queue, key);
            } else {
                self.arrived(queue, key);
            }
        }
    }

    /// A task of the ordering key joined its line (blocked).
    pub(crate) fn joined(&mut self, queue: &str, key: &str) {
        self.left
            .entry((queue.to_owned(), key.to_owned()))
            .or_insert(None);
    }

    /// Task `task_id` of the ordering key is done with it (completed,
    /// cancelled, released when dead): if it is the head, the next may run.
    pub(crate) fn head_left(&mut self, queue: &str, key: &str, task_id: i64) {
        self.left
            .insert((queue.to_owned(), key.to_owned()), Some(task_id));
    }
}

/// Locks the changed keys and gives their free slots to blocked tasks (and
/// their lines' next tasks to ordering keys whose head left); returns the
/// queues where tasks became ready (none when nothing changed).
pub(crate) fn settle_in(client: &mut SpiClient<'_>, changes: SlotChanges) -> Result<Vec<String>> {
    let mut woken = settle_slots_in(client, changes.freed)?;
    woken.extend(settle_lines_in(client, changes.left)?);
    Ok(woken)
}

/// Reads the concurrency key (column `at`, its slot freed when `frees`) and
/// the ordering key (column `at + 1`, whose line task `task_id` leaves) of a
/// settled task.
pub(crate) fn keys_of(
    slots: &mut SlotChanges,
    queue: &str,
    task_id: i64,
    row: &super::Row<'_>,
    at: usize,
    frees: bool,
) -> Result<()> {
    slots.settled(
        queue,
        task_id,
        row.get::<String>(at)?,
        row.get::<String>(at + 1)?,
        frees,
    );
    Ok(())
}
