//! Argument checks shared by every SQL entry point. Each check names the
//! argument it rejects, so the error tells the caller what to fix.

use crate::backoff::{
    DEFAULT_BACKOFF_BASE_MICROS, DEFAULT_BACKOFF_MAX_MICROS, DEFAULT_MAX_ATTEMPTS,
};
use crate::error::quoted;
use crate::QueueError;

pub const MAX_NAME_BYTES: usize = 128;
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 512;
/// Upper bound on one claim batch: keeps a single call's locks and work bounded.
pub const MAX_CLAIM_BATCH: i32 = 10_000;
pub const MAX_LIST_LIMIT: i32 = 100_000;
/// Most elements of one batch call (`payloads`, `task_ids`): bounds the
/// memory and locks of a single statement (SQLSTATE 54000 above).
pub const MAX_BATCH: usize = 10_000;
/// Longest `error` text `queue_fail` stores, in bytes (SQLSTATE 54000 above).
pub const MAX_ERROR_BYTES: usize = 64 * 1024;
/// Longest accepted duration: far beyond any real use, far below where
/// `now() + duration` overflows a timestamp.
pub const MAX_DURATION_MICROS: i64 = 100 * 365 * crate::MICROS_PER_DAY;

pub fn required<T>(arg: &'static str, value: Option<T>) -> Result<T, QueueError> {
    value.ok_or(QueueError::NullArgument { arg })
}

/// An array argument whose elements must all be present: `first_null` is
/// the index of its first NULL element, if any.
pub fn no_null_elements(arg: &str, first_null: Option<usize>) -> Result<(), QueueError> {
    match first_null {
        Some(i) => Err(QueueError::invalid(
            arg,
            format!("must not contain NULL (element {} is NULL)", i + 1),
        )),
        None => Ok(()),
    }
}

/// Queue names and owner ids: non-empty, at most 128 bytes.
pub fn name(arg: &str, value: &str) -> Result<(), QueueError> {
    if value.is_empty() {
        return Err(QueueError::invalid(arg, "must not be empty"));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(QueueError::invalid(
            arg,
            format!("is {} bytes, longer than {MAX_NAME_BYTES}", value.len()),
        ));
    }
    Ok(())
}

pub fn positive_duration(arg: &str, micros: i64) -> Result<i64, QueueError> {
    if micros <= 0 {
        return Err(QueueError::invalid(arg, "must be a positive interval"));
    }
    at_most_max_duration(arg, micros)
}

pub fn non_negative_duration(arg: &str, micros: i64) -> Result<i64, QueueError> {
    if micros < 0 {
        return Err(QueueError::invalid(arg, "must not be a negative interval"));
    }
    at_most_max_duration(arg, micros)
}

fn at_most_max_duration(arg: &str, micros: i64) -> Result<i64, QueueError> {
    if micros > MAX_DURATION_MICROS {
        return Err(QueueError::invalid(arg, "must be at most 100 years"));
    }
    Ok(micros)
}

pub fn claim_max(max: i32) -> Result<i32, QueueError> {
    in_range("max", max, 1, MAX_CLAIM_BATCH)
}

pub fn list_limit(limit: i32) -> Result<i32, QueueError> {
    in_range("limit", limit, 1, MAX_LIST_LIMIT)
}

pub fn reap_max(max: i32) -> Result<i32, QueueError> {
    in_range("max", max, 1, i32::MAX)
}

fn in_range(arg: &str, value: i32, low: i32, high: i32) -> Result<i32, QueueError> {
    if value < low || value > high {
        return Err(QueueError::invalid(
            arg,
            format!("must be between {low} and {high}, got {value}"),
        ));
    }
    Ok(value)
}

/// The one shape of every fixed cap: `value` (`what`: "elements",
/// "bytes", "specs") may be at most `limit`; SQLSTATE 54000 above it.
pub fn at_most(arg: &str, value: usize, limit: usize, what: &str) -> Result<(), QueueError> {
    if value > limit {
        let verb = if what == "bytes" { "is" } else { "has" };
        return Err(QueueError::limit(
            arg,
            format!("{verb} {value} {what}, more than {limit}"),
        ));
    }
    Ok(())
}

pub fn batch_length(arg: &str, len: usize) -> Result<(), QueueError> {
    at_most(arg, len, MAX_BATCH, "elements")
}

pub fn error_text(arg: &str, bytes: usize) -> Result<(), QueueError> {
    at_most(arg, bytes, MAX_ERROR_BYTES, "bytes")
}

/// Parallel arrays (ids and their tokens) must pair up one to one.
pub fn same_length(arg: &str, len: usize, other: &str, other_len: usize) -> Result<(), QueueError> {
    if len != other_len {
        return Err(QueueError::invalid(
            arg,
            format!("has {len} elements but {other} has {other_len}"),
        ));
    }
    Ok(())
}

pub fn payload_size(arg: &str, bytes: usize, limit: usize) -> Result<(), QueueError> {
    if bytes > limit {
        return Err(QueueError::PayloadTooLarge {
            arg: arg.to_string(),
            bytes,
            limit,
        });
    }
    Ok(())
}

/// A state `queue_list` and `queue_purge` accept: a task state, or
/// `completed` for the tasks a queue keeps after completion.
pub fn listed_state(value: &str) -> Result<(), QueueError> {
    match value {
        "completed" | "waiting" | "blocked" => Ok(()),
        _ => state(value).map_err(|_| {
            QueueError::invalid(
                "state",
                format!(
                    "must be one of waiting, scheduled, blocked, ready, in_flight, dead, completed; got {}",
                    quoted(value)
                ),
            )
        }),
    }
}

/// Where a keyset page of tasks (`queue_tasks`) starts: after a task id
/// (None: from the first task), or just before one. A page runs one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageStart {
    After(Option<i64>),
    Before(i64),
}

/// `after_task_id` and `before_task_id` of a paged listing: at most one.
pub fn page_start(after: Option<i64>, before: Option<i64>) -> Result<PageStart, QueueError> {
    match (after, before) {
        (Some(_), Some(_)) => Err(QueueError::invalid(
            "before_task_id",
            "must not be given with after_task_id: a page runs one way",
        )),
        (None, Some(before)) => Ok(PageStart::Before(before)),
        (after, None) => Ok(PageStart::After(after)),
    }
}

/// A fairness key's weight: 1 to 1000 (None: 1).
pub fn fair_weight(arg: &str, weight: Option<i32>) -> Result<Option<i32>, QueueError> {
    match weight {
        Some(w) if !(1..=1000).contains(&w) => Err(QueueError::invalid(
            arg,
            format!("must be 1 to 1000, got {w}"),
        )),
        _ => Ok(weight),
    }
}

/// What a dead task does to its ordering key: `block` or `release`.
pub fn ordering_on_dead<'a>(arg: &str, value: &'a str) -> Result<&'a str, QueueError> {
    match value {
        "block" | "release" => Ok(value),
        _ => Err(QueueError::invalid(
            arg,
            format!("must be block or release, got {}", quoted(value)),
        )),
    }
}

pub fn state(value: &str) -> Result<(), QueueError> {
    match value {
        "scheduled" | "ready" | "in_flight" | "dead" => Ok(()),
        _ => Err(QueueError::invalid(
            "state",
            format!(
                "must be one of scheduled, ready, in_flight, dead; got {}",
                quoted(value)
            ),
        )),
    }
}

/// Per-task enqueue options as given by the caller; `None` means "use the default".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnqueueOptions {
    pub delay_micros: i64,
    pub priority: i64,
    pub max_attempts: Option<i32>,
    pub backoff_base_micros: Option<i64>,
    pub backoff_max_micros: Option<i64>,
    pub idempotency_key: Option<String>,
    pub concurrency_key: Option<String>,
    pub ordering_key: Option<String>,
    pub fairness_key: Option<String>,
}

/// Enqueue options checked and with defaults filled in: what is stored on the task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedEnqueue {
    pub delay_micros: i64,
    pub priority: i64,
    pub max_attempts: i32,
    pub backoff_base_micros: i64,
    pub backoff_max_micros: i64,
    pub idempotency_key: Option<String>,
    pub concurrency_key: Option<String>,
    pub ordering_key: Option<String>,
    pub fairness_key: Option<String>,
}

impl ResolvedEnqueue {
    /// A delayed task waits in `scheduled`; an immediate one is `ready` at once.
    pub fn is_scheduled(&self) -> bool {
        self.delay_micros > 0
    }
}

/// A queue's own retry defaults (`queue_configure`); `None` falls back to
/// the extension's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryDefaults {
    pub max_attempts: Option<i32>,
    pub backoff_base_micros: Option<i64>,
    pub backoff_max_micros: Option<i64>,
}

/// Checks `options` and fills in what the caller left out: the task's own
/// option, else the queue's default, else the extension's. `prefix`
/// qualifies argument names in errors (for follow-up specs, e.g.
/// `follow_ups[2].`).
/// `name` as an error names it: after `prefix` (where it came from, as
/// `follow_ups[2].`), allocated only when there is one.
pub fn argument_name<'a>(prefix: &str, name: &'a str) -> std::borrow::Cow<'a, str> {
    if prefix.is_empty() {
        std::borrow::Cow::Borrowed(name)
    } else {
        std::borrow::Cow::Owned(format!("{prefix}{name}"))
    }
}

pub fn resolve_enqueue(
    options: EnqueueOptions,
    defaults: RetryDefaults,
    prefix: &str,
) -> Result<ResolvedEnqueue, QueueError> {
    let arg = |name| argument_name(prefix, name);
    non_negative_duration(&arg("delay"), options.delay_micros)?;
    let max_attempts = options
        .max_attempts
        .or(defaults.max_attempts)
        .unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if max_attempts < 1 {
        return Err(QueueError::invalid(
            arg("max_attempts"),
            format!("must be at least 1, got {max_attempts}"),
        ));
    }
    let base = match options.backoff_base_micros {
        Some(base) => positive_duration(&arg("backoff_base"), base)?,
        None => defaults
            .backoff_base_micros
            .unwrap_or(DEFAULT_BACKOFF_BASE_MICROS),
    };
    // A base above the default ceiling raises the default ceiling with it.
    let ceiling = match options.backoff_max_micros {
        Some(ceiling) => positive_duration(&arg("backoff_max"), ceiling)?,
        None => defaults
            .backoff_max_micros
            .unwrap_or(DEFAULT_BACKOFF_MAX_MICROS)
            .max(base),
    };
    if ceiling < base {
        return Err(QueueError::invalid(
            arg("backoff_max"),
            "must not be below backoff_base",
        ));
    }
    if let Some(key) = &options.idempotency_key {
        if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
            return Err(QueueError::invalid(
                arg("idempotency_key"),
                format!(
                    "must be 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes, got {}",
                    key.len()
                ),
            ));
        }
    }
    if let Some(key) = &options.concurrency_key {
        name(&arg("concurrency_key"), key)?;
    }
    if let Some(key) = &options.fairness_key {
        name(&arg("fairness_key"), key)?;
    }
    if let Some(key) = &options.ordering_key {
        name(&arg("ordering_key"), key)?;
        if options.concurrency_key.is_some() {
            return Err(QueueError::invalid(
                arg("ordering_key"),
                "cannot be given with concurrency_key: a task has one or the other",
            ));
        }
    }
    Ok(ResolvedEnqueue {
        delay_micros: options.delay_micros,
        priority: options.priority,
        max_attempts,
        backoff_base_micros: base,
        backoff_max_micros: ceiling,
        idempotency_key: options.idempotency_key,
        concurrency_key: options.concurrency_key,
        ordering_key: options.ordering_key,
        fairness_key: options.fairness_key,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_array_with_a_null_element_names_the_argument_and_the_element() {
        assert_eq!(no_null_elements("task_ids", None), Ok(()));
        let e = no_null_elements("task_ids", Some(1)).unwrap_err();
        assert_eq!(e.sqlstate(), "22023");
        assert_eq!(
            e.to_string(),
            "invalid argument \"task_ids\": must not contain NULL (element 2 is NULL)"
        );
    }

    use super::*;
    use crate::MICROS_PER_SECOND as S;

    fn sqlstate<T: std::fmt::Debug>(r: Result<T, QueueError>) -> &'static str {
        r.unwrap_err().sqlstate()
    }

    #[test]
    fn names_must_be_non_empty_and_at_most_128_bytes() {
        assert!(name("queue", "emails").is_ok());
        assert!(name("queue", &"q".repeat(128)).is_ok());
        assert_eq!(sqlstate(name("queue", "")), "22023");
        assert_eq!(sqlstate(name("queue", &"q".repeat(129))), "22023");
        // 64 two-byte characters are 128 bytes; one more is over.
        assert!(name("owner_id", &"é".repeat(64)).is_ok());
        assert!(name("owner_id", &"é".repeat(65))
            .unwrap_err()
            .to_string()
            .contains("owner_id"));
    }

    #[test]
    fn batches_and_error_texts_are_capped() {
        assert!(batch_length("payloads", MAX_BATCH).is_ok());
        let e = batch_length("payloads", MAX_BATCH + 1).unwrap_err();
        assert_eq!(e.sqlstate(), "54000");
        assert!(e.to_string().contains("\"payloads\""));
        assert!(error_text("error", MAX_ERROR_BYTES).is_ok());
        assert_eq!(sqlstate(error_text("error", MAX_ERROR_BYTES + 1)), "54000");
    }

    #[test]
    fn required_reports_null() {
        assert_eq!(required("queue", Some(1)).unwrap(), 1);
        assert_eq!(
            required::<i32>("queue", None).unwrap_err(),
            QueueError::NullArgument { arg: "queue" }
        );
    }

    #[test]
    fn durations() {
        assert_eq!(sqlstate(positive_duration("lease", 0)), "22023");
        assert_eq!(sqlstate(positive_duration("lease", -1)), "22023");
        assert_eq!(positive_duration("lease", 1).unwrap(), 1);
        assert_eq!(non_negative_duration("delay", 0).unwrap(), 0);
        assert_eq!(sqlstate(non_negative_duration("delay", -1)), "22023");
        assert!(positive_duration("lease", MAX_DURATION_MICROS).is_ok());
        assert!(positive_duration("lease", MAX_DURATION_MICROS + 1)
            .unwrap_err()
            .to_string()
            .contains("100 years"));
        assert!(non_negative_duration("delay", i64::MAX).is_err());
    }

    #[test]
    fn a_page_starts_after_or_before_a_task_never_both() {
        assert_eq!(page_start(None, None), Ok(PageStart::After(None)));
        assert_eq!(page_start(Some(7), None), Ok(PageStart::After(Some(7))));
        assert_eq!(page_start(None, Some(7)), Ok(PageStart::Before(7)));
        let e = page_start(Some(1), Some(9)).unwrap_err();
        assert_eq!(e.sqlstate(), "22023");
        assert!(e.to_string().contains("\"before_task_id\""), "{e}");
    }

    #[test]
    fn claim_and_list_bounds() {
        assert!(claim_max(1).is_ok() && claim_max(MAX_CLAIM_BATCH).is_ok());
        assert!(claim_max(0).is_err() && claim_max(MAX_CLAIM_BATCH + 1).is_err());
        assert!(list_limit(0).is_err() && list_limit(100).is_ok());
        assert!(reap_max(0).is_err() && reap_max(1).is_ok());
    }

    #[test]
    fn parallel_arrays_must_match() {
        assert!(same_length("fencing_tokens", 2, "task_ids", 2).is_ok());
        let e = same_length("fencing_tokens", 1, "task_ids", 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"fencing_tokens\"") && e.contains("task_ids has 2"),
            "{e}"
        );
    }

    #[test]
    fn payload_limit() {
        assert!(payload_size("payload", 10, 10).is_ok());
        assert_eq!(sqlstate(payload_size("payload", 11, 10)), "54000");
    }

    #[test]
    fn states() {
        for s in ["scheduled", "ready", "in_flight", "dead"] {
            assert!(state(s).is_ok());
        }
        assert!(state("done").is_err() && state("").is_err());
        assert!(state("completed").is_err() && listed_state("completed").is_ok());
        assert!(listed_state("done")
            .unwrap_err()
            .to_string()
            .contains("completed"));
    }

    #[test]
    fn defaults_are_five_attempts_one_second_sixty_seconds() {
        let r = resolve_enqueue(EnqueueOptions::default(), RetryDefaults::default(), "").unwrap();
        assert_eq!(
            (r.max_attempts, r.backoff_base_micros, r.backoff_max_micros),
            (5, S, 60 * S)
        );
        assert!(!r.is_scheduled());
    }

    #[test]
    fn a_delay_makes_the_task_scheduled() {
        let r = resolve_enqueue(
            EnqueueOptions {
                delay_micros: 1,
                ..Default::default()
            },
            RetryDefaults::default(),
            "",
        )
        .unwrap();
        assert!(r.is_scheduled());
    }

    #[test]
    fn rejects_bad_options_naming_them() {
        let bad = |o: EnqueueOptions| {
            resolve_enqueue(o, RetryDefaults::default(), "follow_ups[1].")
                .unwrap_err()
                .to_string()
        };
        assert!(bad(EnqueueOptions {
            delay_micros: -1,
            ..Default::default()
        })
        .contains("follow_ups[1].delay"));
        assert!(bad(EnqueueOptions {
            max_attempts: Some(0),
            ..Default::default()
        })
        .contains("max_attempts"));
        assert!(bad(EnqueueOptions {
            backoff_base_micros: Some(0),
            ..Default::default()
        })
        .contains("backoff_base"));
        assert!(bad(EnqueueOptions {
            backoff_base_micros: Some(2 * S),
            backoff_max_micros: Some(S),
            ..Default::default()
        })
        .contains("backoff_max"));
        assert!(bad(EnqueueOptions {
            idempotency_key: Some(String::new()),
            ..Default::default()
        })
        .contains("idempotency_key"));
        assert!(bad(EnqueueOptions {
            idempotency_key: Some("k".repeat(513)),
            ..Default::default()
        })
        .contains("idempotency_key"));
    }

    #[test]
    fn a_large_base_lifts_the_default_ceiling() {
        let r = resolve_enqueue(
            EnqueueOptions {
                backoff_base_micros: Some(120 * S),
                ..Default::default()
            },
            RetryDefaults::default(),
            "",
        )
        .unwrap();
        assert_eq!(r.backoff_max_micros, 120 * S);
    }

    #[test]
    fn queue_defaults_sit_between_task_options_and_the_extension_defaults() {
        let queue = RetryDefaults {
            max_attempts: Some(9),
            backoff_base_micros: Some(2 * S),
            backoff_max_micros: Some(10 * S),
        };
        let r = resolve_enqueue(EnqueueOptions::default(), queue, "").unwrap();
        assert_eq!(
            (r.max_attempts, r.backoff_base_micros, r.backoff_max_micros),
            (9, 2 * S, 10 * S)
        );
        let own = EnqueueOptions {
            max_attempts: Some(2),
            backoff_base_micros: Some(20 * S),
            ..Default::default()
        };
        let r = resolve_enqueue(own, queue, "").unwrap();
        assert_eq!(
            (r.max_attempts, r.backoff_base_micros, r.backoff_max_micros),
            (2, 20 * S, 20 * S),
            "the task's base lifts the queue's ceiling"
        );
    }
}
