//! The physical floor: what the machine pays for the minimum writes per job
//! (insert a row, delete it), measured with pgbench in the same run.

use std::time::Duration;

use crate::db::{Cluster, Result};

const SCHEMA: &str = "CREATE TABLE floor_jobs (id bigserial PRIMARY KEY, payload jsonb)";
const PAYLOAD: &str = r#"'{"t": 0, "kind": "bench", "pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'"#;

pub enum Floor {
    /// Insert in one transaction, delete in the next: two commits per job.
    PerRow,
    /// 100 rows inserted in one transaction, deleted in the next.
    Batch100,
}

/// Jobs per second for `clients` pgbench clients over `seconds`.
pub async fn run(
    cluster: &Cluster,
    floor: Floor,
    clients: usize,
    seconds: Duration,
) -> Result<f64> {
    let db = "bench_floor";
    let conn = cluster.recreate(db).await?;
    conn.batch(SCHEMA).await?;
    let (script, jobs_per_tx) = match floor {
        Floor::PerRow => (
            format!("INSERT INTO floor_jobs (payload) VALUES ({PAYLOAD}) RETURNING id \\gset\nDELETE FROM floor_jobs WHERE id = :id;\n"),
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
    let output = tokio::process::Command::new("/usr/lib/postgresql/15/bin/pgbench")
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
    // Each pgbench transaction here is two statements, so two commits per "tps".
    Ok(tps * jobs_per_tx)
}
