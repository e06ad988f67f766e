//! `#[pg_test]`s of `queue_tasks`: one queue's tasks, live and kept
//! completed, filtered and paged by task id in both directions, each page
//! checked against `queue_list`'s rows filtered here; its errors; its rights
//! are `queue_list`'s. Conventions as in `tests.rs`; the plans it runs are
//! checked in `tests_plans.rs`.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    /// One task of every listed state in queue `pg` (two dead, two kept
    /// completed, one waiting and one blocked), ready tasks of customers
    /// acme and globex, some with a `rush` key, and a task of another queue
    /// between each pair of them; created and changed times spread one
    /// minute apart in task id order.
    fn fill() {
        exec("SELECT aedb_queue.queue_configure('pg', keep_completed => '1 day')");
        for i in 0..24 {
            let customer = if i % 3 == 0 { "globex" } else { "acme" };
            let rush = if i % 4 == 0 { ", \"rush\": true" } else { "" };
            enqueue(
                "pg",
                &format!(", '{{\"customer\": \"{customer}\", \"n\": {i}{rush}}}'"),
            );
            enqueue("pg.other", &format!(", '{{\"customer\": \"acme\", \"n\": {i}}}'"));
        }
        for _ in 0..2 {
            let (id, token) = claim_one("pg");
            complete("pg", id, token, "");
        }
        for _ in 0..2 {
            let (id, token) = claim_one("pg");
            fail("pg", id, token, ", dead_letter => true");
        }
        claim_one("pg");
        enqueue("pg", ", '{\"customer\": \"initech\"}', delay => '1 hour'");
        let parent = enqueue("pg.other", "");
        enqueue("pg", &format!(", '{{}}', wait_for => ARRAY[{parent}]"));
        enqueue("pg", ", '{}', concurrency_key => 'k'");
        enqueue("pg", ", '{}', concurrency_key => 'k'");
        exec(
            "UPDATE aedb_queue.task SET created_at = '2030-01-01'::timestamptz + task_id * interval '1 minute',
                                        updated_at = '2030-01-01'::timestamptz + task_id * interval '1 minute' + interval '30 seconds'",
        );
        exec(
            "UPDATE aedb_queue.completed_task SET created_at = '2030-01-01'::timestamptz + task_id * interval '1 minute',
                                                  completed_at = '2030-01-01'::timestamptz + task_id * interval '1 minute' + interval '30 seconds'",
        );
        let states = ints(
            "SELECT count(DISTINCT state) FROM aedb_queue.queue_list('pg', NULL, 1000)",
        );
        assert_eq!(states, vec![7], "every listed state is there");
    }

    /// The ids `queue_tasks` returns for `args` (after the queue).
    fn page(args: &str) -> Vec<i64> {
        ints(&format!(
            "SELECT task_id FROM aedb_queue.queue_tasks('pg'{args})"
        ))
    }

    /// The ids of queue `pg`'s tasks whose row passes `cond`, in task id
    /// order: `queue_list`'s rows (every state) filtered here.
    fn expected(cond: &str) -> Vec<i64> {
        ints(&format!(
            "SELECT task_id FROM aedb_queue.queue_list('pg', NULL, 100000) t
             WHERE {cond} ORDER BY task_id"
        ))
    }

    /// Every task `filter` lets through, page by page of `size`: forward
    /// from the first with `after_task_id`, and backward from the last with
    /// `before_task_id`. Both walks must see the same tasks, in order.
    fn walk(filter: &str, size: usize) -> Vec<i64> {
        let mut forward = Vec::new();
        let mut pages = 0;
        loop {
            let after = forward
                .last()
                .map_or(String::new(), |id| format!(", after_task_id => {id}"));
            let got = page(&format!("{filter}{after}, \"limit\" => {size}"));
            assert!(got.len() <= size, "{filter}: {got:?}");
            assert!(got.windows(2).all(|w| w[0] < w[1]), "{filter}: {got:?}");
            forward.extend(&got);
            pages += 1;
            if got.len() < size {
                break;
            }
            assert!(pages < 100, "{filter}: no end");
        }
        let mut backward: Vec<Vec<i64>> = Vec::new();
        let mut before = i64::MAX;
        loop {
            let got = page(&format!(
                "{filter}, before_task_id => {before}, \"limit\" => {size}"
            ));
            assert!(got.windows(2).all(|w| w[0] < w[1]), "{filter}: {got:?}");
            let Some(first) = got.first().copied() else {
                break;
            };
            let short = got.len() < size;
            backward.push(got);
            if short {
                break;
            }
            before = first;
            assert!(backward.len() < 100, "{filter}: no start");
        }
        let backward: Vec<i64> = backward.into_iter().rev().flatten().collect();
        assert_eq!(forward, backward, "{filter}: forward and backward walks");
        forward
    }

    #[pg_test]
    fn queue_tasks_pages_through_every_state_both_ways() {
        fill();
        let all = expected("true");
        assert_eq!(all.len(), 24 + 4, "24 enqueued, then one scheduled, one waiting, two keyed");
        for size in [1, 3, 7, 100] {
            assert_eq!(walk("", size), all, "pages of {size}");
        }
        for state in [
            "ready",
            "in_flight",
            "scheduled",
            "dead",
            "waiting",
            "blocked",
            "completed",
        ] {
            let want = expected(&format!("t.state = '{state}'"));
            assert!(!want.is_empty(), "{state}");
            assert_eq!(walk(&format!(", state => '{state}'"), 2), want, "{state}");
        }
        // No task of the other queue, nor of any queue for an unknown one.
        assert_eq!(count("aedb_queue.queue_tasks('pg.none')"), 0);
    }

    #[pg_test]
    fn queue_tasks_filters_by_time_and_payload_while_paging() {
        fill();
        let mid: i64 = one("SELECT task_id FROM aedb_queue.queue_list('pg', 'ready', 1000) ORDER BY task_id OFFSET 10 LIMIT 1");
        let at = |id: i64| format!("'2030-01-01'::timestamptz + {id} * interval '1 minute'");
        let cases = [
            (
                format!(", created_after => {}", at(mid)),
                format!("t.created_at >= {}", at(mid)),
            ),
            (
                format!(", created_before => {}", at(mid)),
                format!("t.created_at < {}", at(mid)),
            ),
            (
                format!(
                    ", updated_after => {} + interval '30 seconds', updated_before => {} + interval '1 second'",
                    at(mid - 4),
                    at(mid + 4)
                ),
                format!(
                    "t.updated_at >= {} + interval '30 seconds' AND t.updated_at < {} + interval '1 second'",
                    at(mid - 4),
                    at(mid + 4)
                ),
            ),
            (
                ", payload_contains => '{\"customer\": \"acme\"}'".to_string(),
                "t.payload @> '{\"customer\": \"acme\"}'".to_string(),
            ),
            (
                ", payload_has_key => 'rush'".to_string(),
                "t.payload ? 'rush'".to_string(),
            ),
            (
                ", state => 'ready', payload_contains => '{\"customer\": \"globex\", \"rush\": true}'"
                    .to_string(),
                "t.state = 'ready' AND t.payload @> '{\"customer\": \"globex\", \"rush\": true}'"
                    .to_string(),
            ),
            (
                format!(
                    ", state => 'completed', created_after => {}, payload_has_key => 'customer'",
                    at(0)
                ),
                format!(
                    "t.state = 'completed' AND t.created_at >= {} AND t.payload ? 'customer'",
                    at(0)
                ),
            ),
            (
                ", state => 'dead', payload_contains => '{\"customer\": \"acme\"}'".to_string(),
                "t.state = 'dead' AND t.payload @> '{\"customer\": \"acme\"}'".to_string(),
            ),
            (
                ", payload_contains => '{\"customer\": \"nobody\"}'".to_string(),
                "false".to_string(),
            ),
        ];
        for (filter, cond) in cases {
            let want = expected(&cond);
            assert_eq!(walk(&filter, 2), want, "{filter}");
            assert_eq!(walk(&filter, 5), want, "{filter}");
        }
        // Kept completed tasks: their completion is their last change.
        let done = expected("t.state = 'completed'");
        let completed_at = |id: i64| format!("{} + interval '30 seconds'", at(id));
        assert_eq!(
            page(&format!(
                ", state => 'completed', updated_after => {}",
                completed_at(done[1])
            )),
            vec![done[1]]
        );
    }

    #[pg_test]
    fn queue_tasks_rows_are_queue_lists_rows() {
        fill();
        let rows = |from: &str| -> String {
            one(&format!(
                "SELECT string_agg(to_jsonb(t)::text, E'\\n' ORDER BY t.task_id) FROM {from} t"
            ))
        };
        assert_eq!(
            rows("aedb_queue.queue_tasks('pg', \"limit\" => 1000)"),
            rows("aedb_queue.queue_list('pg', NULL, 1000)")
        );
    }

    /// The filters look at every task of the queue, not the first few
    /// thousand a listing returns: the last of 6,000 is found.
    #[pg_test]
    fn queue_tasks_finds_a_task_far_down_the_queue() {
        exec(
            "SELECT count(*) FROM aedb_queue.queue_enqueue_batch('pg.big',
                 ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 6000) g))",
        );
        let last: i64 = one("SELECT max(task_id) FROM aedb_queue.task WHERE queue = 'pg.big'");
        assert_eq!(
            page_of("pg.big", ", payload_contains => '{\"n\": 6000}'"),
            vec![last]
        );
        let mut before_last = ints(&format!(
            "SELECT task_id FROM aedb_queue.task WHERE queue = 'pg.big' AND task_id < {last}
             ORDER BY task_id DESC LIMIT 2"
        ));
        before_last.reverse();
        assert_eq!(
            page_of("pg.big", &format!(", before_task_id => {last}, \"limit\" => 2")),
            before_last
        );
    }

    fn page_of(queue: &str, args: &str) -> Vec<i64> {
        ints(&format!(
            "SELECT task_id FROM aedb_queue.queue_tasks('{queue}'{args})"
        ))
    }

    #[pg_test]
    fn queue_tasks_rejects_bad_arguments_naming_them() {
        enqueue("pg", "");
        for (args, sqlstate, message) in [
            ("NULL", "22004", "argument \"queue\" must not be NULL"),
            ("''", "22023", "invalid argument \"queue\": must not be empty"),
            (
                "'pg', \"limit\" => NULL",
                "22004",
                "argument \"limit\" must not be NULL",
            ),
            (
                "'pg', \"limit\" => 0",
                "22023",
                "invalid argument \"limit\": must be between 1 and 100000, got 0",
            ),
            (
                "'pg', \"limit\" => 100001",
                "22023",
                "invalid argument \"limit\": must be between 1 and 100000, got 100001",
            ),
            (
                "'pg', state => 'bogus'",
                "22023",
                "invalid argument \"state\": must be one of waiting, scheduled, blocked, ready, in_flight, dead, completed; got \"bogus\"",
            ),
            (
                "'pg', after_task_id => 1, before_task_id => 9",
                "22023",
                "invalid argument \"before_task_id\": must not be given with after_task_id: a page runs one way",
            ),
        ] {
            expect_error(
                &format!("SELECT * FROM aedb_queue.queue_tasks({args})"),
                sqlstate,
                message,
            );
        }
        set_payload_limit(100);
        let (state, message) = error_of(&format!(
            "SELECT * FROM aedb_queue.queue_tasks('pg', payload_contains => {})",
            big_json(200)
        ))
        .expect("an oversized filter is refused");
        assert_eq!(state, "54000", "{message}");
        assert!(message.contains("\"payload_contains\""), "{message}");
        let (state, message) = error_of(
            "SELECT * FROM aedb_queue.queue_tasks('pg', payload_has_key => repeat('k', 101))",
        )
        .expect("an oversized key is refused");
        assert_eq!(state, "54000", "{message}");
        assert!(message.contains("\"payload_has_key\""), "{message}");
    }

    /// The read right of `queue_list`: a role confined to `pa.*` pages its
    /// own queue and is refused another's, whatever its filters say.
    #[pg_test]
    fn queue_tasks_needs_the_read_right_on_the_queue() {
        exec("CREATE ROLE paging_reader NOLOGIN");
        exec("GRANT aedb_queue_worker TO paging_reader");
        exec("SELECT aedb_queue.queue_grant('pa.*', 'paging_reader', 'worker')");
        let own = enqueue("pa.jobs", "");
        enqueue("pb.jobs", "");
        exec("SET LOCAL ROLE paging_reader");
        assert_eq!(
            ints("SELECT task_id FROM aedb_queue.queue_tasks('pa.jobs')"),
            vec![own]
        );
        let refused = error_of("SELECT * FROM aedb_queue.queue_tasks('pb.jobs', state => 'bogus')");
        exec("RESET ROLE");
        assert_eq!(refused.map(|(state, _)| state).as_deref(), Some("42501"));
        exec("CREATE ROLE paging_nobody NOLOGIN");
        exec("SET LOCAL ROLE paging_nobody");
        let refused = error_of("SELECT * FROM aedb_queue.queue_tasks('pa.jobs')");
        exec("RESET ROLE");
        assert_eq!(refused.map(|(state, _)| state).as_deref(), Some("42501"));
    }
}
