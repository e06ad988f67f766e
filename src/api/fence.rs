//! `aedb_queue_internal.fence_holds`, the per-task check of a batch settle's
//! statement (`store::tasks`, COMPLETE_MANY). Not API: only the tables'
//! owner may execute it (sql/security.sql), and outside that statement it
//! is false for every task.

use pgrx::prelude::*;

#[pg_schema]
mod aedb_queue_internal {
    use pgrx::prelude::*;

    /// Whether the batch settle running now named the task under this token.
    #[pg_extern(parallel_unsafe)]
    fn fence_holds(task_id: i64, fencing_token: i64) -> bool {
        crate::store::fence_holds(task_id, fencing_token)
    }
}
