//! Concurrency keys' slots (`aedb_queue.concurrency_slot`).
//!
//! A task with a concurrency key that becomes due (enqueued, its timer or
//! retry delay passed, its parents completed, re-driven) enters `blocked`,
//! and a task that stops being ready or in flight (completed, cancelled,
//! retried later, dead) frees its slot. Every statement that does either
//! returns the keys it touched; `settle_in` then locks those keys' rows and
//! hands each free slot to the key's first blocked task. A claim never
//! looks at keys: it finds only ready tasks, each of which holds a slot, so
//! a key's blocked tasks cost a claim nothing (docs/flow-control.md).

use std::collections::BTreeMap;

use aedb_queue_core::flow::{Bucket, RateLimit};
use pgrx::spi::SpiClient;

use super::{
    execute, Statement, INT4, INT4_ARRAY, INT8, INT8_ARRAY, TEXT, TEXT_ARRAY, TIMESTAMPTZ,
};
use crate::errors::Result;

/// Takes the rows of keys `($1[i], $2[i])`, in that order (sorted, so two
/// transactions never wait for each other's keys in a cycle), creating the
/// missing ones. `WHERE false` locks an existing row without writing it.
pub(super) static LOCK_SLOTS: Statement = Statement {
    sql: "INSERT INTO aedb_queue.concurrency_slot AS s (queue, key, taken)
          SELECT r.queue, r.key, 0
          FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS r(queue, key, i)
          ORDER BY r.i
          ON CONFLICT (queue, key) DO UPDATE SET taken = s.taken WHERE false",
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
pub(super) static SETTLE_SLOTS: Statement = Statement {
    sql: "WITH slot AS (
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
                      WHERE queue = s.queue AND concurrency_key = s.key AND state = 'blocked'
                      ORDER BY priority DESC, -task_id DESC
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
                 (SELECT count(*) FROM kept) + (SELECT count(*) FROM dropped)",
    args: &[TEXT_ARRAY, TEXT_ARRAY, INT4_ARRAY],
    clock: true,
};

/// The keys of every queue a statement touched: per (queue, key), how many
/// slots it freed (0: it only made tasks of the key blocked); per ordering
/// key, the head that left (None: tasks only joined its line).
#[derive(Debug, Default)]
pub(crate) struct SlotChanges {
    freed: BTreeMap<(String, String), i32>,
    left: BTreeMap<(String, String), Option<i64>>,
}

impl SlotChanges {
    /// Tasks of the key became due (blocked, waiting for a slot).
    pub(crate) fn arrived(&mut self, queue: &str, key: &str) {
        self.freed
            .entry((queue.to_owned(), key.to_owned()))
            .or_insert(0);
    }

    /// A task of the key stopped holding one of its slots.
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

fn settle_slots_in(
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

/// Takes the rows of the changed keys with `lock` (its parameters: the
/// queues and the keys, in key order), then runs `settle` in a statement of
/// its own with each key's change as well; the queues where tasks became
/// ready (`settle`'s first column).
fn lock_then_settle<T>(
    client: &mut SpiClient<'_>,
    changes: BTreeMap<(String, String), T>,
    lock: &'static Statement,
    settle: &'static Statement,
) -> Result<Vec<String>>
where
    Vec<T>: pgrx::IntoDatum,
{
    let mut queues = Vec::with_capacity(changes.len());
    let mut keys = Vec::with_capacity(changes.len());
    let mut each = Vec::with_capacity(changes.len());
    for ((queue, key), change) in changes {
        queues.push(queue);
        keys.push(key);
        each.push(change);
    }
    execute(client, lock, &[queues.clone().into(), keys.clone().into()])?;
    let rows = execute(client, settle, &[queues.into(), keys.into(), each.into()])?;
    Ok(rows
        .first(|row| row.get::<Vec<String>>(1))?
        .flatten()
        .unwrap_or_default())
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
pub(super) static SETTLE_ONE_SLOT: Statement = Statement {
    sql: "WITH slot AS (
              SELECT s.taken - $3 AS taken,
                     coalesce(s.concurrency_limit,
                              (SELECT q.concurrency_limit FROM aedb_queue.queue q WHERE q.name = $1), 1) AS cap
              FROM aedb_queue.concurrency_slot s WHERE s.queue = $1 AND s.key = $2),
          given AS (
              UPDATE aedb_queue.task t SET state = 'ready', updated_at = $4
              WHERE t.ctid = ANY(ARRAY(
                  SELECT ctid FROM aedb_queue.task
                  WHERE queue = $1 AND concurrency_key = $2 AND state = 'blocked'
                  ORDER BY priority DESC, -task_id DESC
                  LIMIT (SELECT greatest(cap - taken, 0) FROM slot)
                  FOR UPDATE))
              RETURNING 1)
          UPDATE aedb_queue.concurrency_slot s SET taken = s.taken - $3 + (SELECT count(*) FROM given)
          WHERE s.queue = $1 AND s.key = $2
          RETURNING s.taken, (SELECT count(*) FROM given) > 0, s.concurrency_limit IS NOT NULL",
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
    Ok(if woke { vec![queue.to_owned()] } else { Vec::new() })
}

/// The keys of queue $1 that have a row, in order.
static QUEUE_KEYS: Statement = Statement {
    sql: "SELECT key FROM aedb_queue.concurrency_slot WHERE queue = $1 ORDER BY key",
    args: &[TEXT],
    clock: false,
};

/// Sets key ($1, $2)'s own limit ($3; NULL: the queue's), taking its row.
static SET_KEY_LIMIT: Statement = Statement {
    sql: "INSERT INTO aedb_queue.concurrency_slot AS s (queue, key, taken, concurrency_limit)
          VALUES ($1, $2, 0, $3)
          ON CONFLICT (queue, key) DO UPDATE SET concurrency_limit = $3",
    args: &[TEXT, TEXT, INT4],
    clock: false,
};

/// After a limit was lowered (the keys' rows locked): the ready tasks of
/// each key of queue $1 in $2 beyond its limit go back to blocked, the last
/// in service order first, so no more than the limit can be claimed.
/// Tasks already in flight keep running.
static DEMOTE_EXCESS: Statement = Statement {
    sql: "WITH over AS (
              SELECT s.key,
                     s.taken - coalesce(s.concurrency_limit, q.concurrency_limit, 1) AS excess
              FROM aedb_queue.concurrency_slot s
              LEFT JOIN aedb_queue.queue q ON q.name = s.queue
              WHERE s.queue = $1 AND s.key = ANY($2)),
          ranked AS (
              SELECT t.task_id, t.concurrency_key,
                     row_number() OVER (PARTITION BY t.concurrency_key
                                        ORDER BY t.priority, t.task_id DESC) AS n
              FROM aedb_queue.task t
              WHERE t.queue = $1 AND t.state = 'ready'
                AND t.concurrency_key IN (SELECT key FROM over WHERE excess > 0)),
          demoted AS (
              UPDATE aedb_queue.task t SET state = 'blocked', updated_at = $3
              FROM ranked r JOIN over o ON o.key = r.concurrency_key
              WHERE t.task_id = r.task_id AND r.n <= o.excess AND t.state = 'ready'
              RETURNING t.concurrency_key),
          counted AS (SELECT concurrency_key AS key, count(*) AS n FROM demoted GROUP BY 1)
          UPDATE aedb_queue.concurrency_slot s SET taken = s.taken - c.n
          FROM counted c WHERE s.queue = $1 AND s.key = c.key",
    args: &[TEXT, TEXT_ARRAY],
    clock: true,
};

/// After the limit of `key` (None: of the queue, so of every key) changed:
/// ready tasks over a lowered limit go back to blocked, and blocked ones get
/// the slots a raised limit adds.
pub(crate) fn limits_changed_in(
    client: &mut SpiClient<'_>,
    queue: &str,
    key: Option<&str>,
) -> Result<Vec<String>> {
    let keys = match key {
        Some(key) => vec![key.to_owned()],
        None => execute(client, &QUEUE_KEYS, &[queue.into()])?.map(|row| row.required(1))?,
    };
    let mut changes = SlotChanges::default();
    changes.all(queue, &keys, false);
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let queues = vec![queue.to_owned(); keys.len()];
    execute(
        client,
        &LOCK_SLOTS,
        &[queues.into(), keys.clone().into()],
    )?;
    execute(client, &DEMOTE_EXCESS, &[queue.into(), keys.into()])?;
    settle_in(client, changes)
}

/// Sets (or with None clears) the key's own limit and applies it.
pub(crate) fn set_key_limit(queue: &str, key: &str, limit: Option<i32>) -> Result<Vec<String>> {
    super::with_client(|client| {
        execute(
            client,
            &SET_KEY_LIMIT,
            &[queue.into(), key.into(), limit.into()],
        )?;
        limits_changed_in(client, queue, Some(key))
    })
}

/// The bucket of queue $1, taken: a claim that finds it taken by another
/// gets no tokens (SKIP LOCKED) rather than waiting.
static TAKE_BUCKET: Statement = Statement {
    sql: "SELECT micro_tokens, at FROM aedb_queue.rate_bucket WHERE queue = $1
          FOR NO KEY UPDATE SKIP LOCKED",
    args: &[TEXT],
    clock: false,
};

static BUCKET_EXISTS: Statement = Statement {
    sql: "SELECT EXISTS (SELECT 1 FROM aedb_queue.rate_bucket WHERE queue = $1)",
    args: &[TEXT],
    clock: false,
};

/// A full bucket ($2 micro-tokens) for a queue that has none (its rows
/// were restored without it): the first claim makes it.
static MAKE_BUCKET: Statement = Statement {
    sql: "INSERT INTO aedb_queue.rate_bucket (queue, micro_tokens, at) VALUES ($1, $2, $3)
          ON CONFLICT DO NOTHING RETURNING micro_tokens, at",
    args: &[TEXT, INT8],
    clock: true,
};

static PUT_BUCKET: Statement = Statement {
    sql: "UPDATE aedb_queue.rate_bucket SET micro_tokens = $2, at = $3 WHERE queue = $1",
    args: &[TEXT, INT8, TIMESTAMPTZ],
    clock: false,
};

/// A new limit: a full bucket for a queue newly limited, else the tokens
/// it holds, up to the new burst ($2).
static SET_BUCKET: Statement = Statement {
    sql: "INSERT INTO aedb_queue.rate_bucket AS b (queue, micro_tokens, at) VALUES ($1, $2, $3)
          ON CONFLICT (queue) DO UPDATE SET micro_tokens = least(b.micro_tokens, $2)",
    args: &[TEXT, INT8],
    clock: true,
};

static DROP_BUCKET: Statement = Statement {
    sql: "DELETE FROM aedb_queue.rate_bucket WHERE queue = $1",
    args: &[TEXT],
    clock: false,
};

/// After `queue_configure`: the queue's bucket for its limit, or none.
pub(crate) fn rate_changed_in(
    client: &mut SpiClient<'_>,
    queue: &str,
    limit: Option<RateLimit>,
) -> Result<()> {
    match limit {
        Some(limit) => execute(
            client,
            &SET_BUCKET,
            &[queue.into(), limit.full(0).micro_tokens.into()],
        )?,
        None => execute(client, &DROP_BUCKET, &[queue.into()])?,
    };
    Ok(())
}

/// Claims through `claim` at most what the queue's bucket holds (and at
/// most `want`), taking a token per task claimed. Never waits: with the
/// bucket empty, or taken by a claim in another transaction, it claims
/// nothing.
pub(crate) fn claim_with_tokens<T>(
    queue: &str,
    limit: RateLimit,
    want: i32,
    claim: impl FnOnce(i32) -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    let now = crate::clock::now();
    let micros = crate::clock::unix_micros(now);
    let Some(bucket) = super::with_client(|client| take_bucket(client, queue, limit))? else {
        return Ok(Vec::new());
    };
    let (got, left) = limit.take(bucket, micros, want.max(0) as u32);
    if got == 0 {
        return Ok(Vec::new());
    }
    let tasks = claim(got as i32)?;
    let left = limit.give_back(left, got - tasks.len() as u32);
    super::with_client(|client| {
        let at = crate::clock::from_unix_micros(left.at);
        execute(
            client,
            &PUT_BUCKET,
            &[queue.into(), left.micro_tokens.into(), at.into()],
        )?;
        Ok(())
    })?;
    Ok(tasks)
}

/// The bucket, locked by this transaction; None when another holds it.
fn take_bucket(client: &mut SpiClient<'_>, queue: &str, limit: RateLimit) -> Result<Option<Bucket>> {
    let read = |row: &super::Row<'_>| {
        Ok(Bucket {
            micro_tokens: row.required(1)?,
            at: crate::clock::unix_micros(row.required(2)?),
        })
    };
    if let Some(bucket) = execute(client, &TAKE_BUCKET, &[queue.into()])?.first(read)? {
        return Ok(Some(bucket));
    }
    let exists = execute(client, &BUCKET_EXISTS, &[queue.into()])?
        .first(|row| row.get::<bool>(1))?
        .flatten()
        == Some(true);
    if exists {
        return Ok(None);
    }
    let full = limit.full(0).micro_tokens;
    execute(client, &MAKE_BUCKET, &[queue.into(), full.into()])?.first(read)
}

/// LOCK_SLOTS for ordering keys: their rows (a new one with no head yet),
/// taken in order.
pub(super) static LOCK_LINES: Statement = Statement {
    sql: "INSERT INTO aedb_queue.ordering_slot AS o (queue, key, head)
          SELECT r.queue, r.key, NULL
          FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS r(queue, key, i)
          ORDER BY r.i
          ON CONFLICT (queue, key) DO UPDATE SET head = o.head WHERE false",
    args: &[TEXT_ARRAY, TEXT_ARRAY],
    clock: false,
};

/// Run after LOCK_LINES, as SETTLE_SLOTS is: a key whose head is `$3[i]`
/// (it completed or went) or that has none gets the first task of its line
/// by id as its head, ready or, if its delay has not passed, scheduled; a
/// key left with no task in line loses its row. Returns the queues where
/// tasks became ready.
pub(super) static SETTLE_LINES: Statement = Statement {
    sql: "WITH line AS (
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
                      WHERE queue = l.queue AND ordering_key = l.key AND state = 'blocked'
                      ORDER BY task_id LIMIT 1 FOR UPDATE) n
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
                 (SELECT count(*) FROM kept) + (SELECT count(*) FROM dropped)",
    args: &[TEXT_ARRAY, TEXT_ARRAY, INT8_ARRAY],
    clock: true,
};

fn settle_lines_in(
    client: &mut SpiClient<'_>,
    changes: BTreeMap<(String, String), Option<i64>>,
) -> Result<Vec<String>> {
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    lock_then_settle(client, changes, &LOCK_LINES, &SETTLE_LINES)
}

/// The dead heads of queue $1's ordering keys.
static DEAD_HEADS: Statement = Statement {
    sql: "SELECT o.key, o.head FROM aedb_queue.ordering_slot o
          JOIN aedb_queue.task t ON t.task_id = o.head
          WHERE o.queue = $1 AND t.state = 'dead'
          ORDER BY o.key",
    args: &[TEXT],
    clock: false,
};

/// The queue now releases dead heads: those dead already let their lines
/// move on.
pub(crate) fn release_dead_heads_in(client: &mut SpiClient<'_>, queue: &str) -> Result<Vec<String>> {
    let mut changes = SlotChanges::default();
    for (key, head) in execute(client, &DEAD_HEADS, &[queue.into()])?
        .map(|row| Ok((row.required::<String>(1)?, row.required::<i64>(2)?)))?
    {
        changes.head_left(queue, &key, head);
    }
    settle_in(client, changes)
}

/// The next `$3` virtual start times of fairness key ($1, $2): each
/// 1000 / weight after the key's last, starting no earlier than the queue's
/// head (the lowest virtual time ready), so a key that was idle gets no
/// credit for it. Returns the last time taken and the step. The key's row
/// is held to commit: producers of one key take their times in turn.
static TAKE_VIRTUAL_TIMES: Statement = Statement {
    sql: "WITH head AS (
              SELECT coalesce((SELECT t.fair_vt FROM aedb_queue.task t
                               WHERE t.queue = $1 AND t.state = 'ready' AND t.fair_vt IS NOT NULL
                               ORDER BY t.priority DESC, t.fair_vt, t.task_id LIMIT 1), 0) AS vt)
          INSERT INTO aedb_queue.fairness_key AS f (queue, key, vt)
          SELECT $1, $2, h.vt + $3 * 1000 FROM head h
          ON CONFLICT (queue, key) DO UPDATE
              SET vt = greatest(f.vt, excluded.vt - $3 * 1000) + $3 * (1000 / coalesce(f.weight, 1))
          RETURNING vt, 1000 / coalesce(weight, 1)",
    args: &[TEXT, TEXT, INT4],
    clock: false,
};

/// Virtual start times for `n` new tasks of `key` (None: the tasks with no
/// key share one) in a fair-share queue, in order.
pub(crate) fn take_virtual_times(
    client: &mut SpiClient<'_>,
    queue: &str,
    key: Option<&str>,
    n: usize,
) -> Result<Vec<i64>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let rows = execute(
        client,
        &TAKE_VIRTUAL_TIMES,
        &[queue.into(), key.unwrap_or("").into(), (n as i32).into()],
    )?;
    let (last, step) = rows
        .first(|row| Ok((row.required::<i64>(1)?, row.required::<i32>(2)? as i64)))?
        .unwrap_or((0, 1000));
    Ok((0..n as i64).map(|i| last - (n as i64 - 1 - i) * step).collect())
}

/// Sets fairness key ($1, $2)'s weight ($3; NULL: 1).
static SET_FAIR_WEIGHT: Statement = Statement {
    sql: "INSERT INTO aedb_queue.fairness_key AS f (queue, key, vt, weight) VALUES ($1, $2, 0, $3)
          ON CONFLICT (queue, key) DO UPDATE SET weight = $3",
    args: &[TEXT, TEXT, INT4],
    clock: false,
};

pub(crate) fn set_fair_weight(queue: &str, key: &str, weight: Option<i32>) -> Result<()> {
    super::with_client(|client| {
        execute(
            client,
            &SET_FAIR_WEIGHT,
            &[queue.into(), key.into(), weight.into()],
        )?;
        Ok(())
    })
}

/// The tasks of queue $1 with no virtual time yet (enqueued before it
/// shared its claims), given times key by key in task id order after the
/// key's last: once, when fair share is turned on.
static BACKFILL_VIRTUAL_TIMES: Statement = Statement {
    sql: "WITH missing AS (
              SELECT t.task_id, coalesce(t.fairness_key, '') AS key,
                     row_number() OVER (PARTITION BY coalesce(t.fairness_key, '') ORDER BY t.task_id) AS n
              FROM aedb_queue.task t
              WHERE t.queue = $1 AND t.fair_vt IS NULL),
          keys AS (
              INSERT INTO aedb_queue.fairness_key AS f (queue, key, vt)
              SELECT $1, m.key, max(m.n) * 1000 FROM missing m GROUP BY m.key
              ON CONFLICT (queue, key) DO UPDATE
                  SET vt = f.vt + (excluded.vt / 1000) * (1000 / coalesce(f.weight, 1))
              RETURNING key, vt, 1000 / coalesce(weight, 1) AS step),
          counts AS (SELECT key, max(n) AS total FROM missing GROUP BY key)
          UPDATE aedb_queue.task t SET fair_vt = k.vt - (c.total - m.n) * k.step
          FROM missing m JOIN keys k ON k.key = m.key JOIN counts c ON c.key = m.key
          WHERE t.task_id = m.task_id",
    args: &[TEXT],
    clock: false,
};

pub(crate) fn backfill_virtual_times_in(client: &mut SpiClient<'_>, queue: &str) -> Result<()> {
    execute(client, &BACKFILL_VIRTUAL_TIMES, &[queue.into()])?;
    Ok(())
}
