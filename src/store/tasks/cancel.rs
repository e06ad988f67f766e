//! Cancelling a task in any state (CANCEL).

use crate::counters::{self, Counter};
use crate::errors::Result;
use crate::store::flow::{self, keys_of, SlotChanges};
use crate::store::{execute, with_client, SchemaLevel, Statement, Versioned, INT8, TEXT};

/// Returns whether the task had dependents, and the concurrency key whose
/// slot it held (when it was ready or in flight).
macro_rules! cancel {
    ($deps:literal, $key:literal) => {
        concat!(
            "DELETE FROM aedb_queue.task WHERE task_id = $1 AND queue = $2
             RETURNING ",
            $deps,
            " IS TRUE, ",
            $key
        )
    };
}

pub(super) static CANCEL: Versioned = Versioned {
    current: Statement {
        sql: cancel!(
            "has_dependents",
            "CASE WHEN state IN ('ready', 'in_flight') THEN concurrency_key END,
             CASE WHEN state <> 'blocked' THEN ordering_key END"
        ),
        args: &[INT8, TEXT],
        clock: false,
    },
    older: &[
        (
            SchemaLevel::V060,
            Statement {
                sql: cancel!("has_dependents", "NULL::text, NULL::text"),
                args: &[INT8, TEXT],
                clock: false,
            },
        ),
        (
            SchemaLevel::V050,
            Statement {
                sql: cancel!("NULL::boolean", "NULL::text, NULL::text"),
                args: &[INT8, TEXT],
                clock: false,
            },
        ),
    ],
};

/// Deletes the task; a cancelled parent's children follow their policies.
/// None if there was no such task, else the queues where children became ready.
pub fn cancel(queue: &str, task_id: i64) -> Result<Option<Vec<String>>> {
    with_client(|client| {
        let rows = execute(client, CANCEL.get(), &[task_id.into(), queue.into()])?;
        let mut slots = SlotChanges::default();
        let Some(has_dependents) = rows.first(|row| {
            keys_of(&mut slots, queue, task_id, row, 2, true)?;
            Ok(row.get::<bool>(1)? == Some(true))
        })?
        else {
            return Ok(None);
        };
        counters::count(queue, Counter::Cancelled, 1);
        let mut woken = flow::settle_in(client, slots)?;
        if has_dependents {
            woken.extend(crate::store::dependency::parents_failed_in(
                client,
                vec![task_id],
                "was cancelled",
            )?);
        }
        Ok(Some(woken))
    })
}
