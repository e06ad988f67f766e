//! `#[pg_test]`s of `queue_release`: a worker hands a leased task back
//! without spending an attempt. The conventions are those of `tests.rs`.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    fn release(queue: &str, id: i64, token: i64, extra: &str) -> String {
        one(&format!(
            "SELECT aedb_queue.queue_release('{queue}', {id}, {token}{extra})::text"
        ))
    }

    #[pg_test]
    fn release_makes_the_task_ready_again_with_its_attempt_restored() {
        let id = enqueue("rl", ", max_attempts => 1");
        let (_, t1) = claim_one("rl");
        assert_eq!(field::<i32>(id, "attempts"), Some(1));
        assert_eq!(release("rl", id, t1, ""), "applied");
        assert_eq!(state_of("rl", id).as_deref(), Some("ready"));
        assert_eq!(field::<i32>(id, "attempts"), Some(0));
        assert_eq!(
            field::<bool>(
                id,
                "owner_id IS NULL AND lease_deadline IS NULL AND last_error IS NULL"
            ),
            Some(true)
        );
        assert_task_invariants("released");
        // The only attempt is still there: a failure now dead-letters, a
        // second release keeps the task alive however often it comes back.
        let (again, t2) = claim_one("rl");
        assert_eq!(again, id);
        assert_eq!(t2, t1 + 1, "the next claim gets a new token");
        assert_eq!(release("rl", id, t2, ""), "applied");
        let (_, t3) = claim_one("rl");
        assert_eq!(field::<i32>(id, "attempts"), Some(1));
        assert_eq!(fail("rl", id, t3, ""), "applied");
        assert_eq!(state_of("rl", id).as_deref(), Some("dead"));
    }

    #[pg_test]
    fn a_released_task_keeps_its_progress_and_place() {
        let first = enqueue("rl", "");
        let second = enqueue("rl", "");
        let (id, token) = claim_one("rl");
        assert_eq!(id, first);
        assert_eq!(
            heartbeat("rl", id, token, "1 minute", ", progress => '{\"page\": 3}'"),
            "applied"
        );
        assert_eq!(release("rl", id, token, ""), "applied");
        without_scan_hints();
        let progress: Option<pgrx::JsonB> =
            opt("SELECT progress FROM aedb_queue.queue_claim('rl', 'w2')");
        assert_eq!(
            progress.map(|p| p.0),
            Some(serde_json::json!({"page": 3})),
            "the first task is served again first, with its checkpoint"
        );
        assert_eq!(state_of("rl", second).as_deref(), Some("ready"));
    }

    #[pg_test]
    fn release_with_a_delay_schedules_the_task() {
        let id = enqueue("rl", "");
        let (_, token) = claim_one("rl");
        assert_eq!(
            release("rl", id, token, ", delay => '90 seconds'"),
            "applied"
        );
        assert_eq!(state_of("rl", id).as_deref(), Some("scheduled"));
        assert_eq!(
            text_field(id, "not_before - updated_at").as_deref(),
            Some("00:01:30")
        );
        assert_eq!(field::<i32>(id, "attempts"), Some(0));
        assert!(claim("rl", "").is_empty(), "not claimable before its delay");
        assert_task_invariants("released with a delay");
    }

    #[pg_test]
    fn release_with_a_stale_token_or_of_a_task_not_held_changes_nothing() {
        let id = enqueue("rl", "");
        let (_, token) = claim_one("rl");
        let snapshot =
            "(state, attempts, fencing_token, not_before, owner_id, lease_deadline, updated_at)";
        let before = text_field(id, snapshot);
        assert_eq!(release("rl", id, token + 1, ""), "lease_lost");
        assert_eq!(release("rl", id, token - 1, ""), "lease_lost");
        assert_eq!(release("other", id, token, ""), "lease_lost", "wrong queue");
        assert_eq!(
            release("rl", id + 1000, token, ""),
            "lease_lost",
            "no such task"
        );
        assert_eq!(text_field(id, snapshot), before);
        assert_eq!(release("rl", id, token, ""), "applied");
        assert_eq!(
            release("rl", id, token, ""),
            "lease_lost",
            "a second release: the task is no longer in flight"
        );
        assert_eq!(
            complete("rl", id, token, ""),
            "lease_lost",
            "released: fenced out"
        );
    }

    #[pg_test]
    fn strict_release_fenced_out_raises_40002() {
        let id = enqueue("rl", "");
        let (_, token) = claim_one("rl");
        expect_error(
            &format!(
                "SELECT aedb_queue.queue_release('rl', {id}, {}, strict => true)",
                token + 1
            ),
            "40002",
            &format!(
                "lease lost: task {id} is no longer in flight under fencing token {}",
                token + 1
            ),
        );
        // What the refused call leaves is seen from another session:
        // itests/tests/rejections.rs.
        assert_eq!(release("rl", id, token, ", strict => true"), "applied");
    }

    #[pg_test]
    fn release_rejects_bad_arguments_by_name() {
        let id = enqueue("rl", "");
        let (_, token) = claim_one("rl");
        let call = |args: &str| format!("SELECT aedb_queue.queue_release({args})");
        expect_error(
            &call(&format!("'rl', {id}, {token}, delay => '-1 second'")),
            "22023",
            "invalid argument \"delay\": must not be a negative interval",
        );
        expect_error(
            &call(&format!("NULL, {id}, {token}")),
            "22004",
            "argument \"queue\" must not be NULL",
        );
        expect_error(
            &call(&format!("'rl', NULL, {token}")),
            "22004",
            "argument \"task_id\" must not be NULL",
        );
        expect_error(
            &call(&format!("'rl', {id}, NULL")),
            "22004",
            "argument \"fencing_token\" must not be NULL",
        );
        expect_error(
            &call(&format!("'rl', {id}, {token}, delay => NULL")),
            "22004",
            "argument \"delay\" must not be NULL",
        );
        // What the refused call leaves is seen from another session:
        // itests/tests/rejections.rs.
    }

    #[pg_test]
    fn releasing_a_keyed_task_keeps_its_slot_while_ready_and_frees_it_when_delayed() {
        let holder = enqueue("rl.k", ", concurrency_key => 'k'");
        let waiter = enqueue("rl.k", ", concurrency_key => 'k'");
        assert_eq!(state_of("rl.k", waiter).as_deref(), Some("blocked"));
        let (_, token) = claim_one("rl.k");
        // Back to ready: it still holds the key's one slot, the waiter waits.
        assert_eq!(release("rl.k", holder, token, ""), "applied");
        assert_eq!(state_of("rl.k", holder).as_deref(), Some("ready"));
        assert_eq!(state_of("rl.k", waiter).as_deref(), Some("blocked"));
        assert_task_invariants("released to ready");
        // Delayed: the slot goes to the waiter.
        let (again, token) = claim_one("rl.k");
        assert_eq!(again, holder);
        assert_eq!(
            release("rl.k", holder, token, ", delay => '1 hour'"),
            "applied"
        );
        assert_eq!(state_of("rl.k", holder).as_deref(), Some("scheduled"));
        assert_eq!(state_of("rl.k", waiter).as_deref(), Some("ready"));
        assert_task_invariants("released with a delay");
    }
}
