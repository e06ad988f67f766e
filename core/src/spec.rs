//! Follow-up enqueue specs: a JSON array of objects, each one enqueue.
//!
//! The extension walks the caller's jsonb itself, one level deep, and hands
//! each spec's keys here as [`Json`] values; the payload never leaves
//! jsonb, so it is stored byte for byte (no precision lost, any depth).
//! Durations are a number of seconds (`90`, `0.5`) or text made of
//! `<number> <unit>` pairs (`"5 minutes"`, `"1 hour 30 min"`, `"250 ms"`).

use crate::error::{clipped, quoted};
use crate::validate::at_most;
use crate::QueueError;

/// Most follow-ups one completion may enqueue (SQLSTATE 54000 above).
pub const MAX_FOLLOW_UPS: usize = 1_000;
/// Most bytes all follow-up specs together may take, unless the payload
/// limit (`aedb_queue.max_payload_bytes`) is larger (SQLSTATE 54000 above).
pub const MAX_FOLLOW_UPS_BYTES: usize = 16 * 1024 * 1024;

pub const KNOWN_KEYS: &[&str] = &[
    "queue",
    "payload",
    "delay",
    "priority",
    "max_attempts",
    "backoff_base",
    "backoff_max",
    "idempotency_key",
    "wait_for",
    "on_parent_failure",
    "concurrency_key",
    "ordering_key",
    "fairness_key",
];

/// One value of a spec's key, as the jsonb holds it: scalars with their
/// text (a number as its exact decimal text), containers by kind only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    Number(&'a str),
    String(&'a str),
    /// An array: the texts of its elements when every one is a number
    /// (what `wait_for` takes), None otherwise.
    Array(Option<&'a [String]>),
    Object,
}

/// A follow-up spec with every option checked for type and range (the
/// payload is the caller's: it stays jsonb).
#[derive(Debug, Clone, PartialEq)]
pub struct EnqueueSpec {
    /// Prefix naming this spec in errors, e.g. `follow_ups[0].`.
    pub path: String,
    pub queue: String,
    pub delay: Option<i64>,
    pub priority: Option<i64>,
    pub max_attempts: Option<i32>,
    pub backoff_base: Option<i64>,
    pub backoff_max: Option<i64>,
    pub idempotency_key: Option<String>,
    /// Ids of the tasks this one waits for (unchecked: see `dependency`).
    pub wait_for: Vec<i64>,
    pub on_parent_failure: Option<String>,
    pub concurrency_key: Option<String>,
    pub ordering_key: Option<String>,
    pub fairness_key: Option<String>,
}

/// Checks the size of the whole `follow_ups` argument, before it is read.
pub fn check_follow_ups_size(
    arg: &str,
    bytes: usize,
    payload_limit: usize,
) -> Result<(), QueueError> {
    at_most(arg, bytes, MAX_FOLLOW_UPS_BYTES.max(payload_limit), "bytes")
}

/// Checks the number of specs, before any is read.
pub fn check_follow_ups_count(arg: &str, count: usize) -> Result<(), QueueError> {
    at_most(arg, count, MAX_FOLLOW_UPS, "specs")
}

/// The error for a `follow_ups` argument that is not an array (JSON `null` means none).
pub fn not_an_array(arg: &str) -> QueueError {
    QueueError::invalid(arg, "must be a JSON array of enqueue specs")
}

/// The error for an element that is not an object; `path` is `follow_ups[i].`.
pub fn not_an_object(path: &str) -> QueueError {
    QueueError::invalid(path.trim_end_matches('.'), "must be a JSON object")
}

/// Parses one spec from its keys and values, `path` naming it in errors.
pub fn parse_spec(path: &str, fields: &[(&str, Json<'_>)]) -> Result<EnqueueSpec, QueueError> {
    let at = |key: &str| format!("{path}{key}");
    if let Some((unknown, _)) = fields.iter().find(|(k, _)| !KNOWN_KEYS.contains(k)) {
        return Err(QueueError::invalid(
            at(clipped(unknown)),
            format!(
                "is not a known key (expected one of {})",
                KNOWN_KEYS.join(", ")
            ),
        ));
    }
    // A present key whose value is JSON `null` counts as absent.
    let field = |key: &str| {
        fields
            .iter()
            .find(|(k, v)| *k == key && *v != Json::Null)
            .map(|(_, v)| *v)
    };
    let queue = match field("queue") {
        Some(Json::String(queue)) => queue.to_string(),
        Some(_) => return Err(QueueError::invalid(at("queue"), "must be a string")),
        None => return Err(QueueError::invalid(at("queue"), "is required")),
    };
    let integer = |key: &str| -> Result<Option<i64>, QueueError> {
        match field(key) {
            None => Ok(None),
            Some(Json::Number(text)) => text
                .parse::<i64>()
                .map(Some)
                .map_err(|_| QueueError::invalid(at(key), "must be an integer in range")),
            Some(_) => Err(QueueError::invalid(at(key), "must be an integer")),
        }
    };
    let string = |key: &str| -> Result<Option<String>, QueueError> {
        match field(key) {
            None => Ok(None),
            Some(Json::String(text)) => Ok(Some(text.to_string())),
            Some(_) => Err(QueueError::invalid(at(key), "must be a string")),
        }
    };
    let duration = |key: &str| -> Result<Option<i64>, QueueError> {
        match field(key) {
            None => Ok(None),
            Some(Json::String(text)) => parse_duration_text(text).map(Some).ok_or_else(|| {
                QueueError::invalid(
                    at(key),
                    format!(
                        "{} is not a duration like \"5 minutes\" or \"1 hour 30 min\"",
                        quoted(text)
                    ),
                )
            }),
            Some(Json::Number(text)) => text
                .parse::<f64>()
                .ok()
                .and_then(seconds_to_micros)
                .map(Some)
                .ok_or_else(|| QueueError::invalid(at(key), "is out of range")),
            Some(_) => Err(QueueError::invalid(
                at(key),
                "must be duration text (\"5 minutes\") or a number of seconds",
            )),
        }
    };
    Ok(EnqueueSpec {
        path: path.to_string(),
        queue,
        delay: duration("delay")?,
        priority: integer("priority")?,
        max_attempts: integer("max_attempts")?
            .map(|n| {
                i32::try_from(n)
                    .map_err(|_| QueueError::invalid(at("max_attempts"), "is out of range"))
            })
            .transpose()?,
        backoff_base: duration("backoff_base")?,
        backoff_max: duration("backoff_max")?,
        idempotency_key: string("idempotency_key")?,
        wait_for: match field("wait_for") {
            None => Vec::new(),
            Some(Json::Array(Some(ids))) => ids
                .iter()
                .map(|id| id.parse::<i64>())
                .collect::<Result<_, _>>()
                .map_err(|_| QueueError::invalid(at("wait_for"), "must be an array of task ids"))?,
            Some(_) => {
                return Err(QueueError::invalid(
                    at("wait_for"),
                    "must be an array of task ids",
                ))
            }
        },
        on_parent_failure: string("on_parent_failure")?,
        concurrency_key: string("concurrency_key")?,
        ordering_key: string("ordering_key")?,
        fairness_key: string("fairness_key")?,
    })
}

fn seconds_to_micros(seconds: f64) -> Option<i64> {
    let micros = (seconds * 1e6).round();
    (micros.is_finite() && micros.abs() < i64::MAX as f64).then_some(micros as i64)
}

fn unit_micros(unit: &str) -> Option<f64> {
    Some(match unit {
        "us" | "usec" | "usecs" | "microsecond" | "microseconds" => 1.0,
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => 1e3,
        "s" | "sec" | "secs" | "second" | "seconds" => 1e6,
        "m" | "min" | "mins" | "minute" | "minutes" => 60e6,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600e6,
        "d" | "day" | "days" => 86_400e6,
        "w" | "week" | "weeks" => 604_800e6,
        _ => return None,
    })
}

/// Parses `<number> <unit>` pairs (the space is optional: `"90s"`), summed.
/// A negative number is accepted here so the range check can name it.
pub fn parse_duration_text(text: &str) -> Option<i64> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let number_len = rest
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '-' || c == '+'))))
            .map_or(rest.len(), |(i, _)| i);
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = rest[number_len..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        total += number * unit_micros(&rest[..unit_len].to_ascii_lowercase())?;
        rest = rest[unit_len..].trim_start();
    }
    seconds_to_micros(total / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// What the extension's jsonb walk hands over, made from serde values.
    fn parse_follow_ups(arg: &str, value: &Value) -> Result<Vec<EnqueueSpec>, QueueError> {
        let items = match value {
            Value::Null => return Ok(Vec::new()),
            Value::Array(items) => items,
            _ => return Err(not_an_array(arg)),
        };
        check_follow_ups_count(arg, items.len())?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let path = format!("{arg}[{i}].");
                let Value::Object(object) = item else {
                    return Err(not_an_object(&path));
                };
                let texts: Vec<(String, Value, String, Option<Vec<String>>)> = object
                    .iter()
                    .map(|(k, v)| {
                        let numbers = match v {
                            Value::Array(items) if items.iter().all(Value::is_number) => {
                                Some(items.iter().map(Value::to_string).collect())
                            }
                            _ => None,
                        };
                        (k.clone(), v.clone(), v.to_string(), numbers)
                    })
                    .collect();
                let fields: Vec<(&str, Json<'_>)> = texts
                    .iter()
                    .map(|(k, v, text, numbers)| {
                        let json = match v {
                            Value::Null => Json::Null,
                            Value::Bool(b) => Json::Bool(*b),
                            Value::Number(_) => Json::Number(text),
                            Value::String(s) => Json::String(s),
                            Value::Array(_) => Json::Array(numbers.as_deref()),
                            Value::Object(_) => Json::Object,
                        };
                        (k.as_str(), json)
                    })
                    .collect();
                parse_spec(&path, &fields)
            })
            .collect()
    }

    fn err(value: Value) -> String {
        parse_follow_ups("follow_ups", &value)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn null_means_none() {
        assert!(parse_follow_ups("follow_ups", &Value::Null)
            .unwrap()
            .is_empty());
        assert!(parse_follow_ups("follow_ups", &json!([]))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn parses_every_key() {
        let specs = parse_follow_ups(
            "follow_ups",
            &json!([{"queue": "q", "payload": {"a": 1}, "delay": "5 minutes", "priority": 3,
                     "max_attempts": 2, "backoff_base": 1.5, "backoff_max": "1 hour",
                     "idempotency_key": "k"},
                    {"queue": "r"}]),
        )
        .unwrap();
        assert_eq!(specs.len(), 2);
        let s = &specs[0];
        assert_eq!(s.queue, "q");
        assert_eq!(s.delay, Some(300_000_000));
        assert_eq!(s.priority, Some(3));
        assert_eq!(s.max_attempts, Some(2));
        assert_eq!(s.backoff_base, Some(1_500_000));
        assert_eq!(s.backoff_max, Some(3_600_000_000));
        assert_eq!(s.idempotency_key.as_deref(), Some("k"));
        assert_eq!(specs[1].path, "follow_ups[1].");
    }

    #[test]
    fn rejects_malformed_specs_naming_the_place() {
        assert!(err(json!({"queue": "q"})).contains("must be a JSON array"));
        assert!(err(json!([1])).contains("follow_ups[0]"));
        assert!(err(json!([{}])).contains("follow_ups[0].queue"));
        assert!(err(json!([{"queue": 7}])).contains("follow_ups[0].queue"));
        assert!(
            err(json!([{"queue": "q"}, {"queue": "q", "colour": "red"}]))
                .contains("follow_ups[1].colour")
        );
        assert!(err(json!([{"queue": "q", "priority": "high"}])).contains("priority"));
        assert!(err(json!([{"queue": "q", "priority": 1.5}])).contains("priority"));
        assert!(err(json!([{"queue": "q", "priority": 1e30}])).contains("priority"));
        assert!(err(json!([{"queue": "q", "max_attempts": 1e12}])).contains("max_attempts"));
        assert!(
            err(json!([{"queue": "q", "max_attempts": 10000000000i64}])).contains("max_attempts")
        );
        assert!(err(json!([{"queue": "q", "delay": true}])).contains("delay"));
        assert!(err(json!([{"queue": "q", "idempotency_key": 5}])).contains("idempotency_key"));
        assert_eq!(
            parse_follow_ups("f", &json!(7)).unwrap_err().sqlstate(),
            "22023"
        );
    }

    #[test]
    fn exact_decimal_text_is_read_as_given() {
        let spec = parse_spec(
            "f[0].",
            &[
                ("queue", Json::String("q")),
                ("priority", Json::Number("9223372036854775807")),
            ],
        )
        .unwrap();
        assert_eq!(spec.priority, Some(i64::MAX));
        let over = parse_spec(
            "f[0].",
            &[
                ("queue", Json::String("q")),
                ("priority", Json::Number("9223372036854775808")),
            ],
        );
        assert!(over.unwrap_err().to_string().contains("f[0].priority"));
    }

    #[test]
    fn duration_text() {
        assert_eq!(parse_duration_text("5 minutes"), Some(300_000_000));
        assert_eq!(parse_duration_text("1 hour 30 min"), Some(5_400_000_000));
        assert_eq!(parse_duration_text("90s"), Some(90_000_000));
        assert_eq!(parse_duration_text(" 250 ms "), Some(250_000));
        assert_eq!(parse_duration_text("1.5 Seconds"), Some(1_500_000));
        assert_eq!(parse_duration_text("-2 s"), Some(-2_000_000));
        assert_eq!(
            parse_duration_text("2 weeks 1 day"),
            Some(15 * 86_400_000_000)
        );
        for bad in [
            "",
            "5",
            "minutes",
            "5 fortnights",
            "1 hour and",
            "--1 s",
            "1e999 s",
        ] {
            assert_eq!(parse_duration_text(bad), None, "{bad:?}");
        }
        assert!(err(json!([{"queue": "q", "delay": "soon"}])).contains("follow_ups[0].delay"));
    }

    #[test]
    fn too_many_or_too_large_is_a_limit_error() {
        let many: Vec<Value> = (0..=MAX_FOLLOW_UPS)
            .map(|_| json!({"queue": "q"}))
            .collect();
        let e = parse_follow_ups("follow_ups", &Value::Array(many)).unwrap_err();
        assert!(e.to_string().contains("more than") && e.sqlstate() == "54000");
        assert!(check_follow_ups_size("follow_ups", MAX_FOLLOW_UPS_BYTES, 1024).is_ok());
        let big = check_follow_ups_size("follow_ups", MAX_FOLLOW_UPS_BYTES + 1, 1024).unwrap_err();
        assert_eq!(big.sqlstate(), "54000");
        assert!(big.to_string().contains("\"follow_ups\""));
        // A payload limit raised above the default raises the total with it.
        assert!(check_follow_ups_size("follow_ups", MAX_FOLLOW_UPS_BYTES + 1, usize::MAX).is_ok());
    }

    #[test]
    fn wait_for_takes_an_array_of_task_ids() {
        let specs = parse_follow_ups(
            "follow_ups",
            &json!([{"queue": "q", "wait_for": [3, 1], "on_parent_failure": "run"}]),
        )
        .unwrap();
        assert_eq!(specs[0].wait_for, vec![3, 1]);
        assert_eq!(specs[0].on_parent_failure.as_deref(), Some("run"));
        for bad in [json!("1"), json!([1, "2"]), json!([1.5]), json!({"a": 1})] {
            let e = err(json!([{"queue": "q", "wait_for": bad}]));
            assert!(
                e.contains("\"follow_ups[0].wait_for\": must be an array of task ids"),
                "{e}"
            );
        }
        let e = err(json!([{"queue": "q", "on_parent_failure": 1}]));
        assert!(
            e.contains("\"follow_ups[0].on_parent_failure\": must be a string"),
            "{e}"
        );
    }
}
