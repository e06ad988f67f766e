//! Connections that run as an operator's role.
//!
//! The pool connects as the DSN's login role (the connection role), which
//! should hold no queue rights of its own (NOINHERIT) and be a member of
//! every operator's role. Every checkout sets the role of the request it
//! serves before any query (`set_config('role', ...)`, which is SET ROLE
//! with a bound parameter) or resets it: a connection that served another
//! operator keeps nothing of theirs. Nothing else reaches the pool.
//!
//! The extension checks each call against the current role and the login
//! role (docs/security.md): the connection role's membership in every
//! tenant's role never widens what one operator may do.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};

use crate::conn::Config;

use super::pages::PageError;
use crate::error::{Error, Result};

/// How long a page or a scrape waits for a pooled connection or a new one.
const POOL_WAIT: Duration = Duration::from_secs(5);

/// The pool, seen as one role.
#[derive(Clone)]
pub struct Db {
    pool: Pool,
    /// None: the connection role itself (`--no-login`).
    role: Option<Arc<str>>,
}

pub fn pool(cfg: &Config, size: u32) -> Result<Pool> {
    // TLS as the DSN's sslmode says (crate::conn).
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

impl Db {
    pub fn new(pool: Pool, role: Option<&str>) -> Db {
        Db {
            pool,
            role: role.map(Arc::from),
        }
    }

    /// A pooled connection acting as this role.
    pub async fn conn(&self) -> std::result::Result<Object, PageError> {
        let c = self.pool.get().await?;
        match &self.role {
            Some(role) => {
                c.execute(
                    "SELECT pg_catalog.set_config('role', $1, false)",
                    &[&role.as_ref()],
                )
                .await?;
            }
            None => c.batch_execute("RESET ROLE").await?,
        }
        Ok(c)
    }
}
