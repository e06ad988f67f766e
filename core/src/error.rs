//! Every failure the extension reports, each with one SQLSTATE.

use std::fmt;

/// Most bytes of a value that [`quoted`] shows between its quotes.
pub const QUOTED_MAX_BYTES: usize = 64;

/// Most bytes of one reported message ([`bounded`]): a last defence, since
/// every value in a message is [`quoted`] already.
pub const MESSAGE_MAX_BYTES: usize = 1024;

/// A value as every message shows it: in double quotes, with quotes,
/// backslashes and control characters escaped, cut at a character boundary
/// after [`QUOTED_MAX_BYTES`] with an ellipsis. An argument of any size
/// makes a message of a few dozen bytes, on one line.
pub fn quoted(value: &str) -> String {
    let mut shown = String::with_capacity(QUOTED_MAX_BYTES.min(value.len()) + 8);
    shown.push('"');
    for c in value.chars() {
        let before = shown.len();
        match c {
            '"' | '\\' => {
                shown.push('\\');
                shown.push(c);
            }
            // Line breaks a log reader would take for a new entry, and
            // direction overrides that reorder what a reader sees.
            c if c.is_control()
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                shown.extend(c.escape_default())
            }
            c => shown.push(c),
        }
        if shown.len() - 1 > QUOTED_MAX_BYTES {
            shown.truncate(before);
            shown.push('\u{2026}');
            break;
        }
    }
    shown.push('"');
    shown
}

/// The start of `value` that [`quoted`] shows, and a few bytes more so it
/// still shows the ellipsis: what an error keeps of a value it quotes
/// later, so that no argument is copied whole (a copy of hundreds of MB
/// could fail to allocate, and Rust aborts the backend then).
pub fn clipped(value: &str) -> &str {
    let mut end = value.len().min(QUOTED_MAX_BYTES + 4);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

/// `message` cut at a character boundary after [`MESSAGE_MAX_BYTES`], with
/// an ellipsis: for messages made elsewhere (a caught PostgreSQL error).
pub fn bounded(message: &str) -> std::borrow::Cow<'_, str> {
    if message.len() <= MESSAGE_MAX_BYTES {
        return std::borrow::Cow::Borrowed(message);
    }
    let mut end = MESSAGE_MAX_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}\u{2026}", &message[..end]))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueError {
    /// A required argument was NULL.
    NullArgument { arg: &'static str },
    /// An argument had a value outside its domain.
    InvalidArgument { arg: String, reason: String },
    /// A JSON argument is larger than `aedb_queue.max_payload_bytes`.
    PayloadTooLarge {
        arg: String,
        bytes: usize,
        limit: usize,
    },
    /// An argument has more elements or bytes than a fixed cap allows.
    LimitExceeded { arg: String, reason: String },
    /// A strict completion was fenced out (the task is no longer in flight under that token).
    LeaseLost { task_id: i64, fencing_token: i64 },
    /// The calling role may not do this on this queue (per-queue grants).
    PermissionDenied { action: String, queue: String },
    /// Follow-ups from a role that may not call `queue_enqueue`; `arg` is
    /// the extension's own argument name, shown as is.
    NoEnqueueRight { arg: &'static str },
    /// A confined admin tried to change the grants of a role that is not
    /// confined within the queues it administers.
    RoleOutsideYourQueues { role: String },
    /// A confined role tried what only unconfined admins may (it spans queues).
    Confined { operation: String },
    /// A role argument names no role.
    UnknownRole { role: String },
    /// A timestamp argument, or a time computed from it, is outside the
    /// range the calendar arithmetic covers.
    TimeOutOfRange { arg: String, reason: String },
    /// Something the call needs is missing (pg_cron); `hint` says what to do.
    Prerequisite { message: String, hint: String },
    /// A workflow step of this name is recorded already for the task: a
    /// step runs once, so its first record stands.
    StepRecorded { task_id: i64, step: String },
    /// SPI or another internal step failed; never caused by user input.
    Internal(String),
}

impl QueueError {
    pub fn invalid(arg: impl Into<String>, reason: impl Into<String>) -> Self {
        QueueError::InvalidArgument {
            arg: arg.into(),
            reason: reason.into(),
        }
    }

    pub fn limit(arg: impl Into<String>, reason: impl Into<String>) -> Self {
        QueueError::LimitExceeded {
            arg: arg.into(),
            reason: reason.into(),
        }
    }

    /// The SQLSTATE reported to the client. 40002 is otherwise unused by
    /// Postgres, so a client can match a fenced-out strict completion on it.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            QueueError::NullArgument { .. } => "22004",
            QueueError::InvalidArgument { .. } => "22023",
            QueueError::PayloadTooLarge { .. } | QueueError::LimitExceeded { .. } => "54000",
            QueueError::LeaseLost { .. } => "40002",
            QueueError::PermissionDenied { .. }
            | QueueError::Confined { .. }
            | QueueError::RoleOutsideYourQueues { .. }
            | QueueError::NoEnqueueRight { .. } => "42501",
            QueueError::Prerequisite { .. } => "55000",
            QueueError::UnknownRole { .. } => "42704",
            QueueError::TimeOutOfRange { .. } => "22008",
            QueueError::StepRecorded { .. } => "23505",
            QueueError::Internal(_) => "XX000",
        }
    }
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueError::NullArgument { arg } => write!(f, "argument {} must not be NULL", quoted(arg)),
            QueueError::InvalidArgument { arg, reason } => {
                write!(f, "invalid argument {}: {reason}", quoted(arg))
            }
            QueueError::PayloadTooLarge { arg, bytes, limit } => write!(
                f,
                "argument {} is {bytes} bytes, over the limit of {limit} bytes (aedb_queue.max_payload_bytes)",
                quoted(arg)
            ),
            QueueError::LimitExceeded { arg, reason } => {
                write!(f, "argument {} {reason}", quoted(arg))
            }
            QueueError::LeaseLost { task_id, fencing_token } => write!(
                f,
                "lease lost: task {task_id} is no longer in flight under fencing token {fencing_token}"
            ),
            QueueError::PermissionDenied { action, queue } => write!(
                f,
                "permission denied to {action} on queue {}: no aedb_queue grant of this role covers it",
                quoted(queue)
            ),
            QueueError::NoEnqueueRight { arg } => write!(
                f,
                "permission denied to enqueue {arg}: follow-ups are enqueues, and this role may not call queue_enqueue"
            ),
            QueueError::RoleOutsideYourQueues { role } => write!(
                f,
                "permission denied to change the grants of role {}: it is not confined within the queues you administer",
                quoted(role)
            ),
            QueueError::UnknownRole { role } => write!(f, "role {} does not exist", quoted(role)),
            QueueError::TimeOutOfRange { arg, reason } => {
                write!(f, "argument {} {reason}", quoted(arg))
            }
            QueueError::Confined { operation } => write!(
                f,
                "permission denied to {operation}: only an unconfined aedb_queue admin may, and this session's roles are confined to some queues"
            ),
            QueueError::Prerequisite { message, .. } => write!(f, "{message}"),
            QueueError::StepRecorded { task_id, step } => write!(
                f,
                "step {} of task {task_id} is recorded already: a step runs once, and its first record stands",
                quoted(step)
            ),
            QueueError::Internal(msg) => write!(f, "aedb_queue internal error: {msg}"),
        }
    }
}

impl std::error::Error for QueueError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_a_distinct_sqlstate() {
        let all = [
            QueueError::NullArgument { arg: "queue" },
            QueueError::invalid("lease", "must be positive"),
            QueueError::PayloadTooLarge {
                arg: "payload".into(),
                bytes: 10,
                limit: 5,
            },
            QueueError::LeaseLost {
                task_id: 1,
                fencing_token: 2,
            },
            QueueError::PermissionDenied {
                action: "claim".into(),
                queue: "q".into(),
            },
            QueueError::StepRecorded {
                task_id: 1,
                step: "charge".into(),
            },
            QueueError::Internal("x".into()),
        ];
        let mut codes: Vec<_> = all.iter().map(|e| e.sqlstate()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), all.len());
        let confined = QueueError::Confined {
            operation: "reap every queue".into(),
        };
        assert_eq!(confined.sqlstate(), "42501");
        assert_eq!(
            QueueError::limit("payloads", "has 2 elements").sqlstate(),
            "54000"
        );
    }

    #[test]
    fn messages_name_the_argument() {
        assert!(QueueError::NullArgument { arg: "owner_id" }
            .to_string()
            .contains("\"owner_id\""));
        assert!(QueueError::invalid("delay", "must not be negative")
            .to_string()
            .contains("\"delay\""));
        let big = QueueError::PayloadTooLarge {
            arg: "payload".into(),
            bytes: 10,
            limit: 5,
        };
        assert!(big.to_string().contains("\"payload\"") && big.to_string().contains("10 bytes"));
    }

    #[test]
    fn quoted_leaves_a_short_value_as_debug_shows_it() {
        for value in [
            "",
            "q",
            "state",
            "ünïcödé ✓",
            "a\"b\\c",
            "one\ntwo\tthree\r",
        ] {
            assert_eq!(quoted(value), format!("{value:?}"));
        }
        let fits = "x".repeat(QUOTED_MAX_BYTES);
        assert_eq!(quoted(&fits), format!("\"{fits}\""));
    }

    #[test]
    fn quoted_cuts_a_long_value_with_an_ellipsis() {
        let long = "x".repeat(10_000_000);
        assert_eq!(
            quoted(&long),
            format!("\"{}\u{2026}\"", "x".repeat(QUOTED_MAX_BYTES))
        );
        let just_over = "x".repeat(QUOTED_MAX_BYTES + 1);
        assert!(quoted(&just_over).ends_with("x\u{2026}\""));
    }

    #[test]
    fn quoted_cuts_at_a_character_boundary() {
        // 3- and 4-byte characters in every alignment against the bound.
        for lead in 0..4 {
            for c in ['\u{20ac}', '\u{1f600}', '\u{e9}'] {
                let value = "a".repeat(lead) + &c.to_string().repeat(100);
                let shown = quoted(&value);
                let inner = &shown[1..shown.len() - 1];
                let kept = inner.strip_suffix('\u{2026}').expect("cut");
                assert!(kept.len() <= QUOTED_MAX_BYTES, "{shown}");
                assert!(kept.len() + c.len_utf8() > QUOTED_MAX_BYTES, "{shown}");
                assert!(value.starts_with(kept));
            }
        }
    }

    #[test]
    fn quoted_escapes_every_control_character_and_stays_on_one_line() {
        let newlines = "\n".repeat(540_000);
        let shown = quoted(&newlines);
        assert!(shown.len() <= QUOTED_MAX_BYTES + 5, "{shown}");
        assert!(shown.starts_with("\"\\n\\n"));
        let odd = "\u{0}\u{1b}[31m\u{7f}\u{85}\u{2028}\u{202e}";
        let shown = quoted(odd);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown}");
        assert!(!shown.contains(['\u{2028}', '\u{202e}']), "{shown}");
        assert_eq!(
            shown,
            "\"\\u{0}\\u{1b}[31m\\u{7f}\\u{85}\\u{2028}\\u{202e}\""
        );
        // An escape that would not fit is left out whole, not cut.
        let tail = "x".repeat(QUOTED_MAX_BYTES - 2) + "\u{1b}";
        assert_eq!(
            quoted(&tail),
            format!("\"{}\u{2026}\"", "x".repeat(QUOTED_MAX_BYTES - 2))
        );
    }

    #[test]
    fn a_clipped_value_is_quoted_as_the_whole_value() {
        for value in [
            "short".to_string(),
            "x".repeat(QUOTED_MAX_BYTES + 4),
            "x".repeat(QUOTED_MAX_BYTES + 5),
            "\u{1f600}".repeat(1_000),
            "\n".repeat(1_000),
            "a".to_string() + &"\u{20ac}".repeat(1_000),
        ] {
            let kept = clipped(&value);
            assert!(kept.len() <= QUOTED_MAX_BYTES + 4);
            assert_eq!(quoted(kept), quoted(&value), "{value:?}");
        }
    }

    #[test]
    fn messages_are_bounded_whatever_their_arguments() {
        let huge = "\u{20ac}".repeat(1_000_000);
        let errors = [
            QueueError::invalid(huge.clone(), format!("got {}", quoted(&huge))),
            QueueError::limit(huge.clone(), "has 2 elements"),
            QueueError::PermissionDenied {
                action: "read".into(),
                queue: huge.clone(),
            },
            QueueError::RoleOutsideYourQueues { role: huge.clone() },
            QueueError::UnknownRole { role: huge.clone() },
            QueueError::TimeOutOfRange {
                arg: huge.clone(),
                reason: "is too late".into(),
            },
        ];
        for error in errors {
            let message = error.to_string();
            assert!(message.len() < 300, "{message}");
        }
        let message = bounded(&huge);
        assert!(message.len() <= MESSAGE_MAX_BYTES + 3 && message.ends_with('\u{2026}'));
        assert_eq!(bounded("short"), "short");
    }
}
