//! Producer client and worker runtime for aedb_queue.
//!
//! - [`enqueue()`] / [`enqueue_batch`] on any connection or transaction of
//!   yours (the outbox), or [`Client`] over a pool.
//! - [`Worker`]: handlers ([`handler`]) for one or more queues, claims in
//!   batches, one commit per job while busy, heartbeats and checkpoints,
//!   strict completion in the handler's own transaction, LISTEN wake-ups,
//!   graceful shutdown that hands unfinished tasks back, reconnects.
//! - Durable workflows: [`Task::step`] / [`Task::step_in`] run once,
//!   [`Task::sleep`] and [`Task::wait_for_event`] park the task without
//!   holding a worker, [`emit()`] wakes it; [`Task::spawn_children`] and
//!   [`Task::wait_for_tasks`] fan out to child tasks and back.
//!
//! - [`Settings`]: where and how to connect, TLS as libpq's `sslmode`
//!   says, for every connection the crate makes.
//!
//! Every SQL statement is in `sql.rs`; the README's "Rust client" section
//! has the examples.

mod client;
pub mod connect;
mod duration;
mod enqueue;
mod error;
mod handler;
mod sql;
mod statement;
mod task;
mod telemetry;
mod worker;
mod workflow;

#[cfg(feature = "otel")]
pub mod otel;

pub use client::{pool, Client};
pub use connect::{Settings, SslMode, TlsSettings};
pub use enqueue::{enqueue, enqueue_batch, EnqueueOptions, Enqueued};
pub use error::{Error, Result};
pub use handler::{handler, BoxFuture, Handler};
pub use task::{Done, Task, TaskError};
pub use worker::{shutdown_signal, QueueOptions, Report, Worker, WorkerBuilder};
pub use workflow::{emit, Child, ChildOutcome, Event};

/// The README's examples, compiled as doc tests; one of them uses `otel`, so
/// they run with it: `cargo test -p aedb_queue_client --features otel --doc`.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "otel"))]
pub struct ReadmeDoctests;

/// The repository's README's Rust example, compiled as a doc test too.
#[doc = include_str!("../../../README.md")]
#[cfg(all(doctest, feature = "otel"))]
pub struct FrontDoorDoctests;
