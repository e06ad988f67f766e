//! Queue names, grant patterns and the small enumerations: never panic,
//! accept exactly their words, refuse naming their argument.
#![no_main]

use aedb_queue_core::grants::{Pattern, Privilege};
use aedb_queue_core::schedule::Missed;
use aedb_queue_core::validate;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&str, Option<i32>)| {
    let (text, limit) = input;
    assert_eq!(
        validate::name("queue", text).is_ok(),
        (1..=validate::MAX_NAME_BYTES).contains(&text.len())
    );
    if let Ok(pattern) = Pattern::parse("queue_pattern", text) {
        assert!(pattern.covers(&pattern));
        if let Pattern::Prefix(prefix) = &pattern {
            assert!(pattern.matches(&format!("{prefix}x")));
        }
    }
    if let Ok(p) = Privilege::parse("privilege", text) {
        assert_eq!(p.as_str(), text);
    }
    let _ = validate::listed_state(text);
    let _ = validate::ordering_on_dead("ordering_on_dead", text);
    let _ = Missed::parse(text, limit);
});
