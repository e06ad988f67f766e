//! Promoting due timers and reclaiming expired leases of one queue (REAP),
//! and the queues `queue_reap()` has work in.

use pgrx::datum::TimestampWithTimeZone;
use pgrx::spi::SpiClient;

use crate::counters::{self, Counter};
use crate::errors::Result;
use crate::store::flow::{self, SlotChanges};
use crate::store::{
    execute, with_client, SchemaLevel, Statement, Versioned, INT4, TEXT, TIMESTAMPTZ,
};

/// Promotes due timers and reclaims expired leases of one queue, up to $2 and
/// $3 of each, due at or after $4. An expired lease means the worker vanished,
/// not that the work failed: back to ready at once (no backoff), or dead when
/// no attempt is left.
/// `$deps` is the task's has_dependents column, or NULL on schemas before
/// 0.5.0; `$key` and `$okey` its concurrency and ordering keys and `$due`
/// the state a due task enters (blocked for a concurrency key), NULL and
/// ready on schemas before 0.6.0. Returns the counts, the dead tasks with
/// dependents, the concurrency keys of tasks that became due and of dead
/// ones (their slots freed), and the ordering keys and ids of dead ones.
/// The error of a task whose lease expired.
macro_rules! lease_expired {
    () => {
        "CASE WHEN attempts >= max_attempts THEN 'lease expired; attempts exhausted'
              ELSE 'lease expired; requeued' END"
    };
}

macro_rules! reap {
    ($deps:literal, $key:literal, $okey:literal, $due:literal) => {
        reap!($deps, $key, $okey, $due, "")
    };
    ($deps:literal, $key:literal, $okey:literal, $due:literal, $errors:expr) => {
        concat!(
            "WITH promoted AS (
              UPDATE aedb_queue.task
              SET state = ", $due, ", updated_at = $5
              WHERE task_id = ANY(ARRAY(
                  SELECT task_id FROM aedb_queue.task
                  WHERE queue = $1 AND state = 'scheduled'
                    AND not_before >= $4 AND not_before <= $5
                  ORDER BY not_before
                  LIMIT $2
                  FOR UPDATE SKIP LOCKED))
              RETURNING ", $key, " AS key),
          reclaimed AS (
              UPDATE aedb_queue.task
              SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'ready' END::aedb_queue.task_state,
                  last_error = ", lease_expired!(), ",
                  owner_id = NULL, lease_deadline = NULL, updated_at = $5", $errors, "
              WHERE task_id = ANY(ARRAY(
                  SELECT task_id FROM aedb_queue.task
                  WHERE queue = $1 AND state = 'in_flight'
                    AND lease_deadline >= $4 AND lease_deadline < $5
                  ORDER BY lease_deadline
                  LIMIT $3
                  FOR UPDATE SKIP LOCKED))
              RETURNING task_id, state = 'dead' AS dead, ", $deps, " IS TRUE AS has_dependents,
                        ", $key, " AS key, ", $okey, " AS okey)
          SELECT (SELECT count(*) FROM promoted),
                 (SELECT count(*) FROM reclaimed WHERE NOT dead),
                 (SELECT count(*) FROM reclaimed WHERE dead),
                 ARRAY(SELECT task_id FROM reclaimed WHERE dead AND has_dependents),
                 ARRAY(SELECT key FROM promoted WHERE key IS NOT NULL),
                 ARRAY(SELECT key FROM reclaimed WHERE dead AND key IS NOT NULL),
                 ARRAY(SELECT okey FROM reclaimed WHERE dead AND okey IS NOT NULL),
                 ARRAY(SELECT task_id FROM reclaimed WHERE dead AND okey IS NOT NULL)"
        )
    };
}

pub(super) static REAP: Versioned = Versioned {
    current: Statement {
        sql: reap!(
            "has_dependents",
            "concurrency_key",
            "CASE WHEN state = 'dead' AND (SELECT q.ordering_on_dead FROM aedb_queue.queue q WHERE q.name = $1) = 'release' THEN ordering_key END",
            "CASE WHEN concurrency_key IS NULL THEN 'ready' ELSE 'blocked' END::aedb_queue.task_state",
            concat!(", errors = ", crate::store::append_error!("errors", lease_expired!(), "$5"))
        ),
        args: &[TEXT, INT4, INT4, TIMESTAMPTZ],
        clock: true,
    },
    older: &[(SchemaLevel::V080, Statement {
        sql: reap!("has_dependents", "concurrency_key", "CASE WHEN state = 'dead' AND (SELECT q.ordering_on_dead FROM aedb_queue.queue q WHERE q.name = $1) = 'release' THEN ordering_key END", "CASE WHEN concurrency_key IS NULL THEN 'ready' ELSE 'blocked' END::aedb_queue.task_state"),
        args: &[TEXT, INT4, INT4, TIMESTAMPTZ],
        clock: true,
    }), (SchemaLevel::V060, Statement {
        sql: reap!("has_dependents", "NULL::text", "NULL::text", "'ready'"),
        args: &[TEXT, INT4, INT4, TIMESTAMPTZ],
        clock: true,
    }), (SchemaLevel::V050, Statement {
        sql: reap!("NULL::boolean", "NULL::text", "NULL::text", "'ready'"),
        args: &[TEXT, INT4, INT4, TIMESTAMPTZ],
        clock: true,
    })],
};

/// Every registered queue (the 0.1.0 schema has nothing better to go by).
static QUEUE_NAMES: Statement = Statement {
    sql: "SELECT name FROM aedb_queue.queue ORDER BY name",
    args: &[],
    clock: false,
};

/// The next queue name after `$prev` among the entries of one partial index:
/// a skip scan, one index descent per distinct queue.
macro_rules! next_queue {
    ($table:literal, $where:literal, $prev:literal) => {
        concat!(
            "(SELECT t.queue FROM aedb_queue.",
            $table,
            " t WHERE ",
            $where,
            " AND t.queue > ",
            $prev,
            " ORDER BY t.queue LIMIT 1)"
        )
    };
}

macro_rules! distinct_queues {
    ($name:literal, $table:literal, $where:literal) => {
        concat!(
            $name,
            "(queue) AS (",
            next_queue!($table, $where, "''"),
            " UNION ALL SELECT ",
            next_queue!($table, $where, "p.queue"),
            " FROM ",
            $name,
            " p WHERE p.queue IS NOT NULL)"
        )
    };
}

/// The queues with work for `queue_reap()`: a due timer, an
/// expired lease, kept completed tasks, or idempotency keys to expire. The
/// cost grows with the queues that have timers, leases or kept tasks at
/// all, and with those that keep keys for a limited time, not with every
/// queue name ever registered.
pub(crate) static QUEUES_WITH_WORK: Statement = Statement {
    sql: concat!(
        "WITH RECURSIVE ",
        distinct_queues!("timers", "task", "t.state = 'scheduled'"),
        ", ",
        distinct_queues!(
            "leases",
            "task",
            "t.state = 'in_flight' AND t.lease_deadline IS NOT NULL"
        ),
        ", ",
        distinct_queues!("kept", "completed_task", "true"),
        "
        SELECT queue FROM timers p WHERE p.queue IS NOT NULL AND (
            SELECT t.not_before FROM aedb_queue.task t
            WHERE t.queue = p.queue AND t.state = 'scheduled'
            ORDER BY t.not_before LIMIT 1) <= $1
        UNION
        SELECT queue FROM leases p WHERE p.queue IS NOT NULL AND (
            SELECT t.lease_deadline FROM aedb_queue.task t
            WHERE t.queue = p.queue AND t.state = 'in_flight' AND t.lease_deadline IS NOT NULL
            ORDER BY t.lease_deadline LIMIT 1) < $1
        UNION
        SELECT queue FROM kept WHERE queue IS NOT NULL
        UNION
        SELECT name FROM aedb_queue.queue WHERE keep_idempotency_keys IS NOT NULL
        ORDER BY 1"
    ),
    args: &[],
    clock: true,
};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub promoted: i64,
    pub reclaimed: i64,
    pub dead_lettered: i64,
}

/// Promotes up to `promote` due timers and reclaims up to `reclaim` expired leases of `queue`.
pub fn reap(queue: &str, promote: i32, reclaim: i32) -> Result<Reaped> {
    let from_head = TimestampWithTimeZone::negative_infinity();
    with_client(|client| reap_in(client, queue, promote, reclaim, from_head))
}

/// REAP over the index entries due at or after `due_after`.
pub(super) fn reap_in(
    client: &mut SpiClient<'_>,
    queue: &str,
    promote: i32,
    reclaim: i32,
    due_after: TimestampWithTimeZone,
) -> Result<Reaped> {
    let args = [
        queue.into(),
        promote.into(),
        reclaim.into(),
        due_after.into(),
    ];
    let mut slots = SlotChanges::default();
    let reaped = execute(client, REAP.get(), &args)?.first(|row| {
        slots.all(
            queue,
            &row.get::<Vec<String>>(5)?.unwrap_or_default(),
            false,
        );
        slots.all(queue, &row.get::<Vec<String>>(6)?.unwrap_or_default(), true);
        let lines = row.get::<Vec<String>>(7)?.unwrap_or_default();
        let dead = row.get::<Vec<i64>>(8)?.unwrap_or_default();
        for (key, &id) in lines.iter().zip(&dead) {
            slots.head_left(queue, key, id);
        }
        Ok((
            Reaped {
                promoted: row.get::<i64>(1)?.unwrap_or(0),
                reclaimed: row.get::<i64>(2)?.unwrap_or(0),
                dead_lettered: row.get::<i64>(3)?.unwrap_or(0),
            },
            row.get::<Vec<i64>>(4)?.unwrap_or_default(),
        ))
    })?;
    let (reaped, dead_parents) = reaped.unwrap_or_default();
    // Every expired lease taken back is reclaimed, to a retry or to dead.
    counters::count(
        queue,
        Counter::Reclaimed,
        (reaped.reclaimed + reaped.dead_lettered) as u64,
    );
    counters::count(queue, Counter::DeadLettered, reaped.dead_lettered as u64);
    flow::settle_in(client, slots)?;
    if !dead_parents.is_empty() {
        crate::store::dependency::parents_failed_in(client, dead_parents, "was dead-lettered")?;
    }
    Ok(reaped)
}

/// The queues `queue_reap()` has work in (on the 0.1.0 schema: all of them).
pub fn queues_with_work() -> Result<Vec<String>> {
    with_client(|client| {
        let statement = if crate::store::schema_current() {
            &QUEUES_WITH_WORK
        } else {
            &QUEUE_NAMES
        };
        execute(client, statement, &[])?.map(|row| row.required::<String>(1))
    })
}
