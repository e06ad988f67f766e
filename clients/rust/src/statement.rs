//! Statements on pooled connections, prepared once per connection
//! (deadpool's statement cache): a statement sent as text is prepared on
//! every call, one more round trip and one more transaction each time.

use deadpool_postgres::Object;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::error::Result;

pub(crate) async fn query_one(
    conn: &Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Row> {
    let statement = conn.prepare_cached(sql).await?;
    Ok(conn.query_one(&statement, params).await?)
}

pub(crate) async fn query(
    conn: &Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    let statement = conn.prepare_cached(sql).await?;
    Ok(conn.query(&statement, params).await?)
}
