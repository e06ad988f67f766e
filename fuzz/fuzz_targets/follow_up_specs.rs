//! A `follow_ups` argument as JSON: each object's keys handed to
//! `parse_spec` as the extension's jsonb walk hands them. Never panics;
//! a refusal is a 22023 naming a place inside the argument.
#![no_main]

use aedb_queue_core::spec::{check_follow_ups_count, parse_spec, Json};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|bytes: &[u8]| {
    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    if check_follow_ups_count("follow_ups", items.len()).is_err() {
        return;
    }
    for (i, item) in items.iter().enumerate() {
        let Value::Object(object) = item else {
            continue;
        };
        let texts: Vec<(&str, &Value, String, Option<Vec<String>>)> = object
            .iter()
            .map(|(k, v)| {
                let numbers = match v {
                    Value::Array(a) if a.iter().all(Value::is_number) => {
                        Some(a.iter().map(Value::to_string).collect())
                    }
                    _ => None,
                };
                (k.as_str(), v, v.to_string(), numbers)
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
                (*k, json)
            })
            .collect();
        let path = format!("follow_ups[{i}].");
        if let Err(e) = parse_spec(&path, &fields) {
            assert_eq!(e.sqlstate(), "22023", "{e:?}");
            assert!(e.to_string().contains(&path), "{e}");
        }
    }
});
