//! Duration flags (`enqueue --delay`, `stats --watch`, `tail --interval`,
//! `serve --sample-every` and `--max-age`).
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
    within(
        flag,
        text,
        secs,
        REFRESH_SECS,
        "10 ms to 1 day (0.01 to 86400 seconds)",
    )
}

/// `secs` (what `text` of `flag` reads as) if in `range`, else a usage error
/// naming the flag that says the range (`what`).
pub fn within(
    flag: &str,
    text: &str,
    secs: f64,
    range: std::ops::RangeInclusive<f64>,
    what: &str,
) -> Result<f64> {
    if range.contains(&secs) {
        Ok(secs)
    } else {
        Err(invalid(flag, text, &format!("{secs} s is outside {what}")))
    }
}

/// `text` as seconds when it is a plain number (digits, at most one point,
/// an optional sign), which interval input reads as that many seconds too;
/// None for anything else, which only the server reads. For `serve`, which
/// starts without the database: plain numbers need no connection.
pub fn plain_secs(text: &str) -> Option<f64> {
    let t = text.trim();
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    let plain = digits.bytes().any(|b| b.is_ascii_digit())
        && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && digits.bytes().filter(|&b| b == b'.').count() <= 1;
    if plain {
        t.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::plain_secs;

    #[test]
    fn plain_numbers_are_seconds_and_everything_else_is_the_servers() {
        assert_eq!(plain_secs("10"), Some(10.0));
        assert_eq!(plain_secs(" 0.5 "), Some(0.5));
        assert_eq!(plain_secs(".25"), Some(0.25));
        assert_eq!(plain_secs("-1"), Some(-1.0));
        assert_eq!(plain_secs("+2"), Some(2.0));
        for text in [
            "1e3", "inf", "NaN", "1h", "1 minute", "500ms", "PT1H", "1.2.3", ".", "", "-",
        ] {
            assert_eq!(plain_secs(text), None, "{text}");
        }
    }
}
