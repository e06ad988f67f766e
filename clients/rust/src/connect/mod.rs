//! Where and how to connect, in one place for every connection of the
//! client, the worker runtime (its pool and its LISTEN session), the CLI
//! and the dashboard: a libpq connection string, libpq's `PG*` variables
//! for what it leaves out, and TLS as libpq's `sslmode` says ([`tls`]).
//!
//! tokio-postgres parses the connection string except for the TLS keys
//! (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`), which its parser
//! refuses or does not know; [`conninfo`] takes those out first.

mod conninfo;
mod tls;

use std::collections::HashMap;
use std::path::PathBuf;

use tokio_postgres::config::Host;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, Connection, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

pub use tls::{SslMode, TlsSettings};

use crate::error::{Error, Result};

/// The TLS connector every connection is made with.
pub type TlsConnector = MakeRustlsConnect;
/// The stream of a connection made with [`TlsConnector`] (TLS or plain).
pub type TlsStream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;

/// Connection settings with their TLS connector, ready to connect.
#[derive(Clone)]
pub struct Settings {
    config: Config,
    tls: TlsSettings,
    connector: MakeRustlsConnect,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Config's Debug hides the password.
        f.debug_struct("Settings")
            .field("config", &self.config)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Settings {
    /// From a connection string (`host=... sslmode=...` or a
    /// `postgresql://` URL; empty for the environment only), then for each
    /// setting it leaves out, as libpq: `PGHOST` and `PGHOSTADDR` (else
    /// 127.0.0.1),
    /// `PGPORT`, `PGUSER` (else the OS user), `PGDATABASE`, `PGPASSWORD`,
    /// `PGSSLMODE` (else prefer), `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`
    /// (else `~/.postgresql/root.crt`, `postgresql.crt`, `postgresql.key`
    /// where they exist). A TLS setting that cannot be honoured is an error.
    pub fn parse(conninfo: &str) -> Result<Settings> {
        Settings::parse_with(conninfo, &|name| std::env::var(name).ok())
    }

    fn parse_with(conninfo: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Settings> {
        let split = conninfo::split(conninfo)?;
        let mut config = match split.rest.trim().is_empty() {
            true => Config::new(),
            false => split.rest.parse::<Config>()?,
        };
        fill_from_env(&mut config, env)?;
        let tls = resolve_tls(split.tls, env)?;
        let connector = tls::connector(&tls)?;
        Ok(Settings {
            config,
            tls,
            connector,
        })
    }

    /// tokio-postgres's settings, its `ssl_mode` the one [`TlsSettings`] says.
    pub fn config(&self) -> Config {
        let mut config = self.config.clone();
        config.ssl_mode(self.tls.mode.wire());
        config
    }

    /// To change what is not TLS (application name, timeouts, ...);
    /// `ssl_mode` set here is overridden by the TLS settings.
    pub fn config_mut(&mut self) -> &mut Config {
        &mut self.config
    }

    pub fn tls(&self) -> &TlsSettings {
        &self.tls
    }

    pub fn connector(&self) -> TlsConnector {
        self.connector.clone()
    }

    /// A client and the connection to drive (spawn it, or poll it for
    /// notifications).
    pub async fn connect(
        &self,
    ) -> Result<(Client, Connection<Socket, TlsStream>), tokio_postgres::Error> {
        self.config().connect(self.connector()).await
    }

    /// "host:port as user" for messages (never the password).
    pub fn describe(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            #[cfg(unix)]
            Some(Host::Unix(p)) => p.display().to_string(),
            None => match self.config.get_hostaddrs().first() {
                Some(addr) => addr.to_string(),
                None => "?".to_string(),
            },
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        let user = self.config.get_user().unwrap_or("?");
        format!("{host}:{port} as {user} (sslmode={})", self.tls.mode)
    }
}

fn nonblank(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

/// libpq's fallbacks for what the connection string leaves out.
fn fill_from_env(cfg: &mut Config, env: &dyn Fn(&str) -> Option<String>) -> Result<()> {
    if cfg.get_hosts().is_empty() && cfg.get_hostaddrs().is_empty() {
        let addrs = nonblank(env("PGHOSTADDR"));
        let hosts = nonblank(env("PGHOST")).or_else(|| match addrs {
            Some(_) => None,
            None => Some("127.0.0.1".to_string()),
        });
        for h in hosts.iter().flat_map(|h| h.split(',')).map(str::trim) {
            cfg.host(h);
        }
        for a in addrs.iter().flat_map(|a| a.split(',')).map(str::trim) {
            let addr = a
                .parse()
                .map_err(|_| Error::invalid("PGHOSTADDR", format!("not an IP address: {a:?}")))?;
            cfg.hostaddr(addr);
        }
    }
    if cfg.get_ports().is_empty() {
        if let Some(ports) = nonblank(env("PGPORT")) {
            for p in ports.split(',').map(str::trim) {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| Error::invalid("PGPORT", format!("not a port: {p:?}")))?;
                cfg.port(port);
            }
        }
    }
    if cfg.get_user().is_none() {
        let user = ["PGUSER", "USER", "LOGNAME"]
            .iter()
            .find_map(|name| nonblank(env(name)))
            .unwrap_or_else(|| "postgres".to_string());
        cfg.user(&user);
    }
    // Without a database name tokio-postgres uses the user name, as libpq does.
    if cfg.get_dbname().is_none() {
        if let Some(db) = nonblank(env("PGDATABASE")) {
            cfg.dbname(&db);
        }
    }
    if cfg.get_password().is_none() {
        if let Some(pw) = env("PGPASSWORD").filter(|p| !p.is_empty()) {
            cfg.password(pw.as_bytes());
        }
    }
    Ok(())
}

/// The TLS keys of the connection string, else `PGSSL*`, else libpq's
/// default files where they exist.
fn resolve_tls(
    mut given: HashMap<String, String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TlsSettings> {
    let mut setting =
        |key: &str, var: &str| nonblank(given.remove(key)).or_else(|| nonblank(env(var)));
    let mode = match setting("sslmode", "PGSSLMODE") {
        Some(m) => m.parse::<SslMode>()?,
        None => SslMode::Prefer,
    };
    let root = setting("sslrootcert", "PGSSLROOTCERT");
    let cert = setting("sslcert", "PGSSLCERT");
    let key = setting("sslkey", "PGSSLKEY");
    if mode == SslMode::Disable {
        // As libpq: no TLS, so no file is read.
        return Ok(TlsSettings {
            mode,
            root_cert: None,
            client_cert: None,
        });
    }
    let home = nonblank(env("HOME")).map(|h| PathBuf::from(h).join(".postgresql"));
    let default = |name: &str| home.as_ref().map(|h| h.join(name)).filter(|p| p.exists());
    let root_cert = match root {
        Some(r) if r == "system" => {
            return Err(Error::invalid(
                "sslrootcert",
                "\"system\" is not supported: give the CA certificate file",
            ))
        }
        Some(r) => Some(PathBuf::from(r)),
        None => default("root.crt"),
    };
    let cert = cert
        .map(PathBuf::from)
        .or_else(|| default("postgresql.crt"));
    let key = key.map(PathBuf::from).or_else(|| default("postgresql.key"));
    let client_cert = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (Some(cert), None) => {
            return Err(Error::invalid(
                "sslkey",
                format!(
                    "the client certificate {} needs its key: set sslkey or PGSSLKEY",
                    cert.display()
                ),
            ))
        }
        (None, _) => None,
    };
    Ok(TlsSettings {
        mode,
        root_cert,
        client_cert,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(conninfo: &str, vars: &[(&str, &str)]) -> Result<Settings> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::parse_with(conninfo, &move |name| vars.get(name).cloned())
    }

    #[test]
    fn the_default_is_prefer_over_tcp_to_127_0_0_1() {
        let s = parse("", &[("USER", "alice")]).unwrap();
        assert_eq!(s.tls().mode, SslMode::Prefer);
        assert_eq!(s.config().get_hosts(), &[Host::Tcp("127.0.0.1".into())]);
        assert_eq!(s.config().get_user(), Some("alice"));
        assert_eq!(
            s.config().get_ssl_mode(),
            tokio_postgres::config::SslMode::Prefer
        );
    }

    #[test]
    fn pgsslmode_applies_unless_the_connection_string_says_otherwise() {
        let s = parse("host=db", &[("PGSSLMODE", "require")]).unwrap();
        assert_eq!(s.tls().mode, SslMode::Require);
        assert_eq!(
            s.config().get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        let s = parse("host=db sslmode=disable", &[("PGSSLMODE", "require")]).unwrap();
        assert_eq!(s.tls().mode, SslMode::Disable);
        let s = parse(
            "postgresql://db/app?sslmode=allow",
            &[("PGSSLMODE", "require")],
        )
        .unwrap();
        assert_eq!(s.tls().mode, SslMode::Allow);
    }

    #[test]
    fn settings_that_cannot_be_honoured_are_errors() {
        let e = parse("host=db", &[("PGSSLMODE", "verify_full")]).unwrap_err();
        assert!(e.to_string().contains("sslmode"), "{e}");
        let e = parse("host=db sslmode=verify-full", &[("HOME", "/nonexistent")]).unwrap_err();
        assert!(e.to_string().contains("needs the CA certificate"), "{e}");
        let e = parse(
            "host=db sslmode=verify-ca",
            &[("PGSSLROOTCERT", "/nonexistent/ca.crt")],
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ca.crt"), "{e}");
        let e = parse("host=db sslcert=/c.crt", &[]).unwrap_err();
        assert!(e.to_string().contains("needs its key"), "{e}");
        let e = parse("host=db sslrootcert=system", &[]).unwrap_err();
        assert!(e.to_string().contains("not supported"), "{e}");
    }

    #[test]
    fn disable_reads_no_file() {
        let s = parse(
            "host=db sslmode=disable sslrootcert=/nonexistent sslcert=/c",
            &[],
        )
        .unwrap();
        assert_eq!(s.tls().root_cert, None);
        assert_eq!(s.tls().client_cert, None);
    }

    #[test]
    fn libpq_variables_fill_what_the_string_leaves_out() {
        let vars = [
            ("PGHOST", "h1,h2"),
            ("PGPORT", "5433,5434"),
            ("PGUSER", "bob"),
            ("PGDATABASE", "app"),
            ("PGPASSWORD", "pw"),
        ];
        let s = parse("", &vars).unwrap();
        let c = s.config();
        assert_eq!(c.get_hosts().len(), 2);
        assert_eq!(c.get_ports(), &[5433, 5434]);
        assert_eq!(c.get_user(), Some("bob"));
        assert_eq!(c.get_dbname(), Some("app"));
        assert_eq!(c.get_password(), Some(&b"pw"[..]));
        let s = parse("hostaddr=10.0.0.1 user=u", &vars).unwrap();
        assert!(
            s.config().get_hosts().is_empty(),
            "hostaddr alone names the server"
        );
        assert!(parse("", &[("PGPORT", "x")]).is_err());
        let s = parse("", &[("PGHOST", "localhost"), ("PGHOSTADDR", "127.0.0.1")]).unwrap();
        assert_eq!(s.config().get_hosts(), &[Host::Tcp("localhost".into())]);
        assert_eq!(
            s.config().get_hostaddrs(),
            &["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
    }
}
