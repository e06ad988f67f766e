//! The queues under test. The Rust-driven ones (aedb_queue, the hand-written
//! baseline, PgQ) are driven here through their SQL APIs; pg-boss and
//! graphile-worker run in their own Node driver (`bench/peers/node`).

use std::sync::OnceLock;

use serde_json::Value;

use crate::db::{Conn, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum System {
    Aedb,
    Baseline,
    Pgq,
    PgBoss,
    Graphile,
}

pub const QUEUE: &str = "q";

impl System {
    pub const ALL: [System; 5] = [
        System::Aedb,
        System::Baseline,
        System::Pgq,
        System::PgBoss,
        System::Graphile,
    ];

    pub fn name(self) -> &'static str {
        match self {
            System::Aedb => "aedb_queue",
            System::Baseline => "baseline",
            System::Pgq => "pgq",
            System::PgBoss => "pg-boss",
            System::Graphile => "graphile-worker",
        }
    }

    pub fn from_name(name: &str) -> Option<System> {
        System::ALL.into_iter().find(|s| s.name() == name)
    }

    pub fn db_name(self) -> String {
        format!("bench_{}", self.name().replace('-', "_"))
    }

    /// Driven by the Node driver rather than from Rust.
    pub fn is_node(self) -> bool {
        matches!(self, System::PgBoss | System::Graphile)
    }

    pub async fn setup(self, conn: &Conn) -> Result<()> {
        match self {
            System::Aedb => {
                conn.batch("CREATE EXTENSION aedb_queue").await?;
                match aedb_storage_sql() {
                    Some(sql) => conn.batch(sql).await,
                    None => Ok(()),
                }
            }
            System::Baseline => conn.batch(BASELINE_SCHEMA).await,
            System::Pgq => {
                conn.batch("CREATE EXTENSION pgq; SELECT pgq.create_queue('q'); SELECT pgq.register_consumer('q', 'c');")
                    .await
            }
            System::PgBoss | System::Graphile => Ok(()),
        }
    }

    /// Tables whose size (with indexes and TOAST) the report shows.
    pub fn size_sql(self) -> &'static str {
        match self {
            System::Aedb => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'aedb_queue' AND c.relkind = 'r'",
            System::Baseline => "SELECT pg_total_relation_size('jobs')",
            System::Pgq => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pgq' AND c.relkind = 'r'",
            System::PgBoss => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pgboss' AND c.relkind IN ('r', 'p')",
            System::Graphile => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'graphile_worker' AND c.relkind = 'r'",
        }
    }
}

/// A prototype's SQL (`--aedb-setup-sql`) and the storage settings for
/// aedb_queue.task and its indexes (`--task-storage`, `--task-index-storage`),
/// as the SQL run after CREATE EXTENSION.
static AEDB_STORAGE: OnceLock<Option<String>> = OnceLock::new();

pub fn set_aedb_storage(setup: Option<&str>, table: Option<&str>, indexes: Option<&str>) {
    let mut sql = setup.unwrap_or_default().to_string();
    if let Some(t) = table {
        sql.push_str(&format!("ALTER TABLE aedb_queue.task SET ({t});"));
    }
    if let Some(i) = indexes {
        sql.push_str(&format!(
            "DO $$ DECLARE i regclass; BEGIN FOR i IN SELECT indexrelid::regclass FROM pg_index WHERE indrelid = 'aedb_queue.task'::regclass LOOP EXECUTE format('ALTER INDEX %s SET ({i})', i); END LOOP; END $$;"
        ));
    }
    let _ = AEDB_STORAGE.set((!sql.is_empty()).then_some(sql));
    let label = [
        setup.map(|_| "--aedb-setup-sql (prototype schema)".to_string()),
        table.map(|t| format!("--task-storage '{t}'")),
        indexes.map(|i| format!("--task-index-storage '{i}'")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ");
    let _ = AEDB_STORAGE_LABEL.set(label);
}

static AEDB_STORAGE_LABEL: OnceLock<String> = OnceLock::new();

/// The storage options of this run as given on the command line.
pub fn aedb_storage_label() -> &'static str {
    AEDB_STORAGE_LABEL.get().map_or("", String::as_str)
}

pub fn aedb_storage_sql() -> Option<&'static str> {
    AEDB_STORAGE.get().and_then(|s| s.as_deref())
}

/// The canonical hand-written queue a careful user would write instead of
/// installing anything: one table, a partial index, SKIP LOCKED, DELETE on completion.
const BASELINE_SCHEMA: &str = "
CREATE TABLE jobs (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,
    priority int NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(),
    payload jsonb,
    state text NOT NULL DEFAULT 'ready',
    attempts int NOT NULL DEFAULT 0,
    locked_by text,
    locked_until timestamptz
);
CREATE INDEX jobs_ready ON jobs (queue, priority DESC, id) WHERE state = 'ready';
";

/// A claimed job: what the worker needs to settle it, and its enqueue time.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub id: i64,
    pub token: i64,
    pub enqueued_micros: Option<i64>,
}

fn enqueued_at(payload: Option<Value>) -> Option<i64> {
    payload.and_then(|p| p.get("t").and_then(Value::as_i64))
}

pub async fn enqueue_one(
    system: System,
    conn: &mut Conn,
    queue: &str,
    payload: &Value,
) -> Result<()> {
    match system {
        System::Aedb => {
            conn.query(
                "SELECT task_id FROM aedb_queue.queue_enqueue($1, $2)",
                &[&queue, payload],
            )
            .await?;
        }
        System::Baseline => {
            conn.execute(
                "INSERT INTO jobs (queue, payload) VALUES ($1, $2)",
                &[&queue, payload],
            )
            .await?;
        }
        System::Pgq => {
            let text = payload.to_string();
            conn.query("SELECT pgq.insert_event($1, 'job', $2)", &[&queue, &text])
                .await?;
        }
        _ => unreachable!("node systems enqueue in their driver"),
    }
    Ok(())
}

pub async fn enqueue_batch(
    system: System,
    conn: &mut Conn,
    queue: &str,
    payloads: &[Value],
) -> Result<()> {
    match system {
        System::Aedb => {
            conn.query(
                "SELECT aedb_queue.queue_enqueue_batch($1, $2::jsonb[])",
                &[&queue, &payloads],
            )
            .await?;
        }
        System::Baseline => {
            conn.execute(
                "INSERT INTO jobs (queue, payload) SELECT $1, unnest($2::jsonb[])",
                &[&queue, &payloads],
            )
            .await?;
        }
        System::Pgq => {
            let texts: Vec<String> = payloads.iter().map(Value::to_string).collect();
            // One tick per batch, as PgQ's ticker would produce under this load.
            conn.query(
                "SELECT count(pgq.insert_event($1, 'job', p)) FROM unnest($2::text[]) p",
                &[&queue, &texts],
            )
            .await?;
            conn.query("SELECT pgq.ticker()", &[]).await?;
        }
        _ => unreachable!("node systems enqueue in their driver"),
    }
    Ok(())
}

/// One claim transaction: up to `max` jobs leased to `owner`.
pub async fn claim(
    system: System,
    conn: &mut Conn,
    queue: &str,
    owner: &str,
    max: i32,
) -> Result<Vec<Job>> {
    let rows = match system {
        System::Aedb => {
            conn.query(
                "SELECT task_id, fencing_token, payload FROM aedb_queue.queue_claim($1, $2, '30 seconds', $3)",
                &[&queue, &owner, &max],
            )
            .await?
        }
        System::Baseline => {
            conn.query(
                "WITH c AS (SELECT id FROM jobs WHERE queue = $1 AND state = 'ready' AND run_at <= now()
                            ORDER BY priority DESC, id LIMIT $3 FOR UPDATE SKIP LOCKED)
                 UPDATE jobs j SET state = 'running', attempts = j.attempts + 1, locked_by = $2,
                                   locked_until = now() + interval '30 seconds'
                 FROM c WHERE j.id = c.id
                 RETURNING j.id, j.attempts::bigint, j.payload",
                &[&queue, &owner, &(max as i64)],
            )
            .await?
        }
        _ => unreachable!("{} has no per-job claim", system.name()),
    };
    Ok(rows
        .into_iter()
        .map(|r| Job {
            id: r.get(0),
            token: r.get(1),
            enqueued_micros: enqueued_at(r.get(2)),
        })
        .collect())
}

/// Settles claimed jobs: one call per job when `per_job`, else one round trip.
pub async fn complete(
    system: System,
    conn: &mut Conn,
    queue: &str,
    jobs: &[Job],
    per_job: bool,
) -> Result<()> {
    match system {
        System::Aedb if per_job => {
            for job in jobs {
                conn.query(
                    "SELECT aedb_queue.queue_complete($1, $2, $3)::text",
                    &[&queue, &job.id, &job.token],
                )
                .await?;
            }
        }
        System::Aedb => {
            let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
            let tokens: Vec<i64> = jobs.iter().map(|j| j.token).collect();
            conn.query(
                "SELECT aedb_queue.queue_complete_batch($1, $2, $3)",
                &[&queue, &ids, &tokens],
            )
            .await?;
        }
        System::Baseline if per_job => {
            for job in jobs {
                conn.execute("DELETE FROM jobs WHERE id = $1", &[&job.id])
                    .await?;
            }
        }
        System::Baseline => {
            let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
            conn.execute("DELETE FROM jobs WHERE id = ANY($1)", &[&ids])
                .await?;
        }
        _ => unreachable!("{} has no per-job completion", system.name()),
    }
    Ok(())
}

/// PgQ's consumer step: take the next ticked batch, read it, finish it, in
/// one transaction. Returns the enqueue times of the events read, or None
/// when no batch is ready.
pub async fn pgq_consume(conn: &mut Conn) -> Result<Option<Vec<Option<i64>>>> {
    conn.batch("BEGIN").await?;
    let batch: Option<i64> = conn.query("SELECT pgq.next_batch('q', 'c')", &[]).await?[0].get(0);
    let Some(batch) = batch else {
        conn.batch("COMMIT").await?;
        return Ok(None);
    };
    let rows = conn
        .query("SELECT ev_data FROM pgq.get_batch_events($1)", &[&batch])
        .await?;
    conn.query("SELECT pgq.finish_batch($1)", &[&batch]).await?;
    conn.batch("COMMIT").await?;
    Ok(Some(
        rows.into_iter()
            .map(|r| {
                let text: Option<String> = r.get(0);
                enqueued_at(text.and_then(|t| serde_json::from_str(&t).ok()))
            })
            .collect(),
    ))
}
