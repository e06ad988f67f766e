//! What a changed setting settles: a concurrency limit of a queue or key
//! (ready tasks over it go back to blocked, blocked ones get the slots it
//! adds), and a queue that now releases dead heads (their lines move on).

use pgrx::spi::SpiClient;

use super::super::{execute, Statement, INT4, TEXT, TEXT_ARRAY};
use super::slots::LOCK_SLOTS;
use super::{settle_in, SlotChanges};
use crate::errors::Result;

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
    execute(client, &LOCK_SLOTS, &[queues.into(), keys.clone().into()])?;
    execute(client, &DEMOTE_EXCESS, &[queue.into(), keys.into()])?;
    settle_in(client, changes)
}

/// Sets (or with None clears) the key's own limit and applies it.
pub(crate) fn set_key_limit(queue: &str, key: &str, limit: Option<i32>) -> Result<Vec<String>> {
    super::super::with_client(|client| {
        execute(
            client,
            &SET_KEY_LIMIT,
            &[queue.into(), key.into(), limit.into()],
        )?;
        limits_changed_in(client, queue, Some(key))
    })
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
pub(crate) fn release_dead_heads_in(
    client: &mut SpiClient<'_>,
    queue: &str,
) -> Result<Vec<String>> {
    let mut changes = SlotChanges::default();
    for (key, head) in execute(client, &DEAD_HEADS, &[queue.into()])?
        .map(|row| Ok((row.required::<String>(1)?, row.required::<i64>(2)?)))?
    {
        changes.head_left(queue, &key, head);
    }
    settle_in(client, changes)
}
