//! What the operators' overviews read besides the views: the registered
//! queues, which of the API's functions a role may execute, and where a
//! task is by id or by idempotency key (`queue_access`, `queue_find`), and
//! a task's error history (`queue_errors`).

use pgrx::pg_sys::{Oid, PgBuiltInOids};

use super::{execute, with_client, SchemaLevel, Statement, Versioned, INT8, TEXT};
use crate::errors::Result;
use pgrx::datum::TimestampWithTimeZone;

const OID: PgBuiltInOids = PgBuiltInOids::OIDOID;

static QUEUE_NAMES: Statement = Statement {
    sql: "SELECT q.name FROM aedb_queue.queue q ORDER BY q.name",
    args: &[],
    clock: false,
};

/// Whether role `$1` may execute some overload of each function named in
/// `$2`, in the extension's schema.
static EXECUTABLE: Statement = Statement {
    sql: "SELECT f.name, EXISTS (
              SELECT FROM pg_catalog.pg_proc p
               WHERE p.pronamespace = 'aedb_queue'::pg_catalog.regnamespace
                 AND p.proname = f.name
                 AND pg_catalog.has_function_privilege($1, p.oid, 'EXECUTE'))
          FROM pg_catalog.unnest($2::pg_catalog.text[]) AS f(name)",
    args: &[OID, PgBuiltInOids::TEXTARRAYOID],
    clock: false,
};

/// The queue of task `$1`, live or kept after completion.
static QUEUE_OF_TASK: Statement = Statement {
    sql: "SELECT t.queue FROM aedb_queue.task t WHERE t.task_id = $1
          UNION ALL
          SELECT c.queue FROM aedb_queue.completed_task c WHERE c.task_id = $1",
    args: &[INT8],
    clock: false,
};

/// (queue, task id) of idempotency key `$1`, in queue `$2` or in each
/// registered queue (one key probe per queue).
static TASKS_OF_KEY: Statement = Statement {
    sql: "SELECT k.queue, k.task_id
            FROM aedb_queue.queue q
            JOIN aedb_queue.idempotency_key k ON k.queue = q.name AND k.key = $1
           WHERE $2::text IS NULL OR q.name = $2
           ORDER BY k.queue",
    args: &[TEXT, TEXT],
    clock: false,
};

pub fn queue_names() -> Result<Vec<String>> {
    with_client(|client| execute(client, &QUEUE_NAMES, &[])?.map(|row| row.required(1)))
}

/// For each of `functions`, whether `role` may execute it.
pub fn executable(role: Oid, functions: &[&str]) -> Result<Vec<bool>> {
    let names: Vec<String> = functions.iter().map(|f| f.to_string()).collect();
    with_client(|client| {
        execute(client, &EXECUTABLE, &[role.into(), names.into()])?.map(|row| row.required(2))
    })
}

pub fn queue_of_task(task_id: i64) -> Result<Option<String>> {
    with_client(|client| {
        execute(client, &QUEUE_OF_TASK, &[task_id.into()])?.first(|row| row.required(1))
    })
}

pub fn tasks_of_key(key: &str, queue: Option<&str>) -> Result<Vec<(String, i64)>> {
    with_client(|client| {
        execute(client, &TASKS_OF_KEY, &[key.into(), queue.into()])?
            .map(|row| Ok((row.required(1)?, row.required(2)?)))
    })
}

/// Task `$1` of queue `$2`'s errors, oldest first: its history (0.8.0), or
/// its last error alone where it has none (a task dead-lettered as it was
/// enqueued, or a schema before 0.8.0).
macro_rules! errors_of {
    ($history:literal) => {
        concat!(
            "SELECT (e ->> 'attempt')::int4, (e ->> 'at')::timestamptz, e ->> 'error'
               FROM aedb_queue.task t,
                    jsonb_array_elements(coalesce(", $history, ",
                        CASE WHEN t.last_error IS NOT NULL THEN
                            jsonb_build_array(jsonb_build_object('attempt', NULL, 'at', t.updated_at,
                                                                 'error', t.last_error))
                        END)) e
              WHERE t.task_id = $1 AND t.queue = $2"
        )
    };
}

pub(super) static ERRORS_OF: Versioned = Versioned {
    current: Statement {
        sql: errors_of!("t.errors"),
        args: &[INT8, TEXT],
        clock: false,
    },
    older: &[(
        SchemaLevel::V080,
        Statement {
            sql: errors_of!("NULL::jsonb"),
            args: &[INT8, TEXT],
            clock: false,
        },
    )],
};

/// One entry of a task's error history: (attempt, when, error).
pub type TaskError = (Option<i32>, Option<TimestampWithTimeZone>, Option<String>);

pub fn errors_of(queue: &str, task_id: i64) -> Result<Vec<TaskError>> {
    with_client(|client| {
        execute(client, ERRORS_OF.get(), &[task_id.into(), queue.into()])?
            .map(|row| Ok((row.get(1)?, row.get(2)?, row.get(3)?)))
    })
}
