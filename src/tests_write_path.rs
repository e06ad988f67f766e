//! `#[pg_test]`s of the seam between the two write paths (`store::direct`):
//! the switch, the table states and definitions that send the hot calls to
//! their statements, and what `queue_write_path()` reports. The same
//! operations are compared across the paths by the itest `write_paths.rs`,
//! and the regress, isolation and model suites run both ways.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    /// Direct writes so far in this backend: inserts, claims, deletes.
    fn direct_writes() -> (u64, u64, u64) {
        (
            crate::store::am::insert::WRITES.with(|w| w.get()),
            crate::store::am::update::CALLS.with(|c| c.get()),
            crate::store::am::delete::CALLS.with(|c| c.get()),
        )
    }

    /// Runs an enqueue, a claim and a completion; returns how many of the
    /// three wrote directly.
    fn one_round(queue: &str) -> usize {
        let before = direct_writes();
        let id = enqueue(queue, "");
        let claimed = claim(queue, "");
        assert_eq!(claimed.len(), 1, "the task is claimed on either path");
        let (claimed_id, token) = claimed[0];
        assert_eq!(claimed_id, id);
        assert_eq!(complete(queue, id, token, ""), "applied");
        assert_eq!(state_of(queue, id), None, "completed and deleted");
        let after = direct_writes();
        [after.0 - before.0, after.1 - before.1, after.2 - before.2]
            .iter()
            .filter(|&&n| n > 0)
            .count()
    }

    /// `queue_write_path()` as "operation:direct" or "operation:reason".
    fn write_path() -> String {
        one(
            "SELECT string_agg(operation || ':' || coalesce(reason, 'direct'), ', ' ORDER BY operation)
               FROM aedb_queue.queue_write_path()",
        )
    }

    #[pg_test]
    fn the_default_writes_directly_and_off_runs_the_statements() {
        assert_eq!(
            one::<String>("SHOW aedb_queue.direct_writes"),
            "auto",
            "the default"
        );
        assert_eq!(
            write_path(),
            "claim:direct, complete:direct, enqueue:direct"
        );
        assert_eq!(one_round("paths"), 3, "all three wrote directly");

        exec("SET LOCAL aedb_queue.direct_writes = off");
        let statements = crate::store::statements_run();
        assert_eq!(one_round("paths"), 0, "none wrote directly");
        assert!(crate::store::statements_run() - statements >= 3);
        let off = "aedb_queue.direct_writes is off";
        assert_eq!(
            write_path(),
            format!("claim:{off}, complete:{off}, enqueue:{off}")
        );
        assert_task_invariants("both rounds");
    }

    #[pg_test(error = "permission denied to set parameter \"aedb_queue.direct_writes\"")]
    fn an_application_cannot_turn_direct_writes_on_or_off() {
        exec("CREATE ROLE app_paths LOGIN");
        exec("GRANT aedb_queue_worker TO app_paths");
        exec("SET LOCAL ROLE app_paths");
        exec("SET aedb_queue.direct_writes = on");
    }

    #[pg_test]
    fn a_column_of_another_type_sends_every_call_to_its_statement() {
        // The direct writes take every column of the task row as
        // sql/schema.sql types it (a value of another type would be read
        // or written as the wrong one).
        exec("ALTER TABLE aedb_queue.task ALTER COLUMN idempotency_key TYPE varchar(300)");
        let shape = "the task table or its ready index differs from the schema";
        assert_eq!(
            write_path(),
            format!("claim:{shape}, complete:{shape}, enqueue:{shape}")
        );
        assert_eq!(one_round("typed"), 0);
        exec("ALTER TABLE aedb_queue.task ALTER COLUMN idempotency_key TYPE text");
        assert_eq!(one_round("typed"), 3, "as defined again: direct");
    }

    #[pg_test]
    fn a_redefined_ready_index_sends_claims_to_their_statement() {
        // Same name, another order: the direct claim's service order and
        // scan keys assume the definition in sql/schema.sql.
        exec("DROP INDEX aedb_queue.task_ready_idx");
        exec(
            "CREATE INDEX task_ready_idx ON aedb_queue.task (queue, priority DESC, task_id)
              WHERE state = 'ready'",
        );
        assert_eq!(
            write_path(),
            "claim:the task table or its ready index differs from the schema, \
             complete:direct, enqueue:direct"
        );
        let first = enqueue("redefined", ", priority => 1");
        let second = enqueue("redefined", ", priority => 5");
        let claims = crate::store::am::update::CALLS.with(|c| c.get());
        let claimed: Vec<i64> = claim("redefined", ", max => 2")
            .iter()
            .map(|t| t.0)
            .collect();
        assert_eq!(claimed, vec![second, first], "service order, by statement");
        assert_eq!(crate::store::am::update::CALLS.with(|c| c.get()), claims);
    }

    #[pg_test]
    fn a_ready_index_that_is_not_ready_is_not_read() {
        // What a DROP INDEX CONCURRENTLY cancelled after its second phase
        // leaves (the isolation spec claim-after-cancelled-drop-index makes
        // it for real): an index no longer filled, nor to be read. The
        // table is locked first, as the DDL of the tests running beside
        // this one locks it before the catalog rows: a row of pg_index
        // taken first deadlocked with a DROP INDEX (seen on 18).
        exec("LOCK TABLE aedb_queue.task IN SHARE ROW EXCLUSIVE MODE");
        exec(
            "UPDATE pg_index SET indisvalid = false, indisready = false
              WHERE indexrelid = 'aedb_queue.task_ready_idx'::regclass",
        );
        let ids = [enqueue("unready", ""), enqueue("unready", "")];
        let claimed: Vec<i64> = claim("unready", ", max => 5").iter().map(|t| t.0).collect();
        assert_eq!(
            claimed,
            ids.to_vec(),
            "every task enqueued since is claimed"
        );
        assert!(write_path().starts_with(
            "claim:an index the write reads is not valid, ready and live, complete:direct"
        ));
    }

    #[pg_test]
    fn a_stored_generated_column_is_computed_on_every_write() {
        exec(
            "ALTER TABLE aedb_queue.task
               ADD COLUMN doubled bigint GENERATED ALWAYS AS (fencing_token * 2) STORED",
        );
        let id = enqueue("generated", "");
        let (_, token) = claim_one("generated");
        assert_eq!(field::<i64>(id, "doubled"), Some(token * 2));
        let generated = "the task table has a stored generated column";
        assert_eq!(
            write_path(),
            format!("claim:{generated}, complete:{generated}, enqueue:{generated}")
        );
    }

    #[pg_test]
    fn a_trigger_or_row_security_sends_every_call_to_its_statement() {
        exec("CREATE FUNCTION public.pass() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$");
        exec("CREATE TRIGGER pass BEFORE UPDATE ON aedb_queue.task FOR EACH ROW EXECUTE FUNCTION public.pass()");
        assert_eq!(one_round("triggered"), 0);
        exec("DROP TRIGGER pass ON aedb_queue.task");
        exec("ALTER TABLE aedb_queue.task ENABLE ROW LEVEL SECURITY");
        let rls = "the task table has row-level security enabled";
        assert_eq!(
            write_path(),
            format!("claim:{rls}, complete:{rls}, enqueue:{rls}")
        );
    }

    /// Every reason to decline stands for an executor step in the one list
    /// (`am::steps`), but the two that are not the executor's: the switch
    /// and an older schema.
    #[pg_test]
    fn every_decline_is_an_executor_step_of_the_list() {
        use crate::store::am::steps::{Decision, ALL_DECLINES, STEPS};
        use crate::store::am::Decline;
        for decline in ALL_DECLINES {
            let listed = STEPS
                .iter()
                .any(|s| matches!(s.decision, Decision::Declined(d) if d == *decline));
            let ours = matches!(decline, Decline::SwitchedOff | Decline::Schema);
            assert_eq!(listed, !ours, "{decline:?} in the executor's steps");
        }
        for step in STEPS {
            let said = match step.decision {
                Decision::Done(how) | Decision::NotMet(how) => how,
                Decision::Declined(decline) => crate::store::direct::reason(decline),
            };
            assert!(
                !(step.source.is_empty() || step.step.is_empty() || said.is_empty()),
                "{}",
                step.id
            );
        }
    }
}
