//! A claim of ready tasks without a statement (`am::update`): the ready
//! index read in service order from the head or after a scan position,
//! each task locked with SKIP LOCKED and put in flight as `CLAIM` and
//! `CLAIM_AFTER` do, and its new version read back as their RETURNING.

use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys::{self, Datum, Oid};
use pgrx::{FromDatum, PgMemoryContexts};

use super::Operation;
use crate::datum::RawJsonb;
use crate::errors::{internal, Result};
use crate::store::am::update::{self, Changes, Key};
use crate::store::am::{Decline, Row};
use crate::store::claimed::ClaimedTask;

/// Where a claim reads the ready index.
#[derive(Clone, Copy)]
pub(in crate::store) enum From {
    /// From the head of the queue's entries.
    Head,
    /// After the position (priority, rank) in service order: higher
    /// priorities from their head, then the rest of this priority, then
    /// lower ones.
    After(i64, i64),
}

/// Claims up to `max` ready tasks of `queue` from `from`, each leased to
/// `owner_id` until the call's clock + `lease` under a token of at least
/// `token_floor`. Declines (nothing claimed) where the statements must run
/// (`direct`).
///
/// Called with an SPI connection (inside `with_client`): the tasks' values
/// are copied to the context around it, as `Rows` copies them.
pub(in crate::store) fn claim(
    queue: &str,
    owner_id: &str,
    lease: &Interval,
    max: i32,
    from: From,
    token_floor: i64,
) -> Result<std::result::Result<Vec<ClaimedTask>, Decline>> {
    let admission = match super::admission(Operation::Claim) {
        Ok(admission) => admission,
        Err(decline) => return Ok(Err(decline)),
    };
    if max < 1 {
        return Ok(Ok(Vec::new()));
    }
    let relid =
        crate::oids::relation_oid(c"task").ok_or_else(|| internal("no table aedb_queue.task"))?;
    let index = crate::oids::relation_oid(c"task_ready_idx")
        .ok_or_else(|| internal("no index aedb_queue.task_ready_idx"))?;
    let ready = crate::oids::enum_label_oid(c"task_state", c"ready");
    let in_flight = Datum::from(crate::oids::enum_label_oid(c"task_state", c"in_flight"));
    // SAFETY: the SPI connection's context has a parent (see `Rows`).
    let outer = unsafe { (*pg_sys::CurrentMemoryContext).parent };
    if outer.is_null() {
        return Err(internal("the SPI memory context has no parent"));
    }
    let queue_text = text_datum(queue);
    let owner = text_datum(owner_id);
    let now = crate::clock::now_datum();
    let deadline = crate::store::timestamptz::plus(now, lease);

    let in_queue = key(
        1,
        pg_sys::BTEqualStrategyNumber,
        pg_sys::F_TEXTEQ,
        queue_text,
    );
    let ranges: Vec<Vec<Key>> = match from {
        From::Head => vec![vec![in_queue]],
        From::After(priority, rank) => {
            let at = Datum::from(priority);
            vec![
                vec![
                    in_queue,
                    key(2, pg_sys::BTGreaterStrategyNumber, pg_sys::F_INT8GT, at),
                ],
                vec![
                    in_queue,
                    key(2, pg_sys::BTEqualStrategyNumber, pg_sys::F_INT8EQ, at),
                    // The index's third column is -rank, descending.
                    key(
                        3,
                        pg_sys::BTLessStrategyNumber,
                        pg_sys::F_INT8LT,
                        Datum::from(-rank),
                    ),
                ],
                vec![
                    in_queue,
                    key(2, pg_sys::BTLessStrategyNumber, pg_sys::F_INT8LT, at),
                ],
            ]
        }
    };
    let ranges: Vec<&[Key]> = ranges.iter().map(Vec::as_slice).collect();

    let holds = |row: &Row| row.oid(c"state") == Some(ready) && row.text_is(c"queue", queue);
    let change = |row: &Row, new: &mut Changes<'_>| {
        let attempts = row.get(c"attempts").map_or(0, |d| d.value() as i32);
        let token = row.int8(c"fencing_token").unwrap_or(0);
        new.set(c"state", Some(in_flight))
            && new.set(c"attempts", Some(Datum::from(attempts.saturating_add(1))))
            && new.set(
                c"fencing_token",
                Some(Datum::from(token.saturating_add(1).max(token_floor))),
            )
            && new.set(c"owner_id", Some(owner))
            && new.set(c"lease_deadline", Some(deadline))
            && new.set(c"updated_at", Some(now))
    };
    let read = |row: &Row| claimed(row, outer);
    // The state alone tells which partial indexes take the new versions;
    // a value that differs from call to call (the deadline) would make
    // `OpenIndexes` prove them again on every call.
    let constants = [(c"state", Some(in_flight))];
    let claimed = update::update_in_order(
        relid,
        index,
        &ranges,
        max as usize,
        &constants,
        &admission,
        holds,
        change,
        read,
    );
    Ok(match claimed {
        Ok(tasks) => Ok(tasks.into_iter().collect::<Result<_>>()?),
        Err(decline) => Err(decline),
    })
}

fn key(column: i16, strategy: u32, procedure: u32, argument: Datum) -> Key {
    Key {
        column,
        strategy: strategy as u16,
        procedure: Oid::from(procedure),
        argument,
    }
}

/// A text datum of `value`, in the current memory context.
fn text_datum(value: &str) -> Datum {
    // SAFETY: copies `value.len()` bytes from a live slice.
    unsafe {
        Datum::from(pg_sys::cstring_to_text_with_len(
            value.as_ptr().cast(),
            value.len() as i32,
        ))
    }
}

/// The claimed task in `row` (its new version), its by-reference values
/// copied to `outer`.
fn claimed(row: &Row, outer: pg_sys::MemoryContext) -> Result<ClaimedTask> {
    let missing = |column: &str| internal(format!("a claimed task has no {column}"));
    let jsonb = |name| {
        row.get(name).and_then(|datum| {
            // SAFETY: a jsonb column's datum, not NULL.
            unsafe {
                RawJsonb::from_datum_in_memory_context(
                    PgMemoryContexts::For(outer),
                    datum,
                    false,
                    pg_sys::JSONBOID,
                )
            }
        })
    };
    let timestamp = |name| {
        // SAFETY: a timestamptz column's datum, a plain integer.
        row.get(name)
            .and_then(|datum| unsafe { TimestampWithTimeZone::from_datum(datum, false) })
    };
    let task_id = row.int8(c"task_id").ok_or_else(|| missing("task_id"))?;
    Ok(ClaimedTask {
        task_id,
        payload: jsonb(c"payload"),
        attempts: row
            .get(c"attempts")
            .map(|d| d.value() as i32)
            .ok_or_else(|| missing("attempts"))?,
        fencing_token: row
            .int8(c"fencing_token")
            .ok_or_else(|| missing("fencing_token"))?,
        lease_deadline: timestamp(c"lease_deadline").ok_or_else(|| missing("lease_deadline"))?,
        priority: row.int8(c"priority").ok_or_else(|| missing("priority"))?,
        enqueued_at: timestamp(c"created_at").ok_or_else(|| missing("created_at"))?,
        progress: jsonb(c"progress"),
        rank: row.int8(c"fair_vt").unwrap_or(task_id),
    })
}
