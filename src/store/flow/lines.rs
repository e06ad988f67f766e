//! Ordering keys' lines (`aedb_queue.ordering_slot`).

use std::collections::BTreeMap;

use pgrx::spi::SpiClient;

use super::super::{Statement, INT8_ARRAY, TEXT_ARRAY};
use super::lock::lock_then_settle;
use crate::errors::Result;

/// LOCK_SLOTS for ordering keys: their rows (a new one with no head yet),
/// taken in order.
pub(crate) static LOCK_LINES: Statement = Statement {
    sql: lock_key_rows!("ordering_slot", "head", "NULL::bigint"),
    args: &[TEXT_ARRAY, TEXT_ARRAY],
    clock: false,
};

/// Run after LOCK_LINES, as SETTLE_SLOTS is: a key whose head is `$3[i]`
/// (it completed or went) or that has none gets the first task of its line
/// by id as its head, ready or, if its delay has not passed, scheduled; a
/// key left with no task in line loses its row. Returns the queues where
/// tasks became ready.
pub(crate) static SETTLE_LINES: Statement = Statement {
    sql: concat!("WITH line AS (
              SELECT o.queue, o.key, CASE WHEN o.head = r.gone THEN NULL ELSE o.head END AS head
              FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(queue, key, gone)
              JOIN aedb_queue.ordering_slot o ON o.queue = r.queue AND o.key = r.key),
          given AS (
              UPDATE aedb_queue.task t
              SET state = CASE WHEN t.not_before > $4 THEN 'scheduled' ELSE 'ready' END::aedb_queue.task_state,
                  updated_at = $4
              WHERE t.ctid = ANY(ARRAY(
                  SELECT n.ctid FROM line l CROSS JOIN LATERAL (
                      SELECT ctid FROM aedb_queue.task
                      WHERE queue = l.queue AND ordering_key = l.key AND concurrency_key IS NULL
                        AND state = 'blocked'
                      ORDER BY ", blocked_order!(), " LIMIT 1 FOR UPDATE) n
                  WHERE l.head IS NULL))
              RETURNING t.queue, t.ordering_key, t.task_id, t.state),
          heads AS (
              SELECT l.queue, l.key,
                     coalesce(l.head, (SELECT g.task_id FROM given g
                                       WHERE g.queue = l.queue AND g.ordering_key = l.key)) AS head
              FROM line l),
          kept AS (
              UPDATE aedb_queue.ordering_slot o SET head = h.head
              FROM heads h WHERE o.queue = h.queue AND o.key = h.key AND h.head IS NOT NULL
              RETURNING 1),
          dropped AS (
              DELETE FROM aedb_queue.ordering_slot o
              USING heads h WHERE o.queue = h.queue AND o.key = h.key AND h.head IS NULL
              RETURNING 1)
          SELECT ARRAY(SELECT DISTINCT queue FROM given WHERE state = 'ready'),
                 (SELECT count(*) FROM kept) + (SELECT count(*) FROM dropped)"),
    args: &[TEXT_ARRAY, TEXT_ARRAY, INT8_ARRAY],
    clock: true,
};

pub(super) fn settle_lines_in(
    client: &mut SpiClient<'_>,
    changes: BTreeMap<(String, String), Option<i64>>,
) -> Result<Vec<String>> {
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    lock_then_settle(client, changes, &LOCK_LINES, &SETTLE_LINES)
}
