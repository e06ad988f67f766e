//! Statements on tasks: enqueue, claim, settle, reap.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Instant;

use aedb_queue_core::fence::FencePairs;
use aedb_queue_core::scan_hint::ScanHints;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::spi::SpiClient;

use super::claimed::ClaimedTask;
use super::direct::{self, claim::From};
use super::flow::{self, SlotChanges};
use super::{
    execute, with_client, Rows, SchemaLevel, Statement, Versioned, INT4, INT8, INT8_ARRAY,
    INTERVAL, JSONB, TEXT, TIMESTAMPTZ,
};
use crate::counters::{self, Counter};
use crate::datum::RawJsonb;
use crate::errors::{internal, Result};
use crate::guc;

/// Whether the queue has a due timer or an expired lease from $2 on, so a
/// claim can skip the heavier REAP when there is nothing to do, and the time
/// of the check. Each side reads one range of its index in index order: an
/// `EXISTS` may be planned as a table scan that stops at the first match, and
/// with many future timers and no match that scan reads the whole table. The
/// upper bound keeps the in-flight scan off the entries of completed tasks,
/// whose deadlines lie in the future.
static REAP_NEEDED: Statement = Statement {
    sql: "SELECT (SELECT not_before FROM aedb_queue.task
                  WHERE queue = $1 AND state = 'scheduled'
                    AND not_before >= $2 AND not_before <= $3
                  ORDER BY not_before LIMIT 1) IS NOT NULL
              OR (SELECT lease_deadline FROM aedb_queue.task
                  WHERE queue = $1 AND state = 'in_flight' AND lease_deadline IS NOT NULL
                    AND lease_deadline >= $2 AND lease_deadline < $3
                  ORDER BY lease_deadline LIMIT 1) IS NOT NULL,
             $3",
    args: &[TEXT, TIMESTAMPTZ],
    clock: true,
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

static REAP: Versioned = Versioned {
    current: Statement {
        sql: reap!(
            "has_dependents",
            "concurrency_key",
            "CASE WHEN state = 'dead' AND (SELECT q.ordering_on_dead FROM aedb_queue.queue q WHERE q.name = $1) = 'release' THEN ordering_key END",
            "CASE WHEN concurrency_key IS NULL THEN 'ready' ELSE 'blocked' END::aedb_queue.task_state",
            concat!(", errors = ", super::append_error!("errors", lease_expired!(), "$5"))
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

/// One claim statement around the subquery that picks and locks the tasks.
/// The write fetches each locked row by the ctid the lock returned (a Tid
/// Scan), not by a second descent of the primary key: about 5,000
/// instructions a task. The ctid is the locked version's; should that
/// version be newer than the statement's snapshot (between the snapshot and
/// the lock, other workers claimed the task and handed it back), the write
/// does not see it: the task stays ready, untouched, for the next claim
/// (which, resumed past it, reaches it at the next rescan from the head).
/// `$now` names the clock parameter (the statement's last); `$floor` the
/// least token this timeline hands out (`fence::token_floor`, given by
/// `token_floor()`); `$rank` the task's rank in service order after
/// priority (see `CLAIM`).
macro_rules! claim_picked {
    ($pick:expr, $floor:literal, $now:literal, $rank:literal) => {
        concat!(
            "UPDATE aedb_queue.task
             SET state = 'in_flight', attempts = attempts + 1,
                 fencing_token = greatest(fencing_token + 1, ",
            $floor,
            "),
                 owner_id = $3, lease_deadline = ",
            $now,
            " + $4,
                 updated_at = ",
            $now,
            "
             WHERE ctid = ANY(ARRAY(",
            $pick,
            "))
             RETURNING task_id, payload, attempts, fencing_token, lease_deadline, priority,
                       created_at, progress, ",
            $rank
        )
    };
}

/// The subquery of a claim from the head of the ready index, in `$order`.
macro_rules! ready_head {
    ($order:literal) => {
        concat!(
            "SELECT ctid FROM aedb_queue.task
             WHERE queue = $1 AND state = 'ready'
             ORDER BY ",
            $order,
            "
             LIMIT $2
             FOR UPDATE SKIP LOCKED"
        )
    };
}

/// CLAIM_AFTER's subquery: higher priorities from their head, then the
/// ready index from position ($5 priority, `$position`) on, one range each.
macro_rules! ready_after {
    ($order:literal, $position:literal) => {
        concat!(
            "SELECT ctid FROM (
                 SELECT ctid FROM (SELECT ctid FROM aedb_queue.task
                     WHERE queue = $1 AND state = 'ready' AND priority > $5
                     ORDER BY ",
            $order,
            " LIMIT $2 FOR UPDATE SKIP LOCKED) AS higher
                 UNION ALL
                 SELECT ctid FROM (SELECT ctid FROM aedb_queue.task
                     WHERE queue = $1 AND state = 'ready' AND ",
            $position,
            "
                     ORDER BY ",
            $order,
            " LIMIT $2 FOR UPDATE SKIP LOCKED) AS after
             ) AS resumed
             LIMIT $2"
        )
    };
}

/// A claim from the head of the ready index: in service order, priority,
/// then rank: a fair-share queue's tasks' virtual start times, every other
/// task's id (its `fair_vt` is NULL). The older schemas' ready indexes
/// serve the orders below.
static CLAIM: Versioned = Versioned {
    current: Statement {
        sql: claim_picked!(
            ready_head!("priority DESC, -coalesce(fair_vt, task_id) DESC"),
            "$5",
            "$6",
            "coalesce(fair_vt, task_id)"
        ),
        args: &[TEXT, INT4, TEXT, INTERVAL, INT8],
        clock: true,
    },
    older: &[
        (
            SchemaLevel::V060,
            Statement {
                sql: claim_picked!(
                    ready_head!("priority DESC, -task_id DESC"),
                    "$5",
                    "$6",
                    "task_id"
                ),
                args: &[TEXT, INT4, TEXT, INTERVAL, INT8],
                clock: true,
            },
        ),
        (
            SchemaLevel::V020,
            Statement {
                sql: claim_picked!(ready_head!("priority DESC, task_id"), "$5", "$6", "task_id"),
                args: &[TEXT, INT4, TEXT, INTERVAL, INT8],
                clock: true,
            },
        ),
    ],
};

/// CLAIM resumed after position ($5 priority, $6 task id) in service order
/// (see `scan_hint`), in a queue that does not share its claims (each
/// task ranked by its id). The outer LIMIT stops pulling (and locking) once it has
/// $2 tasks. Locking clauses are not allowed on UNION members, hence the
/// subqueries.
static CLAIM_AFTER: Versioned = Versioned {
    current: Statement {
        sql: claim_picked!(
            ready_after!(
                "priority DESC, -coalesce(fair_vt, task_id) DESC",
                "(priority, -coalesce(fair_vt, task_id)) < ($5, -$6)"
            ),
            "$7",
            "$8",
            "coalesce(fair_vt, task_id)"
        ),
        args: &[TEXT, INT4, TEXT, INTERVAL, INT8, INT8, INT8],
        clock: true,
    },
    older: &[(
        SchemaLevel::V060,
        Statement {
            sql: claim_picked!(
                ready_after!(
                    "priority DESC, -task_id DESC",
                    "(priority, -task_id) < ($5, -$6)"
                ),
                "$7",
                "$8",
                "task_id"
            ),
            args: &[TEXT, INT4, TEXT, INTERVAL, INT8, INT8, INT8],
            clock: true,
        },
    )],
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

static COMPLETE: Versioned = Versioned {
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

static COMPLETE_MANY: Versioned = Versioned {
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
static COMPLETE_MANY_0_3_0: Statement = Statement {
    sql: "DELETE FROM aedb_queue.task t
          WHERE t.task_id = ANY($2) AND t.queue = $1 AND t.state = 'in_flight'
            AND ((t.task_id, t.fencing_token) IN
                 (SELECT * FROM unnest($2::bigint[], $3::bigint[]))) IS TRUE
          RETURNING t.task_id, t.fencing_token, NULL::text, NULL::text",
    args: &[TEXT, INT8_ARRAY, INT8_ARRAY],
    clock: false,
};

static LOCK_FOR_FAIL: Statement = Statement {
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

static SETTLE_FAILURE: Versioned = Versioned {
    current: Statement {
        sql: settle_failure!(
            "has_dependents",
            "concurrency_key,
             CASE WHEN state = 'dead' AND (SELECT q.ordering_on_dead FROM aedb_queue.queue q
                                           WHERE q.name = aedb_queue.task.queue) = 'release'
                  THEN ordering_key END",
            concat!(", errors = ", super::append_error!("errors", "$4", "$5"))
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

static HEARTBEAT: Statement = Statement {
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
static RELEASE: Statement = Statement {
    sql: "UPDATE aedb_queue.task
          SET state = $4::aedb_queue.task_state, not_before = $6 + $5,
              attempts = greatest(attempts - 1, 0),
              owner_id = NULL, lease_deadline = NULL, updated_at = $6
          WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
          RETURNING task_id, concurrency_key, NULL::text",
    args: &[INT8, TEXT, INT8, TEXT, INTERVAL],
    clock: true,
};

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

static CANCEL: Versioned = Versioned {
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

/// The statements of the task lifecycle, by name, for the plan tests: each
/// touches a bounded set of tasks, so none may scan the task table.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) static LIFECYCLE_STATEMENTS: &[(&str, &Statement)] = &[
    ("QUEUES_WITH_WORK", &QUEUES_WITH_WORK),
    ("INSERT_TASKS", &super::insert::INSERT_TASKS.current),
    ("RESERVE_KEY", &super::insert::RESERVE_KEY),
    ("LOOKUP_KEY", &super::insert::LOOKUP_KEY),
    ("REAP_NEEDED", &REAP_NEEDED),
    ("REAP", &REAP.current),
    ("CLAIM", &CLAIM.current),
    ("CLAIM_AFTER", &CLAIM_AFTER.current),
    ("COMPLETE", &COMPLETE.current),
    ("COMPLETE_MANY", &COMPLETE_MANY.current),
    ("COMPLETE_MANY_0_3_0", &COMPLETE_MANY_0_3_0),
    ("LOCK_FOR_FAIL", &LOCK_FOR_FAIL),
    ("SETTLE_FAILURE", &SETTLE_FAILURE.current),
    ("HEARTBEAT", &HEARTBEAT),
    ("RELEASE", &RELEASE),
    ("CANCEL", &CANCEL.current),
    ("LINK_PARENTS", &super::dependency::LINK_PARENTS),
    (
        "COMPLETE_PARENT",
        &super::dependency::COMPLETE_PARENT.current,
    ),
    (
        "COMPLETE_PARENTS",
        &super::dependency::COMPLETE_PARENTS.current,
    ),
    (
        "RELEASE_CHILDREN",
        &super::dependency::RELEASE_CHILDREN.current,
    ),
    ("PARENTS_FAILED", &super::dependency::PARENTS_FAILED.current),
    ("PARENTS_OF", &super::dependency::PARENTS_OF),
    ("CHILDREN_OF", &super::dependency::CHILDREN_OF),
    ("ERRORS_OF", &super::overview::ERRORS_OF.current),
    ("LOCK_SLOTS", &super::flow::LOCK_SLOTS),
    ("SETTLE_SLOTS", &super::flow::SETTLE_SLOTS),
    ("SETTLE_ONE_SLOT", &super::flow::SETTLE_ONE_SLOT),
    ("LOCK_LINES", &super::flow::LOCK_LINES),
    ("SETTLE_LINES", &super::flow::SETTLE_LINES),
];

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
fn reap_in(
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
        super::dependency::parents_failed_in(client, dead_parents, "was dead-lettered")?;
    }
    Ok(reaped)
}

type Hints = ScanHints<TimestampWithTimeZone>;

/// Queues whose hints one backend keeps; past this many, it starts over.
const HINTED_QUEUES_MAX: usize = 1024;

thread_local! {
    /// This backend's scan hints, per queue.
    static HINTS: RefCell<HashMap<String, Hints>> = RefCell::new(HashMap::new());
}

/// Leases up to `max` ready tasks; with `reap`, first promotes and reclaims
/// up to that many in the same SPI connection. Scans resume where this
/// backend's last claim on the queue stopped while its hints are fresh and
/// an old snapshot makes that pay (`horizon`).
///
/// The check for due timers and expired leases runs once per hint lifetime
/// (`claim_rescan_interval`) while claims are served in full; a claim that
/// comes up short checks at once and claims again what it promoted. So a
/// busy queue's timers and expired leases wait at most one interval for a
/// claim, and an idle queue's none.
pub fn claim(
    queue: &str,
    owner_id: &str,
    lease: Interval,
    max: i32,
    reap: Option<i32>,
    fair: bool,
) -> Result<Vec<ClaimedTask>> {
    if fair {
        return claim_fair(queue, owner_id, lease, max, reap);
    }
    let now = Instant::now();
    let mut hints = HINTS
        .with(|all| all.borrow().get(queue).copied())
        .unwrap_or_else(|| Hints::new(now));
    let current = super::schema_current();
    let lifetime = if current {
        guc::claim_rescan_interval()
    } else {
        std::time::Duration::ZERO
    };
    hints.refresh(now, lifetime);
    let tasks = with_client(|client| {
        let mut checked = false;
        if let (Some(limit), None) = (reap, hints.due_after()) {
            reap_if_due(client, queue, limit, &mut hints)?;
            checked = true;
        }
        let mut tasks = claim_in(client, queue, owner_id, lease, max, &mut hints)?;
        if let (Some(limit), false) = (reap, checked) {
            if tasks.len() < max as usize && reap_if_due(client, queue, limit, &mut hints)? {
                let missing = max - tasks.len() as i32;
                tasks.extend(claim_in(
                    client, queue, owner_id, lease, missing, &mut hints,
                )?);
            }
        }
        // UPDATE … RETURNING has no order; hand tasks out in service order.
        tasks.sort_unstable_by_key(ClaimedTask::service_order);
        Ok(tasks)
    })?;
    hints.claimed(tasks.last().map(|t| (t.priority, t.task_id)));
    HINTS.with(|all| {
        let mut all = all.borrow_mut();
        if all.len() >= HINTED_QUEUES_MAX && !all.contains_key(queue) {
            all.clear();
        }
        all.insert(queue.to_owned(), hints);
    });
    Ok(tasks)
}

/// A fair-share queue's claim: due work promoted first (when `reap`), then
/// the head of the ready index, where the lowest virtual times of each
/// priority stand. Never resumed: a position would pass over the tasks of
/// keys that arrive later with earlier times.
fn claim_fair(
    queue: &str,
    owner_id: &str,
    lease: Interval,
    max: i32,
    reap: Option<i32>,
) -> Result<Vec<ClaimedTask>> {
    with_client(|client| {
        if let Some(limit) = reap {
            let mut hints = Hints::new(Instant::now());
            reap_if_due(client, queue, limit, &mut hints)?;
        }
        let direct = direct::claim::claim(queue, owner_id, &lease, max, From::Head, token_floor())?;
        let mut tasks = match direct {
            Ok(tasks) => tasks,
            Err(_) => {
                let args = [
                    queue.into(),
                    max.into(),
                    owner_id.into(),
                    lease.into(),
                    token_floor().into(),
                ];
                claimed_tasks(execute(client, CLAIM.get(), &args)?)?
            }
        };
        tasks.sort_unstable_by_key(ClaimedTask::service_order);
        Ok(tasks)
    })
}

/// One claim of up to `max` tasks: resumed after the hint when there is one
/// and resuming pays, then from the head for what is still missing.
fn claim_in(
    client: &mut SpiClient<'_>,
    queue: &str,
    owner_id: &str,
    lease: Interval,
    max: i32,
    hints: &mut Hints,
) -> Result<Vec<ClaimedTask>> {
    let position = hints.ready_after().filter(|_| resuming_pays());
    match claim_directly(queue, owner_id, &lease, max, position, hints)? {
        Some(tasks) => Ok(tasks),
        None => claim_by_statements(client, queue, owner_id, lease, max, position, hints),
    }
}

/// `claim_in` without statements (`direct::claim`); None, with nothing
/// claimed, where the statements must run.
fn claim_directly(
    queue: &str,
    owner_id: &str,
    lease: &Interval,
    max: i32,
    position: Option<(i64, i64)>,
    hints: &mut Hints,
) -> Result<Option<Vec<ClaimedTask>>> {
    let floor = token_floor();
    let mut tasks = Vec::new();
    if let Some((priority, rank)) = position {
        let from = From::After(priority, rank);
        let Ok(claimed) = direct::claim::claim(queue, owner_id, lease, max, from, floor)? else {
            return Ok(None);
        };
        tasks = claimed;
        if tasks.len() < max as usize {
            hints.came_up_short();
        }
    }
    let missing = max - tasks.len() as i32;
    if missing > 0 {
        match direct::claim::claim(queue, owner_id, lease, missing, From::Head, floor)? {
            Ok(claimed) => tasks.extend(claimed),
            Err(_) if tasks.is_empty() => return Ok(None),
            // Both calls judge the same table in the same transaction.
            Err(_) => return Err(internal("the direct claim declined after it had claimed")),
        }
    }
    Ok(Some(tasks))
}

/// `claim_in` by the CLAIM_AFTER and CLAIM statements, for a schema or
/// table the direct claim does not serve.
fn claim_by_statements(
    client: &mut SpiClient<'_>,
    queue: &str,
    owner_id: &str,
    lease: Interval,
    max: i32,
    position: Option<(i64, i64)>,
    hints: &mut Hints,
) -> Result<Vec<ClaimedTask>> {
    let mut tasks = Vec::new();
    if let Some((priority, task_id)) = position {
        let args = [
            queue.into(),
            max.into(),
            owner_id.into(),
            lease.into(),
            priority.into(),
            task_id.into(),
            token_floor().into(),
        ];
        tasks = claimed_tasks(execute(client, CLAIM_AFTER.get(), &args)?)?;
        if tasks.len() < max as usize {
            hints.came_up_short();
        }
    }
    let missing = max - tasks.len() as i32;
    if missing > 0 {
        let args = [
            queue.into(),
            missing.into(),
            owner_id.into(),
            lease.into(),
            token_floor().into(),
        ];
        tasks.extend(claimed_tasks(execute(client, CLAIM.get(), &args)?)?);
    }
    Ok(tasks)
}

/// The least fencing token a claim hands out on the timeline this server
/// writes WAL on: a standby promoted after losing the old primary's last
/// claims never hands their tokens out again (`fence::token_floor`).
fn token_floor() -> i64 {
    // SAFETY: both read shared state without side effects; the timeline is
    // fixed once recovery is over (a claim in recovery fails on its UPDATE).
    let timeline = unsafe {
        if pgrx::pg_sys::RecoveryInProgress() {
            0
        } else {
            pgrx::pg_sys::GetWALInsertionTimeLine()
        }
    };
    aedb_queue_core::fence::token_floor(timeline)
}

/// Whether the oldest snapshot lags far enough for dead index entries to
/// pile up at the head of the ready index (see `horizon`).
fn resuming_pays() -> bool {
    let lag = guc::claim_resume_lag();
    lag == 0
        || crate::catalog::relation_oid(c"task")
            .is_some_and(|relid| crate::horizon::xids_behind(relid) >= lag)
}

/// Runs REAP when the cheap check finds a due timer or an expired lease past
/// the hint; moves the hint when everything due was handled. True when it
/// made any task ready.
fn reap_if_due(
    client: &mut SpiClient<'_>,
    queue: &str,
    limit: i32,
    hints: &mut Hints,
) -> Result<bool> {
    let due_after = hints
        .due_after()
        .unwrap_or_else(TimestampWithTimeZone::negative_infinity);
    let (needed, checked_at) = execute(client, &REAP_NEEDED, &[queue.into(), due_after.into()])?
        .first(|row| Ok((row.get::<bool>(1)? == Some(true), row.required(2)?)))?
        .ok_or_else(|| internal("REAP_NEEDED returned no row"))?;
    let checked_at: TimestampWithTimeZone = checked_at;
    if !needed {
        hints.reaped(checked_at, true, false);
        return Ok(false);
    }
    let reaped = reap_in(client, queue, limit, limit, due_after)?;
    let cut_short =
        reaped.promoted >= limit as i64 || reaped.reclaimed + reaped.dead_lettered >= limit as i64;
    let moved = reaped.promoted + reaped.reclaimed > 0;
    hints.reaped(checked_at, !cut_short, moved);
    Ok(moved)
}

/// The tasks a claim statement returned.
fn claimed_tasks(rows: Rows<'_>) -> Result<Vec<ClaimedTask>> {
    rows.map(|row| {
        Ok(ClaimedTask {
            task_id: row.required(1)?,
            payload: row.get(2)?,
            attempts: row.required(3)?,
            fencing_token: row.required(4)?,
            lease_deadline: row.required(5)?,
            priority: row.required(6)?,
            enqueued_at: row.required(7)?,
            progress: row.get(8)?,
            rank: row.required(9)?,
        })
    })
}

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
            execute(client, super::admin::COMPLETE_KEEPING.get(), &args)?
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
    if super::schema_level() < super::SchemaLevel::V050 {
        return Ok(None);
    }
    super::complete_parent(queue, task_id, fencing_token, result)
}

/// Deletes each task in flight under its token; returns the (id, token)
/// pairs that were, and the queues where tasks became ready (given the
/// slots the completed ones freed).
pub fn complete_many(
    queue: &str,
    task_ids: &[i64],
    fencing_tokens: &[i64],
) -> Result<(Vec<super::IdAndToken>, Vec<String>)> {
    if let Ok((pairs, slots)) = direct::complete::many(queue, task_ids, fencing_tokens)? {
        counters::count(queue, Counter::Completed, pairs.len() as u64);
        let woken = with_client(|client| flow::settle_in(client, slots))?;
        return Ok((pairs, woken));
    }
    with_client(|client| {
        let mut slots = SlotChanges::default();
        let mut completed = |row: &super::Row<'_>| {
            let task_id = row.required::<i64>(1)?;
            keys_of(&mut slots, queue, task_id, row, 3, true)?;
            Ok((task_id, row.required::<i64>(2)?))
        };
        let pairs = if super::schema_level() < super::SchemaLevel::V040 {
            let args = [
                queue.into(),
                task_ids.to_vec().into(),
                fencing_tokens.to_vec().into(),
            ];
            execute(client, &COMPLETE_MANY_0_3_0, &args)?.map(&mut completed)?
        } else {
            let _fence = super::fence::Active::enter(FencePairs::new(task_ids, fencing_tokens));
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
            woken.extend(super::dependency::parents_failed_in(
                client,
                vec![task_id],
                "was dead-lettered",
            )?);
        }
        Ok(woken)
    })
}

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
            woken.extend(super::dependency::parents_failed_in(
                client,
                vec![task_id],
                "was cancelled",
            )?);
        }
        Ok(Some(woken))
    })
}

/// The queues `queue_reap()` has work in (on the 0.1.0 schema: all of them).
pub fn queues_with_work() -> Result<Vec<String>> {
    with_client(|client| {
        let statement = if super::schema_current() {
            &QUEUES_WITH_WORK
        } else {
            &QUEUE_NAMES
        };
        execute(client, statement, &[])?.map(|row| row.required::<String>(1))
    })
}

/// Reads the concurrency key (column `at`, its slot freed when `frees`) and
/// the ordering key (column `at + 1`, whose line task `task_id` leaves) of a
/// settled task.
pub(super) fn keys_of(
    slots: &mut SlotChanges,
    queue: &str,
    task_id: i64,
    row: &super::Row<'_>,
    at: usize,
    frees: bool,
) -> Result<()> {
    slots.settled(
        queue,
        task_id,
        row.get::<String>(at)?,
        row.get::<String>(at + 1)?,
        frees,
    );
    Ok(())
}
