//! Statements of task dependencies: linking a new task to its parents,
//! completing a parent (keeping it, releasing its children), and a parent
//! that failed (its children's policies). docs/dependencies.md.
//!
//! Exactly once: a child counts its parents not yet completed on its own
//! row (`waiting_on`); each parent's completion decrements it in an UPDATE
//! of that row, so parents completing at once in different sessions
//! serialize on the row lock, and the one that finds it at zero releases
//! the child. A completion that rolls back leaves the count as it was.

use aedb_queue_core::dependency::Parent;
use aedb_queue_core::fence::FencePairs;
use pgrx::spi::SpiClient;

use super::fence::IdAndToken;
use super::flow::{self, SlotChanges};
use super::{
    execute, with_client, SchemaLevel, Statement, Versioned, BOOL, INT8, INT8_ARRAY, JSONB, TEXT,
};
use crate::counters::{self, Counter};
use crate::datum::{RawJsonb, RawTaskRow};
use crate::errors::Result;

/// The parents, held against completion and expiry until this
/// transaction ends, and marked as having dependents. Every live parent's
/// row is written (even one marked already): a completion waiting for
/// this transaction then sees a changed row, so under READ COMMITTED its
/// next statement (the release) sees this transaction's links, and under
/// REPEATABLE READ it fails to serialize rather than miss them. Kept
/// parents are locked FOR KEY SHARE (expiry skips locked rows). An id in
/// neither table is left out.
pub(super) static LINK_PARENTS: Statement = Statement {
    sql: "WITH live AS (
              SELECT task_id, queue, state FROM aedb_queue.task
              WHERE task_id = ANY($1) FOR KEY SHARE),
          marked AS (
              UPDATE aedb_queue.task t SET has_dependents = true
              WHERE t.task_id IN (SELECT task_id FROM live WHERE state <> 'dead')
              RETURNING 1),
          kept AS (
              SELECT task_id, queue FROM aedb_queue.completed_task
              WHERE task_id = ANY($1) AND task_id NOT IN (SELECT task_id FROM live)
              FOR KEY SHARE)
          SELECT task_id, queue, state::text, (SELECT count(*) FROM marked) FROM live
          UNION ALL
          SELECT task_id, queue, 'completed', 0 FROM kept",
    args: &[INT8_ARRAY],
    clock: false,
};

/// Parents completed while LINK_PARENTS waited for them: kept by then,
/// which a new statement (a new snapshot) sees.
static KEPT_PARENTS: Statement = Statement {
    sql: "SELECT task_id FROM aedb_queue.completed_task WHERE task_id = ANY($1) FOR KEY SHARE",
    args: &[INT8_ARRAY],
    clock: false,
};

/// The queue of each of the tasks, live or kept, without a lock: to check
/// the caller may read them before anything is locked or marked.
static PARENT_QUEUES: Statement = Statement {
    sql: "SELECT task_id, queue FROM aedb_queue.task WHERE task_id = ANY($1)
          UNION ALL
          SELECT task_id, queue FROM aedb_queue.completed_task WHERE task_id = ANY($1)",
    args: &[INT8_ARRAY],
    clock: false,
};

/// One row per (parent, child). From 0.9.0 the children are marked too
/// (has_dependents), so that their completion archives them with their
/// results and the DAG stays readable after it finished (only enqueues
/// with wait_for run this; a plain enqueue writes nothing more).
macro_rules! insert_links {
    ($mark:literal) => {
        concat!(
            $mark,
            "INSERT INTO aedb_queue.task_dependency (parent_id, child_id, run_on_failure)
          SELECT p, c, $3 FROM unnest($1::bigint[]) p, unnest($2::bigint[]) c"
        )
    };
}

pub(super) static INSERT_LINKS: Versioned = Versioned {
    current: Statement {
        sql: insert_links!(
            "WITH marked AS (
              UPDATE aedb_queue.task t SET has_dependents = true
              WHERE t.task_id = ANY($2) AND t.has_dependents IS NOT TRUE)
          "
        ),
        args: &[INT8_ARRAY, INT8_ARRAY, BOOL],
        clock: false,
    },
    older: &[(
        SchemaLevel::V090,
        Statement {
            sql: insert_links!(""),
            args: &[INT8_ARRAY, INT8_ARRAY, BOOL],
            clock: false,
        },
    )],
};

/// Completes a parent (any task marked has_dependents: one that took part
/// in a DAG or a workflow) under the fence and keeps it with `$4` as its
/// result (its children may read it, whatever the queue's retention; from
/// 0.9.0 marked in_workflow, kept for aedb_queue.keep_workflows).
/// Its children are released by RELEASE_CHILDREN, a statement of its own:
/// a child linked by a transaction this one waited for is seen only by a
/// snapshot taken after the wait. Returns the parent's concurrency key
/// (`$key`, NULL on schemas before 0.6.0), whose slot it frees.
macro_rules! complete_parent {
    ($key:literal $(, $flag:ident)?) => {
        concat!(
            "WITH done AS (
              DELETE FROM aedb_queue.task
              WHERE task_id = $1 AND queue = $2 AND state = 'in_flight' AND fencing_token = $3
                AND has_dependents
              RETURNING *), ",
            archive_done!("$4", "$5" $(, $flag)?),
            "
          SELECT task_id, ",
            $key,
            " FROM done"
        )
    };
}

pub(super) static COMPLETE_PARENT: Versioned = Versioned {
    current: Statement {
        sql: complete_parent!("concurrency_key, ordering_key", in_workflow),
        args: &[INT8, TEXT, INT8, JSONB],
        clock: true,
    },
    older: &[
        (
            SchemaLevel::V090,
            Statement {
                sql: complete_parent!("concurrency_key, ordering_key"),
                args: &[INT8, TEXT, INT8, JSONB],
                clock: true,
            },
        ),
        (
            SchemaLevel::V060,
            Statement {
                sql: complete_parent!("NULL::text, NULL::text"),
                args: &[INT8, TEXT, INT8, JSONB],
                clock: true,
            },
        ),
    ],
};

/// COMPLETE_PARENT for the pairs of a batch settle that the plain batch
/// left (`fence_holds` checks each task against the pairs, as
/// COMPLETE_MANY does), with no result; returns the pairs that applied
/// and their concurrency keys.
macro_rules! complete_parents {
    ($key:literal $(, $flag:ident)?) => {
        concat!(
            "WITH done AS (
              DELETE FROM aedb_queue.task t
              WHERE t.task_id = ANY($2) AND t.queue = $1 AND t.state = 'in_flight'
                AND t.has_dependents AND aedb_queue_internal.fence_holds(t.task_id, t.fencing_token)
              RETURNING *), ",
            archive_done!("NULL", "$3" $(, $flag)?),
            "
          SELECT task_id, fencing_token, ", $key, " FROM done"
        )
    };
}

pub(super) static COMPLETE_PARENTS: Versioned = Versioned {
    current: Statement {
        sql: complete_parents!("concurrency_key, ordering_key", in_workflow),
        args: &[TEXT, INT8_ARRAY],
        clock: true,
    },
    older: &[
        (
            SchemaLevel::V090,
            Statement {
                sql: complete_parents!("concurrency_key, ordering_key"),
                args: &[TEXT, INT8_ARRAY],
                clock: true,
            },
        ),
        (
            SchemaLevel::V060,
            Statement {
                sql: complete_parents!("NULL::text, NULL::text"),
                args: &[TEXT, INT8_ARRAY],
                clock: true,
            },
        ),
    ],
};

/// The children waiting for the completed parents `$1`: each count goes
/// down by the parents it loses; at zero the child is ready (or scheduled,
/// if its delay has not passed; blocked, if it has a concurrency key:
/// `$due`). Returns the queues where a child became ready, and the (queue,
/// key) of each that became blocked (`$key`). One statement, however many
/// children.
macro_rules! release_children {
    ($key:literal, $okey:literal, $line:literal, $due:literal) => {
        concat!(
            "WITH released AS (
              UPDATE aedb_queue.task c
              SET waiting_on = c.waiting_on - r.n,
                  state = CASE WHEN c.waiting_on > r.n THEN c.state",
            $line,
            "
                               WHEN c.not_before > $2 THEN 'scheduled'
                               ELSE ",
            $due,
            " END::aedb_queue.task_state,
                  updated_at = $2
              FROM (SELECT d.child_id, count(*) AS n FROM aedb_queue.task_dependency d
                    WHERE d.parent_id = ANY($1)
                    GROUP BY d.child_id) r
              WHERE c.task_id = r.child_id AND c.state = 'waiting'
              RETURNING c.queue, c.state = 'ready' AS ready, ",
            $key,
            " AS key, ",
            $okey,
            " AS okey)
          SELECT ARRAY(SELECT DISTINCT queue FROM released WHERE ready),
                 ARRAY(SELECT queue FROM released WHERE key IS NOT NULL),
                 ARRAY(SELECT key FROM released WHERE key IS NOT NULL),
                 ARRAY(SELECT queue FROM released WHERE okey IS NOT NULL),
                 ARRAY(SELECT okey FROM released WHERE okey IS NOT NULL)"
        )
    };
}

pub(super) static RELEASE_CHILDREN: Versioned = Versioned {
    current: Statement {
        sql: release_children!(
            "CASE WHEN c.state = 'blocked' THEN c.concurrency_key END",
            "CASE WHEN c.state = 'blocked' THEN c.ordering_key END",
            "
                               WHEN c.ordering_key IS NOT NULL THEN 'blocked'",
            "CASE WHEN c.concurrency_key IS NULL THEN 'ready' ELSE 'blocked' END::aedb_queue.task_state"
        ),
        args: &[INT8_ARRAY],
        clock: true,
    },
    older: &[(
        SchemaLevel::V060,
        Statement {
            sql: release_children!("NULL::text", "NULL::text", "", "'ready'"),
            args: &[INT8_ARRAY],
            clock: true,
        },
    )],
};

/// Parents `$1` left without completing ($2 says how: "was dead-lettered",
/// "was cancelled"): their links go, and each child waiting for them
/// follows its policy: dead-lettered naming the parent, or run as if the
/// parent had completed. Returns the children dead-lettered that have
/// children of their own (the caller goes on with them), the queues
/// where a child became ready, and the (queue, key) of each child that
/// became blocked (`$key`, `$due`: as in RELEASE_CHILDREN).
macro_rules! parents_failed {
    ($key:literal, $okey:literal, $line:literal, $due:literal) => {
        parents_failed!($key, $okey, $line, $due, "")
    };
    // `$errors`: the error history's update (schemas from 0.8.0).
    ($key:literal, $okey:literal, $line:literal, $due:literal, $errors:expr) => {
        concat!(
            "WITH gone AS (
              DELETE FROM aedb_queue.task_dependency WHERE parent_id = ANY($1)
              RETURNING parent_id, child_id, run_on_failure),
          hit AS (
              SELECT child_id, count(*) AS n, bool_and(run_on_failure) AS run,
                     min(parent_id) AS parent
              FROM gone GROUP BY child_id),
          changed AS (
              UPDATE aedb_queue.task c
              SET waiting_on = CASE WHEN h.run THEN c.waiting_on - h.n ELSE 0 END,
                  state = CASE WHEN NOT h.run THEN 'dead'
                               WHEN c.waiting_on > h.n THEN c.state",
            $line,
            "
                               WHEN c.not_before > $3 THEN 'scheduled'
                               ELSE ",
            $due,
            " END::aedb_queue.task_state,
                  last_error = CASE WHEN h.run THEN c.last_error
                                    ELSE 'parent task ' || h.parent || ' ' || $2 END,
                  updated_at = $3",
            $errors,
            "
              FROM hit h
              WHERE c.task_id = h.child_id AND c.state = 'waiting'
              RETURNING c.task_id, c.queue, c.state, c.has_dependents IS TRUE AS has_dependents,
                        ",
            $key,
            " AS key, ",
            $okey,
            " AS okey)
          SELECT ARRAY(SELECT task_id FROM changed WHERE state = 'dead' AND has_dependents),
                 ARRAY(SELECT DISTINCT queue FROM changed WHERE state = 'ready'),
                 ARRAY(SELECT queue FROM changed WHERE key IS NOT NULL),
                 ARRAY(SELECT key FROM changed WHERE key IS NOT NULL),
                 ARRAY(SELECT queue FROM changed WHERE okey IS NOT NULL),
                 ARRAY(SELECT okey FROM changed WHERE okey IS NOT NULL),
                 ARRAY(SELECT queue FROM changed WHERE state = 'dead')"
        )
    };
}

pub(super) static PARENTS_FAILED: Versioned = Versioned {
    current: Statement {
        sql: parents_failed!(
            "CASE WHEN c.state = 'blocked' THEN c.concurrency_key END",
            "CASE WHEN c.state = 'blocked' THEN c.ordering_key END",
            "
                               WHEN c.ordering_key IS NOT NULL THEN 'blocked'",
            "CASE WHEN c.concurrency_key IS NULL THEN 'ready' ELSE 'blocked' END::aedb_queue.task_state",
            concat!(
                ", errors = CASE WHEN h.run THEN c.errors ELSE ",
                super::append_error!("c.errors", "'parent task ' || h.parent || ' ' || $2", "$3"),
                " END"
            )
        ),
        args: &[INT8_ARRAY, TEXT],
        clock: true,
    },
    older: &[(
        SchemaLevel::V080,
        Statement {
            sql: parents_failed!(
                "CASE WHEN c.state = 'blocked' THEN c.concurrency_key END",
                "CASE WHEN c.state = 'blocked' THEN c.ordering_key END",
                "
                               WHEN c.ordering_key IS NOT NULL THEN 'blocked'",
                "CASE WHEN c.concurrency_key IS NULL THEN 'ready' ELSE 'blocked' END::aedb_queue.task_state"
            ),
            args: &[INT8_ARRAY, TEXT],
            clock: true,
        },
    ), (
        SchemaLevel::V060,
        Statement {
            sql: parents_failed!("NULL::text", "NULL::text", "", "'ready'"),
            args: &[INT8_ARRAY, TEXT],
            clock: true,
        },
    )],
};

/// The tasks linked to task $1 of queue $2 (none if it is not there) by
/// `task_dependency` rows whose `$mine` column names it, through their
/// `$theirs`: live or kept after completion, as (queue, task row).
macro_rules! linked_tasks {
    ($mine:literal, $theirs:literal) => {
        concat!(
            "WITH this AS (
              SELECT task_id FROM aedb_queue.task WHERE task_id = $1 AND queue = $2
              UNION ALL
              SELECT task_id FROM aedb_queue.completed_task WHERE task_id = $1 AND queue = $2),
          links AS (
              SELECT d.", $theirs, " AS id FROM aedb_queue.task_dependency d
              WHERE d.", $mine, " = $1 AND EXISTS (SELECT 1 FROM this))
          SELECT t.queue, ROW(t.task_id, t.queue, t.state::text, t.not_before, t.priority,
                      t.attempts, t.max_attempts, t.owner_id, t.fencing_token, t.lease_deadline,
                      t.payload, t.progress, t.last_error, t.idempotency_key, t.backoff_base,
                      t.backoff_max, t.created_at, t.updated_at, NULL::jsonb, NULL::timestamptz)
          FROM links l JOIN aedb_queue.task t ON t.task_id = l.id
          UNION ALL
          SELECT c.queue, ROW(c.task_id, c.queue, 'completed'::text, NULL::timestamptz, c.priority,
                      c.attempts, c.max_attempts, c.owner_id, c.fencing_token, NULL::timestamptz,
                      c.payload, c.progress, NULL::text, c.idempotency_key, NULL::interval,
                      NULL::interval, c.created_at, c.completed_at, c.result, c.completed_at)
          FROM links l JOIN aedb_queue.completed_task c ON c.task_id = l.id
          ORDER BY 1"
        )
    };
}

/// The tasks task $1 of queue $2 waits or waited for.
pub(super) static PARENTS_OF: Statement = Statement {
    sql: linked_tasks!("child_id", "parent_id"),
    args: &[INT8, TEXT],
    clock: false,
};

/// The tasks that wait or waited for task $1 of queue $2.
pub(super) static CHILDREN_OF: Statement = Statement {
    sql: linked_tasks!("parent_id", "child_id"),
    args: &[INT8, TEXT],
    clock: false,
};

/// (id, queue) of each of `ids` that exists, live or kept.
pub fn parent_queues(ids: &[i64]) -> Result<Vec<(i64, String)>> {
    with_client(|client| {
        execute(client, &PARENT_QUEUES, &[ids.to_vec().into()])?
            .map(|row| Ok((row.required(1)?, row.required(2)?)))
    })
}

/// Where each of `ids` that exists stands; the live ones are locked and
/// marked until this transaction ends.
pub fn link_parents(ids: &[i64]) -> Result<Vec<(i64, Parent)>> {
    with_client(|client| {
        let mut found = execute(client, &LINK_PARENTS, &[ids.to_vec().into()])?.map(|row| {
            let state: String = row.required(3)?;
            let parent = match state.as_str() {
                "completed" => Parent::Completed,
                "dead" => Parent::Dead,
                _ => Parent::Live,
            };
            Ok((row.required::<i64>(1)?, parent))
        })?;
        let gone: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| !found.iter().any(|(f, _)| f == id))
            .collect();
        if !gone.is_empty() {
            let kept = execute(client, &KEPT_PARENTS, &[gone.into()])?;
            found.extend(kept.map(|row| Ok((row.required::<i64>(1)?, Parent::Completed)))?);
        }
        Ok(found)
    })
}

pub fn insert_links(parents: &[i64], children: &[i64], run_on_failure: bool) -> Result<()> {
    if parents.is_empty() || children.is_empty() {
        return Ok(());
    }
    with_client(|client| {
        execute(
            client,
            INSERT_LINKS.get(),
            &[
                parents.to_vec().into(),
                children.to_vec().into(),
                run_on_failure.into(),
            ],
        )?;
        Ok(())
    })
}

/// The parent path of a completion; None if the fence did not hold (or
/// the task has no dependents), else the queues where children became ready.
pub fn complete_parent(
    queue: &str,
    task_id: i64,
    fencing_token: i64,
    result: Option<RawJsonb>,
) -> Result<Option<Vec<String>>> {
    with_client(|client| {
        let args = [
            task_id.into(),
            queue.into(),
            fencing_token.into(),
            result.into(),
        ];
        let rows = execute(client, COMPLETE_PARENT.get(), &args)?;
        let mut slots = SlotChanges::default();
        if rows
            .first(|row| flow::keys_of(&mut slots, queue, task_id, row, 2, true))?
            .is_none()
        {
            return Ok(None);
        }
        release_children_in(client, vec![task_id], slots).map(Some)
    })
}

/// The parent path for the (task, token) pairs a plain batch settle left
/// (fenced out, or parents): one statement for the parents, one release;
/// returns the pairs that applied and the queues where children became
/// ready.
pub fn complete_parents(
    queue: &str,
    left: &[(i64, i64)],
) -> Result<(Vec<IdAndToken>, Vec<String>)> {
    if left.is_empty() || super::schema_level() < super::SchemaLevel::V050 {
        return Ok((Vec::new(), Vec::new()));
    }
    let ids: Vec<i64> = left.iter().map(|p| p.0).collect();
    let tokens: Vec<i64> = left.iter().map(|p| p.1).collect();
    with_client(|client| {
        let mut slots = SlotChanges::default();
        let applied = {
            let _fence = super::fence::Active::enter(FencePairs::new(&ids, &tokens));
            execute(
                client,
                COMPLETE_PARENTS.get(),
                &[queue.into(), ids.clone().into()],
            )?
            .map(|row| {
                let task_id = row.required::<i64>(1)?;
                flow::keys_of(&mut slots, queue, task_id, row, 3, true)?;
                Ok((task_id, row.required::<i64>(2)?))
            })?
        };
        if applied.is_empty() {
            return Ok((applied, Vec::new()));
        }
        counters::count(queue, Counter::Completed, applied.len() as u64);
        let parents: Vec<i64> = applied.iter().map(|p| p.0).collect();
        let woken = release_children_in(client, parents, slots)?;
        Ok((applied, woken))
    })
}

/// Releases the children of completed `parents`, then settles `slots`
/// (the parents' own) with the keys of the children that became blocked;
/// returns the queues where tasks became ready.
fn release_children_in(
    client: &mut SpiClient<'_>,
    parents: Vec<i64>,
    mut slots: SlotChanges,
) -> Result<Vec<String>> {
    let rows = execute(client, RELEASE_CHILDREN.get(), &[parents.into()])?;
    let mut woken = rows
        .first(|row| {
            arrived(&mut slots, row, 2)?;
            Ok(row.get::<Vec<String>>(1)?.unwrap_or_default())
        })?
        .unwrap_or_default();
    woken.extend(flow::settle_in(client, slots)?);
    Ok(woken)
}

/// Records the (queue, concurrency key) pairs of columns `at` and `at + 1`
/// as arrived, and the (queue, ordering key) pairs of `at + 2` and `at + 3`
/// as joined their lines.
fn arrived(slots: &mut SlotChanges, row: &super::Row<'_>, at: usize) -> Result<()> {
    let pairs = |at: usize| -> Result<Vec<(String, String)>> {
        let queues = row.get::<Vec<String>>(at)?.unwrap_or_default();
        let keys = row.get::<Vec<String>>(at + 1)?.unwrap_or_default();
        Ok(queues.into_iter().zip(keys).collect())
    };
    for (queue, key) in pairs(at)? {
        slots.arrived(&queue, &key);
    }
    for (queue, key) in pairs(at + 2)? {
        slots.joined(&queue, &key);
    }
    Ok(())
}

/// Applies the children's policies for parents that failed, and for the
/// children that were dead-lettered in turn; returns the queues where a
/// child became ready. Each round is one statement; a chain of N
/// generations takes N rounds.
pub(super) fn parents_failed_in(
    client: &mut SpiClient<'_>,
    mut parents: Vec<i64>,
    how: &str,
) -> Result<Vec<String>> {
    let mut woken = Vec::new();
    let mut how = how;
    while !parents.is_empty() {
        let rows = execute(
            client,
            PARENTS_FAILED.get(),
            &[parents.clone().into(), how.into()],
        )?;
        let mut slots = SlotChanges::default();
        let (next, ready, dead) = rows
            .first(|row| {
                arrived(&mut slots, row, 3)?;
                Ok((
                    row.get::<Vec<i64>>(1)?.unwrap_or_default(),
                    row.get::<Vec<String>>(2)?.unwrap_or_default(),
                    row.get::<Vec<String>>(7)?.unwrap_or_default(),
                ))
            })?
            .unwrap_or_default();
        // One entry per child dead-lettered with its parent, by its queue.
        for queue in &dead {
            counters::count(queue, Counter::DeadLettered, 1);
        }
        woken.extend(ready);
        woken.extend(flow::settle_in(client, slots)?);
        parents = next;
        how = "was dead-lettered";
    }
    woken.sort();
    woken.dedup();
    Ok(woken)
}

/// (child's queue, child as a task row) for each task that waits or
/// waited for task `task_id` of `queue`.
pub fn children_of(queue: &str, task_id: i64) -> Result<Vec<(String, RawTaskRow)>> {
    with_client(|client| {
        execute(client, &CHILDREN_OF, &[task_id.into(), queue.into()])?
            .map(|row| Ok((row.required(1)?, row.required(2)?)))
    })
}

/// (parent's queue, parent as a task row) for each parent of task
/// `task_id` of `queue`.
pub fn parents_of(queue: &str, task_id: i64) -> Result<Vec<(String, RawTaskRow)>> {
    with_client(|client| {
        execute(client, &PARENTS_OF, &[task_id.into(), queue.into()])?
            .map(|row| Ok((row.required(1)?, row.required(2)?)))
    })
}
