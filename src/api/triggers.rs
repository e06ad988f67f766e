//! The statement trigger on `queue`, `queue_grant` and `confined_role`
//! that tells every backend its copies of them are stale (see `cache`),
//! whoever writes: our functions, or direct DML by an operator.

use pgrx::prelude::*;

/// Not API: it lives in schema aedb_queue_internal.
#[pg_schema]
mod aedb_queue_internal {
    use pgrx::prelude::*;
    use pgrx::WhoAllocated;

    use crate::cache;

    #[pg_trigger]
    fn invalidate_copies<'a>(
        trigger: &'a PgTrigger<'a>,
    ) -> Result<Option<PgHeapTuple<'a, impl WhoAllocated>>, PgTriggerError> {
        cache::invalidate_relation(trigger.relation()?.oid());
        Ok(None::<PgHeapTuple<'a, AllocatedByPostgres>>)
    }
}

extension_sql_file!(
    "../../sql/triggers.sql",
    name = "triggers",
    requires = [aedb_queue_internal::invalidate_copies]
);
