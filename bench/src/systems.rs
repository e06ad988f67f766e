//! The queues under test. The Rust-driven ones (aedb_queue, the hand-written
//! baseline, PgQ, pgmq) are driven here through their SQL APIs; pg-boss and
//! graphile-worker run in their own Node driver (`bench/peers/node`), awa in
//! its own Rust driver on awa's runtime (`bench/peers/awa`), and awa's Python
//! SDK (a second awa row, awa-python), procrastinate, PgQueuer, Oban for
//! Python and PgQue in Python drivers of their own (`bench/peers/python`).
//!
//! Three rows are worker loops rather than queues of their own, measured in
//! the per-job drain only: `aedb-loop` (aedb_queue's settle-and-claim call),
//! `baseline-loop` (the baseline's one-statement delete-and-claim) and
//! `pgmq-pop` (pgmq's read-and-delete in one call).

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
    /// awa through its own Rust runtime (crate `awa`), in its own driver
    /// (`bench/peers/awa`).
    Awa,
    /// awa through its Python SDK (PyPI `awa-pg`), in its own driver
    /// (`bench/peers/python`).
    AwaPython,
    /// procrastinate, PgQueuer, Oban for Python and PgQue (through its
    /// Python client `pgque-py`), each in its own Python driver.
    Procrastinate,
    PgQueuer,
    ObanPy,
    PgQue,
    Pgmq,
    /// pgmq drained with `pgmq.pop` (read and delete in one call, no lease).
    PgmqPop,
    /// aedb_queue, each call settles the held task and claims the next.
    AedbLoop,
    /// The baseline, one statement deletes the finished job and claims the next.
    BaselineLoop,
}

pub const QUEUE: &str = "q";

impl System {
    pub const ALL: [System; 15] = [
        System::Aedb,
        System::AedbLoop,
        System::Baseline,
        System::BaselineLoop,
        System::Pgq,
        System::Pgmq,
        System::PgmqPop,
        System::PgBoss,
        System::Graphile,
        System::Awa,
        System::AwaPython,
        System::Procrastinate,
        System::PgQueuer,
        System::ObanPy,
        System::PgQue,
    ];

    pub fn name(self) -> &'static str {
        match self {
            System::Aedb => "aedb_queue",
            System::Baseline => "baseline",
            System::Pgq => "pgq",
            System::PgBoss => "pg-boss",
            System::Graphile => "graphile-worker",
            System::Awa => "awa",
            System::AwaPython => "awa-python",
            System::Procrastinate => "procrastinate",
            System::PgQueuer => "pgqueuer",
            System::ObanPy => "oban-py",
            System::PgQue => "pgque",
            System::Pgmq => "pgmq",
            System::PgmqPop => "pgmq-pop",
            System::AedbLoop => "aedb-loop",
            System::BaselineLoop => "baseline-loop",
        }
    }

    /// A worker loop over another system's schema: measured in the per-job
    /// drain only (its enqueue is its parent's).
    pub fn is_loop(self) -> bool {
        matches!(
            self,
            System::PgmqPop | System::AedbLoop | System::BaselineLoop
        )
    }

    /// The system whose schema and enqueue a worker loop uses.
    pub fn base(self) -> System {
        match self {
            System::PgmqPop => System::Pgmq,
            System::AedbLoop => System::Aedb,
            System::BaselineLoop => System::Baseline,
            s => s,
        }
    }

    /// The worker holds one job between calls and settles it in the call
    /// that claims the next.
    pub fn settles_in_claim(self) -> bool {
        matches!(self, System::AedbLoop | System::BaselineLoop)
    }

    pub fn from_name(name: &str) -> Option<System> {
        System::ALL.into_iter().find(|s| s.name() == name)
    }

    pub fn db_name(self) -> String {
        format!("bench_{}", self.name().replace('-', "_"))
    }

    /// Driven by a driver of its own (Node, Rust or Python: `crate::node`)
    /// rather than from the harness.
    pub fn is_node(self) -> bool {
        matches!(self, System::PgBoss | System::Graphile | System::Awa)
            || self.python_driver().is_some()
    }

    /// Drains with the smaller preload (`Plan::slow_drain_jobs`): the ones
    /// that drain a few hundred to a few thousand jobs/s. (awa's Rust row
    /// drains the full preload.)
    pub fn slow_drain(self) -> bool {
        matches!(
            self,
            System::AwaPython | System::Procrastinate | System::ObanPy
        )
    }

    /// The Python driver's file in `bench/peers/python`, for the systems driven from Python.
    pub fn python_driver(self) -> Option<&'static str> {
        match self {
            System::AwaPython => Some("awa_driver.py"),
            System::Procrastinate => Some("procrastinate_driver.py"),
            System::PgQueuer => Some("pgqueuer_driver.py"),
            System::ObanPy => Some("oban_driver.py"),
            System::PgQue => Some("pgque_driver.py"),
            _ => None,
        }
    }

    /// Installs the system into the fresh database `conn` is connected to.
    pub async fn setup(self, conn: &Conn) -> Result<()> {
        match self {
            System::Aedb | System::AedbLoop => {
                conn.batch("CREATE EXTENSION aedb_queue").await?;
                match aedb_storage_sql() {
                    Some(sql) => conn.batch(sql).await,
                    None => Ok(()),
                }
            }
            System::Baseline | System::BaselineLoop => conn.batch(BASELINE_SCHEMA).await,
            System::Pgmq | System::PgmqPop => {
                install_pgmq(conn).await?;
                conn.batch(&format!("SELECT pgmq.create('{QUEUE}')")).await
            }
            System::Pgq => {
                conn.batch("CREATE EXTENSION pgq; SELECT pgq.create_queue('q'); SELECT pgq.register_consumer('q', 'c');")
                    .await
            }
            // Their drivers install them, each through its own API.
            System::PgBoss
            | System::Graphile
            | System::Awa
            | System::AwaPython
            | System::Procrastinate
            | System::PgQueuer
            | System::ObanPy
            | System::PgQue => Ok(()),
        }
    }

    /// Tables whose size (with indexes and TOAST) the report shows.
    pub fn size_sql(self) -> &'static str {
        match self {
            System::Aedb | System::AedbLoop => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'aedb_queue' AND c.relkind = 'r'",
            System::Pgmq | System::PgmqPop => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pgmq' AND c.relkind IN ('r', 'p')",
            System::Baseline | System::BaselineLoop => "SELECT pg_total_relation_size('jobs')",
            System::Pgq => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pgq' AND c.relkind = 'r'",
            System::PgBoss => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pgboss' AND c.relkind IN ('r', 'p')",
            System::Graphile => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'graphile_worker' AND c.relkind = 'r'",
            System::Awa | System::AwaPython => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname LIKE 'awa%' AND c.relkind IN ('r', 'p')",
            System::Procrastinate => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname LIKE 'procrastinate%' AND c.relkind = 'r'",
            System::PgQueuer => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname LIKE 'pgqueuer%' AND c.relkind = 'r'",
            System::ObanPy => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname LIKE 'oban%' AND c.relkind = 'r'",
            System::PgQue => "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pgque' AND c.relkind = 'r'",
        }
    }
}

/// pgmq's SQL-only install: its `pgmq.sql` (SQL 1.13.0), run in one
/// transaction into the fresh database, as pgmq's own installer does
/// (`install_pgmq_from_sql` of its Python client, whose package ships the
/// script; pgmq's INSTALLATION.md, "SQL-only installation"). bench/run.sh
/// takes the script from PyPI (`pgmq` 1.1.4, the file `pgmq/sql/pgmq.sql`
/// with its version in `pgmq/sql/VERSION`) into target/bench-tools/pgmq;
/// the `pgmq` crate 0.34.0-alpha.7 embeds the same file byte for byte.
/// Nothing goes into the PostgreSQL installation, and nothing is fetched
/// when a database is set up. `AEDB_PGMQ_SQL` names another script.
async fn install_pgmq(conn: &Conn) -> Result<()> {
    let path = std::env::var("AEDB_PGMQ_SQL").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/bench-tools/pgmq/pgmq.sql"
        )
        .to_string()
    });
    let sql = std::fs::read_to_string(&path)
        .map_err(|e| format!("pgmq's install script {path}: {e} (bench/run.sh fetches it)"))?;
    conn.batch(&format!("BEGIN;\n{sql}\n;COMMIT;")).await
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
    /// The payload has `"small": true`: a small key's task in the
    /// fair-share scenario (`SMALL_MARK`).
    pub small: bool,
}

/// The payload field that marks the fair-share scenario's small-key tasks.
pub const SMALL_MARK: &str = "small";

impl Job {
    fn new(id: i64, token: i64, payload: Option<Value>) -> Job {
        let small = payload
            .as_ref()
            .is_some_and(|p| p.get(SMALL_MARK) == Some(&Value::Bool(true)));
        Job {
            id,
            token,
            enqueued_micros: enqueued_at(payload),
            small,
        }
    }
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
            // In the select list: in FROM, PostgreSQL's function scan adds
            // about 10,000 instructions a call (bench/results/instructions.md).
            conn.query(
                "SELECT (aedb_queue.queue_enqueue($1, $2)).task_id",
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
        System::Pgmq => {
            conn.query("SELECT * FROM pgmq.send($1, $2)", &[&queue, payload])
                .await?;
        }
        _ => unreachable!("{} does not enqueue here", system.name()),
    }
    Ok(())
}

pub async fn enqueue_batch(
    system: System,
    conn: &mut Conn,
    queue: &str,
    payloads: &[Value],
) -> Result<()> {
    match system.base() {
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
        System::Pgmq => {
            conn.query(
                "SELECT count(*) FROM pgmq.send_batch($1, $2::jsonb[])",
                &[&queue, &payloads],
            )
            .await?;
        }
        _ => unreachable!("node systems enqueue in their driver"),
    }
    Ok(())
}

/// aedb_queue's batch enqueue with one concurrency key for the whole batch
/// (None: unkeyed, the same statement, so keyed and unkeyed loads compare).
pub async fn enqueue_batch_keyed(
    conn: &mut Conn,
    queue: &str,
    payloads: &[Value],
    key: Option<&str>,
) -> Result<()> {
    conn.query(
        "SELECT count(*) FROM aedb_queue.queue_enqueue_batch($1, $2::jsonb[], concurrency_key => $3)",
        &[&queue, &payloads, &key],
    )
    .await?;
    Ok(())
}

/// aedb_queue's batch enqueue with one fairness key for the whole batch (the
/// fair-share scenario loads every task, of both its cells, through this).
pub async fn enqueue_batch_fair(
    conn: &mut Conn,
    queue: &str,
    payloads: &[Value],
    key: &str,
) -> Result<()> {
    conn.query(
        "SELECT count(*) FROM aedb_queue.queue_enqueue_batch($1, $2::jsonb[], fairness_key => $3)",
        &[&queue, &payloads, &key],
    )
    .await?;
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
        System::Aedb | System::AedbLoop => {
            conn.query(
                "SELECT task_id, fencing_token, payload FROM aedb_queue.queue_claim($1, $2, '30 seconds', $3)",
                &[&queue, &owner, &max],
            )
            .await?
        }
        System::Baseline | System::BaselineLoop => {
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
        // A lease of 30 s (the visibility timeout); the worker deletes what it read.
        System::Pgmq => {
            conn.query(
                "SELECT msg_id, read_ct::bigint, message FROM pgmq.read($1, 30, $2)",
                &[&queue, &max],
            )
            .await?
        }
        System::PgmqPop => {
            conn.query(
                "SELECT msg_id, read_ct::bigint, message FROM pgmq.pop($1)",
                &[&queue],
            )
            .await?
        }
        _ => unreachable!("{} has no per-job claim", system.name()),
    };
    Ok(rows
        .into_iter()
        .map(|r| Job::new(r.get(0), r.get(1), r.get(2)))
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
            // The tasks fenced out, as the README's worker reads them; the
            // bench never loses a lease, so any row is a fault.
            let rows = conn
                .query(
                    "SELECT task_id FROM aedb_queue.queue_complete_batch($1, $2, $3) \
                     WHERE outcome = 'lease_lost'",
                    &[&queue, &ids, &tokens],
                )
                .await?;
            if let Some(lost) = rows.first() {
                let task: i64 = lost.get(0);
                return Err(format!("task {task} was fenced out of its batch completion").into());
            }
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
        System::Pgmq if per_job => {
            for job in jobs {
                conn.query("SELECT pgmq.delete($1, $2::bigint)", &[&queue, &job.id])
                    .await?;
            }
        }
        System::Pgmq => {
            let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
            conn.query(
                "SELECT count(*) FROM pgmq.delete($1, $2::bigint[])",
                &[&queue, &ids],
            )
            .await?;
        }
        // pop removed the message when it read it.
        System::PgmqPop => {}
        _ => unreachable!("{} has no per-job completion", system.name()),
    }
    Ok(())
}

/// The settle-and-claim loop: settles `held` and claims the next job in one
/// call (one transaction). Returns whether the settlement applied, and the
/// next job if there was one.
pub async fn settle_and_claim(
    system: System,
    conn: &mut Conn,
    queue: &str,
    owner: &str,
    held: Job,
) -> Result<(bool, Option<Job>)> {
    match system {
        System::AedbLoop => {
            let rows = conn
                .query(
                    "SELECT settled::text, task_id, fencing_token, payload FROM aedb_queue.queue_complete_and_claim($1, $2, $3, $4, lease => '30 seconds'::interval)",
                    &[&queue, &owner, &held.id, &held.token],
                )
                .await?;
            let row = rows
                .first()
                .ok_or("queue_complete_and_claim returned no row")?;
            let settled: String = row.get(0);
            let next = row
                .get::<_, Option<i64>>(1)
                .map(|id| Job::new(id, row.get(2), row.get(3)));
            Ok((settled == "applied", next))
        }
        System::BaselineLoop => {
            // The delete of the finished job and the claim of the next share
            // one statement, so one snapshot and one commit. The delete must
            // run before the claim locks anything: a SKIP LOCKED claim keeps
            // a lock on a row it rechecked and rejected (another worker's
            // held job, claimed after this statement's snapshot), and a
            // delete that then waited on such a lock could close a cycle
            // (seen: "deadlock detected" at 8 workers, with the delete in a
            // CTE the claim did not depend on). The claim's one-time filter
            // on the delete's count runs the delete first.
            let rows = conn
                .query(
                    "WITH done AS (DELETE FROM jobs WHERE id = $1 RETURNING id),
                          c AS (SELECT id FROM jobs WHERE queue = $2 AND state = 'ready' AND run_at <= now()
                                AND (SELECT count(*) FROM done) >= 0
                                ORDER BY priority DESC, id LIMIT 1 FOR UPDATE SKIP LOCKED)
                     UPDATE jobs j SET state = 'running', attempts = j.attempts + 1, locked_by = $3,
                                       locked_until = now() + interval '30 seconds'
                     FROM c WHERE j.id = c.id
                     RETURNING j.id, j.attempts::bigint, j.payload, (SELECT count(*) FROM done)",
                    &[&held.id, &queue, &owner],
                )
                .await?;
            match rows.first() {
                Some(r) => Ok((
                    r.get::<_, i64>(3) == 1,
                    Some(Job::new(r.get(0), r.get(1), r.get(2))),
                )),
                // Nothing left to claim: the delete ran all the same.
                None => Ok((true, None)),
            }
        }
        _ => unreachable!("{} has no settle-and-claim call", system.name()),
    }
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
