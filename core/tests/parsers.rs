//! The argument parsers over arbitrary input: the fuzz harness that runs on
//! stable (`fuzz/` has cargo-fuzz targets over the same entry points, for
//! when a nightly toolchain is there). Each parser must never panic, must
//! refuse with the typed error naming its argument (SQLSTATE 22023), and
//! what it accepts must read back the same when rendered and parsed again.
//!
//! `PROPTEST_CASES` sets the cases per property (proptest's default 256).

use aedb_queue_core::dependency::OnParentFailure;
use aedb_queue_core::grants::{Pattern, Privilege};
use aedb_queue_core::schedule::{Missed, Schedule};
use aedb_queue_core::spec::{parse_duration_text, parse_spec, EnqueueSpec, Json};
use aedb_queue_core::validate;
use aedb_queue_core::QueueError;
use proptest::prelude::*;

/// proptest's defaults (PROPTEST_CASES honoured), without regression files
/// in the checkout: a failure prints its shrunk input.
fn config() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The error a parser refuses with: an invalid argument named `arg`.
fn refused_as(e: &QueueError, arg: &str) -> bool {
    matches!(e, QueueError::InvalidArgument { arg: got, .. } if got == arg)
        && e.sqlstate() == "22023"
}

// ---------------------------------------------------------------------------
// Durations ("5 minutes", "1 hour 30 min", "250 ms")
// ---------------------------------------------------------------------------

const UNITS: &[(&str, i64)] = &[
    ("us", 1),
    ("usec", 1),
    ("microseconds", 1),
    ("ms", 1_000),
    ("msecs", 1_000),
    ("s", 1_000_000),
    ("sec", 1_000_000),
    ("seconds", 1_000_000),
    ("m", 60_000_000),
    ("min", 60_000_000),
    ("minutes", 60_000_000),
    ("h", 3_600_000_000),
    ("hrs", 3_600_000_000),
    ("hour", 3_600_000_000),
    ("d", 86_400_000_000),
    ("days", 86_400_000_000),
    ("w", 604_800_000_000),
    ("weeks", 604_800_000_000),
];

/// Text made of the pieces durations are made of, in any order.
fn duration_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[0-9]{1,4}",
        "[0-9]{0,3}\\.[0-9]{0,3}",
        proptest::sample::select(UNITS).prop_map(|(u, _)| u.to_string()),
        "[ +\\-.]",
        "[A-Za-z]{1,3}",
        any::<char>().prop_map(String::from),
    ];
    proptest::collection::vec(piece, 0..8).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn duration_text_never_panics(text in prop_oneof![any::<String>(), duration_like()]) {
        let _ = parse_duration_text(&text);
    }

    #[test]
    fn duration_text_ignores_surrounding_space_and_unit_case(text in duration_like()) {
        let parsed = parse_duration_text(&text);
        prop_assert_eq!(parse_duration_text(&format!("  {text}\t")), parsed);
        prop_assert_eq!(parse_duration_text(&text.to_ascii_uppercase()), parsed);
    }

    #[test]
    fn whole_units_add_up_exactly(pairs in proptest::collection::vec(
        (0i64..1_000, proptest::sample::select(UNITS), any::<bool>()), 1..4)) {
        let text: Vec<String> = pairs
            .iter()
            .map(|(n, (unit, _), spaced)| format!("{n}{}{unit}", if *spaced { " " } else { "" }))
            .collect();
        let want: i64 = pairs.iter().map(|(n, (_, micros), _)| n * micros).sum();
        // Exact to the microsecond up to the longest duration allowed (past
        // ~136 years the sum's seconds carry less than a microsecond; a
        // thousand weeks thrice is 57 years).
        prop_assert!(want <= validate::MAX_DURATION_MICROS);
        prop_assert_eq!(parse_duration_text(&text.join(" ")), Some(want));
    }

    #[test]
    fn an_accepted_duration_reads_back_as_microseconds(text in duration_like()) {
        if let Some(micros) = parse_duration_text(&text) {
            // Exact below 2^53 µs (285 years), beyond any duration allowed.
            if micros.unsigned_abs() < 1 << 53 {
                prop_assert_eq!(parse_duration_text(&format!("{micros} us")), Some(micros));
            }
        }
    }

    #[test]
    fn duration_ranges_are_checked_exactly(micros in any::<i64>()) {
        let max = validate::MAX_DURATION_MICROS;
        match validate::non_negative_duration("delay", micros) {
            Ok(v) => prop_assert!(v == micros && (0..=max).contains(&micros)),
            Err(e) => prop_assert!(refused_as(&e, "delay") && !(0..=max).contains(&micros)),
        }
        match validate::positive_duration("lease", micros) {
            Ok(v) => prop_assert!(v == micros && (1..=max).contains(&micros)),
            Err(e) => prop_assert!(refused_as(&e, "lease") && !(1..=max).contains(&micros)),
        }
    }
}

// ---------------------------------------------------------------------------
// Follow-up specs (one JSON object's keys, as the extension's walk hands them)
// ---------------------------------------------------------------------------

/// An owned JSON value of a spec's key, for generating `Json` borrows.
#[derive(Debug, Clone)]
enum Value {
    Null,
    Bool(bool),
    Number(String),
    Text(String),
    Numbers(Vec<String>),
    OtherArray,
    Object,
}

impl Value {
    fn as_json(&self) -> Json<'_> {
        match self {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Number(n) => Json::Number(n),
            Value::Text(t) => Json::String(t),
            Value::Numbers(ids) => Json::Array(Some(ids)),
            Value::OtherArray => Json::Array(None),
            Value::Object => Json::Object,
        }
    }
}

/// The keys a follow-up spec may hold, as the parser knows them.
const KEYS: &[&str] = aedb_queue_core::spec::KNOWN_KEYS;

fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<i32>().prop_map(|n| n.to_string()),
        (-1e6f64..1e6).prop_map(|f| f.to_string()),
        "-?[0-9]{1,25}(\\.[0-9]{0,6})?(e-?[0-9]{1,3})?",
    ]
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number_text().prop_map(Value::Number),
        prop_oneof![duration_like(), any::<String>(), "[a-z.]{1,8}"].prop_map(Value::Text),
        proptest::collection::vec(number_text(), 0..4).prop_map(Value::Numbers),
        Just(Value::OtherArray),
        Just(Value::Object),
    ]
}

fn fields() -> impl Strategy<Value = Vec<(String, Value)>> {
    let key = prop_oneof![
        9 => proptest::sample::select(KEYS).prop_map(str::to_string),
        1 => "[a-z_]{0,12}",
    ];
    proptest::collection::vec((key, value()), 0..8)
}

fn parse_owned(path: &str, fields: &[(String, Value)]) -> Result<EnqueueSpec, QueueError> {
    let borrowed: Vec<(&str, Json<'_>)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_json()))
        .collect();
    parse_spec(path, &borrowed)
}

/// A parsed spec as keys again, each value in one canonical form
/// (durations as microseconds of text).
fn rendered(spec: &EnqueueSpec) -> Vec<(String, Value)> {
    let mut out = vec![("queue".to_string(), Value::Text(spec.queue.clone()))];
    let mut put = |key: &str, v: Option<Value>| {
        if let Some(v) = v {
            out.push((key.to_string(), v));
        }
    };
    let micros = |m: Option<i64>| m.map(|m| Value::Text(format!("{m} us")));
    let number = |n: Option<i64>| n.map(|n| Value::Number(n.to_string()));
    put("delay", micros(spec.delay));
    put("priority", number(spec.priority));
    put("max_attempts", number(spec.max_attempts.map(i64::from)));
    put("backoff_base", micros(spec.backoff_base));
    put("backoff_max", micros(spec.backoff_max));
    put(
        "idempotency_key",
        spec.idempotency_key.clone().map(Value::Text),
    );
    put(
        "wait_for",
        (!spec.wait_for.is_empty())
            .then(|| Value::Numbers(spec.wait_for.iter().map(i64::to_string).collect())),
    );
    put(
        "on_parent_failure",
        spec.on_parent_failure.clone().map(Value::Text),
    );
    put(
        "concurrency_key",
        spec.concurrency_key.clone().map(Value::Text),
    );
    put("ordering_key", spec.ordering_key.clone().map(Value::Text));
    put("fairness_key", spec.fairness_key.clone().map(Value::Text));
    out
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_spec_is_parsed_or_refused_naming_one_of_its_keys(fields in fields(), i in 0usize..1000) {
        let path = format!("follow_ups[{i}].");
        match parse_owned(&path, &fields) {
            Ok(spec) => {
                prop_assert_eq!(&spec.path, &path);
                // Accepted specs read back the same from their canonical form.
                let again = parse_owned(&path, &rendered(&spec));
                prop_assert_eq!(again.as_ref(), Ok(&spec));
            }
            Err(e) => {
                let QueueError::InvalidArgument { arg, .. } = &e else {
                    return Err(TestCaseError::fail(format!("not a typed refusal: {e:?}")));
                };
                prop_assert_eq!(e.sqlstate(), "22023");
                let key = arg.strip_prefix(&path).unwrap_or("");
                prop_assert!(
                    fields.iter().any(|(k, _)| k == key) || key == "queue",
                    "{arg} names none of the spec's keys"
                );
            }
        }
    }

    #[test]
    fn a_spec_with_only_a_queue_is_accepted(queue in any::<String>()) {
        let spec = parse_owned("f.", &[("queue".into(), Value::Text(queue.clone()))]);
        prop_assert_eq!(spec.map(|s| s.queue), Ok(queue));
    }
}

// ---------------------------------------------------------------------------
// Cron patterns and time zones
// ---------------------------------------------------------------------------

/// Fields made of what cron fields are made of, valid or not.
fn cron_like() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        Just("*".to_string()),
        Just("?".to_string()),
        (0u32..70).prop_map(|n| n.to_string()),
        (0u32..70, 0u32..70).prop_map(|(a, b)| format!("{a}-{b}")),
        (0u32..70).prop_map(|n| format!("*/{n}")),
        (0u32..70, 0u32..70).prop_map(|(a, n)| format!("{a}/{n}")),
        proptest::sample::select(
            &["MON", "sun", "JAN", "dec", "L", "W", "5L", "15W", "LW", "1#2", "7#5", "0#0"][..]
        )
        .prop_map(str::to_string),
        "[0-9A-Za-z*/,#?L-]{1,4}",
    ];
    let field = proptest::collection::vec(atom, 1..3).prop_map(|a| a.join(","));
    prop_oneof![
        proptest::collection::vec(field, 4..8).prop_map(|f| f.join(" ")),
        any::<String>(),
    ]
}

fn zone() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(chrono_tz::TZ_VARIANTS.to_vec()).prop_map(|z| z.name().to_string()),
        1 => proptest::sample::select(&["UTC", "utc", "Europe/Berlin ", "Mars/Olympus", "", "+01:00", "EST5EDT"][..])
            .prop_map(str::to_string),
        1 => any::<String>(),
    ]
}

const YEAR_2026: i64 = 1_767_225_600_000_000;

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_cron_pattern_is_parsed_or_refused_as_cron_or_time_zone(pattern in cron_like(), zone in zone()) {
        match Schedule::parse(&pattern, &zone) {
            Err(e) => prop_assert!(refused_as(&e, "cron") || refused_as(&e, "time_zone"), "{e:?}"),
            Ok(schedule) => {
                // Fire times go forward, and a second parse yields the same.
                let times = schedule.upcoming(YEAR_2026, 4);
                prop_assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
                prop_assert!(times.iter().all(|&t| t > YEAR_2026));
                let again = Schedule::parse(&pattern, &zone).expect("parsed once");
                prop_assert_eq!(again.upcoming(YEAR_2026, 4), times);
            }
        }
    }

    #[test]
    fn fire_times_at_any_instant_never_panic(pattern in cron_like(), after in any::<i64>(), span in 0i64..1 << 40) {
        if let Ok(schedule) = Schedule::parse(&pattern, "Europe/Berlin") {
            let _ = schedule.next_after(after);
            let due = schedule.due(after, after.saturating_add(span), Missed::CatchUp(3));
            prop_assert!(due.len() <= 3);
        }
    }

    #[test]
    fn every_iana_zone_is_accepted_by_its_name(zone in proptest::sample::select(chrono_tz::TZ_VARIANTS.to_vec())) {
        prop_assert!(Schedule::parse("0 0 * * *", zone.name()).is_ok());
    }

    #[test]
    fn the_missed_policy_is_checked(policy in prop_oneof![Just("skip".to_string()), Just("catch_up".to_string()), any::<String>()],
                                    limit in proptest::option::of(any::<i32>())) {
        match Missed::parse(&policy, limit) {
            Ok(Missed::Skip) => prop_assert!(policy == "skip" && limit.is_none()),
            Ok(Missed::CatchUp(n)) => prop_assert!(policy == "catch_up" && limit == Some(n as i32) && (1..=1000).contains(&n)),
            Err(e) => prop_assert!(refused_as(&e, "missed") || refused_as(&e, "catch_up_limit")),
        }
    }
}

// ---------------------------------------------------------------------------
// Names, patterns and the small enumerations
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_name_is_one_to_128_bytes(name in prop_oneof![any::<String>(), "[a-z]{120,136}", Just(String::new())]) {
        let ok = (1..=validate::MAX_NAME_BYTES).contains(&name.len());
        match validate::name("queue", &name) {
            Ok(()) => prop_assert!(ok),
            Err(e) => prop_assert!(!ok && refused_as(&e, "queue")),
        }
    }

    #[test]
    fn a_queue_pattern_matches_what_it_says(value in prop_oneof![any::<String>(), "[a-z.]{0,6}\\\\?\\*?"], rest in "[a-z.*]{0,4}") {
        match Pattern::parse("queue_pattern", &value) {
            Err(e) => prop_assert!(refused_as(&e, "queue_pattern") && validate::name("q", &value).is_err()),
            Ok(pattern) => {
                prop_assert!(pattern.covers(&pattern));
                match &pattern {
                    Pattern::Exact(name) => {
                        prop_assert!(pattern.matches(name));
                        prop_assert_eq!(value.ends_with('*'), value.ends_with("\\*"));
                    }
                    Pattern::Prefix(prefix) => {
                        prop_assert_eq!(format!("{prefix}*"), value);
                        let longer = format!("{prefix}{rest}");
                        prop_assert!(pattern.matches(&longer));
                    }
                }
            }
        }
    }

    #[test]
    fn the_enumerations_take_their_words_only(word in prop_oneof![
        proptest::sample::select(&["producer", "worker", "admin", "run", "dead_letter", "block", "release",
                                   "ready", "scheduled", "in_flight", "dead", "waiting", "blocked", "completed"][..])
            .prop_map(str::to_string),
        any::<String>()]) {
        prop_assert_eq!(Privilege::parse("privilege", &word).is_ok(), ["producer", "worker", "admin"].contains(&word.as_str()));
        if let Ok(p) = Privilege::parse("privilege", &word) {
            prop_assert_eq!(p.as_str(), word.as_str());
        }
        prop_assert_eq!(OnParentFailure::parse("on_parent_failure", &word).is_ok(), ["run", "dead_letter"].contains(&word.as_str()));
        prop_assert_eq!(validate::ordering_on_dead("ordering_on_dead", &word).is_ok(), ["block", "release"].contains(&word.as_str()));
        let listed = ["ready", "scheduled", "in_flight", "dead", "waiting", "blocked", "completed"].contains(&word.as_str());
        match validate::listed_state(&word) {
            Ok(()) => prop_assert!(listed),
            Err(e) => prop_assert!(!listed && refused_as(&e, "state")),
        }
    }
}

/// Instants near the edges of the calendars involved: croner's search
/// limits (years 1 and 5000), chrono's range (years ±262143), PostgreSQL's
/// (4713 BC to 294276 AD) and i64's ends, a few days either side.
fn edge_instant() -> impl Strategy<Value = i64> {
    const YEAR: i64 = 31_556_952_000_000;
    const UNIX_YEAR_0: i64 = -62_167_219_200_000_000;
    let edges = [
        i64::MIN,
        i64::MAX,
        UNIX_YEAR_0,
        UNIX_YEAR_0 + YEAR,
        UNIX_YEAR_0 + 5000 * YEAR,
        UNIX_YEAR_0 + 262_143 * YEAR,
        UNIX_YEAR_0 - 262_143 * YEAR,
        UNIX_YEAR_0 - 4713 * YEAR,
    ];
    (
        proptest::sample::select(edges.to_vec()),
        -10 * YEAR..10 * YEAR,
    )
        .prop_map(|(edge, offset)| edge.saturating_add(offset))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fire_times_near_the_calendar_edges_never_panic(
        pattern in cron_like(),
        zone in zone(),
        after in edge_instant(),
        span in 0i64..1 << 50,
        n in 1usize..20,
    ) {
        if let Ok(schedule) = Schedule::parse(&pattern, &zone) {
            let times = schedule.upcoming(after, n);
            prop_assert!(times.len() <= n && times.iter().all(|&t| t > after));
            let due = schedule.due(after, after.saturating_add(span), Missed::CatchUp(3));
            prop_assert!(due.len() <= 3);
            let _ = aedb_queue_core::schedule::fire_time_text(after);
        }
    }
}
