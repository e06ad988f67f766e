//! `aedb-queue serve`: the web dashboard and the Prometheus endpoint.
//!
//! - `mod.rs`: options, shared state, router, startup.
//! - `queries.rs`: every SQL statement (bound parameters only).
//! - `sampler.rs`: the in-memory history behind charts and rates.
//! - `snapshot.rs`: the latest queue_overview, shared and kept briefly.
//! - `metrics.rs`: `/metrics` in the Prometheus text format.
//! - `pages/`: the HTML pages (maud escapes every value it renders).
//! - `actions.rs`: the POST actions, behind a CSRF token and an Origin check.
//! - `hosts.rs`: the Host header every request must carry (DNS rebinding).
//! - `svg.rs`: the charts, as pure functions.
//!
//! The server connects as the DSN's role with a small pool; every page
//! shows what that role may read, and offers an action only where
//! `queue_access()` says it administers the queue (the SQL call checks
//! again). Nothing counts rows on a page load: figures come from
//! `queue_overview` (bounded reads, estimates marked) and the counters.

mod actions;
mod hosts;
mod metrics;
mod pages;
mod queries;
mod sampler;
mod snapshot;
mod svg;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use crate::conn::Config;
use crate::error::{Error, Result};
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

    /// Seconds between samples of queue_overview and queue_counters for the
    /// charts and rates (fractions allowed).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = crate::positive_secs)]
    pub sample_every: f64,

    /// Minutes of samples kept per queue (at most 2,000 samples).
    #[arg(long, value_name = "MINUTES", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(1..=10_080))]
    pub history: u32,

    /// Seconds between refreshes of the overview page in the browser (0: off).
    #[arg(long, value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(0..=3_600))]
    pub refresh: u32,

    /// Serve queue_overview figures up to this many seconds old (fractions
    /// allowed; 0: read them for every request). Older ones are replaced in
    /// the background while they are served; actions of this server show at
    /// once.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = max_age_secs)]
    pub max_age: f64,

    /// Connections in the pool.
    #[arg(long, value_name = "N", default_value_t = 4, hide = true,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub pool_size: u32,

    /// queue_overview's exact_limit: counts past it are estimates (for tests).
    #[arg(long, value_name = "N", default_value_t = 1000, hide = true,
          value_parser = clap::value_parser!(i32).range(1..=1_000_000))]
    pub exact_limit: i32,
}

fn max_age_secs(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=3_600.0).contains(&v) => Ok(v),
        _ => Err(format!("expected seconds from 0 to 3600, got {s:?}")),
    }
}

/// What every handler shares.
pub struct App {
    pub pool: Pool,
    /// The latest queue_overview (pages, /metrics, the sampler).
    pub overview: Arc<snapshot::OverviewCache>,
    /// The per-process token every form carries.
    pub csrf: String,
    pub history: Arc<Mutex<History>>,
    pub exact_limit: i32,
    pub max_queues: usize,
    pub sample_every: f64,
    pub history_minutes: u32,
    pub refresh_secs: u32,
}

pub type Shared = Arc<App>;

/// How long a page or a scrape waits for a pooled connection or a new one.
const POOL_WAIT: Duration = Duration::from_secs(5);

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

fn csrf_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::msg(format!("no random bytes for the CSRF token: {e}")))?;
    let mut s = String::with_capacity(64);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    Ok(s)
}

fn pool(cfg: &Config, size: u32) -> Result<Pool> {
    let manager = Manager::from_config(
        cfg.config(),
        cfg.connector(),
        // A closed connection (the server restarted) is replaced on checkout.
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size as usize)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(POOL_WAIT))
        .create_timeout(Some(POOL_WAIT))
        .recycle_timeout(Some(POOL_WAIT))
        .build()
        .map_err(|e| Error::msg(format!("connection pool: {e}")))
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
        .route("/tasks/{id}/cancel", post(actions::cancel))
        .route("/assets/app.js", get(pages::script))
        .fallback(pages::not_found)
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
    match app.pool.get().await {
        Ok(c) => match queries::ping(&c).await {
            Ok(()) => (StatusCode::OK, "ok\n".into()),
            Err(e) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("database: {}\n", describe_db(&e)),
            ),
        },
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("database: {e}\n")),
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

pub async fn run(cfg: &Config, opts: &Options) -> Result<()> {
    let max_queues = opts.max_queues as usize;
    let history = Arc::new(Mutex::new(History::new(
        sampler::capacity(opts.history, opts.sample_every),
        max_queues,
    )));
    let pool = pool(cfg, opts.pool_size)?;
    let overview = snapshot::OverviewCache::new(
        pool.clone(),
        opts.exact_limit,
        Duration::from_secs_f64(opts.max_age),
    );
    let app = Arc::new(App {
        pool,
        overview,
        csrf: csrf_token()?,
        history: history.clone(),
        exact_limit: opts.exact_limit,
        max_queues,
        sample_every: opts.sample_every,
        history_minutes: opts.history,
        refresh_secs: opts.refresh,
    });
    // The first sample before the first page, so that pages know whether
    // the counters are there; a database that is down only logs.
    sampler::sample_once(&app.pool, &app.overview, &history).await;
    if let Some(e) = &history.lock().unwrap_or_else(|p| p.into_inner()).last_error {
        eprintln!("warning: first sample failed (serving anyway): {e}");
    }
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| Error::msg(format!("cannot listen on {}: {e}", opts.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::msg(format!("cannot read the bound address: {e}")))?;
    sampler::spawn(
        app.pool.clone(),
        app.overview.clone(),
        history,
        Duration::from_secs_f64(opts.sample_every),
    );
    println!("listening on http://{addr}");
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
    axum::serve(listener, router(app, allowed))
        .with_graceful_shutdown(stop_signal())
        .await
        .map_err(|e| Error::msg(format!("server: {e}")))
}
