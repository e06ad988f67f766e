//! A lease in flight: extending it (`heartbeat`) and handing the task back
//! unworked (`release`).

use pgrx::datum::Interval;

use crate::datum::RawJsonb;
use crate::errors::Result;
use crate::store::flow::{self, keys_of, SlotChanges};
use crate::store::{execute, with_client, Statement, INT8, INTERVAL, JSONB, TEXT};

pub(super) static HEARTBEAT: Statement = Statement {
    sql: "UPDATE aedb_queue.task
          SET lease_deadline = $6 + $4, progress = COALESCE($5, progress),
              updated_at = $6
          WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
          RETURNING task_id",
    args: &[INT8, TEXT, INT8, INTERVAL, JSONB],
    clock: true,
};

/// Hands a task back unworked: `$4` is the new state (ready, or scheduled
/// after the delay `$5`); the claim's attempt is not counted, the progress
/// stays. Returns the concurrency key (the slot is freed unless it stays
/// ready); an ordered task stays its line's head.
pub(super) static RELEASE: Statement = Statement {
    sql: "UPDATE aedb_queue.task
          SET state = $4::aedb_queue.task_state, not_before = $6 + $5,
              attempts = greatest(attempts - 1, 0),
              owner_id = NULL, lease_deadline = NULL, updated_at = $6
          WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
          RETURNING task_id, concurrency_key, NULL::text",
    args: &[INT8, TEXT, INT8, TEXT, INTERVAL],
    clock: true,
};

pub fn heartbeat(
    queue: &str,
    task_id: i64,
    fencing_token: i64,
    extend: Interval,
    progress: Option<RawJsonb>,
) -> Result<bool> {
    with_client(|client| {
        let args = [
            task_id.into(),
            queue.into(),
            fencing_token.into(),
            extend.into(),
            progress.into(),
        ];
        Ok(!execute(client, &HEARTBEAT, &args)?.is_empty())
    })
}

/// Hands the task back if it is in flight under `fencing_token` (see
/// RELEASE). None if the fence failed, else the queues where tasks became
/// ready.
pub fn release(
    queue: &str,
    task_id: i64,
    fencing_token: i64,
    delay: Interval,
    ready: bool,
) -> Result<Option<Vec<String>>> {
    with_client(|client| {
        let state = if ready { "ready" } else { "scheduled" };
        let args = [
            task_id.into(),
            queue.into(),
            fencing_token.into(),
            state.into(),
            delay.into(),
        ];
        let rows = execute(client, &RELEASE, &args)?;
        let mut slots = SlotChanges::default();
        let Some(()) = rows.first(|row| keys_of(&mut slots, queue, task_id, row, 2, !ready))?
        else {
            return Ok(None);
        };
        let mut woken = flow::settle_in(client, slots)?;
        if ready {
            woken.push(queue.to_string());
        }
        Ok(Some(woken))
    })
}
