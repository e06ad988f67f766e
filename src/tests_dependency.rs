//! `#[pg_test]`s of task dependencies: the statements one completion runs
//! whatever the number of children, the columns a child and a parent
//! carry, the plain path left to tasks without dependents, and argument
//! errors. pg_regress `task_dependencies.sql` shows a DAG as an example;
//! the isolation spec `parents-complete-concurrently` and the itest
//! `dependencies.rs` the concurrency.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    #[pg_test]
    fn a_parent_with_a_thousand_children_completes_in_three_statements() {
        let parent = enqueue("p", "");
        let children = ints(&format!(
            "SELECT * FROM aedb_queue.queue_enqueue_batch('c',
                 ARRAY(SELECT '{{}}'::jsonb FROM generate_series(1, 1000)), wait_for => ARRAY[{parent}])"
        ));
        assert_eq!(children.len(), 1000);
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'c' AND state = 'waiting'"),
            1000
        );
        let (_, token) = claim_one("p");
        // Both queues' settings read (and cached) before the count starts:
        // waking the children's queue looks up whether it notifies.
        exec("SELECT aedb_queue.queue_enqueue_batch('c', ARRAY[]::jsonb[])");
        let before = (crate::store::statements_run(), direct_deletes());
        assert_eq!(complete("p", parent, token, ""), "applied");
        let statements = crate::store::statements_run() - before.0;
        // The plain completion (which leaves parents alone) without a
        // statement; the parent's (kept) and the release of every child.
        assert_eq!(direct_deletes() - before.1, 1, "the plain completion tried");
        assert_eq!(statements, 2, "statements for one parent and 1000 children");
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'c' AND state = 'ready'"),
            1000
        );
        assert_eq!(
            count(&format!(
                "aedb_queue.completed_task WHERE task_id = {parent}"
            )),
            1
        );
        assert_task_invariants("after the release");
    }

    /// A batch settle with parents among its tasks: the plain ones on the
    /// plain path, the parents on theirs (kept, children released), a stale
    /// pair of a parent fenced out.
    #[pg_test]
    fn a_batch_settle_completes_parents_and_plain_tasks() {
        let parent = enqueue("b", "");
        let plain = enqueue("b", "");
        let child: i64 = one(&format!(
            "SELECT task_id FROM aedb_queue.queue_enqueue('bc', wait_for => ARRAY[{parent}])"
        ));
        let claimed = claim("b", ", max => 2");
        let token = |id: i64| claimed.iter().find(|(t, _)| *t == id).unwrap().1;
        let outcomes: String = one(&format!(
            "SELECT string_agg(outcome::text, ',' ORDER BY ord) FROM aedb_queue.queue_complete_batch('b',
                 ARRAY[{parent}, {plain}, {parent}], ARRAY[{}, {}, {}]) WITH ORDINALITY AS o(t, outcome, ord)",
            token(parent) + 1,
            token(plain),
            token(parent)
        ));
        assert_eq!(outcomes, "lease_lost,applied,applied");
        assert_eq!(text_field(child, "state::text").as_deref(), Some("ready"));
        assert_eq!(
            count(&format!(
                "aedb_queue.completed_task WHERE task_id = {parent}"
            )),
            1
        );
        assert_eq!(count("aedb_queue.task WHERE queue = 'b'"), 0);
    }

    #[pg_test]
    fn a_task_without_dependents_completes_on_the_plain_path() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        let before = (crate::store::statements_run(), direct_deletes());
        assert_eq!(complete("q", id, token, ""), "applied");
        assert_eq!(crate::store::statements_run() - before.0, 0);
        assert_eq!(direct_deletes() - before.1, 1);
        assert_eq!(count("aedb_queue.completed_task"), 0, "not kept");
    }

    fn direct_deletes() -> u64 {
        crate::store::am::delete::CALLS.with(|c| c.get())
    }

    #[pg_test]
    fn child_and_parent_columns() {
        let a = enqueue("p", "");
        let b = enqueue("p", "");
        let child: i64 = one(&format!(
            "SELECT task_id FROM aedb_queue.queue_enqueue('c', wait_for => ARRAY[{b}, {a}, {a}])"
        ));
        assert_eq!(
            field::<i32>(child, "waiting_on"),
            Some(2),
            "duplicates count once"
        );
        assert_eq!(field::<bool>(a, "has_dependents"), Some(true));
        assert_eq!(text_field(child, "state::text").as_deref(), Some("waiting"));
        assert_eq!(
            ints(&format!(
                "SELECT parent_id FROM aedb_queue.task_dependency WHERE child_id = {child} ORDER BY 1"
            )),
            vec![a, b]
        );
        // A delayed child released before its delay is over is scheduled.
        let later: i64 = one(&format!(
            "SELECT task_id FROM aedb_queue.queue_enqueue('c', delay => '1 hour', wait_for => ARRAY[{a}])"
        ));
        let (_, token) = claim_one("p");
        assert_eq!(complete("p", a, token, ""), "applied");
        assert_eq!(
            text_field(later, "state::text").as_deref(),
            Some("scheduled")
        );
        assert_eq!(text_field(child, "state::text").as_deref(), Some("waiting"));
        assert_eq!(field::<i32>(child, "waiting_on"), Some(1));
        assert_task_invariants("after one parent");
    }

    #[pg_test]
    fn an_idempotent_retry_links_nothing_more() {
        let p = enqueue("p", "");
        let first: i64 = one(&format!(
            "SELECT task_id FROM aedb_queue.queue_enqueue('c', idempotency_key => 'k', wait_for => ARRAY[{p}])"
        ));
        let again: String = one(&format!(
            "SELECT (task_id, deduplicated)::text
             FROM aedb_queue.queue_enqueue('c', idempotency_key => 'k', wait_for => ARRAY[{p}])"
        ));
        assert_eq!(
            again,
            format!("({first},t)"),
            "the first task, deduplicated"
        );
        assert_eq!(count("aedb_queue.task_dependency"), 1);
    }

    #[pg_test]
    fn argument_errors_name_their_argument() {
        let cases = [
            (
                "SELECT aedb_queue.queue_enqueue('c', wait_for => ARRAY[1], on_parent_failure => NULL)",
                "22004",
                "argument \"on_parent_failure\" must not be NULL",
            ),
            (
                "SELECT aedb_queue.queue_enqueue_batch('c', ARRAY['{}'::jsonb], wait_for => ARRAY[NULL::bigint])",
                "22023",
                "invalid argument \"wait_for\": must not contain NULL (element 1 is NULL)",
            ),
            (
                "SELECT aedb_queue.queue_enqueue_batch('c', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 1000)),
                     wait_for => ARRAY(SELECT generate_series(1, 101)::bigint))",
                "54000",
                "argument \"wait_for\" links 1000 tasks to 101 parents, more than 100000 pairs",
            ),
            (
                "SELECT * FROM aedb_queue.queue_parents('c', NULL)",
                "22004",
                "argument \"task_id\" must not be NULL",
            ),
        ];
        for (query, sqlstate, message) in cases {
            expect_error(query, sqlstate, message);
        }
        expect_error(
            "SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{\"queue\": \"c\", \"wait_for\": [1, \"x\"]}]')",
            "22023",
            "invalid argument \"follow_ups[0].wait_for\": must be an array of task ids",
        );
        assert_eq!(count("aedb_queue.task"), 0);
    }
}
