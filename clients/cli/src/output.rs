//! Output: rows as ordered records, printed as tables for people or as JSON
//! for scripts; UTC timestamps for `tail`.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use comfy_table::{presets, CellAlignment, ContentArrangement, Table};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use crate::error::{Error, Result};

/// One row: column names and values, in the statement's column order (which
/// JSON output keeps).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record(Vec<(String, Value)>);

impl Record {
    pub fn push(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        self.0.push((key.into(), value.into()));
    }

    pub fn get(&self, key: &str) -> &Value {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .unwrap_or(&Value::Null)
    }

    /// A count column (0 when NULL or absent).
    pub fn int(&self, key: &str) -> i64 {
        self.get(key).as_i64().unwrap_or(0)
    }

    pub fn text(&self, key: &str) -> &str {
        self.get(key).as_str().unwrap_or("")
    }

    pub fn fields(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

impl Serialize for Record {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Writes `text` and a newline to stdout. A reader that went away (a pipe
/// into `head`) ends the command quietly instead of a panic.
pub fn line(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|_| out.flush())
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                Error::BrokenPipe
            } else {
                Error::msg(format!("cannot write to stdout: {e}"))
            }
        })
}

/// One JSON document on one line (JSON lines).
pub fn json_line<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let text = serde_json::to_string(value).map_err(|e| Error::msg(e.to_string()))?;
    line(&text)
}

/// One indented JSON document.
pub fn json_pretty<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::msg(e.to_string()))?;
    line(&text)
}

/// A value as a table cell: text without quotes, NULL empty, JSON compact.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(true) => "yes".to_string(),
        Value::Bool(false) => "no".to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

/// An ISO 8601 timestamp as the server wrote it, shortened for a table:
/// `2026-12-02T16:54:39.213518+00:00` as `2026-12-02 16:54:39+00`. Other
/// values are returned as they are.
pub fn human_time(v: &Value) -> Value {
    let Some(s) = v.as_str() else {
        return v.clone();
    };
    let Some((date, rest)) = s.split_once('T') else {
        return v.clone();
    };
    if date.len() != 10 {
        return v.clone();
    }
    let cut = rest.find(['+', '-', 'Z']).unwrap_or(rest.len());
    let (clock, zone) = rest.split_at(cut);
    let clock = clock.split('.').next().unwrap_or(clock);
    let zone = zone.strip_suffix(":00").unwrap_or(zone);
    Value::from(format!("{date} {clock}{zone}"))
}

/// `s` cut to at most `max` characters, ending with `…` when cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A table of `columns` of `rows`; numeric columns are right-aligned. The
/// width follows the terminal's when stdout is one, else is unbounded.
pub fn table(rows: &[Record], columns: &[&str]) -> String {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(columns.iter().copied());
    for r in rows {
        t.add_row(columns.iter().map(|c| cell(r.get(c))));
    }
    for (i, c) in columns.iter().enumerate() {
        let numeric = rows
            .iter()
            .all(|r| matches!(r.get(c), Value::Number(_) | Value::Null))
            && rows.iter().any(|r| r.get(c).is_number());
        if numeric {
            if let Some(col) = t.column_mut(i) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
    }
    t.to_string()
}

/// A two-column table of field names and values (payloads as given).
pub fn vertical(pairs: &[(String, String)]) -> String {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(["field", "value"]);
    for (k, v) in pairs {
        t.add_row([k.as_str(), v.as_str()]);
    }
    t.to_string()
}

/// The current time in UTC, `2026-12-02T16:40:01.123Z`.
pub fn utc_now() -> String {
    utc(SystemTime::now())
}

pub fn utc(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (y, m, day) = civil_date((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The Gregorian date `days` days after 1970-01-01. Counts in 400-year
/// cycles of 146,097 days, in years starting on March 1st so that the leap
/// day is a cycle's last day.
fn civil_date(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let cycle = shifted.div_euclid(146_097);
    let day_of_cycle = shifted.rem_euclid(146_097);
    let year_of_cycle = (day_of_cycle - day_of_cycle / 1_460 + day_of_cycle / 36_524
        - day_of_cycle / 146_096)
        / 365;
    let day_of_year =
        day_of_cycle - (365 * year_of_cycle + year_of_cycle / 4 - year_of_cycle / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_cycle + cycle * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates_across_leap_years_and_centuries() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(-1), (1969, 12, 31));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(11_017), (2000, 3, 1));
        assert_eq!(civil_date(19_723), (2024, 1, 1));
        assert_eq!(civil_date(19_782), (2024, 2, 29));
        // 2100 is not a leap year: Feb 28 is followed by Mar 1.
        assert_eq!(civil_date(47_540), (2100, 2, 28));
        assert_eq!(civil_date(47_541), (2100, 3, 1));
    }

    #[test]
    fn utc_formats_milliseconds() {
        let t = UNIX_EPOCH + Duration::from_millis(1_764_693_601_123);
        assert_eq!(utc(t), "2025-12-02T16:40:01.123Z");
    }

    #[test]
    fn records_keep_column_order_in_json() {
        let mut r = Record::default();
        r.push("zeta", 1);
        r.push("alpha", Value::Null);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"zeta":1,"alpha":null}"#
        );
        assert_eq!(r.int("zeta"), 1);
        assert_eq!(r.int("missing"), 0);
    }

    #[test]
    fn human_time_drops_fractions_and_a_whole_hour_offset() {
        let t = |s: &str| human_time(&Value::from(s));
        assert_eq!(
            t("2026-12-02T16:54:39.213518+00:00"),
            "2026-12-02 16:54:39+00"
        );
        assert_eq!(t("2026-12-02T16:54:39+05:30"), "2026-12-02 16:54:39+05:30");
        assert_eq!(t("1999-01-01T00:00:00.5-08:00"), "1999-01-01 00:00:00-08");
        assert_eq!(t("00:00:02"), "00:00:02");
        assert_eq!(human_time(&Value::from(3)), Value::from(3));
    }

    #[test]
    fn truncate_counts_characters() {
        assert_eq!(truncate("héllo", 5), "héllo");
        assert_eq!(truncate("héllo wörld", 6), "héllo…");
    }
}
