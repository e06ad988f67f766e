//! The `otel` feature against a real cluster (the itests harness): the
//! runtime's spans go through `otel::layer` into a tracer provider whose
//! exporter is the SDK's in-memory one, and each test reads back the spans
//! of its own queue: one per attempt, with the messaging conventions'
//! attributes, the outcome, and the error of a failed attempt.
//!
//! Run with `cargo test -p aedb_queue_client --features otel` (the target
//! requires the feature).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use aedb_queue_client::otel;
use aedb_queue_client::{handler, Done, QueueOptions, Task, TaskError, Worker};
use aedb_queue_itests::{json, Cluster, EnqueueOpts, ADMIN, PRODUCER, SUPERUSER, WORKER};
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use otel::{opentelemetry, opentelemetry_sdk};
use tokio_postgres::NoTls;
use tracing_subscriber::layer::SubscriberExt;

mod support;
use support::runtime;

/// The process's one subscriber (the worker's tasks run on the runtime's
/// threads, so a thread-local default would not see them): the otel layer
/// over a provider that exports each span synchronously when it ends.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    let (exporter, _provider) = EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(otel::layer(&provider));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        (exporter, provider)
    });
    exporter
}

/// The finished spans of attempts on `queue`, by task then attempt.
fn spans_of(queue: &str) -> Vec<SpanData> {
    let mut spans: Vec<SpanData> = exporter()
        .get_finished_spans()
        .expect("the exporter's spans")
        .into_iter()
        .filter(|s| attr(s, "messaging.destination.name").as_deref() == Some(queue))
        .collect();
    spans.sort_by_key(|s| {
        (
            attr(s, "messaging.message.id")
                .unwrap()
                .parse::<i64>()
                .unwrap(),
            attr(s, "aedb_queue.attempt")
                .unwrap()
                .parse::<i64>()
                .unwrap(),
        )
    });
    spans
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// The attributes every attempt's span carries, checked against the task.
fn assert_attempt(span: &SpanData, queue: &str, task_id: i64, attempt: i32, token: i64) {
    assert_eq!(span.name, format!("process {queue}"), "{span:#?}");
    assert_eq!(span.span_kind, SpanKind::Consumer, "{span:#?}");
    assert_eq!(span.instrumentation_scope.name(), otel::SCOPE);
    let expected = [
        ("messaging.system", "aedb_queue".to_string()),
        ("messaging.operation.name", "process".to_string()),
        ("messaging.operation.type", "process".to_string()),
        ("messaging.destination.name", queue.to_string()),
        ("messaging.message.id", task_id.to_string()),
        ("aedb_queue.attempt", attempt.to_string()),
        ("aedb_queue.fencing_token", token.to_string()),
        // The runtime's own `task` span fields, as in its log lines.
        ("queue", queue.to_string()),
        ("task_id", task_id.to_string()),
        ("attempt", attempt.to_string()),
    ];
    for (key, value) in expected {
        assert_eq!(
            attr(span, key).as_deref(),
            Some(value.as_str()),
            "{key} of {span:#?}"
        );
    }
    assert!(
        attr(span, "messaging.client.id").is_some_and(|owner| owner.starts_with("rust-")),
        "{span:#?}"
    );
}

fn assert_failed(span: &SpanData, error_type: &str, message: &str) {
    assert_eq!(
        attr(span, "error.type").as_deref(),
        Some(error_type),
        "{span:#?}"
    );
    assert_eq!(span.status, Status::error(message.to_string()), "{span:#?}");
    let exceptions: Vec<_> = span
        .events
        .iter()
        .filter(|e| e.name == "exception")
        .collect();
    assert_eq!(exceptions.len(), 1, "{span:#?}");
    let field = |key: &str| {
        exceptions[0]
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.as_str().into_owned())
    };
    assert_eq!(field("exception.type").as_deref(), Some(error_type));
    assert_eq!(field("exception.message").as_deref(), Some(message));
}

fn assert_succeeded(span: &SpanData) {
    assert_eq!(attr(span, "error.type"), None, "{span:#?}");
    assert_eq!(span.status, Status::Unset, "{span:#?}");
    assert!(
        span.events.iter().all(|e| e.name != "exception"),
        "{span:#?}"
    );
}

/// Resolves once `sql` (a boolean, run as the superuser) is true, or after
/// 30 s (the test then fails on its own checks).
async fn until(dsn: String, sql: String) {
    let (client, connection) = tokio_postgres::connect(&dsn, NoTls).await.unwrap();
    tokio::spawn(connection);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if client.query_one(&sql, &[]).await.unwrap().get::<_, bool>(0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether every one of `ids` in `queue` is in `state`.
fn all_in(queue: &str, ids: &[i64], state: &str) -> String {
    let ids = ids
        .iter()
        .map(|id| id.to_string())
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "SELECT count(*) = cardinality('{{{ids}}}'::int8[]) FROM unnest('{{{ids}}}'::int8[]) AS i,
                LATERAL aedb_queue.queue_get('{queue}', i) AS t WHERE t.state = '{state}'"
    )
}

/// The fencing token a task holds now (completed ones too).
fn token(queue: &str, id: i64) -> i64 {
    Cluster::shared()
        .connect()
        .query_one(
            "SELECT fencing_token FROM aedb_queue.queue_get($1, $2)",
            &[&queue, &id],
        )
        .unwrap()
        .get(0)
}

fn keep_completed(queue: &str) {
    Cluster::shared()
        .connect_as(ADMIN)
        .execute(
            "SELECT aedb_queue.queue_configure($1, keep_completed => '1 hour')",
            &[&queue],
        )
        .unwrap();
}

#[test]
fn a_completed_task_is_one_span_with_the_messaging_attributes() {
    exporter();
    let cluster = Cluster::shared();
    let queue = "otel.done";
    keep_completed(queue);
    let id =
        aedb_queue_itests::enqueue(&mut cluster.connect_as(PRODUCER), queue, &json!({})).task_id;
    let report = runtime().block_on(
        Worker::builder(&cluster.dsn(WORKER))
            .unwrap()
            .queue(
                QueueOptions::new(queue),
                handler(|_task: Task<serde_json::Value>| async move {
                    tracing::info!("working");
                    Ok::<_, TaskError>(Done::new())
                }),
            )
            .build()
            .unwrap()
            .run(until(
                cluster.dsn(SUPERUSER),
                all_in(queue, &[id], "completed"),
            )),
    );
    assert_eq!(report.unwrap().completed, 1);
    let spans = spans_of(queue);
    assert_eq!(spans.len(), 1, "{spans:#?}");
    let span = &spans[0];
    assert_attempt(span, queue, id, 1, token(queue, id));
    assert_eq!(
        attr(span, "aedb_queue.outcome").as_deref(),
        Some("completed")
    );
    assert_succeeded(span);
    // The handler's own event is in the attempt's span.
    assert!(span.events.iter().any(|e| e.name == "working"), "{span:#?}");
}

/// A failure retried at once, then a success: two attempts, two spans, the
/// first with the handler's error, each with its own fencing token.
#[test]
fn a_retried_task_is_a_span_per_attempt() {
    exporter();
    let cluster = Cluster::shared();
    let queue = "otel.retry";
    keep_completed(queue);
    let id =
        aedb_queue_itests::enqueue(&mut cluster.connect_as(PRODUCER), queue, &json!({})).task_id;
    let report = runtime()
        .block_on(
            Worker::builder(&cluster.dsn(WORKER))
                .unwrap()
                .queue(
                    QueueOptions::new(queue),
                    handler(|task: Task<serde_json::Value>| async move {
                        if task.attempts == 1 {
                            return Err(TaskError::retry_in("smtp timeout", Duration::ZERO));
                        }
                        Ok(Done::new())
                    }),
                )
                .build()
                .unwrap()
                .run(until(
                    cluster.dsn(SUPERUSER),
                    all_in(queue, &[id], "completed"),
                )),
        )
        .unwrap();
    assert_eq!((report.failed, report.completed), (1, 1), "{report:?}");
    let spans = spans_of(queue);
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let last = token(queue, id);
    assert_attempt(&spans[0], queue, id, 1, last - 1);
    assert_eq!(
        attr(&spans[0], "aedb_queue.outcome").as_deref(),
        Some("retried")
    );
    assert_failed(&spans[0], "handler_error", "smtp timeout");
    assert_attempt(&spans[1], queue, id, 2, last);
    assert_eq!(
        attr(&spans[1], "aedb_queue.outcome").as_deref(),
        Some("completed")
    );
    assert_succeeded(&spans[1]);
    // Each attempt is a trace of its own (a root span), not a child of the last.
    assert!(spans
        .iter()
        .all(|s| s.parent_span_id == opentelemetry::trace::SpanId::INVALID));
    assert_ne!(
        spans[0].span_context.trace_id(),
        spans[1].span_context.trace_id()
    );
}

/// Dead letters three ways: the handler gives up (`TaskError::dead_letter`),
/// a panic on the last attempt (max_attempts 1: the runtime reads back that
/// the failure dead-lettered it), a payload that does not decode.
#[test]
fn dead_lettered_tasks_end_their_span_dead_lettered_with_the_error() {
    #[derive(serde::Deserialize)]
    struct Job {
        kind: String,
    }
    exporter();
    let cluster = Cluster::shared();
    let queue = "otel.dead";
    let mut p = cluster.connect_as(PRODUCER);
    let once = EnqueueOpts::default().max_attempts(1);
    let mut enqueue =
        |payload| aedb_queue_itests::enqueue_with(&mut p, queue, Some(&payload), &once).task_id;
    let gives_up = enqueue(json!({"kind": "give up"}));
    let panics = enqueue(json!({"kind": "panic"}));
    let garbled = enqueue(json!({"nokind": 1}));
    let ids = [gives_up, panics, garbled];
    let report = runtime()
        .block_on(
            Worker::builder(&cluster.dsn(WORKER))
                .unwrap()
                .queue(
                    QueueOptions::new(queue),
                    handler(|task: Task<Job>| async move {
                        match task.payload.kind.as_str() {
                            "give up" => Err(TaskError::dead_letter("bad address")),
                            _ => panic!("handler bug"),
                        }
                    }),
                )
                .build()
                .unwrap()
                .run(until(cluster.dsn(SUPERUSER), all_in(queue, &ids, "dead"))),
        )
        .unwrap();
    assert_eq!(report.failed, 3, "{report:?}");
    let spans = spans_of(queue);
    assert_eq!(spans.len(), 3, "{spans:#?}");
    for (span, id) in spans.iter().zip(ids) {
        assert_attempt(span, queue, id, 1, token(queue, id));
        assert_eq!(
            attr(span, "aedb_queue.outcome").as_deref(),
            Some("dead_lettered"),
            "{span:#?}"
        );
    }
    assert_failed(&spans[0], "handler_error", "bad address");
    assert_failed(&spans[1], "panic", "the handler panicked: handler bug");
    let garbled_error = aedb_queue_itests::get(&mut cluster.connect(), queue, garbled)
        .unwrap()
        .last_error
        .unwrap();
    assert!(garbled_error.starts_with("the payload does not decode"));
    assert_failed(&spans[2], "undecodable_payload", &garbled_error);
}

/// Shutdown's deadline hands a running task back: its span ends released,
/// not as an error.
#[test]
fn a_task_handed_back_at_shutdown_ends_its_span_released() {
    exporter();
    let cluster = Cluster::shared();
    let queue = "otel.release";
    let id =
        aedb_queue_itests::enqueue(&mut cluster.connect_as(PRODUCER), queue, &json!({})).task_id;
    let report = runtime()
        .block_on(
            Worker::builder(&cluster.dsn(WORKER))
                .unwrap()
                .shutdown_timeout(Duration::from_millis(100))
                .queue(
                    QueueOptions::new(queue),
                    handler(|_task: Task<serde_json::Value>| async move {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Ok::<_, TaskError>(Done::new())
                    }),
                )
                .build()
                .unwrap()
                .run(until(
                    cluster.dsn(SUPERUSER),
                    all_in(queue, &[id], "in_flight"),
                )),
        )
        .unwrap();
    assert_eq!(report.released, 1, "{report:?}");
    let spans = spans_of(queue);
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_attempt(&spans[0], queue, id, 1, token(queue, id));
    assert_eq!(
        attr(&spans[0], "aedb_queue.outcome").as_deref(),
        Some("released")
    );
    assert_succeeded(&spans[0]);
}
