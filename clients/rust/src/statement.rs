//! Statements on pooled connections, sent one of two ways:
//! - prepared once per connection (deadpool's statement cache; a statement
//!   sent as text is prepared on every call, one more round trip each time);
//! - unnamed, with their parameters' types (`query_typed`: parsed, bound and
//!   run in one round trip, nothing kept on the server), for a pooler in
//!   transaction mode (PgBouncer before 1.21, or without
//!   `max_prepared_statements`), where each transaction may run on another
//!   server connection, one that never saw the statement prepared.

use deadpool_postgres::Object;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use crate::error::Result;
use crate::sql::Sql;

/// How statements are sent ([`crate::WorkerBuilder::transaction_pooler`],
/// [`crate::Client::transaction_pooler`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Statements {
    #[default]
    Prepared,
    Unnamed,
}

impl Statements {
    pub fn behind_transaction_pooler(on: bool) -> Statements {
        if on {
            Statements::Unnamed
        } else {
            Statements::Prepared
        }
    }
}

pub(crate) async fn query_one(
    mode: Statements,
    conn: &Object,
    sql: &Sql,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Row> {
    match mode {
        Statements::Prepared => {
            let statement = conn.prepare_cached(sql.text).await?;
            Ok(conn.query_one(&statement, params).await?)
        }
        Statements::Unnamed => Ok(conn.query_typed_one(sql.text, &typed(sql, params)).await?),
    }
}

pub(crate) async fn query(
    mode: Statements,
    conn: &Object,
    sql: &Sql,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    match mode {
        Statements::Prepared => {
            let statement = conn.prepare_cached(sql.text).await?;
            Ok(conn.query(&statement, params).await?)
        }
        Statements::Unnamed => Ok(conn.query_typed(sql.text, &typed(sql, params)).await?),
    }
}

fn typed<'a>(sql: &Sql, params: &[&'a (dyn ToSql + Sync)]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    assert_eq!(params.len(), sql.types.len(), "parameters of {}", sql.text);
    params
        .iter()
        .copied()
        .zip(sql.types.iter().cloned())
        .collect()
}
