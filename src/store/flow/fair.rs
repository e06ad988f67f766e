//! Fair share's virtual start times (`aedb_queue.fairness_key`).

use pgrx::spi::SpiClient;

use super::super::{execute, Statement, INT4, TEXT};
use crate::errors::Result;

/// The next `$3` virtual start times of fairness key ($1, $2): each
/// 1000 / weight after the key's last, starting no earlier than the queue's
/// head (the lowest virtual time ready), so a key that was idle gets no
/// credit for it. Returns the last time taken and the step. The key's row
/// is held to commit: producers of one key take their times in turn.
static TAKE_VIRTUAL_TIMES: Statement = Statement {
    sql: "WITH head AS (
              SELECT coalesce((SELECT coalesce(t.fair_vt, t.task_id) FROM aedb_queue.task t
                               WHERE t.queue = $1 AND t.state = 'ready'
                               ORDER BY t.priority DESC, -coalesce(t.fair_vt, t.task_id) DESC LIMIT 1), 0) AS vt)
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
    Ok((0..n as i64)
        .map(|i| last - (n as i64 - 1 - i) * step)
        .collect())
}

/// Sets fairness key ($1, $2)'s weight ($3; NULL: 1).
static SET_FAIR_WEIGHT: Statement = Statement {
    sql: "INSERT INTO aedb_queue.fairness_key AS f (queue, key, vt, weight) VALUES ($1, $2, 0, $3)
          ON CONFLICT (queue, key) DO UPDATE SET weight = $3",
    args: &[TEXT, TEXT, INT4],
    clock: false,
};

pub(crate) fn set_fair_weight(queue: &str, key: &str, weight: Option<i32>) -> Result<()> {
    super::super::with_client(|client| {
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
/// key's last: when fair share is turned on. Reads every task of the
/// table once (no index holds a queue's tasks of every state).
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

/// Queue $1 no longer shares its claims: its tasks lose their virtual
/// times, so they are served first in, first out. Reads every task, as
/// BACKFILL_VIRTUAL_TIMES does.
static CLEAR_VIRTUAL_TIMES: Statement = Statement {
    sql: "UPDATE aedb_queue.task SET fair_vt = NULL WHERE queue = $1 AND fair_vt IS NOT NULL",
    args: &[TEXT],
    clock: false,
};

pub(crate) fn clear_virtual_times_in(client: &mut SpiClient<'_>, queue: &str) -> Result<()> {
    execute(client, &CLEAR_VIRTUAL_TIMES, &[queue.into()])?;
    Ok(())
}
