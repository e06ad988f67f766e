//! The physical floor: what the machine pays for the minimum writes per job
//! (insert a row, delete it), measured with pgbench in the same run.

use std::time::Duration;

use crate::db::{Cluster, Result};
use crate::scenarios::{Cost, Window};

const SCHEMA: &str = "CREATE TABLE floor_jobs (id bigserial PRIMARY KEY, payload jsonb)";
const PAYLOAD: &str = r#"'{"t": 0, "kind": "bench", "pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'"#;

pub enum Floor {
    /// Insert in one transaction, delete in the next: two commits per job.
    PerRow,
    /// Insert and delete in one transaction: one commit per job.
    OneTransaction,
    /// 100 rows inserted in one transaction, deleted in the next.
    Batch100,
}

/// Jobs per second for `clients` pgbench clients over `seconds`, and the
/// commits and WAL they cost.
pub async fn run(
    cluster: &Cluster,
    floor: Floor,
    clients: usize,
    seconds: Duration,
) -> Result<(f64, Cost)> {
    let db = "bench_floor";
    let conn = cluster.recreate(db).await?;
    conn.batch(SCHEMA).await?;
    drop(conn);
    let (script, jobs_per_tx) = match floor {
        Floor::PerRow => (
            format!("INSERT INTO floor_jobs (payload) VALUES ({PAYLOAD}) RETURNING id \\gset\nDELETE FROM floor_jobs WHERE id = :id;\n"),
            1.0,
        ),
        Floor::OneTransaction => (
            format!("BEGIN;\nINSERT INTO floor_jobs (payload) VALUES ({PAYLOAD}) RETURNING id \\gset\nDELETE FROM floor_jobs WHERE id = :id;\nCOMMIT;\n"),
            1.0,
        ),
        Floor::Batch100 => (
            format!(
                "WITH ins AS (INSERT INTO floor_jobs (payload) SELECT {PAYLOAD} FROM generate_series(1, 100) RETURNING id) \
                 SELECT min(id) AS lo FROM ins \\gset\n\
                 DELETE FROM floor_jobs WHERE id BETWEEN :lo AND :lo + 99;\n"
            ),
            100.0,
        ),
    };
    let path = std::env::temp_dir().join(format!("aedb_floor_{}.sql", std::process::id()));
    std::fs::write(&path, script)?;
    let pgbench = std::env::var("AEDB_PG_BIN")
        .map(|bin| format!("{bin}/pgbench"))
        .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pgbench".into());
    let window = Window::open(cluster, db).await?;
    let output = tokio::process::Command::new(&pgbench)
        .args([
            "-n",
            "-h",
            &cluster.host,
            "-p",
            &cluster.port.to_string(),
            "-U",
            &cluster.user,
        ])
        .args([
            "-c",
            &clients.to_string(),
            "-j",
            &clients.to_string(),
            "-T",
            &seconds.as_secs().to_string(),
        ])
        .arg("-f")
        .arg(&path)
        .arg(db)
        .output()
        .await?;
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let tps = stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("tps = ")
                .and_then(|rest| rest.split_whitespace().next())
        })
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| {
            format!(
                "pgbench printed no tps: {stdout} {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
    let transactions = stdout
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|rest| rest.split(['/', ' ']).next())
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or("pgbench printed no transaction count")?;
    let jobs = (transactions * jobs_per_tx) as u64;
    let cost = window.close(cluster, db, jobs).await?;
    // A pgbench "transaction" is one run of the script: one job (or 100).
    Ok((tps * jobs_per_tx, cost))
}
