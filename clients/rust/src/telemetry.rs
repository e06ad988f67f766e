//! The span of one task attempt.
//!
//! Every attempt runs its handler in a `task` span (fields `queue`,
//! `task_id`, `attempt`). With the `otel` feature the same span is an
//! OpenTelemetry span as the messaging semantic conventions describe a
//! consumer's "process" operation (name `process <queue>`, kind consumer,
//! `messaging.*` attributes), it covers the settlement too, and it ends with
//! the attempt's outcome (`aedb_queue.outcome`), an error status and an
//! `exception` event when the handler failed. The OpenTelemetry attributes
//! are set on the OpenTelemetry span alone (tracing-opentelemetry's span
//! extension), so a log line shows the same fields with or without the
//! feature, plus `otel.name` and `otel.kind`, which the layer reads when the
//! span starts. Without the feature every method here is a no-op and the
//! span is the one the runtime always made.

use tracing::Span;

use crate::task::{Claimed, TaskError};

/// How an attempt ended, as its span records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Completed,
    /// Failed and retried (now or after a backoff).
    Retried,
    /// Failed and dead: the handler gave up, or no attempt was left.
    DeadLettered,
    /// The failure applied but whether it dead-lettered the task could not
    /// be read back.
    Failed,
    /// The fence refused the settlement: another worker has the task.
    LeaseLost,
    /// Handed back at shutdown, the attempt not spent.
    Released,
    /// The settlement did not reach the server; the lease will expire.
    Unsettled,
    /// A workflow's sleep or event wait handed the task back (nothing
    /// settled, the attempt not counted).
    Parked,
}

impl Outcome {
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Retried => "retried",
            Outcome::DeadLettered => "dead_lettered",
            Outcome::Failed => "failed",
            Outcome::LeaseLost => "lease_lost",
            Outcome::Released => "released",
            Outcome::Unsettled => "unsettled",
            Outcome::Parked => "parked",
        }
    }
}

/// What a failure was, for the span's `error.type` (low cardinality).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The handler returned an error.
    Handler,
    /// The handler panicked.
    Panic,
    /// The payload did not decode as the handler's type.
    Undecodable,
}

impl Cause {
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    fn as_str(self) -> &'static str {
        match self {
            Cause::Handler => "handler_error",
            Cause::Panic => "panic",
            Cause::Undecodable => "undecodable_payload",
        }
    }
}

pub(crate) struct Attempt {
    span: Span,
    /// The handler's failure (error.type, message), recorded at the end.
    #[cfg(feature = "otel")]
    failure: Option<(&'static str, String)>,
}

impl Attempt {
    #[cfg(not(feature = "otel"))]
    pub fn start(queue: &str, _owner: &str, claimed: &Claimed) -> Attempt {
        Attempt {
            span: tracing::info_span!("task", queue = %queue, task_id = claimed.id, attempt = claimed.attempts),
        }
    }

    #[cfg(feature = "otel")]
    pub fn start(queue: &str, owner: &str, claimed: &Claimed) -> Attempt {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        // The conventions' span name: "{operation name} {destination}".
        let name = format!("process {queue}");
        let span = tracing::info_span!(
            "task",
            queue = %queue,
            task_id = claimed.id,
            attempt = claimed.attempts,
            otel.name = name.as_str(),
            otel.kind = "consumer",
        );
        let attributes: [(&'static str, opentelemetry::Value); 8] = [
            ("messaging.system", "aedb_queue".into()),
            ("messaging.operation.name", "process".into()),
            ("messaging.operation.type", "process".into()),
            ("messaging.destination.name", queue.to_string().into()),
            ("messaging.message.id", claimed.id.to_string().into()),
            ("messaging.client.id", owner.to_string().into()),
            ("aedb_queue.attempt", i64::from(claimed.attempts).into()),
            ("aedb_queue.fencing_token", claimed.fencing_token.into()),
        ];
        for (key, value) in attributes {
            span.set_attribute(key, value);
        }
        Attempt {
            span,
            failure: None,
        }
    }

    /// The span the handler runs in.
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// The span the settlement runs in: the attempt's with the `otel`
    /// feature, none without (the settlement's log lines as they were).
    pub fn settling(&self) -> Span {
        #[cfg(feature = "otel")]
        return self.span.clone();
        #[cfg(not(feature = "otel"))]
        return Span::none();
    }

    /// The handler failed with `error`: an `exception` event now, the error
    /// status when the attempt ends.
    pub fn failed(&mut self, error: &TaskError) {
        #[cfg(feature = "otel")]
        {
            use opentelemetry::KeyValue;
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            let kind = error.cause.as_str();
            self.span.add_event(
                "exception",
                vec![
                    KeyValue::new("exception.type", kind),
                    KeyValue::new("exception.message", error.message.clone()),
                ],
            );
            self.failure = Some((kind, error.message.clone()));
        }
        #[cfg(not(feature = "otel"))]
        let _ = error;
    }

    /// The attempt is over: its outcome and, if it failed, the error status.
    /// The span ends when the last handle on it drops.
    pub fn end(self, outcome: Outcome) {
        #[cfg(feature = "otel")]
        {
            use opentelemetry::trace::Status;
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            self.span
                .set_attribute("aedb_queue.outcome", outcome.as_str());
            let error = match (outcome, self.failure) {
                (Outcome::LeaseLost, _) => Some((
                    "lease_lost",
                    "lease lost: another worker has the task".to_string(),
                )),
                (Outcome::Unsettled, _) => Some((
                    "unsettled",
                    "the settlement did not reach the server; the lease will expire".to_string(),
                )),
                (_, failure) => failure,
            };
            if let Some((kind, message)) = error {
                self.span.set_attribute("error.type", kind);
                self.span.set_status(Status::error(message));
            }
        }
        #[cfg(not(feature = "otel"))]
        let _ = (self, outcome);
    }
}
