//! Concurrency keys' slots (`aedb_queue.concurrency_slot`).

use std::collections::BTreeMap;

use pgrx::spi::SpiClient;

use super::super::{execute, Statement, INT4, INT4_ARRAY, TEXT, TEXT_ARRAY};
use super::lock::lock_then_settle;
use crate::errors::Result;

/// The keys' slot rows, locked in order (a new one with no slot taken).
pub(crate) static LOCK_SLOTS: Statement = Statement {
    sql: lock_key_rows!("concurrency_slot", "taken", "0"),
    args: &[TEXT_ARRAY, TEXT_ARRAY],
    clock: false,
};

/// Run after LOCK_SLOTS, in a snapshot that sees every blocked task of the
/// locked keys committed before the locks were granted: frees `$3[i]` slots
/// of each key, gives the free slots to its first blocked tasks in service
/// order, and drops the rows left with no slot taken (unless they hold a
/// key's limit). Returns the queues where tasks became ready. A blocked
/// task being cancelled is waited for (`FOR UPDATE`), and passed over once
/// gone, so a free slot never goes to a task that is not there; the locked
/// tasks are then written by the ctid their lock returned (a Tid Scan, as
/// claims do; a condition on their state would let the planner read every
/// blocked task of every key instead).
pub(crate) static SETTLE_SLOTS: Statement = Statement {
    sql: concat!(
        "WITH slot AS (
              SELECT s.queue, s.key, s.taken - r.freed AS taken,
                     coalesce(s.concurrency_limit, q.concurrency_limit, 1) AS cap,
                     s.concurrency_limit IS NOT NULL AS has_limit
              FROM unnest($1::text[], $2::text[], $3::int[]) AS r(queue, key, freed)
              JOIN aedb_queue.concurrency_slot s ON s.queue = r.queue AND s.key = r.key
              LEFT JOIN aedb_queue.queue q ON q.name = r.queue),
          given AS (
              UPDATE aedb_queue.task t SET state = 'ready', updated_at = $4
              WHERE t.ctid = ANY(ARRAY(
                  SELECT b.ctid FROM slot s CROSS JOIN LATERAL (
                      SELECT ctid FROM aedb_queue.task
                      WHERE queue = s.queue AND concurrency_key = s.key AND ordering_key IS NULL
                        AND state = 'blocked'
                      ORDER BY ",
        blocked_order!(),
        "
                      LIMIT greatest(s.cap - s.taken, 0)
                      FOR UPDATE) b))
              RETURNING t.queue, t.concurrency_key),
          counted AS (
              SELECT s.queue, s.key, s.has_limit,
                     s.taken + (SELECT count(*) FROM given g
                                WHERE g.queue = s.queue AND g.concurrency_key = s.key) AS taken
              FROM slot s),
          kept AS (
              UPDATE aedb_queue.concurrency_slot s SET taken = c.taken
              FROM counted c
              WHERE s.queue = c.queue AND s.key = c.key AND (c.taken > 0 OR c.has_limit)
              RETURNING 1),
          dropped AS (
              DELETE FROM aedb_queue.concurrency_slot s
              USING counted c
              WHERE s.queue = c.queue AND s.key = c.key AND c.taken <= 0 AND NOT c.has_limit
              RETURNING 1)
          SELECT ARRAY(SELECT DISTINCT queue FROM given),
                 (SELECT count(*) FROM kept) + (SELECT count(*) FROM dropped)"
    ),
    args: &[TEXT_ARRAY, TEXT_ARRAY, INT4_ARRAY],
    clock: true,
};

pub(super) fn settle_slots_in(
    client: &mut SpiClient<'_>,
    changes: BTreeMap<(String, String), i32>,
) -> Result<Vec<String>> {
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    if changes.len() == 1 {
        let ((queue, key), freed) = changes.into_iter().next().expect("one change");
        return settle_one_slot_in(client, &queue, &key, freed);
    }
    lock_then_settle(client, changes, &LOCK_SLOTS, &SETTLE_SLOTS)
}

/// LOCK_SLOTS for one key whose row exists (a slot is freed): a plain lock.
static LOCK_ONE_SLOT: Statement = Statement {
    sql: "SELECT 1 FROM aedb_queue.concurrency_slot WHERE queue = $1 AND key = $2 FOR UPDATE",
    args: &[TEXT, TEXT],
    clock: false,
};

/// SETTLE_SLOTS for one key ($1, $2) freeing $3 slots: fewer plan nodes,
/// so about a third of the instructions. Returns the slots now taken (no
/// row: the key has none) and whether a task became ready.
pub(crate) static SETTLE_ONE_SLOT: Statement = Statement {
    sql: concat!("WITH slot AS (
              SELECT s.taken - $3 AS taken,
                     coalesce(s.concurrency_limit,
                              (SELECT q.concurrency_limit FROM aedb_queue.queue q WHERE q.name = $1), 1) AS cap
              FROM aedb_queue.concurrency_slot s WHERE s.queue = $1 AND s.key = $2),
          given AS (
              UPDATE aedb_queue.task t SET state = 'ready', updated_at = $4
              WHERE t.ctid = ANY(ARRAY(
                  SELECT ctid FROM aedb_queue.task
                  WHERE queue = $1 AND concurrency_key = $2 AND ordering_key IS NULL
                    AND state = 'blocked'
                  ORDER BY ", blocked_order!(), "
                  LIMIT (SELECT greatest(cap - taken, 0) FROM slot)
                  FOR UPDATE))
              RETURNING 1)
          UPDATE aedb_queue.concurrency_slot s SET taken = s.taken - $3 + (SELECT count(*) FROM given)
          WHERE s.queue = $1 AND s.key = $2
          RETURNING s.taken, (SELECT count(*) FROM given) > 0, s.concurrency_limit IS NOT NULL"),
    args: &[TEXT, TEXT, INT4],
    clock: true,
};

/// A key's row with no slot taken and no limit of its own goes.
static DROP_IDLE_SLOT: Statement = Statement {
    sql: "DELETE FROM aedb_queue.concurrency_slot
          WHERE queue = $1 AND key = $2 AND taken <= 0 AND concurrency_limit IS NULL",
    args: &[TEXT, TEXT],
    clock: false,
};

/// `settle_slots_in` for one key: lock (creating its row if a task of a new
/// key arrived), settle, and drop the row when nothing is taken.
fn settle_one_slot_in(
    client: &mut SpiClient<'_>,
    queue: &str,
    key: &str,
    freed: i32,
) -> Result<Vec<String>> {
    let locked = !execute(client, &LOCK_ONE_SLOT, &[queue.into(), key.into()])?.is_empty();
    if !locked {
        let (queues, keys) = (vec![queue.to_owned()], vec![key.to_owned()]);
        execute(client, &LOCK_SLOTS, &[queues.into(), keys.into()])?;
    }
    let rows = execute(
        client,
        &SETTLE_ONE_SLOT,
        &[queue.into(), key.into(), freed.into()],
    )?;
    let (taken, woke, has_limit) = rows
        .first(|row| {
            Ok((
                row.get::<i32>(1)?.unwrap_or(0),
                row.get::<bool>(2)? == Some(true),
                row.get::<bool>(3)? == Some(true),
            ))
        })?
        .unwrap_or((0, false, true));
    if taken <= 0 && !has_limit {
        execute(client, &DROP_IDLE_SLOT, &[queue.into(), key.into()])?;
    }
    Ok(if woke {
        vec![queue.to_owned()]
    } else {
        Vec::new()
    })
}
