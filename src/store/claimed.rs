//! A claimed task as every claim path returns it (the statements' RETURNING
//! and the direct claim's new row versions alike).

use pgrx::datum::TimestampWithTimeZone;

use crate::datum::RawJsonb;

pub struct ClaimedTask {
    pub task_id: i64,
    pub payload: Option<RawJsonb>,
    pub attempts: i32,
    pub fencing_token: i64,
    pub lease_deadline: TimestampWithTimeZone,
    pub priority: i64,
    pub enqueued_at: TimestampWithTimeZone,
    pub progress: Option<RawJsonb>,
    /// Its place after priority in service order: its virtual start time
    /// in a fair-share queue, else its id.
    pub rank: i64,
}

impl ClaimedTask {
    /// Where the task stands in service order (the ready index's).
    pub(super) fn service_order(&self) -> (std::cmp::Reverse<i64>, i64, i64) {
        (std::cmp::Reverse(self.priority), self.rank, self.task_id)
    }
}
