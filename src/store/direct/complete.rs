//! Completions without a statement (`am::delete`): COMPLETE's and
//! COMPLETE_MANY's fence and DELETE, each task judged on its own row
//! version as the statements' WHERE judges it.

use aedb_queue_core::fence::FencePairs;
use pgrx::pg_sys::Oid;

use super::Operation;
use crate::errors::{internal, Result};
use crate::store::am::{delete, Decline, Row};
use crate::store::fence::IdAndToken;
use crate::store::flow::SlotChanges;

/// Deletes the task if it is in flight under `fencing_token` with no
/// dependents: the changes of its keys, None when the fence did not hold;
/// declines where the statement must run.
pub(in crate::store) fn one(
    queue: &str,
    task_id: i64,
    fencing_token: i64,
) -> Result<std::result::Result<Option<SlotChanges>, Decline>> {
    let admission = match super::admission(Operation::Complete) {
        Ok(admission) => admission,
        Err(decline) => return Ok(Err(decline)),
    };
    let (relid, completable) = completable_in(queue)?;
    let fence_holds =
        |row: &Row| completable(row) && row.int8(c"fencing_token") == Some(fencing_token);
    let keys = |row: &Row| {
        let mut slots = SlotChanges::default();
        settled(&mut slots, queue, task_id, row);
        slots
    };
    Ok(delete::delete_by_key(
        relid,
        task_id,
        &admission,
        fence_holds,
        keys,
    ))
}

/// Deletes each task in flight under its token, in task_id order as the
/// statement's index scan goes: the (id, token) pairs deleted and their
/// keys' changes; declines where the statement must run.
pub(in crate::store) fn many(
    queue: &str,
    task_ids: &[i64],
    fencing_tokens: &[i64],
) -> Result<std::result::Result<(Vec<IdAndToken>, SlotChanges), Decline>> {
    let admission = match super::admission(Operation::Complete) {
        Ok(admission) => admission,
        Err(decline) => return Ok(Err(decline)),
    };
    let (relid, completable) = completable_in(queue)?;
    let pairs = FencePairs::new(task_ids, fencing_tokens);
    let mut ids = task_ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let fence_holds = |row: &Row| {
        completable(row)
            && matches!((row.int8(c"task_id"), row.int8(c"fencing_token")),
                (Some(id), Some(token)) if pairs.contains(id, token))
    };
    let mut slots = SlotChanges::default();
    let deleted = delete::delete_by_keys(relid, &ids, &admission, fence_holds, |row| {
        let task_id = row.int8(c"task_id").unwrap_or_default();
        settled(&mut slots, queue, task_id, row);
        (task_id, row.int8(c"fencing_token").unwrap_or_default())
    });
    Ok(deleted.map(|pairs| (pairs, slots)))
}

/// The task table, and the part of COMPLETE's fence that does not depend
/// on the token: a task of `queue`, in flight, with no dependents.
fn completable_in(queue: &str) -> Result<(Oid, impl Fn(&Row) -> bool + '_)> {
    let relid =
        crate::oids::relation_oid(c"task").ok_or_else(|| internal("no table aedb_queue.task"))?;
    let in_flight = crate::oids::enum_label_oid(c"task_state", c"in_flight");
    let completable = move |row: &Row| {
        row.oid(c"state") == Some(in_flight)
            && row.bool(c"has_dependents") != Some(true)
            && row.text_is(c"queue", queue)
    };
    Ok((relid, completable))
}

/// The key changes of a task the completion deleted.
fn settled(slots: &mut SlotChanges, queue: &str, task_id: i64, row: &Row) {
    slots.settled(
        queue,
        task_id,
        row.text(c"concurrency_key"),
        row.text(c"ordering_key"),
        true,
    );
}
