//! Completing tasks in flight under their fencing tokens, one or a batch:
//! by the direct delete where the seam admits it, else by the COMPLETE
//! statements (COMPLETE_KEEPING when the queue keeps completed tasks); a
//! parent goes to `dependency::complete_parent`.

use aedb_queue_core::fence::FencePairs;

use crate::counters::{self, Counter};
use crate::datum::RawJsonb;
use crate::errors::Result;
use crate::store::direct;
use crate::store::flow::{self, keys_of, SlotChanges};
use crate::store::{
    execute, with_client, SchemaLevel, Statement, Versioned, INT8, INT8_ARRAY, JSONB, TEXT,
};

/// The fence: a settlement applies only to the task in flight under this
/// token. A parent (has_dependents) is left to `complete_parent`. Returns
/// the task's concurrency key (`$key`), whose slot it frees.
macro_rules! complete {
    ($deps:literal, $key:literal) => {
        concat!(
            "DELETE FROM aedb_queue.task
             WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
               AND ",
            $deps,
            " IS NOT TRUE
             RETURNING task_id, ",
            $key
        )
    };
}

pub(super) static COMPLETE: Versioned = Versioned {
    current: Statement {
        sql: complete!("has_dependents", "concurrency_key, ordering_key"),
        args: &[INT8, TEXT, INT8],
        clock: false,
    },
    older: &[
        (
            SchemaLevel::V060,
            Statement {
                sql: complete!("has_dependents", "NULL::text, NULL::text"),
                args: &[INT8, TEXT, INT8],
                clock: false,
            },
        ),
        (
            SchemaLevel::V050,
            Statement {
                sql: complete!("NULL::boolean", "NULL::text, NULL::text"),
                args: &[INT8, TEXT, INT8],
                clock: false,
            },
        ),
    ],
};

/// The same fence as COMPLETE, for many tasks in one statement. The tasks
/// are found by one scan of the primary key (`= ANY`), each checked against
/// the caller's (id, token) pairs by `fence_holds` (`fence::Active` holds
/// them; a binary search per task). A join with the pairs ran as one index
/// lookup per pair; hashing them in SQL (COMPLETE_MANY_0_3_0) cost about
/// 4,000 instructions per pair.
macro_rules! complete_many {
    ($deps:literal, $key:literal) => {
        concat!(
            "DELETE FROM aedb_queue.task t
             WHERE t.task_id = ANY($2) AND t.queue = $1 AND t.state = 'in_flight'
               AND aedb_queue_internal.fence_holds(t.task_id, t.fencing_token)
               AND ",
            $deps,
            " IS NOT TRUE
             RETURNING t.task_id, t.fencing_token, ",
            $key
        )
    };
}

pub(super) static COMPLETE_MANY: Versioned = Versioned {
    current: Statement {
        sql: complete_many!("t.has_dependents", "t.concurrency_key, t.ordering_key"),
        args: &[TEXT, INT8_ARRAY],
        clock: false,
    },
    older: &[
        (
            SchemaLevel::V060,
            Statement {
                sql: complete_many!("t.has_dependents", "NULL::text, NULL::text"),
                args: &[TEXT, INT8_ARRAY],
                clock: false,
            },
        ),
        (
            SchemaLevel::V050,
            Statement {
                sql: complete_many!("NULL::boolean", "NULL::text, NULL::text"),
                args: &[TEXT, INT8_ARRAY],
                clock: false,
            },
        ),
    ],
};

/// COMPLETE_MANY for schemas before 0.4.0, which have no `fence_holds`: the
/// pairs in a hash table of the statement's. `IS TRUE` keeps the planner
/// from turning the `IN` into a join.
pub(super) static COMPLETE_MANY_0_3_0: Statement = Statement {
    sql: "DELETE FROM aedb_queue.task t
          WHERE t.task_id = ANY($2) AND t.queue = $1 AND t.state = 'in_flight'
            AND ((t.task_id, t.fencing_token) IN
                 (SELECT * FROM unnest($2::bigint[], $3::bigint[]))) IS TRUE
          RETURNING t.task_id, t.fencing_token, NULL::text, NULL::text",
    args: &[TEXT, INT8_ARRAY, INT8_ARRAY],
    clock: false,
};

/// COMPLETE that keeps the task, with its result, in the archive. A
/// parent is left to `complete_parent`. Returns the task's id and
/// concurrency key, as COMPLETE does.
macro_rules! complete_keeping {
    ($deps:literal, $key:literal) => {
        concat!(
            "WITH done AS (
              DELETE FROM aedb_queue.task
              WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
                AND ",
            $deps,
            " IS NOT TRUE
              RETURNING *), ",
            archive_done!("$4", "$5"),
            "
          SELECT task_id, ",
            $key,
            " FROM done"
        )
    };
}

static COMPLETE_KEEPING: Versioned = Versioned {
    current: Statement {
        sql: complete_keeping!("has_dependents", "concurrency_key, ordering_key"),
        args: &[INT8, TEXT, INT8, JSONB],
        clock: true,
    },
    older: &[
        (
            SchemaLevel::V060,
            Statement {
                sql: complete_keeping!("has_dependents", "NULL::text, NULL::text"),
                args: &[INT8, TEXT, INT8, JSONB],
                clock: true,
            },
        ),
        (
            SchemaLevel::V050,
            Statement {
                sql: complete_keeping!("NULL::boolean", "NULL::text, NULL::text"),
                args: &[INT8, TEXT, INT8, JSONB],
                clock: true,
            },
        ),
    ],
};

/// Deletes the task if it is in flight under `fencing_token`; with `keep`
/// (the queue keeps completed tasks), keeps it in the archive with
/// `result`, as a parent always is (its children are then released). None
/// if the fence did not hold, else the queues where children became ready.
pub fn complete(
    queue: &str,
    task_id: i64,
    fencing_token: i64,
    result: Option<RawJsonb>,
    keep: bool,
) -> Result<Option<Vec<String>>> {
    let direct = if keep {
        None
    } else {
        direct::complete::one(queue, task_id, fencing_token)?.ok()
    };
    let done = match direct {
        Some(None) => None,
        Some(Some(slots)) if slots.is_empty() => Some(Vec::new()),
        Some(Some(slots)) => with_client(|client| flow::settle_in(client, slots).map(Some))?,
        None => complete_through_executor(queue, task_id, fencing_token, result, keep)?,
    };
    let done = match done {
        Some(woken) => Some(woken),
        None => complete_if_parent(queue, task_id, fencing_token, result)?,
    };
    if done.is_some() {
        counters::count(queue, Counter::Completed, 1);
    }
    Ok(done)
}

/// COMPLETE (or COMPLETE_KEEPING) as a statement: the queues where children
/// became ready, None when the fence did not hold.
fn complete_through_executor(
    queue: &str,
    task_id: i64,
    fencing_token: i64,
    result: Option<RawJsonb>,
    keep: bool,
) -> Result<Option<Vec<String>>> {
    with_client(|client| {
        let rows = if keep {
            let args = [
                task_id.into(),
                queue.into(),
                fencing_token.into(),
                result.into(),
            ];
            execute(client, COMPLETE_KEEPING.get(), &args)?
        } else {
            let args = [task_id.into(), queue.into(), fencing_token.into()];
            execute(client, COMPLETE.get(), &args)?
        };
        let mut slots = SlotChanges::default();
        if rows
            .first(|row| keys_of(&mut slots, queue, task_id, row, 2, true))?
            .is_none()
        {
            return Ok(None);
        }
        flow::settle_in(client, slots).map(Some)
    })
}

/// The parent path, tried when the plain one applied to nothing: only on
/// schemas with dependencies.
pub(super) fn complete_if_parent(
    queue: &str,
    task_id: i64,
    fencing_token: i64,
    result: Option<RawJsonb>,
) -> Result<Option<Vec<String>>> {
    if crate::store::schema_level() < crate::store::SchemaLevel::V050 {
        return Ok(None);
    }
    crate::store::dependency::complete_parent(queue, task_id, fencing_token, result)
}

/// Deletes each task in flight under its token; returns the (id, token)
/// pairs that were, and the queues where tasks became ready (given the
/// slots the completed ones freed).
pub fn complete_many(
    queue: &str,
    task_ids: &[i64],
    fencing_tokens: &[i64],
) -> Result<(Vec<crate::store::fence::IdAndToken>, Vec<String>)> {
    if let Ok((pairs, slots)) = direct::complete::many(queue, task_ids, fencing_tokens)? {
        counters::count(queue, Counter::Completed, pairs.len() as u64);
        let woken = with_client(|client| flow::settle_in(client, slots))?;
        return Ok((pairs, woken));
    }
    with_client(|client| {
        let mut slots = SlotChanges::default();
        let mut completed = |row: &crate::store::Row<'_>| {
            let task_id = row.required::<i64>(1)?;
            keys_of(&mut slots, queue, task_id, row, 3, true)?;
            Ok((task_id, row.required::<i64>(2)?))
        };
        let pairs = if crate::store::schema_level() < crate::store::SchemaLevel::V040 {
            let args = [
                queue.into(),
                task_ids.to_vec().into(),
                fencing_tokens.to_vec().into(),
            ];
            execute(client, &COMPLETE_MANY_0_3_0, &args)?.map(&mut completed)?
        } else {
            let _fence =
                crate::store::fence::Active::enter(FencePairs::new(task_ids, fencing_tokens));
            execute(
                client,
                COMPLETE_MANY.get(),
                &[queue.into(), task_ids.to_vec().into()],
            )?
            .map(&mut completed)?
        };
        counters::count(queue, Counter::Completed, pairs.len() as u64);
        Ok((pairs, flow::settle_in(client, slots)?))
    })
}
