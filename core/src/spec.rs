//! Follow-up enqueue specs: a JSON array of objects, each one enqueue.
//!
//! Durations are a number of seconds (`90`, `0.5`) or text made of
//! `<number> <unit>` pairs (`"5 minutes"`, `"1 hour 30 min"`, `"250 ms"`).

use serde_json::{Map, Value};

use crate::QueueError;

pub const MAX_FOLLOW_UPS: usize = 1_000;

const KNOWN_KEYS: &[&str] = &[
    "queue",
    "payload",
    "delay",
    "priority",
    "max_attempts",
    "backoff_base",
    "backoff_max",
    "idempotency_key",
];

#[derive(Debug, Clone, PartialEq)]
pub struct EnqueueSpec {
    /// Prefix naming this spec in errors, e.g. `follow_ups[0].`.
    pub path: String,
    pub queue: String,
    pub payload: Option<Value>,
    pub delay: Option<i64>,
    pub priority: Option<i64>,
    pub max_attempts: Option<i32>,
    pub backoff_base: Option<i64>,
    pub backoff_max: Option<i64>,
    pub idempotency_key: Option<String>,
}

/// Parses the `follow_ups` argument. JSON `null` means no follow-ups.
pub fn parse_follow_ups(arg: &str, value: &Value) -> Result<Vec<EnqueueSpec>, QueueError> {
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        _ => {
            return Err(QueueError::invalid(
                arg,
                "must be a JSON array of enqueue specs",
            ))
        }
    };
    if items.len() > MAX_FOLLOW_UPS {
        return Err(QueueError::invalid(
            arg,
            format!("has {} specs, more than {MAX_FOLLOW_UPS}", items.len()),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_spec(&format!("{arg}[{i}]."), item))
        .collect()
}

fn parse_spec(path: &str, value: &Value) -> Result<EnqueueSpec, QueueError> {
    let at = |key: &str| format!("{path}{key}");
    let Value::Object(object) = value else {
        return Err(QueueError::invalid(
            path.trim_end_matches('.'),
            "must be a JSON object",
        ));
    };
    if let Some(unknown) = object.keys().find(|k| !KNOWN_KEYS.contains(&k.as_str())) {
        return Err(QueueError::invalid(
            at(unknown),
            format!(
                "is not a known key (expected one of {})",
                KNOWN_KEYS.join(", ")
            ),
        ));
    }
    let queue = match field(object, "queue") {
        Some(Value::String(queue)) => queue.clone(),
        Some(_) => return Err(QueueError::invalid(at("queue"), "must be a string")),
        None => return Err(QueueError::invalid(at("queue"), "is required")),
    };
    Ok(EnqueueSpec {
        path: path.to_string(),
        queue,
        payload: field(object, "payload").cloned(),
        delay: duration(object, "delay", &at)?,
        priority: integer(object, "priority", &at)?,
        max_attempts: integer(object, "max_attempts", &at)?
            .map(|n| {
                i32::try_from(n)
                    .map_err(|_| QueueError::invalid(at("max_attempts"), "is out of range"))
            })
            .transpose()?,
        backoff_base: duration(object, "backoff_base", &at)?,
        backoff_max: duration(object, "backoff_max", &at)?,
        idempotency_key: match field(object, "idempotency_key") {
            None => None,
            Some(Value::String(key)) => Some(key.clone()),
            Some(_) => {
                return Err(QueueError::invalid(
                    at("idempotency_key"),
                    "must be a string",
                ))
            }
        },
    })
}

/// A present key whose value is JSON `null` counts as absent.
fn field<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|v| !v.is_null())
}

fn integer(
    object: &Map<String, Value>,
    key: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<i64>, QueueError> {
    match field(object, key) {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| QueueError::invalid(at(key), "must be an integer")),
    }
}

fn duration(
    object: &Map<String, Value>,
    key: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<i64>, QueueError> {
    match field(object, key) {
        None => Ok(None),
        Some(Value::String(text)) => parse_duration_text(text).map(Some).ok_or_else(|| {
            QueueError::invalid(
                at(key),
                format!("{text:?} is not a duration like \"5 minutes\" or \"1 hour 30 min\""),
            )
        }),
        Some(Value::Number(n)) => seconds_to_micros(n.as_f64().unwrap_or(f64::NAN))
            .map(Some)
            .ok_or_else(|| QueueError::invalid(at(key), "is out of range")),
        Some(_) => Err(QueueError::invalid(
            at(key),
            "must be duration text (\"5 minutes\") or a number of seconds",
        )),
    }
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
    use serde_json::json;

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
        assert_eq!(s.payload, Some(json!({"a": 1})));
        assert_eq!(s.delay, Some(300_000_000));
        assert_eq!(s.priority, Some(3));
        assert_eq!(s.max_attempts, Some(2));
        assert_eq!(s.backoff_base, Some(1_500_000));
        assert_eq!(s.backoff_max, Some(3_600_000_000));
        assert_eq!(s.idempotency_key.as_deref(), Some("k"));
        assert_eq!(specs[1].path, "follow_ups[1].");
        assert_eq!(specs[1].payload, None);
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
        assert!(err(json!([{"queue": "q", "max_attempts": 1e12}])).contains("max_attempts"));
        assert!(err(json!([{"queue": "q", "delay": true}])).contains("delay"));
        assert!(err(json!([{"queue": "q", "idempotency_key": 5}])).contains("idempotency_key"));
        assert_eq!(
            parse_follow_ups("f", &json!(7)).unwrap_err().sqlstate(),
            "22023"
        );
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
    fn too_many_specs_are_rejected() {
        let many: Vec<Value> = (0..=MAX_FOLLOW_UPS)
            .map(|_| json!({"queue": "q"}))
            .collect();
        assert!(err(Value::Array(many)).contains("more than"));
    }
}
