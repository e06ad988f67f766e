//! Where to connect: `--dsn` / `AEDB_QUEUE_DSN`, else libpq's `PG*`
//! environment variables, and TLS as libpq's `sslmode` says (`PGSSLMODE`,
//! `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`; default prefer). All of it is
//! the Rust client's [`Settings`](aedb_queue_client::connect::Settings), the
//! one place shared with the worker runtime; the command line adds only its
//! application name and connect timeout.

use std::time::Duration;

use tokio_postgres::{Client, Connection, Socket};

pub use aedb_queue_client::connect::{Settings as Config, TlsStream};

use crate::error::{Error, Result};

/// The connection settings: the DSN's, then for each setting it does not
/// give, `PGHOST` (default 127.0.0.1), `PGPORT` (5432), `PGUSER` (the OS
/// user), `PGDATABASE` (the user name), `PGPASSWORD`, `PGSSLMODE` (prefer),
/// `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`.
pub fn config(dsn: Option<&str>) -> Result<Config> {
    let mut settings = Config::parse(dsn.unwrap_or(""))
        .map_err(|e| Error::msg(format!("invalid connection settings: {e}")))?;
    let cfg = settings.config_mut();
    if cfg.get_application_name().is_none() {
        cfg.application_name("aedb-queue");
    }
    if cfg.get_connect_timeout().is_none() {
        cfg.connect_timeout(Duration::from_secs(10));
    }
    Ok(settings)
}

/// A client and its connection, for callers that drive the connection
/// themselves (`tail` reads its notifications).
pub async fn connect_raw(cfg: &Config) -> Result<(Client, Connection<Socket, TlsStream>)> {
    cfg.connect()
        .await
        .map_err(|e| Error::from(e).context(format!("cannot connect to {}", cfg.describe())))
}

/// A client whose connection runs on its own task.
pub async fn connect(cfg: &Config) -> Result<Client> {
    let (client, connection) = connect_raw(cfg).await?;
    tokio::spawn(async move {
        // Errors surface on the client's next call; nothing to do here.
        let _ = connection.await;
    });
    Ok(client)
}
