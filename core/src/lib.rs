//! Pure queue logic of aedb_queue: no Postgres in here, so every rule can be
//! unit-tested with plain `cargo test`.
//!
//! - [`error`]: the typed error enum and its SQLSTATEs.
//! - [`validate`]: argument checks shared by every SQL entry point.
//! - [`backoff`] and [`transition`]: what a failure does to a task.
//! - [`grants`]: per-queue grants, patterns and what each privilege allows.
//! - [`spec`]: parsing of follow-up enqueue specs (JSON).
//! - [`scan_hint`]: where a backend's next claim may resume its index scans.
//! - [`schedule`]: cron schedules in time zones and the fire times they owe.
//! - [`dependency`]: which parents a task waits for and how it starts.
//! - [`flow`]: flow control: the rate limit's token bucket.
//! - [`counters`]: per-queue event counters in a fixed table (shared memory).
//! - [`workflow`]: durable workflows: steps, sleeps and event waits.
//! - [`model`]: a reference model of one queue's SQL surface, for the property test.

pub mod backoff;
pub mod counters;
pub mod dependency;
pub mod error;
pub mod fence;
pub mod flow;
pub mod grants;
pub mod model;
pub mod reaper;
pub mod scan_hint;
pub mod schedule;
pub mod spec;
pub mod transition;
pub mod validate;
pub mod workflow;

pub use error::QueueError;

/// Microseconds per unit, matching Postgres' interval arithmetic
/// (a month counts as 30 days when intervals are compared).
pub const MICROS_PER_SECOND: i64 = 1_000_000;
pub const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;
