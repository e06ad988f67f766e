//! Every failure the extension reports, each with one SQLSTATE.

use std::fmt;

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
    /// A strict completion was fenced out (the task is no longer in flight under that token).
    LeaseLost { task_id: i64, fencing_token: i64 },
    /// The calling role may not do this on this queue (per-queue grants).
    PermissionDenied { action: String, queue: String },
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

    /// The SQLSTATE reported to the client. 40002 is otherwise unused by
    /// Postgres, so a client can match a fenced-out strict completion on it.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            QueueError::NullArgument { .. } => "22004",
            QueueError::InvalidArgument { .. } => "22023",
            QueueError::PayloadTooLarge { .. } => "54000",
            QueueError::LeaseLost { .. } => "40002",
            QueueError::PermissionDenied { .. } => "42501",
            QueueError::Internal(_) => "XX000",
        }
    }
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueError::NullArgument { arg } => write!(f, "argument \"{arg}\" must not be NULL"),
            QueueError::InvalidArgument { arg, reason } => {
                write!(f, "invalid argument \"{arg}\": {reason}")
            }
            QueueError::PayloadTooLarge { arg, bytes, limit } => write!(
                f,
                "argument \"{arg}\" is {bytes} bytes, over the limit of {limit} bytes (aedb_queue.max_payload_bytes)"
            ),
            QueueError::LeaseLost { task_id, fencing_token } => write!(
                f,
                "lease lost: task {task_id} is no longer in flight under fencing token {fencing_token}"
            ),
            QueueError::PermissionDenied { action, queue } => write!(
                f,
                "permission denied to {action} on queue {queue:?}: no aedb_queue grant of this role covers it"
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
            QueueError::Internal("x".into()),
        ];
        let mut codes: Vec<_> = all.iter().map(|e| e.sqlstate()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), all.len());
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
}
