//! Connections to the benchmark cluster, with statements prepared once per connection.

use std::collections::HashMap;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row, Statement};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, BoxError>;

#[derive(Clone, Debug)]
pub struct Cluster {
    pub host: String,
    pub port: u16,
    pub user: String,
}

impl Cluster {
    pub fn url(&self, dbname: &str) -> String {
        format!(
            "postgres://{}@{}:{}/{}",
            self.user, self.host, self.port, dbname
        )
    }

    pub async fn connect(&self, dbname: &str) -> Result<Conn> {
        let (client, connection) = tokio_postgres::connect(&self.url(dbname), NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("connection error: {e}");
            }
        });
        Ok(Conn {
            client,
            prepared: HashMap::new(),
        })
    }

    /// A fresh, empty database: every measurement starts from the same state.
    pub async fn recreate(&self, dbname: &str) -> Result<Conn> {
        let admin = self.connect("postgres").await?;
        admin
            .client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {dbname} WITH (FORCE)"))
            .await?;
        admin
            .client
            .batch_execute(&format!("CREATE DATABASE {dbname}"))
            .await?;
        self.connect(dbname).await
    }
}

pub struct Conn {
    pub client: Client,
    prepared: HashMap<&'static str, Statement>,
}

impl Conn {
    async fn statement(&mut self, sql: &'static str) -> Result<Statement> {
        if let Some(stmt) = self.prepared.get(sql) {
            return Ok(stmt.clone());
        }
        let stmt = self.client.prepare(sql).await?;
        self.prepared.insert(sql, stmt.clone());
        Ok(stmt)
    }

    pub async fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let stmt = self.statement(sql).await?;
        Ok(self.client.query(&stmt, params).await?)
    }

    pub async fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64> {
        let stmt = self.statement(sql).await?;
        Ok(self.client.execute(&stmt, params).await?)
    }

    pub async fn batch(&self, sql: &str) -> Result<()> {
        Ok(self.client.batch_execute(sql).await?)
    }

    pub async fn scalar_i64(&self, sql: &str) -> Result<i64> {
        Ok(self.client.query_one(sql, &[]).await?.get(0))
    }
}

/// Microseconds since the Unix epoch, the clock payloads carry for pickup latency.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// A payload of about 100 bytes of JSON that records when it was enqueued.
pub fn payload() -> serde_json::Value {
    serde_json::json!({"t": now_micros(), "kind": "bench", "pad": "x".repeat(64)})
}
