//! The bench's role on every cluster, the one-shard router database, and
//! connections.

use tokio_postgres::{Client, NoTls};

use super::{Options, ADMIN, ROLE, ROUTER_DB, ROUTER_ONE_DB, SHARDS, SHARD_DB};
use crate::db::Result;

pub async fn connect(opts: &Options, port: u16, db: &str, user: &str) -> Result<Client> {
    let (client, connection) = tokio_postgres::connect(&opts.url(port, db, user), NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("connection error: {e}");
        }
    });
    Ok(client)
}

/// The admin connection to shard `shard`'s database.
pub async fn shard_admin(opts: &Options, shard: i32) -> Result<Client> {
    connect(opts, opts.shard_port(shard), SHARD_DB, ADMIN).await
}

pub async fn utc_now(opts: &Options) -> Result<String> {
    let c = connect(opts, opts.port, ROUTER_DB, ADMIN).await?;
    let row = c
        .query_one(
            "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') || ' UTC'",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

fn create_role_sql() -> String {
    format!(
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{ROLE}') THEN
             CREATE ROLE {ROLE} LOGIN;
           END IF;
         END $$"
    )
}

/// The role on each shard (with the extension's producer and worker roles)
/// and on the router cluster (where it needs nothing but to log in: the
/// shards decide); the router database with shard 1 alone.
pub async fn prepare(opts: &Options) -> Result<()> {
    for shard in 1..=SHARDS {
        let c = shard_admin(opts, shard).await?;
        c.batch_execute(&create_role_sql()).await?;
        c.batch_execute(&format!(
            "GRANT aedb_queue_producer, aedb_queue_worker TO {ROLE}"
        ))
        .await?;
        let reported: i32 = c
            .query_one("SELECT aedb_queue.queue_shard()", &[])
            .await?
            .get(0);
        if reported != shard {
            return Err(format!(
                "the node on port {} is shard {reported}, not {shard}",
                opts.shard_port(shard)
            )
            .into());
        }
    }
    let admin = connect(opts, opts.port, "postgres", ADMIN).await?;
    admin.batch_execute(&create_role_sql()).await?;
    admin
        .batch_execute(&format!(
            "DROP DATABASE IF EXISTS {ROUTER_ONE_DB} WITH (FORCE)"
        ))
        .await?;
    admin
        .batch_execute(&format!("CREATE DATABASE {ROUTER_ONE_DB}"))
        .await?;
    let one = connect(opts, opts.port, ROUTER_ONE_DB, ADMIN).await?;
    one.batch_execute("CREATE EXTENSION aedb_queue_router CASCADE")
        .await?;
    let conninfo = format!(
        "host={} port={} dbname={SHARD_DB} connect_timeout=2",
        opts.host,
        opts.shard_port(1)
    );
    one.execute(
        "SELECT aedb_queue.queue_router_add_shard(1, $1)",
        &[&conninfo],
    )
    .await?;
    // The three-shard router of scripts/shards.sh must know every shard.
    let router = connect(opts, opts.port, ROUTER_DB, ADMIN).await?;
    let known: i64 = router
        .query_one(
            "SELECT count(*) FROM aedb_queue.queue_router_shards() WHERE available AND reports_shard = shard",
            &[],
        )
        .await?
        .get(0);
    if known != SHARDS as i64 {
        return Err(format!(
            "the router on port {} answers for {known} shards, not {SHARDS}",
            opts.port
        )
        .into());
    }
    Ok(())
}

/// `count` tasks enqueued directly on one shard, in batches of 1,000
/// (about 100 bytes of JSON each, as elsewhere in the bench).
pub async fn preload(shard: &Client, queue: &str, count: usize) -> Result<()> {
    let mut left = count as i32;
    while left > 0 {
        let n = left.min(1000);
        shard
            .execute(
                "SELECT count(*) FROM aedb_queue.queue_enqueue_batch($1,
                   ARRAY(SELECT jsonb_build_object('i', g, 'kind', 'bench', 'pad', repeat('x', 64))
                           FROM generate_series(1, $2) g))",
                &[&queue, &n],
            )
            .await?;
        left -= n;
    }
    Ok(())
}

/// Leases of `count` tasks taken directly on one shard (for the completes).
pub async fn preclaim(shard: &Client, queue: &str, count: usize) -> Result<Vec<(i64, i64)>> {
    let mut held = Vec::with_capacity(count);
    while held.len() < count {
        let n = (count - held.len()).min(100) as i32;
        let sql = format!(
            "SELECT task_id, fencing_token FROM aedb_queue.queue_claim($1, 'bench-pre', {}, $2)",
            super::LEASE
        );
        let rows = shard.query(&sql, &[&queue, &n]).await?;
        if rows.is_empty() {
            return Err(format!(
                "queue {queue}: only {} tasks to claim, {count} wanted",
                held.len()
            )
            .into());
        }
        held.extend(
            rows.iter()
                .map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1))),
        );
    }
    Ok(held)
}
