//! A failed attempt: locking the task in flight (`lock_for_fail`), then
//! retrying or dead-lettering it (`settle_failure`).

use pgrx::datum::Interval;

use crate::counters::{self, Counter};
use crate::errors::Result;
use crate::store::flow::{self, keys_of, SlotChanges};
use crate::store::{execute, with_client, SchemaLevel, Statement, Versioned, INT8, INTERVAL, TEXT};

pub(super) static LOCK_FOR_FAIL: Statement = Statement {
    sql: "SELECT attempts, max_attempts, backoff_base, backoff_max FROM aedb_queue.task
          WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
          FOR UPDATE",
    args: &[INT8, TEXT, INT8],
    clock: false,
};

/// `$2` is the new state (scheduled, ready or dead); `$3` the retry delay,
/// NULL for dead. Returns whether the task has dependents, its concurrency
/// key (the slot is freed unless it stays ready), and its ordering key if
/// it died and the queue releases dead heads.
/// `$errors` sets the error history (nothing on schemas before 0.8.0).
macro_rules! settle_failure {
    ($deps:literal, $key:literal, $errors:expr) => {
        concat!(
            "UPDATE aedb_queue.task
             SET state = $2::aedb_queue.task_state,
                 not_before = COALESCE($5 + $3, not_before),
                 last_error = $4, owner_id = NULL, lease_deadline = NULL,
                 updated_at = $5",
            $errors,
            "
             WHERE task_id = $1
             RETURNING ",
            $deps,
            " IS TRUE, ",
            $key
        )
    };
}

pub(super) static SETTLE_FAILURE: Versioned = Versioned {
    current: Statement {
        sql: settle_failure!(
            "has_dependents",
            "concurrency_key,
             CASE WHEN state = 'dead' AND (SELECT q.ordering_on_dead FROM aedb_queue.queue q
                                           WHERE q.name = aedb_queue.task.queue) = 'release'
                  THEN ordering_key END",
            concat!(
                ", errors = ",
                crate::store::append_error!("errors", "$4", "$5")
            )
        ),
        args: &[INT8, TEXT, INTERVAL, TEXT],
        clock: true,
    },
    older: &[
        (
            SchemaLevel::V080,
            Statement {
                sql: settle_failure!(
                    "has_dependents",
                    "concurrency_key,
                     CASE WHEN state = 'dead' AND (SELECT q.ordering_on_dead FROM aedb_queue.queue q
                                                   WHERE q.name = aedb_queue.task.queue) = 'release'
                          THEN ordering_key END",
                    ""
                ),
                args: &[INT8, TEXT, INTERVAL, TEXT],
                clock: true,
            },
        ),
        (
            SchemaLevel::V060,
            Statement {
                sql: settle_failure!("has_dependents", "NULL::text, NULL::text", ""),
                args: &[INT8, TEXT, INTERVAL, TEXT],
                clock: true,
            },
        ),
        (
            SchemaLevel::V050,
            Statement {
                sql: settle_failure!("NULL::boolean", "NULL::text, NULL::text", ""),
                args: &[INT8, TEXT, INTERVAL, TEXT],
                clock: true,
            },
        ),
    ],
};

pub struct FailingTask {
    pub attempts: i32,
    pub max_attempts: i32,
    pub backoff_base: Interval,
    pub backoff_max: Interval,
}

/// Locks the task if it is in flight under `fencing_token`.
pub fn lock_for_fail(queue: &str, task_id: i64, fencing_token: i64) -> Result<Option<FailingTask>> {
    with_client(|client| {
        let args = [task_id.into(), queue.into(), fencing_token.into()];
        execute(client, &LOCK_FOR_FAIL, &args)?.first(|row| {
            Ok(FailingTask {
                attempts: row.required(1)?,
                max_attempts: row.required(2)?,
                backoff_base: row.required(3)?,
                backoff_max: row.required(4)?,
            })
        })
    })
}

/// Retries or dead-letters the locked task of `queue`, freeing its slot
/// unless it stays ready; a dead parent's children follow their policies.
/// Returns the queues where tasks became ready.
pub fn settle_failure(
    queue: &str,
    task_id: i64,
    state: &str,
    delay: Option<Interval>,
    error: &str,
) -> Result<Vec<String>> {
    with_client(|client| {
        let rows = execute(
            client,
            SETTLE_FAILURE.get(),
            &[task_id.into(), state.into(), delay.into(), error.into()],
        )?;
        let mut slots = SlotChanges::default();
        let has_dependents = rows
            .first(|row| {
                keys_of(&mut slots, queue, task_id, row, 2, state != "ready")?;
                Ok(row.get::<bool>(1)? == Some(true))
            })?
            .unwrap_or_default();
        counters::count(queue, Counter::Failed, 1);
        if state == "dead" {
            counters::count(queue, Counter::DeadLettered, 1);
        }
        let mut woken = flow::settle_in(client, slots)?;
        if state == "dead" && has_dependents {
            woken.extend(crate::store::dependency::parents_failed_in(
                client,
                vec![task_id],
                "was dead-lettered",
            )?);
        }
        Ok(woken)
    })
}
