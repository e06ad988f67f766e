//! Where to connect: `--dsn` / `AEDB_QUEUE_DSN`, else libpq's `PG*`
//! environment variables, filling in what a connection string leaves out
//! the way libpq does.
//!
//! TLS is not supported (the client connects with `NoTls`; `sslmode=prefer`,
//! the default, falls back to a plain connection): use it on the database
//! host or through a tunnel.

use std::time::Duration;

use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{Client, Config, Connection, NoTls, Socket};

use crate::error::{Error, Result};

/// A non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The connection settings: the DSN's, then for each setting it does not
/// give, `PGHOST` (default 127.0.0.1), `PGPORT` (5432), `PGUSER` (the OS
/// user), `PGDATABASE` (the user name), `PGPASSWORD`.
pub fn config(dsn: Option<&str>) -> Result<Config> {
    let mut cfg = match dsn {
        Some(d) => d
            .parse::<Config>()
            .map_err(|e| Error::msg(format!("invalid connection string: {e}")))?,
        None => Config::new(),
    };
    if cfg.get_hosts().is_empty() {
        let hosts = env("PGHOST").unwrap_or_else(|| "127.0.0.1".to_string());
        for h in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            cfg.host(h);
        }
    }
    if cfg.get_ports().is_empty() {
        if let Some(ports) = env("PGPORT") {
            for p in ports.split(',').map(str::trim) {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| Error::msg(format!("invalid PGPORT {p:?}")))?;
                cfg.port(port);
            }
        }
    }
    if cfg.get_user().is_none() {
        let user = env("PGUSER")
            .or_else(|| env("USER"))
            .or_else(|| env("LOGNAME"))
            .unwrap_or_else(|| "postgres".to_string());
        cfg.user(&user);
    }
    // Without a database name tokio-postgres uses the user name, as libpq does.
    if cfg.get_dbname().is_none() {
        if let Some(db) = env("PGDATABASE") {
            cfg.dbname(&db);
        }
    }
    if cfg.get_password().is_none() {
        if let Some(pw) = std::env::var_os("PGPASSWORD") {
            cfg.password(pw.to_string_lossy().as_bytes());
        }
    }
    if cfg.get_application_name().is_none() {
        cfg.application_name("aedb-queue");
    }
    if cfg.get_connect_timeout().is_none() {
        cfg.connect_timeout(Duration::from_secs(10));
    }
    Ok(cfg)
}

/// "host:port as user" for error messages (never the password).
fn describe(cfg: &Config) -> String {
    use tokio_postgres::config::Host;
    let host = match cfg.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "?".to_string(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port} as {}", cfg.get_user().unwrap_or("?"))
}

/// A client and its connection, for callers that drive the connection
/// themselves (`tail` reads its notifications).
pub async fn connect_raw(cfg: &Config) -> Result<(Client, Connection<Socket, NoTlsStream>)> {
    cfg.connect(NoTls)
        .await
        .map_err(|e| Error::from(e).context(format!("cannot connect to {}", describe(cfg))))
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
