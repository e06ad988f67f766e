//! The statements on single tasks after they are written (`insert`): one
//! file per operation, each with the statements it runs.

mod cancel;
mod claim;
mod complete;
mod fail;
mod hints;
mod lease;
mod reap;

pub use cancel::cancel;
pub use claim::claim;
pub use complete::{complete, complete_many};
pub use fail::{lock_for_fail, settle_failure};
pub use lease::{heartbeat, release};
#[cfg(any(test, feature = "pg_test"))]
pub(crate) use reap::QUEUES_WITH_WORK;
pub use reap::{queues_with_work, reap, Reaped};

#[cfg(any(test, feature = "pg_test"))]
use crate::store::Statement;

/// The statements of the task lifecycle, by name, for the plan tests: each
/// touches a bounded set of tasks, so none may scan the task table.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) static LIFECYCLE_STATEMENTS: &[(&str, &Statement)] = &[
    ("QUEUES_WITH_WORK", &reap::QUEUES_WITH_WORK),
    ("INSERT_TASKS", &crate::store::insert::INSERT_TASKS.current),
    ("RESERVE_KEY", &crate::store::insert::RESERVE_KEY),
    ("LOOKUP_KEY", &crate::store::insert::LOOKUP_KEY),
    ("REAP_NEEDED", &hints::REAP_NEEDED),
    ("REAP", &reap::REAP.current),
    ("CLAIM", &claim::CLAIM.current),
    ("CLAIM_AFTER", &claim::CLAIM_AFTER.current),
    ("COMPLETE", &complete::COMPLETE.current),
    ("COMPLETE_MANY", &complete::COMPLETE_MANY.current),
    ("COMPLETE_MANY_0_3_0", &complete::COMPLETE_MANY_0_3_0),
    ("LOCK_FOR_FAIL", &fail::LOCK_FOR_FAIL),
    ("SETTLE_FAILURE", &fail::SETTLE_FAILURE.current),
    ("HEARTBEAT", &lease::HEARTBEAT),
    ("RELEASE", &lease::RELEASE),
    ("CANCEL", &cancel::CANCEL.current),
    ("LINK_PARENTS", &crate::store::dependency::LINK_PARENTS),
    (
        "COMPLETE_PARENT",
        &crate::store::dependency::COMPLETE_PARENT.current,
    ),
    (
        "COMPLETE_PARENTS",
        &crate::store::dependency::COMPLETE_PARENTS.current,
    ),
    (
        "RELEASE_CHILDREN",
        &crate::store::dependency::RELEASE_CHILDREN.current,
    ),
    (
        "PARENTS_FAILED",
        &crate::store::dependency::PARENTS_FAILED.current,
    ),
    ("INSERT_LINKS", &crate::store::dependency::INSERT_LINKS.current),
    (
        "EXPIRE_COMPLETED",
        &crate::store::admin::EXPIRE_COMPLETED.current,
    ),
    ("PARENTS_OF", &crate::store::dependency::PARENTS_OF),
    ("CHILDREN_OF", &crate::store::dependency::CHILDREN_OF),
    ("ERRORS_OF", &crate::store::overview::ERRORS_OF.current),
    ("LOCK_SLOTS", &crate::store::flow::LOCK_SLOTS),
    ("SETTLE_SLOTS", &crate::store::flow::SETTLE_SLOTS),
    ("SETTLE_ONE_SLOT", &crate::store::flow::SETTLE_ONE_SLOT),
    ("LOCK_LINES", &crate::store::flow::LOCK_LINES),
    ("SETTLE_LINES", &crate::store::flow::SETTLE_LINES),
];
