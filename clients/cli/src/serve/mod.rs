//! `aedb-queue serve`: the web dashboard and the Prometheus endpoint.
//!
//! - `mod.rs`: options, shared state, router, startup.
//! - `identity/`: who is asking (users file, sessions, the proxy's header).
//! - `db.rs`: connections that run as the operator's database role.
//! - `queries.rs`: every SQL statement (bound parameters only).
//! - `sampler.rs`: the in-memory history behind charts and rates.
//! - `snapshot.rs`: the latest queue_overview, shared and kept briefly.
//! - `metrics.rs`: `/metrics` in the Prometheus text format.
//! - `pages/`: the HTML pages (maud escapes every value it renders).
//! - `actions.rs`: the POST actions, behind a CSRF token and an Origin check.
//! - `hosts.rs`: the Host header every request must carry (DNS rebinding).
//! - `tls.rs`: HTTPS.
//! - `svg.rs`: the charts, as pure functions.
//!
//! Each operator's requests run as their database role, so every page
//! shows what that role may read, and offers an action only where
//! `queue_access()` says it administers the queue (the SQL call checks
//! again). Each role has its own view: snapshot and history, sampled as
//! that role, so no operator sees figures of a queue their role may not
//! read. Nothing counts rows on a page load: figures come from
//! `queue_overview` (bounded reads, estimates marked) and the counters.

mod actions;
mod db;
mod hosts;
pub mod identity;
mod metrics;
mod pages;
mod queries;
mod sampler;
mod snapshot;
mod svg;
mod tls;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderName, StatusCode};
use axum::routing::{get, post};
use axum::Router;

use crate::conn::Config;
use crate::error::{Error, Result};
use db::Db;
use identity::{Identity, Mode, Operator};
use pages::PageError;
use sampler::History;

#[derive(clap::Args, Debug)]
pub struct Options {
    /// Address to listen on (port 0: any free port; the bound address is
    /// printed as "listening on http://ADDR").
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Also answer requests with this Host (repeatable), e.g. the name a
    /// reverse proxy passes through; without :PORT any port of that name.
    /// Otherwise only the listening address (and, for a loopback or
    /// wildcard bind, localhost, 127.0.0.1 and [::1]) with its port is
    /// answered; any other Host gets 421 (a DNS-rebinding defence).
    #[arg(long = "allowed-host", value_name = "HOST[:PORT]", value_parser = hosts::parse)]
    pub allowed_hosts: Vec<hosts::Allowed>,

    /// At most this many queue label values in /metrics (the rest are summed
    /// as queue="other"), and queues kept in the charts' history.
    #[arg(long, value_name = "N", default_value_t = 200,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_queues: u32,

    /// How often queue_overview and queue_counters are sampled for the
    /// charts and rates: a duration as in SQL ('10s', '500ms', '1 minute')
    /// or seconds (fractions allowed), 10 ms to 1 day. Only a plain number
    /// is read without the database.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10",
        allow_negative_numbers = true,
        value_parser = crate::duration_text
    )]
    pub sample_every: String,

    /// Minutes of samples kept per queue (at most 2,000 samples).
    #[arg(long, value_name = "MINUTES", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(1..=10_080))]
    pub history: u32,

    /// Seconds between refreshes of the overview page in the browser (0: off).
    #[arg(long, value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(0..=3_600))]
    pub refresh: u32,

    /// Serve queue_overview figures up to this old: a duration as in SQL
    /// ('2s', '500ms', '1 minute') or seconds (fractions allowed), 0 to 1
    /// hour (0: read them for every request). Older ones are replaced in the
    /// background while they are served; actions of this server show at
    /// once. Only a plain number is read without the database.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "2",
        allow_negative_numbers = true,
        value_parser = crate::duration_text
    )]
    pub max_age: String,

    /// Connections in the pool.
    #[arg(long, value_name = "N", default_value_t = 4, hide = true,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub pool_size: u32,

    /// queue_overview's exact_limit: counts past it are estimates (for tests).
    #[arg(long, value_name = "N", default_value_t = 1000, hide = true,
          value_parser = clap::value_parser!(i32).range(1..=1_000_000))]
    pub exact_limit: i32,

    /// The operators: one a line, "NAME ROLE HASH" (HASH from
    /// `aedb-queue hash-password`, or "-" for single sign-on only). Each
    /// operator's requests run as ROLE (SET ROLE from the DSN's role).
    #[arg(long, value_name = "FILE", required_unless_present = "no_login")]
    pub users: Option<PathBuf>,

    /// Single sign-on: a reverse proxy names the operator (of the users
    /// file) in this header, e.g. X-Forwarded-User. Trusted only on
    /// connections from a --trusted-proxy address.
    #[arg(
        long,
        value_name = "HEADER",
        requires = "trusted_proxies",
        requires = "users"
    )]
    pub trust_user_header: Option<HeaderName>,

    /// The address a --trust-user-header proxy connects from (repeatable).
    #[arg(
        long = "trusted-proxy",
        value_name = "IP",
        requires = "trust_user_header"
    )]
    pub trusted_proxies: Vec<IpAddr>,

    /// No login: everyone who reaches the server acts as the DSN's role.
    /// Only with a loopback --listen address (a local, single-user setup).
    #[arg(long, conflicts_with = "users")]
    pub no_login: bool,

    /// Minutes a login lasts.
    #[arg(long, value_name = "MINUTES", default_value_t = 720,
          value_parser = clap::value_parser!(u64).range(1..=43_200))]
    pub session_minutes: u64,

    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// `--sample-every` and `--max-age`, in seconds.
#[derive(Debug, Clone, Copy)]
struct Periods {
    sample_every: f64,
    max_age: f64,
}

/// The duration flags read as the other flags' durations are (by the
/// server's interval input, `duration.rs`) and checked against their
/// ranges. serve starts while the database is down, so a plain number is
/// read here as seconds without connecting; any other text needs the
/// database, and when it cannot be reached that is an error naming the
/// flag.
async fn periods(cfg: &Config, opts: &Options) -> Result<Periods> {
    let mut client = None;
    let sample_every = period(
        cfg,
        &mut client,
        "--sample-every",
        &opts.sample_every,
        crate::duration::REFRESH_SECS,
        "10 ms to 1 day (0.01 to 86400 seconds)",
    )
    .await?;
    let max_age = period(
        cfg,
        &mut client,
        "--max-age",
        &opts.max_age,
        0.0..=3_600.0,
        "0 to 1 hour (0 to 3600 seconds)",
    )
    .await?;
    Ok(Periods {
        sample_every,
        max_age,
    })
}

async fn period(
    cfg: &Config,
    client: &mut Option<tokio_postgres::Client>,
    flag: &str,
    text: &str,
    range: std::ops::RangeInclusive<f64>,
    what: &str,
) -> Result<f64> {
    use crate::duration;
    let secs = match duration::plain_secs(text) {
        Some(secs) => secs,
        None => {
            if client.is_none() {
                let c = crate::conn::connect(cfg).await.map_err(|e| {
                    let reason = e.report();
                    let reason = reason.strip_prefix("error: ").unwrap_or(&reason);
                    Error::msg(format!(
                        "{flag} '{text}': a duration other than a plain number is read by the \
                         database, which cannot be reached ({reason}); give {flag} in seconds \
                         (e.g. {flag} 10) or start the database"
                    ))
                })?;
                *client = Some(c);
            }
            let c = client.as_ref().expect("connected above");
            duration::seconds(c, flag, text).await?
        }
    };
    duration::within(flag, text, secs, range, what)
}

/// What one role sees: its connections, its latest overview and its
/// history.
pub struct View {
    pub db: Db,
    /// The latest queue_overview (pages, /metrics, the sampler).
    pub overview: Arc<snapshot::OverviewCache>,
    pub history: Arc<Mutex<History>>,
}

/// What every handler shares.
pub struct App {
    /// One view per operator role (None: the connection's own role).
    views: BTreeMap<Option<String>, View>,
    /// /healthz's connections (the connection role; it only pings).
    health: Db,
    pub identity: Identity,
    pub exact_limit: i32,
    pub max_queues: usize,
    pub sample_every: f64,
    pub history_minutes: u32,
    pub refresh_secs: u32,
}

impl App {
    /// The view of the operator's role.
    pub fn view(&self, op: &Operator) -> std::result::Result<&View, PageError> {
        self.views
            .get(&op.role)
            .ok_or_else(|| PageError::new(StatusCode::FORBIDDEN, "No view for this role."))
    }

    /// After an action: every role reads its overview anew.
    pub fn invalidate(&self) {
        for v in self.views.values() {
            v.overview.invalidate();
        }
    }
}

pub type Shared = Arc<App>;

/// The SQLSTATE of a server error.
pub fn sqlstate(e: &tokio_postgres::Error) -> Option<String> {
    e.as_db_error().map(|d| d.code().code().to_string())
}

/// "[SQLSTATE] message" for server errors (as the CLI prints them, with
/// detail and hint), else what the connection says went wrong.
pub fn describe_db(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("[{}] {}", db.code().code(), db.message());
            if let Some(d) = db.detail() {
                let _ = write!(s, " (detail: {d})");
            }
            if let Some(h) = db.hint() {
                let _ = write!(s, " (hint: {h})");
            }
            s
        }
        None => match std::error::Error::source(e) {
            Some(src) => format!("{e}: {src}"),
            None => e.to_string(),
        },
    }
}

fn router(app: Shared, allowed: Vec<hosts::Allowed>) -> Router {
    Router::new()
        .route("/", get(pages::overview::page))
        .route("/queues/{queue}", get(pages::queue::page))
        .route("/tasks/{id}", get(pages::task::page))
        .route("/search", get(pages::search::page))
        .route("/metrics", get(metrics::handler))
        .route("/healthz", get(healthz))
        .route("/queues/{queue}/pause", post(actions::pause))
        .route("/queues/{queue}/resume", post(actions::resume))
        .route("/queues/{queue}/retry-dead", post(actions::retry_dead))
        .route("/queues/{queue}/purge", post(actions::purge))
        .route("/queues/{queue}/bulk", post(actions::bulk))
        .route("/tasks/{id}/cancel", post(actions::cancel))
        .route(
            "/tasks/{id}/retry-from-step",
            post(actions::retry_from_step),
        )
        .route("/assets/app.js", get(pages::script))
        .route(
            "/login",
            get(identity::login::page).post(identity::login::submit),
        )
        .route("/logout", post(identity::login::logout))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            identity::require,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(allowed),
            hosts::check,
        ))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(app)
}

/// The pages' policy: scripts only from this server (the one file), no
/// framing (a page elsewhere cannot overlay the action buttons), forms
/// post only here, nothing else loaded. The CSS is inline and small.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

async fn security_headers(mut resp: axum::response::Response) -> axum::response::Response {
    use axum::http::header::{self, HeaderValue};
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    resp
}

/// "ok" when the database answers, 503 otherwise.
async fn healthz(
    axum::extract::State(app): axum::extract::State<Shared>,
) -> (axum::http::StatusCode, String) {
    use axum::http::StatusCode;
    match app.health.conn().await {
        Ok(c) => match queries::ping(&c).await {
            Ok(()) => (StatusCode::OK, "ok\n".into()),
            Err(e) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("database: {}\n", describe_db(&e)),
            ),
        },
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("database: {}\n", e.message),
        ),
    }
}

/// Ctrl-C, or SIGTERM (a service manager stopping it): requests in flight
/// finish first.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// How operators are known, from the options; refuses --no-login on an
/// address other hosts can reach.
fn mode(opts: &Options) -> Result<Mode> {
    if opts.no_login {
        if !opts.listen.ip().is_loopback() {
            return Err(Error::msg(format!(
                "--no-login serves everyone as the DSN's role: only on a loopback address, not {}; \
                 give operators a --users file",
                opts.listen
            )));
        }
        return Ok(Mode::NoLogin);
    }
    let path = opts
        .users
        .as_ref()
        .ok_or_else(|| Error::msg("serve needs --users FILE (or --no-login on loopback)"))?;
    Ok(Mode::Login {
        users: identity::users::Users::load(path).map_err(Error::msg)?,
        header: opts.trust_user_header.clone(),
        proxies: opts.trusted_proxies.clone(),
    })
}

fn views(
    identity: &Identity,
    pool: &deadpool_postgres::Pool,
    opts: &Options,
    periods: Periods,
) -> BTreeMap<Option<String>, View> {
    let capacity = sampler::capacity(opts.history, periods.sample_every);
    identity
        .roles()
        .into_iter()
        .map(|role| {
            let db = Db::new(pool.clone(), role.as_deref());
            let view = View {
                overview: snapshot::OverviewCache::new(
                    db.clone(),
                    opts.exact_limit,
                    Duration::from_secs_f64(periods.max_age),
                ),
                history: Arc::new(Mutex::new(History::new(capacity, opts.max_queues as usize))),
                db,
            };
            (role, view)
        })
        .collect()
}

/// The first sample of every view before the first page, so that pages
/// know whether the counters are there; a database that is down only logs.
async fn first_samples(app: &App) {
    for (role, v) in &app.views {
        sampler::sample_once(v).await;
        if let Some(e) = &v
            .history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_error
        {
            let who = role.as_deref().unwrap_or("the connection role");
            eprintln!("warning: first sample as {who} failed (serving anyway): {e}");
        }
    }
}

pub async fn run(cfg: &Config, opts: &Options) -> Result<()> {
    let periods = periods(cfg, opts).await?;
    let tls = match (&opts.tls_cert, &opts.tls_key) {
        (Some(cert), Some(key)) => Some(tls::config(cert, key)?),
        _ => None,
    };
    let identity = Identity::new(
        mode(opts)?,
        Duration::from_secs(opts.session_minutes * 60),
        tls.is_some(),
    )
    .map_err(Error::msg)?;
    let pool = db::pool(cfg, opts.pool_size)?;
    let app = Arc::new(App {
        views: views(&identity, &pool, opts, periods),
        health: Db::new(pool, None),
        identity,
        exact_limit: opts.exact_limit,
        max_queues: opts.max_queues as usize,
        sample_every: periods.sample_every,
        history_minutes: opts.history,
        refresh_secs: opts.refresh,
    });
    first_samples(&app).await;
    let listener = std::net::TcpListener::bind(opts.listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| Error::msg(format!("cannot listen on {}: {e}", opts.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::msg(format!("cannot read the bound address: {e}")))?;
    sampler::spawn(app.clone(), Duration::from_secs_f64(periods.sample_every));
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("listening on {scheme}://{addr}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let allowed = hosts::allowed(addr, &opts.allowed_hosts);
    if addr.ip().is_unspecified() && opts.allowed_hosts.is_empty() {
        eprintln!(
            "note: listening on every interface, but only Host localhost, 127.0.0.1 or [::1] \
             with port {} is answered; name the others with --allowed-host",
            addr.port()
        );
    }
    let handle = axum_server::Handle::new();
    let stopping = handle.clone();
    tokio::spawn(async move {
        stop_signal().await;
        stopping.graceful_shutdown(Some(Duration::from_secs(10)));
    });
    // The peer address: the trusted proxy check and the login limiter.
    let service = router(app, allowed).into_make_service_with_connect_info::<SocketAddr>();
    let served = match tls {
        Some(config) => {
            axum_server::from_tcp_rustls(listener, config)
                .handle(handle)
                .serve(service)
                .await
        }
        None => {
            axum_server::from_tcp(listener)
                .handle(handle)
                .serve(service)
                .await
        }
    };
    served.map_err(|e| Error::msg(format!("server: {e}")))
}
