//! Duration flags (`enqueue --delay`, `stats --watch`, `tail --interval`).
//!
//! Their text is read by PostgreSQL's own interval input, so a duration is
//! written as in SQL everywhere: '90 seconds', '1 hour', '1h30m', '500ms',
//! 'PT1H', '2 days', and a plain number is seconds (that is how interval
//! input reads a bare number, and what these flags took before). One reader,
//! the server's, so the CLI cannot disagree with SQL about what a duration is.

use tokio_postgres::Client;

use crate::error::{Error, Result};
use crate::sql;

/// How `stats --watch` and `tail --interval` may refresh: 10 ms to a day.
pub const REFRESH_SECS: std::ops::RangeInclusive<f64> = 0.01..=86_400.0;

/// What a bad duration's error says after PostgreSQL's reason.
const HOW: &str = "write a duration as in SQL: '90 seconds', '1 hour', '1h30m', '500ms', \
                   '2 days', or a number of seconds";

/// The usage error of `flag` given `text`, in clap's words.
fn invalid(flag: &str, text: &str, why: &str) -> Error {
    Error::usage(format!(
        "invalid value '{text}' for '{flag} <DURATION>': {why}\n  {HOW}"
    ))
}

/// `text` read as an interval by the server, in seconds. A text the interval
/// input refuses (SQLSTATE class 22: bad syntax, a field out of range) is a
/// usage error naming `flag`, not a raw SQL error.
pub async fn seconds(c: &Client, flag: &str, text: &str) -> Result<f64> {
    match sql::interval_secs(c, text).await {
        Err(Error::Db(e)) => match e.as_db_error() {
            Some(db) if db.code().code().starts_with("22") => {
                Err(invalid(flag, text, db.message()))
            }
            _ => Err(Error::Db(e)),
        },
        other => other,
    }
}

/// A refresh period: [`seconds`] within [`REFRESH_SECS`].
pub async fn refresh(c: &Client, flag: &str, text: &str) -> Result<f64> {
    let secs = seconds(c, flag, text).await?;
    if REFRESH_SECS.contains(&secs) {
        Ok(secs)
    } else {
        Err(invalid(
            flag,
            text,
            &format!("{secs} s is outside 10 ms to 1 day (0.01 to 86400 seconds)"),
        ))
    }
}
