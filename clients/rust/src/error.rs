//! The client's one error type.

use std::fmt;

/// What a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database refused or failed the call; `sqlstate()` says why
    /// (see the README's error table: 22004/22023 bad arguments, 42501
    /// no right, 40002 lease lost under `strict`, ...).
    #[error("database: {0}")]
    Database(#[from] tokio_postgres::Error),
    /// No connection could be had from the pool.
    #[error("connection pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// A payload or result could not be turned into JSON, or back.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// The worker's first connection could not be made, or the database
    /// has no aedb_queue extension: a wrong configuration, reported at once
    /// by [`Worker::run`](crate::Worker::run) instead of retried.
    #[error("worker cannot start: {0}")]
    Startup(String),
    /// A bad argument to a client call, named.
    #[error("invalid argument \"{arg}\": {reason}")]
    InvalidArgument { arg: &'static str, reason: String },
}

impl Error {
    pub(crate) fn invalid(arg: &'static str, reason: impl fmt::Display) -> Error {
        Error::InvalidArgument {
            arg,
            reason: reason.to_string(),
        }
    }

    /// The SQLSTATE of a database error, if the server sent one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Database(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }

    /// True when the connection itself failed (closed, refused, reset):
    /// the call may be retried on a new connection.
    pub fn is_connection(&self) -> bool {
        match self {
            Error::Database(e) => e.is_closed() || e.code().is_none(),
            Error::Pool(_) => true,
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
