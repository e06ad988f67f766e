//! The worker's start: one connection before anything else. A wrong host,
//! port, password or database, or a database without the extension, is a
//! configuration error, reported at once as [`Error::Startup`]; only after
//! this first success are lost connections retried with backoff.

use deadpool_postgres::{Pool, PoolError};
use tokio_postgres::SimpleQueryMessage;

use crate::error::{Error, Result};
use crate::sql;

/// The extension's version, once the pool could connect and find it.
pub(crate) async fn check(pool: &Pool, database: &str) -> Result<String> {
    let conn = pool.get().await.map_err(|e| {
        let cause = match e {
            PoolError::Backend(e) => with_causes(&e),
            e => with_causes(&e),
        };
        Error::Startup(format!("cannot connect to {database}: {cause}"))
    })?;
    let messages = conn
        .simple_query(sql::EXTENSION_VERSION)
        .await
        .map_err(|e| Error::Startup(format!("cannot use {database}: {}", with_causes(&e))))?;
    messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
        .ok_or_else(|| {
            Error::Startup(format!(
                "the aedb_queue extension is not installed in {database} (CREATE EXTENSION aedb_queue)"
            ))
        })
}

/// The error and its causes: tokio-postgres shows "db error" alone, the
/// server's message ("password authentication failed ...") is its cause.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}

/// `host=... port=... dbname=... user=...` of a connection's settings, for
/// log lines and errors: never the password.
pub(crate) fn describe(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let mut shown = Vec::new();
    if !hosts.is_empty() {
        shown.push(format!("host={}", hosts.join(",")));
    }
    if !ports.is_empty() {
        shown.push(format!("port={}", ports.join(",")));
    }
    if let Some(db) = config.get_dbname() {
        shown.push(format!("dbname={db}"));
    }
    if let Some(user) = config.get_user() {
        shown.push(format!("user={user}"));
    }
    shown.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_shows_where_but_never_the_password() {
        let config: tokio_postgres::Config =
            "host=db.example port=6432 dbname=app user=svc password=s3cret"
                .parse()
                .unwrap();
        assert_eq!(
            describe(&config),
            "host=db.example port=6432 dbname=app user=svc"
        );
        let url: tokio_postgres::Config = "postgresql://svc:s3cret@db.example/app".parse().unwrap();
        assert!(!describe(&url).contains("s3cret"));
    }
}
