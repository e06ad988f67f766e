//! OpenTelemetry traces of the worker runtime (the `otel` feature).
//!
//! Each task attempt is a span named `process <queue>` (kind consumer) with
//! the messaging semantic conventions' attributes: `messaging.system` =
//! `aedb_queue`, `messaging.operation.name` and `messaging.operation.type`
//! = `process`, `messaging.destination.name` = the queue,
//! `messaging.message.id` = the task id, `messaging.client.id` = the
//! worker's owner id; and this crate's own: `aedb_queue.attempt`,
//! `aedb_queue.fencing_token`, `aedb_queue.outcome` (`completed`,
//! `retried`, `dead_lettered`, `lease_lost`, `released`, `unsettled`, or
//! `failed` when a failure applied but its fate could not be read back).
//! A failed handler adds an `exception` event (`exception.type`,
//! `exception.message`), `error.type` (`handler_error`, `panic`,
//! `undecodable_payload`, `lease_lost`, `unsettled`) and the error status.
//! The span covers the handler and the settlement; the handler's own spans
//! are its children.
//!
//! The runtime's spans are `tracing` spans; [`layer`] turns them (and every
//! other `tracing` span of the process) into OpenTelemetry spans of the
//! tracer provider you built with your exporter. The crates are re-exported
//! so that the provider and the layer are of the versions this crate uses.

pub use opentelemetry;
pub use opentelemetry_sdk;
pub use tracing_opentelemetry;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetryLayer;

/// The instrumentation scope of the spans [`layer`] makes.
pub const SCOPE: &str = "aedb_queue_client";

/// A `tracing-subscriber` layer exporting `tracing` spans through
/// `provider`'s tracer, under the instrumentation scope [`SCOPE`] with this
/// crate's version.
pub fn layer<S>(provider: &SdkTracerProvider) -> OpenTelemetryLayer<S, SdkTracer>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let scope = InstrumentationScope::builder(SCOPE)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    tracing_opentelemetry::layer().with_tracer(provider.tracer_with_scope(scope))
}
