//! Statements on queues rather than single tasks: settings, grants, dead
//! letters, purges, the completed-task archive, wake-ups and inspection.

use std::cell::RefCell;

use aedb_queue_core::flow::RateLimit;
use aedb_queue_core::validate::{PageStart, RetryDefaults};
use pgrx::datum::{Interval, TimestampWithTimeZone};

use super::flow::SlotChanges;

use super::{
    execute, first_i64, with_client, Row, SchemaLevel, Statement, Versioned, BOOL, INT4, INT8,
    INTERVAL, JSONB, TEXT, TIMESTAMPTZ,
};
use crate::cache::{self, Copies, Topic};
use crate::datum::{RawJsonb, RawTaskRow};
use crate::duration::micros;
use crate::errors::{internal, Result};

/// One queue's settings; every field `None` (or false) for a queue never configured.
#[derive(Debug, Clone, Default)]
pub struct QueueSettings {
    pub retry: RetryDefaults,
    pub default_lease: Option<Interval>,
    pub max_payload_bytes: Option<i32>,
    pub keep_completed: Option<Interval>,
    pub keep_idempotency_keys: Option<Interval>,
    pub notify: bool,
    pub paused: bool,
    /// Tasks of one concurrency key ready or in flight at once (None: 1).
    pub concurrency_limit: Option<i32>,
    /// Claims per interval, as stored (None: no limit).
    pub rate_limit: Option<i32>,
    pub rate_interval: Option<Interval>,
    pub rate_burst: Option<i32>,
    /// "block" (None) or "release": what a dead task does to its ordering key.
    pub ordering_on_dead: Option<String>,
    /// Claims share the ready tasks across fairness keys.
    pub fair_share: bool,
    /// Read from the queue's registry row (false: the queue has none yet).
    pub registered: bool,
}

impl QueueSettings {
    /// The rate limit in force, with its defaults filled in.
    pub fn rate(&self) -> Option<RateLimit> {
        let rate = self.rate_limit?;
        Some(RateLimit {
            rate: rate.max(1) as u32,
            per_micros: self.rate_interval.map_or(1_000_000, micros),
            burst: self.rate_burst.unwrap_or(rate).max(1) as u32,
        })
    }
}

/// `$flow` lists the flow-control settings (concurrency_limit, rate_limit,
/// rate_interval, rate_burst, ordering_on_dead, fair_share), NULLs on
/// schemas before 0.6.0.
macro_rules! load_settings {
    ($flow:literal) => {
        concat!(
            "SELECT max_attempts, backoff_base, backoff_max, default_lease, max_payload_bytes,
                    keep_completed, keep_idempotency_keys, notify, paused, ",
            $flow,
            " FROM aedb_queue.queue WHERE name = $1"
        )
    };
}

static LOAD_SETTINGS: Versioned = Versioned {
    current: Statement {
        sql: load_settings!(
            "concurrency_limit, rate_limit, rate_interval, rate_burst, ordering_on_dead, fair_share"
        ),
        args: &[TEXT],
        clock: false,
    },
    older: &[(
        SchemaLevel::V060,
        Statement {
            sql: load_settings!(
                "NULL::integer, NULL::integer, NULL::interval, NULL::integer, NULL::text, NULL::boolean"
            ),
            args: &[TEXT],
            clock: false,
        },
    )],
};

/// Sets the given settings, or with $10 first resets every one to the
/// default. The `$flow_*` pieces set the flow-control settings ($11 to
/// $16, as `load_settings`), which schemas before 0.6.0 lack.
macro_rules! configure {
    ($flow_columns:literal, $flow_values:literal, $flow_set:literal, $flow:literal) => {
        concat!(
            "INSERT INTO aedb_queue.queue AS q
              (name, max_attempts, backoff_base, backoff_max, default_lease, max_payload_bytes,
               keep_completed, keep_idempotency_keys, notify", $flow_columns, ")
          VALUES ($1, $2, $3, $4, $5, $6, $7, $8, coalesce($9, false)", $flow_values, ")
          ON CONFLICT (name) DO UPDATE SET
              max_attempts = coalesce($2, CASE WHEN $10 THEN NULL ELSE q.max_attempts END),
              backoff_base = coalesce($3, CASE WHEN $10 THEN NULL ELSE q.backoff_base END),
              backoff_max = coalesce($4, CASE WHEN $10 THEN NULL ELSE q.backoff_max END),
              default_lease = coalesce($5, CASE WHEN $10 THEN NULL ELSE q.default_lease END),
              max_payload_bytes = coalesce($6, CASE WHEN $10 THEN NULL ELSE q.max_payload_bytes END),
              keep_completed = coalesce($7, CASE WHEN $10 THEN NULL ELSE q.keep_completed END),
              keep_idempotency_keys = coalesce($8, CASE WHEN $10 THEN NULL ELSE q.keep_idempotency_keys END),
              notify = coalesce($9, CASE WHEN $10 THEN false ELSE q.notify END)", $flow_set, "
          RETURNING max_attempts, backoff_base, backoff_max, default_lease, max_payload_bytes,
                    keep_completed, keep_idempotency_keys, notify, paused, ", $flow
        )
    };
}

const CONFIGURE_ARGS: &[pgrx::pg_sys::PgBuiltInOids] = &[
    TEXT, INT4, INTERVAL, INTERVAL, INTERVAL, INT4, INTERVAL, INTERVAL, BOOL, BOOL, INT4, INT4,
    INTERVAL, INT4, TEXT, BOOL,
];

static CONFIGURE: Versioned = Versioned {
    current: Statement {
        sql: configure!(
            ", concurrency_limit, rate_limit, rate_interval, rate_burst, ordering_on_dead, fair_share",
            ", $11, $12, $13, $14, $15, $16",
            ",
              concurrency_limit = coalesce($11, CASE WHEN $10 THEN NULL ELSE q.concurrency_limit END),
              rate_limit = coalesce($12, CASE WHEN $10 THEN NULL ELSE q.rate_limit END),
              rate_interval = coalesce($13, CASE WHEN $10 THEN NULL ELSE q.rate_interval END),
              rate_burst = coalesce($14, CASE WHEN $10 THEN NULL ELSE q.rate_burst END),
              ordering_on_dead = coalesce($15, CASE WHEN $10 THEN NULL ELSE q.ordering_on_dead END),
              fair_share = coalesce($16, CASE WHEN $10 THEN NULL ELSE q.fair_share END)",
            "concurrency_limit, rate_limit, rate_interval, rate_burst, ordering_on_dead, fair_share"
        ),
        args: CONFIGURE_ARGS,
        clock: false,
    },
    older: &[(
        SchemaLevel::V060,
        Statement {
            sql: configure!(
                "",
                "",
                "",
                "NULL::integer, NULL::integer, NULL::interval, NULL::integer, NULL::text, NULL::boolean"
            ),
            args: CONFIGURE_ARGS,
            clock: false,
        },
    )],
};

/// Returns whether the flag changed.
static SET_PAUSED: Statement = Statement {
    sql: "WITH before AS (SELECT paused FROM aedb_queue.queue WHERE name = $1)
          INSERT INTO aedb_queue.queue AS q (name, paused) VALUES ($1, $2)
          ON CONFLICT (name) DO UPDATE SET paused = $2
          RETURNING coalesce((SELECT paused FROM before), false) <> $2",
    args: &[TEXT, BOOL],
    clock: false,
};

/// Dead tasks back to ready with their attempts reset (`$due`: blocked with
/// a concurrency key, or with an ordering key whose head it no longer is,
/// so it waits in line again); $2 one task (NULL: all), up to $3. Both
/// cases are one task-id range, so the dead index serves either. Returns
/// the count and the keys of the tasks that became blocked.
macro_rules! retry_dead {
    ($key:literal, $okey:literal, $due:literal) => {
        concat!(
            "WITH retried AS (
              UPDATE aedb_queue.task
              SET state = ", $due, ", attempts = 0, not_before = $4,
                  updated_at = $4
              WHERE task_id = ANY(ARRAY(
                  SELECT task_id FROM aedb_queue.task
                  WHERE queue = $1 AND state = 'dead'
                    AND task_id >= coalesce($2, 0) AND task_id <= coalesce($2, 9223372036854775807)
                  ORDER BY task_id LIMIT $3 FOR UPDATE SKIP LOCKED))
              RETURNING ", $key, " AS key, ", $okey, " AS okey)
          SELECT count(*), ARRAY(SELECT key FROM retried WHERE key IS NOT NULL),
                 ARRAY(SELECT okey FROM retried WHERE okey IS NOT NULL)
          FROM retried"
        )
    };
}

static RETRY_DEAD: Versioned = Versioned {
    current: Statement {
        sql: retry_dead!(
            "concurrency_key",
            "CASE WHEN state = 'blocked' THEN ordering_key END",
            "CASE WHEN concurrency_key IS NOT NULL
                    OR (ordering_key IS NOT NULL AND NOT EXISTS (
                          SELECT 1 FROM aedb_queue.ordering_slot o
                          WHERE o.queue = aedb_queue.task.queue AND o.key = aedb_queue.task.ordering_key
                            AND o.head = aedb_queue.task.task_id))
                  THEN 'blocked' ELSE 'ready' END::aedb_queue.task_state"
        ),
        args: &[TEXT, INT8, INT4],
        clock: true,
    },
    older: &[(
        SchemaLevel::V060,
        Statement {
            sql: retry_dead!("NULL::text", "NULL::text", "'ready'"),
            args: &[TEXT, INT8, INT4],
            clock: true,
        },
    )],
};

/// Returns the count, the purged tasks that had dependents, the
/// concurrency keys of those that held slots, and the ordering keys and ids
/// of those in their key's line ahead of the blocked ones.
macro_rules! purge {
    ($deps:literal, $key:literal, $okey:literal) => {
        concat!(
            "WITH purged AS (
              DELETE FROM aedb_queue.task WHERE queue = $1 AND state = $2::aedb_queue.task_state
              RETURNING task_id, ",
            $deps,
            " IS TRUE AS has_dependents, ",
            $key,
            " AS key, ",
            $okey,
            " AS okey)
          SELECT count(*), ARRAY(SELECT task_id FROM purged WHERE has_dependents),
                 ARRAY(SELECT key FROM purged WHERE key IS NOT NULL),
                 ARRAY(SELECT okey FROM purged WHERE okey IS NOT NULL),
                 ARRAY(SELECT task_id FROM purged WHERE okey IS NOT NULL)
          FROM purged"
        )
    };
}

static PURGE: Versioned = Versioned {
    current: Statement {
        sql: purge!(
            "has_dependents",
            "CASE WHEN state IN ('ready', 'in_flight') THEN concurrency_key END",
            "CASE WHEN state <> 'blocked' THEN ordering_key END"
        ),
        args: &[TEXT, TEXT],
        clock: false,
    },
    older: &[
        (
            SchemaLevel::V060,
            Statement {
                sql: purge!("has_dependents", "NULL::text", "NULL::text"),
                args: &[TEXT, TEXT],
                clock: false,
            },
        ),
        (
            SchemaLevel::V050,
            Statement {
                sql: purge!("NULL::boolean", "NULL::text", "NULL::text"),
                args: &[TEXT, TEXT],
                clock: false,
            },
        ),
    ],
};

static PURGE_COMPLETED: Statement = Statement {
    sql: "WITH purged AS (DELETE FROM aedb_queue.completed_task WHERE queue = $1 RETURNING 1)
          SELECT count(*) FROM purged",
    args: &[TEXT],
    clock: false,
};

/// The archived tasks of queue $1 completed before `$before`, of one kind
/// (`$flow`: in_workflow or not), oldest first, up to $3, locked: an
/// ordered range of completed_task_age_idx (the others: a workflow's task
/// younger than keep_workflows is stepped over, in a queue that keeps
/// completed tasks for less) or of completed_task_workflow_idx (in_workflow).
/// A parent stays while a child of it is left (its children read its
/// result).
macro_rules! expirable {
    ($flow:literal, $before:literal) => {
        concat!(
            "ARRAY(SELECT c.task_id FROM aedb_queue.completed_task c
                  WHERE c.queue = $1 AND c.in_workflow = ",
            $flow,
            " AND c.completed_at < ",
            $before,
            "
                    AND NOT EXISTS (SELECT 1 FROM aedb_queue.task_dependency d
                                    JOIN aedb_queue.task t ON t.task_id = d.child_id
                                    WHERE d.parent_id = c.task_id)
                  ORDER BY c.completed_at LIMIT $3 FOR UPDATE OF c SKIP LOCKED)"
        )
    };
}

/// Archived tasks completed longer than $2 ago (those of a workflow or a
/// DAG: longer than the greater of $2 and $4), up to $3 of each kind;
/// rows someone holds locked are left for the next run rather than waited
/// for. A parent stays while a child of it is left (its children read its
/// result); its links go with it. The steps and waits of the tasks that
/// went are swept by `queue_reap()` of every queue (SWEEP_STEPS).
pub(super) static EXPIRE_COMPLETED: Versioned = Versioned {
    current: Statement {
        sql: concat!(
            "WITH expired AS (
              DELETE FROM aedb_queue.completed_task
              WHERE task_id = ANY(",
            expirable!("false", "$5 - $2"),
            " || ",
            expirable!("true", "$5 - greatest($2, $4)"),
            ")
              RETURNING task_id),
          unlinked AS (
              DELETE FROM aedb_queue.task_dependency
              WHERE parent_id IN (SELECT task_id FROM expired))
          SELECT count(*) FROM expired"
        ),
        args: &[TEXT, INTERVAL, INT4, INTERVAL],
        clock: true,
    },
    older: &[
        (
            SchemaLevel::V090,
            Statement {
                sql: "WITH expired AS (
                  DELETE FROM aedb_queue.completed_task
                  WHERE task_id = ANY(ARRAY(
                      SELECT c.task_id FROM aedb_queue.completed_task c
                      WHERE c.queue = $1 AND c.completed_at < $4 - $2
                        AND NOT EXISTS (SELECT 1 FROM aedb_queue.task_dependency d
                                        JOIN aedb_queue.task t ON t.task_id = d.child_id
                                        WHERE d.parent_id = c.task_id)
                      ORDER BY c.completed_at LIMIT $3 FOR UPDATE OF c SKIP LOCKED))
                  RETURNING task_id),
              unlinked AS (
                  DELETE FROM aedb_queue.task_dependency
                  WHERE parent_id IN (SELECT task_id FROM expired))
              SELECT count(*) FROM expired",
                args: &[TEXT, INTERVAL, INT4],
                clock: true,
            },
        ),
        (
            SchemaLevel::V050,
            Statement {
                sql: "WITH expired AS (
              DELETE FROM aedb_queue.completed_task
              WHERE task_id = ANY(ARRAY(
                  SELECT task_id FROM aedb_queue.completed_task
                  WHERE queue = $1 AND completed_at < $4 - $2
                  ORDER BY completed_at LIMIT $3 FOR UPDATE SKIP LOCKED))
              RETURNING 1)
          SELECT count(*) FROM expired",
                args: &[TEXT, INTERVAL, INT4],
                clock: true,
            },
        ),
    ],
};

/// Idempotency keys taken longer than $2 ago whose task is gone, up to $3
/// (locked ones skipped, as above).
static EXPIRE_KEYS: Statement = Statement {
    sql: "WITH expired AS (
              DELETE FROM aedb_queue.idempotency_key k
              USING (SELECT key FROM aedb_queue.idempotency_key i
                     WHERE i.queue = $1 AND i.created_at < $4 - $2
                       AND NOT EXISTS (SELECT 1 FROM aedb_queue.task t WHERE t.task_id = i.task_id)
                     ORDER BY i.created_at LIMIT $3 FOR UPDATE OF i SKIP LOCKED) AS old
              WHERE k.queue = $1 AND k.key = old.key
              RETURNING 1)
          SELECT count(*) FROM expired",
    args: &[TEXT, INTERVAL, INT4],
    clock: true,
};

/// Wakes listeners; Postgres delivers it at commit, once per transaction and queue.
/// `$1` is `<queue> <tasks completed> <first task id>`.
static NOTIFY_COMPLETED: Statement = Statement {
    sql: "SELECT pg_catalog.pg_notify('aedb_queue_completed', $1)",
    args: &[TEXT],
    clock: false,
};

static NOTIFY: Statement = Statement {
    sql: "SELECT pg_catalog.pg_notify('aedb_queue', $1)",
    args: &[TEXT],
    clock: false,
};

/// A live task (`t`) as a task row, in the column order of aedb_queue.task_row.
macro_rules! task_record {
    () => {
        "ROW(t.task_id, t.queue, t.state::text, t.not_before, t.priority, t.attempts,
             t.max_attempts, t.owner_id, t.fencing_token, t.lease_deadline, t.payload, t.progress,
             t.last_error, t.idempotency_key, t.backoff_base, t.backoff_max, t.created_at,
             t.updated_at, NULL::jsonb, NULL::timestamptz)"
    };
}

/// A kept completed task (`t`) as a task row: its completion time is its
/// `updated_at` and its `completed_at`.
macro_rules! completed_record {
    () => {
        "ROW(t.task_id, t.queue, 'completed'::text, NULL::timestamptz, t.priority, t.attempts,
             t.max_attempts, t.owner_id, t.fencing_token, NULL::timestamptz, t.payload, t.progress,
             NULL::text, t.idempotency_key, NULL::interval, NULL::interval, t.created_at,
             t.completed_at, t.result, t.completed_at)"
    };
}

macro_rules! task_record_select {
    ($($where:expr),+) => {
        concat!("SELECT ", task_record!(), " FROM aedb_queue.task t ", $($where),+)
    };
}

macro_rules! completed_record_select {
    ($where:literal) => {
        concat!("SELECT ", completed_record!(), " FROM aedb_queue.completed_task t ", $where)
    };
}

static GET_TASK: Statement = Statement {
    sql: concat!(
        task_record_select!("WHERE t.queue = $1 AND t.task_id = $2"),
        " UNION ALL ",
        completed_record_select!("WHERE t.queue = $1 AND t.task_id = $2")
    ),
    args: &[TEXT, INT8],
    clock: false,
};

/// Waiting tasks oldest first (schemas from 0.5.0 on; `list_tasks` adds
/// them after the others). From 0.6.0 on they share `task_blocked_idx`
/// with the blocked tasks, by key: the listing reads the queue's range of
/// it and keeps the oldest (a top-N sort), an inspection's price for one
/// index less on every task write.
static LIST_WAITING: Versioned = Versioned {
    current: Statement {
        sql: task_record_select!(
            "WHERE t.queue = $1 AND t.state > 'dead' AND t.waiting_on > 0
              ORDER BY t.task_id LIMIT $2"
        ),
        args: &[TEXT, INT4],
        clock: false,
    },
    older: &[(
        SchemaLevel::V060,
        Statement {
            sql: task_record_select!(
                "WHERE t.queue = $1 AND t.waiting_on > 0 ORDER BY t.queue, t.task_id LIMIT $2"
            ),
            args: &[TEXT, INT4],
            clock: false,
        },
    )],
};

/// Blocked tasks by key, each key's in the order it is served (as
/// `task_blocked_idx` holds them; schemas from 0.6.0 on).
static LIST_BLOCKED: Versioned = Versioned {
    current: Statement {
        sql: task_record_select!(
            "WHERE t.queue = $1 AND t.state = 'blocked'
              ORDER BY t.queue, t.concurrency_key, t.ordering_key,
                       (CASE WHEN t.ordering_key IS NULL THEN t.priority END) DESC, t.task_id LIMIT $2"
        ),
        args: &[TEXT, INT4],
        clock: false,
    },
    older: &[],
};

/// States listed by statements of their own, after LIST_TASKS's, on the
/// schemas that have them.
static LISTED_APART: &[(&str, &Versioned, SchemaLevel)] = &[
    ("waiting", &LIST_WAITING, SchemaLevel::V050),
    ("blocked", &LIST_BLOCKED, SchemaLevel::V060),
];

/// Each state through its own index in its natural order; $2 NULL lists
/// all. `$ready` orders the ready tasks as the schema's ready index does.
macro_rules! list_tasks {
    ($ready:literal) => {
        concat!(
            "(",
            task_record_select!(
                "WHERE t.queue = $1 AND t.state = 'ready' AND ($2 IS NULL OR $2 = 'ready')
              ORDER BY ",
                $ready,
                " LIMIT $3"
            ),
            ")
         UNION ALL
         (",
            task_record_select!(
                "WHERE t.queue = $1 AND t.state = 'in_flight' AND t.lease_deadline IS NOT NULL
              AND ($2 IS NULL OR $2 = 'in_flight') ORDER BY t.lease_deadline LIMIT $3"
            ),
            ")
         UNION ALL
         (",
            task_record_select!(
                "WHERE t.queue = $1 AND t.state = 'scheduled' AND ($2 IS NULL OR $2 = 'scheduled')
              ORDER BY t.not_before LIMIT $3"
            ),
            ")
         UNION ALL
         (",
            task_record_select!(
                "WHERE t.queue = $1 AND t.state = 'dead' AND ($2 IS NULL OR $2 = 'dead')
              ORDER BY t.task_id LIMIT $3"
            ),
            ")
         UNION ALL
         (",
            completed_record_select!(
                "WHERE t.queue = $1 AND ($2 IS NULL OR $2 = 'completed')
              ORDER BY t.queue, t.completed_at DESC LIMIT $3"
            ),
            ")
         LIMIT $3"
        )
    };
}

static LIST_TASKS: Versioned = Versioned {
    current: Statement {
        sql: list_tasks!("t.priority DESC, -coalesce(t.fair_vt, t.task_id) DESC"),
        args: &[TEXT, TEXT, INT4],
        clock: false,
    },
    older: &[(
        SchemaLevel::V060,
        Statement {
            sql: list_tasks!("t.priority DESC, -t.task_id DESC"),
            args: &[TEXT, TEXT, INT4],
            clock: false,
        },
    )],
};

/// The filters of a page of tasks (`queue_tasks`), on the columns of
/// `page` below or of a task table aliased `t`: created and last changed
/// in [$4, $5) and [$6, $7), payload containing $8 and having the
/// top-level key $9, each left out when NULL. None bounds an index scan:
/// the page reads its index in task id order, keeping the rows that pass.
macro_rules! page_filters {
    ($t:literal, $updated:literal) => {
        concat!(
            " AND ($4 IS NULL OR ", $t, ".created_at >= $4) AND ($5 IS NULL OR ", $t, ".created_at < $5)
              AND ($6 IS NULL OR ", $updated, " >= $6) AND ($7 IS NULL OR ", $updated, " < $7)
              AND ($8 IS NULL OR ", $t, ".payload @> $8) AND ($9 IS NULL OR ", $t, ".payload ? $9)"
        )
    };
}

/// A page of up to $10 tasks of queue $1 after task id $3 (`$cmp` `>`,
/// `$order` ASC) or before it (`<`, DESC), in that order: the live tasks
/// when $11 (of state $2 unless it is NULL), the kept completed ones when
/// $12. Each table's primary key is read in task id order from $3 and the
/// two are merged (no index of the task table leads with the queue in task
/// id order, and one more would cost every write of a task row: see
/// `task_blocked_idx` in sql/schema.sql), so a page costs the rows read
/// until $10 pass: more when the queue is small beside the others or the
/// filters pass few. The conditions are on the union, so that the planner
/// pulls both tables up into one append and pushes them down to each as
/// index conditions and filters (a branch with a WHERE of its own stays a
/// subquery, whose rows come out unordered: a sort of all of them).
/// `live` tells the branches apart: the flags become each one's one-time
/// filter.
macro_rules! tasks_page {
    ($cmp:literal, $order:literal) => {
        concat!(
            in_index_order!(),
            "SELECT page.r FROM (
                 SELECT t.task_id AS id, t.queue, t.state, t.created_at, t.updated_at AS changed,
                        t.payload, true AS live, ", task_record!(), " AS r
                 FROM aedb_queue.task t
                 UNION ALL
                 SELECT t.task_id, t.queue, NULL::aedb_queue.task_state, t.created_at, t.completed_at,
                        t.payload, false, ", completed_record!(), "
                 FROM aedb_queue.completed_task t) page
             WHERE page.queue = $1 AND page.id ", $cmp, " $3
               AND CASE WHEN page.live THEN $11 ELSE $12 END
               AND ($2 IS NULL OR page.state = $2::aedb_queue.task_state)",
            page_filters!("page", "page.changed"),
            " ORDER BY page.id ", $order, " LIMIT $10"
        )
    };
}

/// The dead tasks of a page: the queue's range of `task_dead_idx`, which
/// is in (queue, task id) order, so only dead tasks of the queue are read.
/// The queue is bounded on one side with the start (a row comparison,
/// `$cmp`) and on the other by itself (`$bound`), not by `queue = $1`, and
/// the rows are ordered by both columns (`$order`): only that index reads
/// them so (the primary key, with every other task among them, would need
/// a sort; under `queue = $1` both are ordered by task id alone, and a
/// generic plan can take the primary key).
macro_rules! dead_page {
    ($cmp:literal, $bound:literal, $order:literal) => {
        concat!(
            in_index_order!(),
            task_record_select!(
                "WHERE t.state = 'dead' AND (t.queue, t.task_id) ",
                $cmp,
                " ($1, $3) AND t.queue ",
                $bound,
                " $1",
                page_filters!("t", "t.updated_at"),
                " ORDER BY t.queue ",
                $order,
                ", t.task_id ",
                $order,
                " LIMIT $10"
            )
        )
    };
}

/// The parameters of every page statement (those a statement does not use
/// are still bound, so one argument list serves them all).
const PAGE_ARGS: &[pgrx::pg_sys::PgBuiltInOids] = &[
    TEXT,
    TEXT,
    INT8,
    TIMESTAMPTZ,
    TIMESTAMPTZ,
    TIMESTAMPTZ,
    TIMESTAMPTZ,
    JSONB,
    TEXT,
    INT4,
    BOOL,
    BOOL,
];

const fn page(sql: &'static str) -> Statement {
    Statement {
        sql,
        args: PAGE_ARGS,
        clock: false,
    }
}

static TASKS_AFTER: Statement = page(tasks_page!(">", "ASC"));
static TASKS_BEFORE: Statement = page(tasks_page!("<", "DESC"));
static DEAD_AFTER: Statement = page(dead_page!(">", "<=", "ASC"));
static DEAD_BEFORE: Statement = page(dead_page!("<", ">=", "DESC"));

/// The listing statements, by name, for the plan tests.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) static LISTING_STATEMENTS: &[(&str, &Statement)] = &[
    ("LIST_TASKS", &LIST_TASKS.current),
    ("LIST_WAITING", &LIST_WAITING.current),
    ("LIST_BLOCKED", &LIST_BLOCKED.current),
    ("TASKS_AFTER", &TASKS_AFTER),
    ("TASKS_BEFORE", &TASKS_BEFORE),
    ("DEAD_AFTER", &DEAD_AFTER),
    ("DEAD_BEFORE", &DEAD_BEFORE),
];

thread_local! {
    static SETTINGS: RefCell<Copies<String, QueueSettings>> = RefCell::new(Copies::new(Topic::Settings));
}

/// The queue's settings, from this backend's copy while no change was committed.
pub fn settings(queue: &str) -> Result<QueueSettings> {
    if !super::schema_current() {
        return Ok(QueueSettings::default());
    }
    if let Some(found) = SETTINGS.with(|s| s.borrow_mut().get(queue)) {
        return Ok(found);
    }
    let generation = cache::generation(Topic::Settings);
    let loaded = with_client(|client| {
        Ok(execute(client, LOAD_SETTINGS.get(), &[queue.into()])?
            .first(settings_of)?
            .unwrap_or_default())
    })?;
    SETTINGS.with(|s| {
        s.borrow_mut()
            .put(queue.to_string(), loaded.clone(), generation)
    });
    Ok(loaded)
}

fn settings_of(row: &Row<'_>) -> Result<QueueSettings> {
    Ok(QueueSettings {
        retry: RetryDefaults {
            max_attempts: row.get(1)?,
            backoff_base_micros: row.get::<Interval>(2)?.map(micros),
            backoff_max_micros: row.get::<Interval>(3)?.map(micros),
        },
        default_lease: row.get(4)?,
        max_payload_bytes: row.get(5)?,
        keep_completed: row.get(6)?,
        keep_idempotency_keys: row.get(7)?,
        notify: row.get(8)?.unwrap_or(false),
        paused: row.get(9)?.unwrap_or(false),
        concurrency_limit: row.get(10)?,
        rate_limit: row.get(11)?,
        rate_interval: row.get(12)?,
        rate_burst: row.get(13)?,
        ordering_on_dead: row.get(14)?,
        fair_share: row.get(15)?.unwrap_or(false),
        registered: true,
    })
}

/// New values for `configure`; `None` leaves a setting as it is.
pub struct SettingsChange {
    pub max_attempts: Option<i32>,
    pub backoff_base: Option<Interval>,
    pub backoff_max: Option<Interval>,
    pub default_lease: Option<Interval>,
    pub max_payload_bytes: Option<i32>,
    pub keep_completed: Option<Interval>,
    pub keep_idempotency_keys: Option<Interval>,
    pub notify: Option<bool>,
    pub concurrency_limit: Option<i32>,
    pub rate_limit: Option<i32>,
    pub rate_interval: Option<Interval>,
    pub rate_burst: Option<i32>,
    pub ordering_on_dead: Option<String>,
    pub fair_share: Option<bool>,
    /// Reset every setting not given to its default first.
    pub reset: bool,
}

/// Applies `change` (creating the queue if new); returns the settings now in force.
pub fn configure(queue: &str, change: &SettingsChange) -> Result<QueueSettings> {
    let settings = with_client(|client| {
        let args = [
            queue.into(),
            change.max_attempts.into(),
            change.backoff_base.into(),
            change.backoff_max.into(),
            change.default_lease.into(),
            change.max_payload_bytes.into(),
            change.keep_completed.into(),
            change.keep_idempotency_keys.into(),
            change.notify.into(),
            change.reset.into(),
            change.concurrency_limit.into(),
            change.rate_limit.into(),
            change.rate_interval.into(),
            change.rate_burst.into(),
            change.ordering_on_dead.as_deref().into(),
            change.fair_share.into(),
        ];
        let settings = execute(client, CONFIGURE.get(), &args)?
            .first(settings_of)?
            .ok_or_else(|| internal("CONFIGURE returned no row"))?;
        if super::schema_level() < SchemaLevel::V060 {
            // No flow control before 0.6.0: nothing below applies.
            return Ok(settings);
        }
        if change.concurrency_limit.is_some() || change.reset {
            super::flow::limits_changed_in(client, queue, None)?;
        }
        super::flow::rate_changed_in(client, queue, settings.rate())?;
        if settings.ordering_on_dead.as_deref() == Some("release") {
            super::flow::release_dead_heads_in(client, queue)?;
        }
        // Turned on: the tasks already there get virtual times; off: lose
        // them, so the queue is first in, first out again at once.
        if change.fair_share == Some(true) {
            super::flow::backfill_virtual_times_in(client, queue)?;
        } else if change.fair_share == Some(false) || change.reset {
            super::flow::clear_virtual_times_in(client, queue)?;
        }
        Ok(settings)
    })?;
    super::copies_stale_without_trigger(c"queue");
    Ok(settings)
}

/// Pauses or resumes the queue; true if that changed its state.
pub fn set_paused(queue: &str, paused: bool) -> Result<bool> {
    let changed = with_client(|client| {
        let rows = execute(client, &SET_PAUSED, &[queue.into(), paused.into()])?;
        Ok(rows.first(|row| row.get::<bool>(1))?.flatten())
    })?;
    super::copies_stale_without_trigger(c"queue");
    Ok(changed == Some(true))
}

/// Moves dead tasks (one, or all when `task_id` is None) back to ready, up to `max`.
pub fn retry_dead(queue: &str, task_id: Option<i64>, max: i32) -> Result<i64> {
    with_client(|client| {
        let table = execute(
            client,
            RETRY_DEAD.get(),
            &[queue.into(), task_id.into(), max.into()],
        )?;
        let mut slots = SlotChanges::default();
        let retried = table.first(|row| {
            slots.all(
                queue,
                &row.get::<Vec<String>>(2)?.unwrap_or_default(),
                false,
            );
            for key in row.get::<Vec<String>>(3)?.unwrap_or_default() {
                slots.joined(queue, &key);
            }
            row.get::<i64>(1)
        })?;
        super::flow::settle_in(client, slots)?;
        Ok(retried.flatten().unwrap_or(0))
    })
}

/// Deletes the queue's tasks in `state` ("completed": its archived tasks).
/// Deletes the queue's tasks of `state` (purged parents count as
/// cancelled for their children); returns how many, and the queues where
/// children became ready.
pub fn purge(queue: &str, state: &str) -> Result<(i64, Vec<String>)> {
    with_client(|client| {
        if state == "completed" {
            let table = execute(client, &PURGE_COMPLETED, &[queue.into()])?;
            return Ok((first_i64(table)?.unwrap_or(0), Vec::new()));
        }
        let table = execute(client, PURGE.get(), &[queue.into(), state.into()])?;
        let mut slots = SlotChanges::default();
        let (count, parents) = table
            .first(|row| {
                slots.all(queue, &row.get::<Vec<String>>(3)?.unwrap_or_default(), true);
                let lines = row.get::<Vec<String>>(4)?.unwrap_or_default();
                let ids = row.get::<Vec<i64>>(5)?.unwrap_or_default();
                for (key, &id) in lines.iter().zip(&ids) {
                    slots.head_left(queue, key, id);
                }
                Ok((
                    row.get::<i64>(1)?.unwrap_or(0),
                    row.get::<Vec<i64>>(2)?.unwrap_or_default(),
                ))
            })?
            .unwrap_or_default();
        let mut woken = super::flow::settle_in(client, slots)?;
        if !parents.is_empty() {
            woken.extend(super::dependency::parents_failed_in(
                client,
                parents,
                "was purged",
            )?);
        }
        Ok((count, woken))
    })
}

/// Deletes up to `max` archived tasks completed longer than `keep` ago
/// (of a workflow or a DAG: longer than `keep` and `keep_workflows`; up to
/// `max` more of those).
pub fn expire_completed(
    queue: &str,
    keep: Interval,
    keep_workflows: Interval,
    max: i32,
) -> Result<i64> {
    with_client(|client| {
        let table = if super::schema_level() >= SchemaLevel::V090 {
            execute(
                client,
                EXPIRE_COMPLETED.get(),
                &[queue.into(), keep.into(), max.into(), keep_workflows.into()],
            )?
        } else {
            execute(
                client,
                EXPIRE_COMPLETED.get(),
                &[queue.into(), keep.into(), max.into()],
            )?
        };
        Ok(first_i64(table)?.unwrap_or(0))
    })
}

/// Deletes up to `max` idempotency keys taken longer than `keep` ago whose task is gone.
pub fn expire_keys(queue: &str, keep: Interval, max: i32) -> Result<i64> {
    with_client(|client| {
        let table = execute(
            client,
            &EXPIRE_KEYS,
            &[queue.into(), keep.into(), max.into()],
        )?;
        Ok(first_i64(table)?.unwrap_or(0))
    })
}

pub fn notify(queue: &str) -> Result<()> {
    with_client(|client| {
        execute(client, &NOTIFY, &[queue.into()])?;
        Ok(())
    })
}

/// Tells listeners of `aedb_queue_completed` that `count` tasks of
/// `queue` completed, the first of them `first_task_id`.
pub fn notify_completed(queue: &str, count: usize, first_task_id: i64) -> Result<()> {
    with_client(|client| {
        let payload = format!("{queue} {count} {first_task_id}");
        execute(client, &NOTIFY_COMPLETED, &[payload.as_str().into()])?;
        Ok(())
    })
}

/// The task (live, or kept after completion) as a task row.
pub fn get_task(queue: &str, task_id: i64) -> Result<Option<RawTaskRow>> {
    with_client(|client| {
        let rows = execute(client, &GET_TASK, &[queue.into(), task_id.into()])?;
        Ok(rows.first(|row| row.get(1))?.flatten())
    })
}

/// What a page of tasks keeps (`queue_tasks`); None: not filtered.
#[derive(Default)]
pub struct TaskFilter<'a> {
    /// A listed state (`validate::listed_state`): a task state or "completed".
    pub state: Option<&'a str>,
    pub created_after: Option<TimestampWithTimeZone>,
    pub created_before: Option<TimestampWithTimeZone>,
    pub updated_after: Option<TimestampWithTimeZone>,
    pub updated_before: Option<TimestampWithTimeZone>,
    pub payload_contains: Option<RawJsonb>,
    pub payload_has_key: Option<&'a str>,
}

/// Up to `limit` tasks of the queue that pass `filter`, after or before a
/// task id, in task id order either way.
pub fn page_tasks(
    queue: &str,
    filter: &TaskFilter<'_>,
    start: PageStart,
    limit: i32,
) -> Result<Vec<RawTaskRow>> {
    let (key, forward) = match start {
        PageStart::After(after) => (after.unwrap_or(i64::MIN), true),
        PageStart::Before(before) => (before, false),
    };
    let statement = match (filter.state, forward) {
        (Some("dead"), true) => &DEAD_AFTER,
        (Some("dead"), false) => &DEAD_BEFORE,
        (_, true) => &TASKS_AFTER,
        (_, false) => &TASKS_BEFORE,
    };
    let kept = matches!(filter.state, None | Some("completed"));
    let live_state = filter.state.filter(|s| *s != "completed");
    let mut rows = with_client(|client| {
        let args = [
            queue.into(),
            live_state.into(),
            key.into(),
            filter.created_after.into(),
            filter.created_before.into(),
            filter.updated_after.into(),
            filter.updated_before.into(),
            filter.payload_contains.into(),
            filter.payload_has_key.into(),
            limit.into(),
            (filter.state != Some("completed")).into(),
            kept.into(),
        ];
        execute(client, statement, &args)?.map(|row| row.required::<RawTaskRow>(1))
    })?;
    if !forward {
        rows.reverse();
    }
    Ok(rows)
}

/// Up to `limit` tasks of the queue, of one state or of all.
pub fn list_tasks(queue: &str, state: Option<&str>, limit: i32) -> Result<Vec<RawTaskRow>> {
    with_client(|client| {
        let apart = |name: &str| state.is_none() || state == Some(name);
        let mut rows = if LISTED_APART.iter().any(|(name, ..)| state == Some(*name)) {
            Vec::new()
        } else {
            execute(
                client,
                LIST_TASKS.get(),
                &[queue.into(), state.into(), limit.into()],
            )?
            .map(|row| row.required(1))?
        };
        for (name, statement, level) in LISTED_APART {
            let room = limit - rows.len() as i32;
            if apart(name) && room > 0 && super::schema_level() >= *level {
                let listed = execute(client, statement.get(), &[queue.into(), room.into()])?;
                rows.extend(listed.map(|row| row.required::<RawTaskRow>(1))?);
            }
        }
        Ok(rows)
    })
}
