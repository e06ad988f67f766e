//! Duration text of follow-up specs ("5 minutes", "1 hour 30 min"): never
//! panics; what it accepts reads back the same as microseconds.
#![no_main]

use aedb_queue_core::spec::parse_duration_text;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Some(micros) = parse_duration_text(text) {
        if micros.unsigned_abs() < 1 << 53 {
            assert_eq!(parse_duration_text(&format!("{micros} us")), Some(micros));
        }
    }
});
