//! `#[pg_test]`s of what dashboards read: `queue_overview`, `queue_find`,
//! `queue_access` and `queue_counters` (the last on a cluster without the
//! library preloaded, as `cargo pgrx test` runs it; the counting itself is
//! tested over TCP in itests/tests/counters.rs). The conventions are those
//! of `tests.rs`.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    fn overview(queue: &str, limit: i32, column: &str) -> String {
        one(&format!(
            "SELECT ({column})::text FROM aedb_queue.queue_overview({limit}) WHERE queue = '{queue}'"
        ))
    }

    #[pg_test]
    fn overview_counts_exactly_below_the_limit() {
        let doomed = enqueue("ov", ", max_attempts => 1");
        enqueue("ov", "");
        enqueue("ov", "");
        enqueue("ov", ", delay => '1 hour'");
        let (first, t1) = claim_one("ov");
        assert_eq!(first, doomed);
        assert_eq!(fail("ov", first, t1, ""), "applied");
        let (id, token) = claim_one("ov");
        assert_eq!(
            overview(
                "ov",
                1000,
                "ready || '/' || in_flight || '/' || scheduled || '/' || dead"
            ),
            "1/1/1/1"
        );
        assert_eq!(overview("ov", 1000, "estimated"), "{}");
        assert_eq!(overview("ov", 1000, "expired_leases"), "0");
        expire_lease(id);
        assert_eq!(overview("ov", 1000, "expired_leases"), "1");
        assert_eq!(complete("ov", id, token, ""), "applied");
        assert_eq!(
            overview("ov", 1000, "in_flight || '/' || expired_leases"),
            "0/0"
        );
    }

    #[pg_test]
    fn overview_marks_a_figure_estimated_once_it_reaches_the_limit() {
        for _ in 0..5 {
            enqueue("ov", "");
        }
        exec("ANALYZE aedb_queue.task");
        // Three entries read: ready is cut short and estimated, never below
        // what was read; the empty states stay exact.
        assert_eq!(overview("ov", 3, "estimated"), "{ready}");
        let ready: i64 = one("SELECT ready FROM aedb_queue.queue_overview(3) WHERE queue = 'ov'");
        assert!(ready >= 3, "an estimate is never below the limit: {ready}");
        assert_eq!(overview("ov", 3, "dead"), "0");
        assert_eq!(overview("ov", 5, "estimated"), "{ready}");
        assert_eq!(overview("ov", 6, "estimated::text || ready"), "{}5");
    }

    #[pg_test]
    fn overview_oldest_ready_age_is_the_head_of_the_queue() {
        assert_eq!(
            opt::<String>(
                "SELECT oldest_ready_age::text FROM aedb_queue.queue_overview() WHERE queue = 'ov'"
            ),
            None,
            "no queue yet, no row"
        );
        enqueue("ov", "");
        let age: bool = one(
            "SELECT oldest_ready_age >= '0 s' AND oldest_ready_age < '1 minute'
             FROM aedb_queue.queue_overview() WHERE queue = 'ov'",
        );
        assert!(age);
    }

    #[pg_test]
    fn overview_of_one_queue_reads_that_queue_alone() {
        enqueue("ov1", "");
        enqueue("ov2", "");
        let queues: String = one(
            "SELECT string_agg(queue, ',') FROM aedb_queue.queue_overview(queue_name => 'ov2')",
        );
        assert_eq!(queues, "ov2");
        let none: i64 = one("SELECT count(*) FROM aedb_queue.queue_overview(queue_name => 'nope')");
        assert_eq!(none, 0);
    }

    #[pg_test]
    fn overview_refuses_a_limit_out_of_range() {
        for limit in ["0", "-1", "NULL", "1000001"] {
            expect_error(
                &format!("SELECT * FROM aedb_queue.queue_overview({limit})"),
                "22023",
                "invalid argument \"exact_limit\": must be between 1 and 1000000",
            );
        }
    }

    #[pg_test]
    fn find_by_id_sees_live_and_kept_completed_tasks() {
        exec("SELECT aedb_queue.queue_configure('fd', keep_completed => '1 day')");
        let live = enqueue("fd", "");
        let done = enqueue("fd", "");
        let (_, _) = claim_one("fd");
        let (second, token) = claim_one("fd");
        assert_eq!(second, done);
        assert_eq!(complete("fd", done, token, ""), "applied");
        let find = |args: &str| -> Vec<String> {
            let rows: Vec<i64> = ints(&format!(
                "SELECT task_id FROM aedb_queue.queue_find({args}) ORDER BY task_id"
            ));
            rows.iter().map(|i| i.to_string()).collect()
        };
        assert_eq!(find(&format!("task_id => {live}")), [live.to_string()]);
        assert_eq!(find(&format!("task_id => {done}")), [done.to_string()]);
        let state: String = one(&format!(
            "SELECT state FROM aedb_queue.queue_find(task_id => {done})"
        ));
        assert_eq!(state, "completed");
        assert!(find(&format!("task_id => {live}, queue => 'other'")).is_empty());
        assert!(find("task_id => 0").is_empty());
    }

    #[pg_test]
    fn find_by_key_looks_in_every_queue_or_one() {
        let a = enqueue("fa", ", idempotency_key => 'k1'");
        let b = enqueue("fb", ", idempotency_key => 'k1'");
        enqueue("fb", ", idempotency_key => 'k2'");
        let ids = |args: &str| {
            ints(&format!(
                "SELECT task_id FROM aedb_queue.queue_find({args}) ORDER BY task_id"
            ))
        };
        assert_eq!(ids("idempotency_key => 'k1'"), [a, b]);
        assert_eq!(ids("idempotency_key => 'k1', queue => 'fb'"), [b]);
        assert!(ids("idempotency_key => 'nope'").is_empty());
    }

    #[pg_test]
    fn find_needs_exactly_one_of_id_and_key() {
        for args in ["", "task_id => 1, idempotency_key => 'k'", "queue => 'fa'"] {
            expect_error(
                &format!("SELECT * FROM aedb_queue.queue_find({args})"),
                "22023",
                "invalid argument \"task_id\": give exactly one of task_id and idempotency_key",
            );
        }
        expect_error(
            "SELECT * FROM aedb_queue.queue_find(task_id => 1, queue => '')",
            "22023",
            "invalid argument \"queue\": must not be empty",
        );
    }

    #[pg_test]
    fn access_of_the_superuser_is_everything_on_every_queue() {
        enqueue("ac1", "");
        enqueue("ac2", "");
        let rows: String = one(
            "SELECT string_agg(queue || ':' || produce || work || administer, ',' ORDER BY queue)
             FROM aedb_queue.queue_access() WHERE queue LIKE 'ac%'",
        );
        assert_eq!(rows, "ac1:truetruetrue,ac2:truetruetrue");
    }

    #[pg_test]
    fn counters_say_the_library_is_not_preloaded() {
        enqueue("ct", "");
        let (state, message) = error_of("SELECT * FROM aedb_queue.queue_counters()")
            .expect("queue_counters() without shared_preload_libraries must fail");
        assert_eq!(state, "55000");
        assert!(
            message.contains("shared_preload_libraries"),
            "the message says what to do: {message}"
        );
    }

    fn errors(queue: &str, id: i64) -> String {
        one(&format!(
            "SELECT coalesce(string_agg(coalesce(attempt::text, '-') || ':' || error, ' | '), '')
             FROM aedb_queue.queue_errors('{queue}', {id})"
        ))
    }

    #[pg_test]
    fn errors_keep_every_failure_expired_lease_and_retry() {
        let id = enqueue("er", ", max_attempts => 3");
        assert_eq!(
            errors("er", id),
            "",
            "a task that never failed has no errors"
        );
        let (_, t1) = claim_one("er");
        assert_eq!(fail("er", id, t1, ", retry_in => '0'"), "applied");
        let (_, _) = claim_one("er");
        expire_lease(id);
        exec("SELECT * FROM aedb_queue.queue_reap('er')");
        let (_, t3) = claim_one("er");
        assert_eq!(fail("er", id, t3, ""), "applied");
        assert_eq!(state_of("er", id).as_deref(), Some("dead"));
        assert_eq!(
            errors("er", id),
            "1:boom | 2:lease expired; requeued | 3:boom",
            "one entry per attempt that failed, oldest first"
        );
        let stamped: bool = one(&format!(
            "SELECT bool_and(failed_at IS NOT NULL) FROM aedb_queue.queue_errors('er', {id})"
        ));
        assert!(stamped);
        // A retry of the dead task keeps its history; the next failure adds to it.
        exec(&format!(
            "SELECT aedb_queue.queue_retry_dead('er', task_id => {id})"
        ));
        let (_, t4) = claim_one("er");
        assert_eq!(fail("er", id, t4, ""), "applied");
        assert_eq!(
            errors("er", id),
            "1:boom | 2:lease expired; requeued | 3:boom | 1:boom"
        );
    }

    #[pg_test]
    fn errors_keep_the_last_twenty() {
        let id = enqueue("er", ", max_attempts => 100");
        for _ in 0..25 {
            let (_, token) = claim_one("er");
            assert_eq!(fail("er", id, token, ", retry_in => '0'"), "applied");
        }
        let attempts: String = one(&format!(
            "SELECT string_agg(attempt::text, ',') FROM aedb_queue.queue_errors('er', {id})"
        ));
        let expected: Vec<String> = (6..=25).map(|n| n.to_string()).collect();
        assert_eq!(attempts, expected.join(","));
    }

    #[pg_test]
    fn errors_of_a_child_name_its_failed_parent() {
        let parent = enqueue("er", ", max_attempts => 1");
        let child = enqueue("er", &format!(", wait_for => ARRAY[{parent}]"));
        let (_, token) = claim_one("er");
        assert_eq!(fail("er", parent, token, ""), "applied");
        assert_eq!(
            errors("er", child),
            format!("0:parent task {parent} was dead-lettered")
        );
        // Dead-lettered as it is enqueued (its parent is dead already):
        // the last error alone, with no attempt.
        let late = enqueue("er", &format!(", wait_for => ARRAY[{parent}]"));
        assert_eq!(state_of("er", late).as_deref(), Some("dead"));
        assert!(
            errors("er", late).starts_with("-:parent task"),
            "{}",
            errors("er", late)
        );
    }

    #[pg_test]
    fn errors_and_children_need_a_queue_and_a_task() {
        for call in ["queue_errors", "queue_children"] {
            expect_error(
                &format!("SELECT * FROM aedb_queue.{call}(NULL, 1)"),
                "22004",
                "argument \"queue\" must not be NULL",
            );
            expect_error(
                &format!("SELECT * FROM aedb_queue.{call}('q', NULL)"),
                "22004",
                "argument \"task_id\" must not be NULL",
            );
        }
    }

    #[pg_test]
    fn children_are_the_tasks_waiting_for_a_task() {
        let parent = enqueue("ch", "");
        let a = enqueue("ch", &format!(", wait_for => ARRAY[{parent}]"));
        let b = enqueue("ch.other", &format!(", wait_for => ARRAY[{parent}]"));
        let children = ints(&format!(
            "SELECT task_id FROM aedb_queue.queue_children('ch', {parent}) ORDER BY task_id"
        ));
        assert_eq!(children, [a, b]);
        let state: String = one(&format!(
            "SELECT string_agg(state, ',' ORDER BY task_id) FROM aedb_queue.queue_children('ch', {parent})"
        ));
        assert_eq!(state, "waiting,waiting");
        assert!(ints(&format!(
            "SELECT task_id FROM aedb_queue.queue_children('ch', {a})"
        ))
        .is_empty());
        assert!(
            ints(&format!(
                "SELECT task_id FROM aedb_queue.queue_children('ch.other', {parent})"
            ))
            .is_empty(),
            "the task is looked up in the queue named"
        );
    }
}
