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
    /// An argument has more elements or bytes than a fixed cap allows.
    LimitExceeded { arg: String, reason: String },
    /// A strict completion was fenced out (the task is no longer in flight under that token).
    LeaseLost { task_id: i64, fencing_token: i64 },
    /// The calling role may not do this on this queue (per-queue grants).
    PermissionDenied { action: String, queue: String },
    /// Follow-ups from a role that may not call `queue_enqueue`.
    NoEnqueueRight { arg: String },
    /// A confined admin tried to change the grants of a role that is not
    /// confined within the queues it administers.
    RoleOutsideYourQueues { role: String },
    /// A confined role tried what only unconfined admins may (it spans queues).
    Confined { operation: String },
    /// Something the call needs is missing (pg_cron); `hint` says what to do.
    Prerequisite { message: String, hint: String },
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
            QueueError::LimitExceeded { arg, reason } => write!(f, "argument \"{arg}\" {reason}"),
            QueueError::LeaseLost { task_id, fencing_token } => write!(
                f,
                "lease lost: task {task_id} is no longer in flight under fencing token {fencing_token}"
            ),
            QueueError::PermissionDenied { action, queue } => write!(
                f,
                "permission denied to {action} on queue {queue:?}: no aedb_queue grant of this role covers it"
            ),
            QueueError::NoEnqueueRight { arg } => write!(
                f,
                "permission denied to enqueue {arg}: follow-ups are enqueues, and this role may not call queue_enqueue"
            ),
            QueueError::RoleOutsideYourQueues { role } => write!(
                f,
                "permission denied to change the grants of role {role:?}: it is not confined within the queues you administer"
            ),
            QueueError::Confined { operation } => write!(
                f,
                "permission denied to {operation}: only an unconfined aedb_queue admin may, and this session's roles are confined to some queues"
            ),
            QueueError::Prerequisite { message, .. } => write!(f, "{message}"),
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
}
