//! `#[pg_test]`s of how statements run: their plans (the index each real
//! statement reads), batch completion, inline reaping, and the scan hints
//! that let claims resume. Conventions as in `tests.rs`.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    // ------------------------------------------------------------------
    // Claim cost does not depend on clutter: the plans read only the
    // partial index of the state they serve.
    // ------------------------------------------------------------------

    type PlanNode = (String, Option<String>, Option<String>);

    /// (Node Type, Index Name, Index Cond) of every node of an EXPLAIN (FORMAT JSON) plan.
    fn nodes_of(plan: &serde_json::Value) -> Vec<PlanNode> {
        fn walk(node: &serde_json::Value, out: &mut Vec<PlanNode>) {
            let text = |key: &str| node.get(key).and_then(|v| v.as_str()).map(str::to_string);
            if let Some(kind) = text("Node Type") {
                out.push((kind, text("Index Name"), text("Index Cond")));
            }
            if let Some(plan) = node.get("Plan") {
                walk(plan, out);
            }
            for child in node
                .get("Plans")
                .and_then(|p| p.as_array())
                .into_iter()
                .flatten()
            {
                walk(child, out);
            }
        }
        let mut out = Vec::new();
        for root in plan.as_array().expect("EXPLAIN JSON is an array") {
            walk(root, &mut out);
        }
        out
    }

    /// 20,000 future timers, 20,000 dead tasks and a few ready ones in one
    /// queue, and 2,000 blocked tasks of one concurrency key and of one
    /// ordering key in another.
    fn fill_with_clutter() {
        for key in ["concurrency_key", "ordering_key"] {
            exec(&format!(
                "SELECT count(*) FROM aedb_queue.queue_enqueue_batch('clutter.keys',
                     ARRAY(SELECT '{{}}'::jsonb FROM generate_series(1, 2000)), {key} => 'hot')"
            ));
        }
        exec(
            "INSERT INTO aedb_queue.task (queue, state, not_before, max_attempts, backoff_base, backoff_max,
                                          attempts, created_at, updated_at)
             SELECT 'clutter', s.state::aedb_queue.task_state,
                    statement_timestamp() + interval '1 day' + g * interval '1 second', 5, '1 second', '1 minute',
                    CASE WHEN s.state = 'dead' THEN 5 ELSE 0 END, statement_timestamp(), statement_timestamp()
             FROM generate_series(1, 20000) g, (VALUES ('scheduled'), ('dead')) s(state)",
        );
        assert_eq!(
            ints("SELECT count(*) FROM aedb_queue.queue_enqueue_batch('clutter', array_fill('{}'::jsonb, ARRAY[5]))"),
            vec![5]
        );
        exec("ANALYZE aedb_queue.task");
    }

    /// The index scans each task statement's generic plan must contain, as
    /// (statement, [(index, a column its condition must mention)]).
    const EXPECTED_INDEXES: &[(&str, &[(&str, &str)])] = &[
        // The write then fetches the rows it locked by ctid (a Tid Scan, below).
        ("CLAIM", &[("task_ready_idx", "queue")]),
        ("CLAIM_AFTER", &[("task_ready_idx", "task_id")]),
        (
            "REAP_NEEDED",
            &[
                ("task_scheduled_idx", "not_before"),
                ("task_in_flight_idx", "lease_deadline"),
            ],
        ),
        (
            "REAP",
            &[
                ("task_scheduled_idx", "not_before"),
                ("task_in_flight_idx", "lease_deadline"),
            ],
        ),
        ("COMPLETE", &[("task_pkey", "task_id")]),
        // Each kind's oldest archived rows, in order: a workflow's from
        // its own index.
        (
            "EXPIRE_COMPLETED",
            &[
                ("completed_task_age_idx", "completed_at"),
                ("completed_task_workflow_idx", "completed_at"),
            ],
        ),
        // The children marked: by their keys.
        ("INSERT_LINKS", &[("task_pkey", "task_id")]),
        // One scan of the primary key for the whole batch.
        ("COMPLETE_MANY", &[("task_pkey", "ANY")]),
        ("LOCK_FOR_FAIL", &[("task_pkey", "task_id")]),
        ("SETTLE_FAILURE", &[("task_pkey", "task_id")]),
        ("HEARTBEAT", &[("task_pkey", "task_id")]),
        ("RELEASE", &[("task_pkey", "task_id")]),
        ("CANCEL", &[("task_pkey", "task_id")]),
        ("LOOKUP_KEY", &[("idempotency_key_pkey", "key")]),
        // A key's first blocked tasks, from its own range of the index.
        ("SETTLE_SLOTS", &[("task_blocked_idx", "concurrency_key")]),
        (
            "SETTLE_ONE_SLOT",
            &[("task_blocked_idx", "concurrency_key")],
        ),
        ("SETTLE_LINES", &[("task_blocked_idx", "ordering_key")]),
        (
            "QUEUES_WITH_WORK",
            &[
                ("task_scheduled_idx", "queue"),
                ("task_in_flight_idx", "queue"),
                ("completed_task_age_idx", "queue"),
            ],
        ),
    ];

    /// The real statements, prepared and planned as `store::execute` runs
    /// them (generic plans, our planner settings), on a table full of
    /// timers and dead tasks: each reads the index of the state it serves,
    /// bounded by its condition, and none scans the table. The resumed
    /// claim reads a range of the ready index, never the primary key in
    /// task-id order (which would walk every later task of any queue).
    /// Statements on the links and the archive as well as on tasks.
    const DEPENDENCY_STATEMENTS: &[&str] = &[
        "EXPIRE_COMPLETED",
        "LINK_PARENTS",
        "RELEASE_CHILDREN",
        "PARENTS_FAILED",
        "PARENTS_OF",
        "CHILDREN_OF",
    ];

    /// The statements that give slots and lines to blocked tasks: the
    /// tasks they pick, locked, are written by ctid.
    const FLOW_SETTLES: &[&str] = &["SETTLE_SLOTS", "SETTLE_ONE_SLOT", "SETTLE_LINES"];

    fn is_task_index(index: &str) -> bool {
        index.starts_with("task_") && !index.starts_with("task_dependency")
    }

    #[pg_test]
    fn every_task_statement_reads_its_index_on_a_cluttered_table() {
        fill_with_clutter();
        for (name, stmt) in crate::store::LIFECYCLE_STATEMENTS {
            let nodes = nodes_of(&crate::store::explain(stmt).unwrap());
            assert!(
                // The registry rows keeping keys: a partial index, any scan
                // of it. Links and kept parents: their tables' keys, any scan
                // of them; the task table's indexes are read in order.
                nodes.iter().all(|(kind, used, _)| kind != "Seq Scan"
                    && (!kind.starts_with("Bitmap")
                        || *name == "QUEUES_WITH_WORK"
                        || (DEPENDENCY_STATEMENTS.contains(name)
                            && !used.as_deref().is_some_and(is_task_index)))),
                "{name}: {nodes:?}"
            );
            let expected = EXPECTED_INDEXES
                .iter()
                .find(|(n, _)| n == name)
                .map_or(&[][..], |(_, e)| *e);
            for (index, column) in expected {
                assert!(
                    nodes.iter().any(|(kind, used, cond)| kind.starts_with("Index")
                        && used.as_deref() == Some(*index)
                        && cond.as_deref().is_some_and(|c| c.contains(column))),
                    "{name}: expected an index scan of {index} bounded by {column}; plan: {nodes:?}"
                );
            }
            if *name == "COMPLETE_MANY" {
                // Not a lookup (and a rescan) per task: fence_holds checks each.
                assert!(
                    nodes
                        .iter()
                        .all(|(kind, _, _)| !kind.contains("Nested Loop")),
                    "{name}: {nodes:?}"
                );
            }
            if *name == "EXPIRE_COMPLETED" {
                // A sort would read every archived row of the queue.
                assert!(
                    nodes.iter().all(|(kind, _, _)| !kind.contains("Sort")),
                    "{name} sorts: {nodes:?}"
                );
            }
            if name.starts_with("CLAIM") || FLOW_SETTLES.contains(name) {
                // The index is read in the order served: a sort would read
                // every ready task of the queue, or every blocked one of a key.
                assert!(
                    nodes.iter().all(|(kind, _, _)| !kind.contains("Sort")),
                    "{name} sorts: {nodes:?}"
                );
                // The picked rows are fetched by the ctid their lock returned,
                // not looked up again in the primary key (nor is the resumed
                // pick a walk of the primary key in task-id order).
                assert!(
                    nodes.iter().any(|(kind, _, _)| kind == "Tid Scan")
                        && nodes
                            .iter()
                            .all(|(_, used, _)| used.as_deref() != Some("task_pkey")),
                    "{name}: {nodes:?}"
                );
            }
        }
        // And the claim itself serves exactly the ready tasks.
        assert_eq!(claim("clutter", ", max => 100").len(), 5);
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'clutter' AND state = 'scheduled'"),
            20_000
        );
    }

    /// The workflow statements read their tables' keys and the task table's
    /// indexes, never a whole table: a step or a wait by its task, an event
    /// by its key, the tasks parked on an event through the waits' index.
    #[pg_test]
    fn workflow_statements_read_indexes_only() {
        fill_with_clutter();
        for (name, stmt) in crate::store::workflow::WORKFLOW_STATEMENTS {
            let nodes = nodes_of(&crate::store::explain(stmt).unwrap());
            assert!(!nodes.is_empty(), "{name}: no plan");
            assert!(
                nodes.iter().all(|(kind, _, _)| kind != "Seq Scan"),
                "{name}: {nodes:?}"
            );
        }
    }

    /// `queue_list` reads each state's index in its order and stops at its
    /// limit: a sort would read every task of the state first (every
    /// ready task, on a queue where only the first page is wanted). The
    /// waiting tasks, oldest first, are the exception: they share the
    /// blocked index, by key; the listing reads the queue's range of it.
    #[pg_test]
    fn listings_read_each_states_index_in_order() {
        fill_with_clutter();
        for (name, stmt) in crate::store::LISTING_STATEMENTS {
            let nodes = nodes_of(&crate::store::explain(stmt).unwrap());
            assert!(
                nodes.iter().all(|(kind, _, _)| kind != "Seq Scan"
                    && (*name == "LIST_WAITING" || !kind.contains("Sort"))),
                "{name}: {nodes:?}"
            );
        }
        let (_, waiting) = crate::store::LISTING_STATEMENTS
            .iter()
            .find(|(name, _)| *name == "LIST_WAITING")
            .unwrap();
        let nodes = nodes_of(&crate::store::explain(waiting).unwrap());
        assert!(
            nodes.iter().any(
                |(_, used, cond)| used.as_deref() == Some("task_blocked_idx")
                    && cond.as_deref().is_some_and(|c| c.contains("queue"))
            ),
            "LIST_WAITING: {nodes:?}"
        );
    }

    /// The index scans each page statement of `queue_tasks` must contain,
    /// as in `EXPECTED_INDEXES`.
    const PAGE_INDEXES: &[(&str, &[(&str, &str)])] = &[
        (
            "TASKS_AFTER",
            &[("task_pkey", "task_id"), ("completed_task_pkey", "task_id")],
        ),
        (
            "TASKS_BEFORE",
            &[("task_pkey", "task_id"), ("completed_task_pkey", "task_id")],
        ),
        ("DEAD_AFTER", &[("task_dead_idx", "task_id")]),
        ("DEAD_BEFORE", &[("task_dead_idx", "task_id")]),
    ];

    /// `queue_tasks` reads an index in task id order from where its page
    /// starts and stops at its limit: the primary keys of the task table
    /// and of the kept completed tasks, merged (no sort), or for dead tasks
    /// the queue's range of the dead index. A sort, or a bitmap, would read
    /// every task of the queue (or of every queue) before the first row.
    /// They start with `in_index_order!`, so the planner leaves them no
    /// sort and no bitmap, on tables full of clutter (this test) and on
    /// tables never analyzed (the next), also as `execute` plans them.
    #[pg_test]
    fn task_pages_read_an_index_in_task_id_order() {
        fill_with_clutter();
        exec(
            "INSERT INTO aedb_queue.completed_task (task_id, queue, priority, attempts, max_attempts,
                                                    fencing_token, created_at, completed_at)
             SELECT 1000000000 + g, 'clutter.done', 0, 1, 5, 1, statement_timestamp(), statement_timestamp()
             FROM generate_series(1, 20000) g",
        );
        exec("ANALYZE aedb_queue.completed_task");
        assert_task_pages_read_in_order("cluttered");
    }

    /// As above, with plans made while the tables were never analyzed (a
    /// fresh install), which a generic plan outlives.
    #[pg_test]
    fn task_pages_read_an_index_in_task_id_order_on_tables_never_analyzed() {
        for table in ["task", "completed_task"] {
            exec(&format!(
                "UPDATE pg_catalog.pg_class SET relpages = 0, reltuples = -1, relallvisible = 0
                 WHERE oid = 'aedb_queue.{table}'::regclass"
            ));
        }
        assert_task_pages_read_in_order("never analyzed");
    }

    fn assert_task_pages_read_in_order(tables: &str) {
        for (name, expected) in PAGE_INDEXES {
            let (_, stmt) = crate::store::LISTING_STATEMENTS
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("no statement {name}"));
            let nodes = nodes_of(&crate::store::explain(stmt).unwrap());
            assert!(
                nodes.iter().all(|(kind, _, _)| kind != "Seq Scan"
                    && !kind.contains("Sort")
                    && !kind.starts_with("Bitmap")),
                "{name}, {tables}: {nodes:?}"
            );
            for (index, column) in *expected {
                assert!(
                    nodes.iter().any(|(kind, used, cond)| kind.starts_with("Index")
                        && used.as_deref() == Some(*index)
                        && cond.as_deref().is_some_and(|c| c.contains(column))),
                    "{name}, {tables}: expected an index scan of {index} bounded by {column}; plan: {nodes:?}"
                );
            }
            assert_eq!(crate::store::seq_scans_of(stmt), 0, "{name}, {tables}, as executed");
            // Planned through the hook, which turns sorts and bitmaps off for it.
            assert_eq!(crate::store::sorts_of(stmt), 0, "{name}, {tables}, as executed");
        }
        // The planner settings were the statements' only.
        for setting in ["enable_sort", "enable_bitmapscan", "enable_seqscan"] {
            assert_eq!(
                Spi::get_one::<String>(&format!("SELECT current_setting('{setting}')")).unwrap(),
                Some("on".into()),
                "{setting}"
            );
        }
    }

    /// A generic plan lives until the next ANALYZE, so one made while the
    /// task table is empty and never analyzed (a fresh install, workers
    /// started before producers) serves the queue as it fills. None of the
    /// lifecycle statements may scan the table then, or every claim would
    /// read every task: the claim's write, picked by `ctid = ANY(...)`,
    /// is a sequential scan on such a table unless they are ruled out.
    #[pg_test]
    fn lifecycle_plans_made_on_a_never_analyzed_table_never_scan_it() {
        exec(
            "UPDATE pg_catalog.pg_class SET relpages = 0, reltuples = -1, relallvisible = 0
             WHERE oid = 'aedb_queue.task'::regclass",
        );
        for (name, stmt) in crate::store::LIFECYCLE_STATEMENTS {
            let nodes = nodes_of(&crate::store::explain(stmt).unwrap());
            assert!(!nodes.is_empty(), "{name}: no plan");
            assert!(
                nodes.iter().all(|(kind, _, _)| kind != "Seq Scan"),
                "{name} scans the task table: {nodes:?}"
            );
            if FLOW_SETTLES.contains(name) {
                // Not a bitmap of every blocked task: the picked ones by ctid.
                assert!(
                    nodes.iter().any(|(kind, _, _)| kind == "Tid Scan")
                        && nodes.iter().all(|(kind, _, _)| !kind.starts_with("Bitmap")),
                    "{name}: {nodes:?}"
                );
            }
            // And planned as execute plans it, through the planner hook.
            assert_eq!(crate::store::seq_scans_of(stmt), 0, "{name}, as executed");
        }
        // The planner settings are the statement's only: the session's are back.
        assert_eq!(
            Spi::get_one::<String>("SELECT current_setting('enable_seqscan')").unwrap(),
            Some("on".into())
        );
    }

    /// The same through the real calls: plans made by the planner hook on a
    /// never-analyzed table, and the transaction's own scan counters show
    /// that no statement of enqueue, claim, complete, fail or reap scanned
    /// the table; the session's settings stay as they were.
    #[pg_test]
    fn real_calls_on_a_never_analyzed_table_never_scan_it() {
        exec(
            "UPDATE pg_catalog.pg_class SET relpages = 0, reltuples = -1, relallvisible = 0
             WHERE oid = 'aedb_queue.task'::regclass",
        );
        let id = enqueue("never", "");
        enqueue("never", "");
        exec("SELECT count(*) FROM aedb_queue.queue_enqueue_batch('never', array_fill('{}'::jsonb, ARRAY[3]))");
        let (claimed, token) = claim_one("never");
        assert_eq!(claimed, id);
        assert_eq!(complete("never", id, token, ""), "applied");
        let (next, token) = claim_one("never");
        assert_eq!(fail("never", next, token, ""), "applied");
        exec("SELECT * FROM aedb_queue.queue_reap('never')");
        assert_eq!(
            one::<i64>("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'aedb_queue.task'::regclass"),
            0
        );
        assert_eq!(
            one::<String>("SELECT current_setting('enable_seqscan')"),
            "on"
        );
    }

    /// User code that runs inside our statements (a trigger on our table)
    /// plans and runs with the session's own enable_seqscan: only the
    /// planning of our statements has it off. (It does run with our search
    /// path, pg_catalog alone, as code inside a function with a SET
    /// search_path clause would: it must qualify its names.)
    #[pg_test]
    fn user_code_inside_our_statements_keeps_the_sessions_planner_settings() {
        exec("CREATE TEMP TABLE seen (setting text)");
        exec(
            "CREATE FUNCTION public.note_setting() RETURNS trigger LANGUAGE plpgsql
             AS $$ BEGIN INSERT INTO pg_temp.seen VALUES (current_setting('enable_seqscan')); RETURN NEW; END $$",
        );
        exec("CREATE TRIGGER note BEFORE INSERT ON aedb_queue.task FOR EACH ROW EXECUTE FUNCTION public.note_setting()");
        enqueue("noted", "");
        assert_eq!(
            one::<String>("SELECT string_agg(setting, ',') FROM seen"),
            "on"
        );
    }

    // ------------------------------------------------------------------
    // queue_complete_batch: many fenced completions in one statement.
    // ------------------------------------------------------------------

    fn complete_batch(queue: &str, ids: &[i64], tokens: &[i64], extra: &str) -> Vec<(i64, String)> {
        let list = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        Spi::connect(|c| {
            c.select(
                &format!(
                    "SELECT task_id, outcome::text FROM aedb_queue.queue_complete_batch('{queue}', \
                     ARRAY[{}]::bigint[], ARRAY[{}]::bigint[]{extra})",
                    list(ids),
                    list(tokens)
                ),
                None,
                &[],
            )
            .unwrap()
            .map(|r| {
                (
                    r.get::<i64>(1).unwrap().unwrap(),
                    r.get::<String>(2).unwrap().unwrap(),
                )
            })
            .collect()
        })
    }

    #[pg_test]
    fn complete_batch_applies_each_task_under_its_own_token() {
        for _ in 0..3 {
            enqueue("cb", "");
        }
        let claimed = claim("cb", ", max => 3");
        let ids: Vec<i64> = claimed.iter().map(|c| c.0).collect();
        let mut tokens: Vec<i64> = claimed.iter().map(|c| c.1).collect();
        tokens[1] += 1; // a stale token for the second task
        let rows = complete_batch("cb", &ids, &tokens, "");
        assert_eq!(
            rows,
            vec![
                (ids[0], "applied".to_string()),
                (ids[1], "lease_lost".to_string()),
                (ids[2], "applied".to_string())
            ]
        );
        assert_eq!(state_of("cb", ids[0]), None);
        assert_eq!(state_of("cb", ids[1]).as_deref(), Some("in_flight"));
        assert_eq!(state_of("cb", ids[2]), None);
    }

    /// A task named twice is settled by the entry with its token, wherever
    /// that entry is; the other entry, and a repeat, are fenced out.
    #[pg_test]
    fn complete_batch_settles_a_task_named_twice_by_its_own_token() {
        let id = enqueue("cb2", "");
        let (_, token) = claim_one("cb2");
        assert_eq!(
            complete_batch("cb2", &[id, id, id], &[token + 1, token, token], ""),
            vec![
                (id, "lease_lost".to_string()),
                (id, "applied".to_string()),
                (id, "lease_lost".to_string())
            ]
        );
        assert_eq!(state_of("cb2", id), None);
    }

    #[pg_test]
    fn complete_batch_is_fenced_by_queue() {
        let id = enqueue("cb_a", "");
        let (_, token) = claim_one("cb_a");
        assert_eq!(
            complete_batch("cb_b", &[id], &[token], ""),
            vec![(id, "lease_lost".to_string())]
        );
        assert_eq!(state_of("cb_a", id).as_deref(), Some("in_flight"));
    }

    #[pg_test]
    fn strict_complete_batch_applies_nothing_when_one_is_fenced_out() {
        let a = enqueue("cbs", "");
        let b = enqueue("cbs", "");
        let claimed = claim("cbs", ", max => 2");
        let query = format!(
            "SELECT * FROM aedb_queue.queue_complete_batch('cbs', ARRAY[{a}, {b}], ARRAY[{}, {}], strict => true)",
            claimed[0].1,
            claimed[1].1 + 5
        );
        expect_error(
            &query,
            "40002",
            &format!(
                "lease lost: task {b} is no longer in flight under fencing token {}",
                claimed[1].1 + 5
            ),
        );
        assert_eq!(state_of("cbs", a).as_deref(), Some("in_flight"));
        assert_eq!(state_of("cbs", b).as_deref(), Some("in_flight"));
    }

    #[pg_test]
    fn complete_batch_rejects_unpaired_arrays() {
        expect_error(
            "SELECT * FROM aedb_queue.queue_complete_batch('q', ARRAY[1, 2], ARRAY[1])",
            "22023",
            "invalid argument \"fencing_tokens\": has 1 elements but task_ids has 2",
        );
        expect_error(
            "SELECT * FROM aedb_queue.queue_complete_batch('q', NULL, ARRAY[1])",
            "22004",
            "argument \"task_ids\" must not be NULL",
        );
    }

    /// The function the batch settle's statement checks each task with says
    /// yes only inside that statement, for the pairs it was given.
    #[pg_test]
    fn fence_holds_is_false_outside_a_batch_settle() {
        let done = enqueue("fh", "");
        let held = enqueue("fh", "");
        let claimed = claim("fh", ", max => 2");
        let token_of = |id: i64| claimed.iter().find(|c| c.0 == id).unwrap().1;
        assert_eq!(
            complete_batch("fh", &[done], &[token_of(done)], ""),
            vec![(done, "applied".to_string())]
        );
        for (id, token) in [(done, token_of(done)), (held, token_of(held))] {
            assert!(!one::<bool>(&format!(
                "SELECT aedb_queue_internal.fence_holds({id}, {token})"
            )));
        }
        assert_eq!(state_of("fh", held).as_deref(), Some("in_flight"));
    }

    /// A trigger that settles another batch while ours deletes (a BEFORE
    /// DELETE row trigger runs between our rows) checks its own pairs, and
    /// ours are back for the rest of our rows.
    #[pg_test]
    fn a_batch_settled_inside_a_batch_settle_keeps_each_fence() {
        let inner = enqueue("fh_inner", "");
        let (_, inner_token) = claim_one("fh_inner");
        let outer: Vec<i64> = (0..3).map(|_| enqueue("fh_outer", "")).collect();
        let claimed = claim("fh_outer", ", max => 3");
        exec(&format!(
            "CREATE TABLE public.inner_outcomes (outcome text);
             CREATE FUNCTION public.settle_inner() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF OLD.queue = 'fh_outer' THEN
                     INSERT INTO public.inner_outcomes
                     SELECT outcome::text FROM aedb_queue.queue_complete_batch(
                         'fh_inner', ARRAY[{inner}, {inner}]::bigint[], ARRAY[{inner_token}, {}]::bigint[]);
                 END IF;
                 RETURN OLD;
             END $$;
             CREATE TRIGGER settle_inner BEFORE DELETE ON aedb_queue.task
                 FOR EACH ROW EXECUTE FUNCTION public.settle_inner()",
            inner_token + 1
        ));
        let ids: Vec<i64> = claimed.iter().map(|c| c.0).collect();
        let tokens: Vec<i64> = claimed.iter().map(|c| c.1).collect();
        let rows = complete_batch("fh_outer", &ids, &tokens, "");
        assert_eq!(
            rows,
            ids.iter()
                .map(|&id| (id, "applied".to_string()))
                .collect::<Vec<_>>()
        );
        for id in outer {
            assert_eq!(state_of("fh_outer", id), None);
        }
        assert_eq!(state_of("fh_inner", inner), None);
        // The first firing applies under the current token (the stale one
        // next to it is fenced out); later firings find the task gone.
        let outcomes: Vec<String> = Spi::connect(|c| {
            c.select("SELECT outcome FROM public.inner_outcomes", None, &[])
                .unwrap()
                .map(|r| r.get::<String>(1).unwrap().unwrap())
                .collect()
        });
        assert_eq!(
            outcomes,
            [
                "applied",
                "lease_lost",
                "lease_lost",
                "lease_lost",
                "lease_lost",
                "lease_lost"
            ]
        );
    }

    // ------------------------------------------------------------------
    // aedb_queue.inline_reap: off leaves timers and leases to queue_reap.
    // ------------------------------------------------------------------

    #[pg_test]
    fn with_inline_reap_off_claims_leave_due_work_to_the_reaper() {
        let timer = enqueue("ir", ", delay => '1 hour'");
        make_due(timer);
        exec("SET LOCAL aedb_queue.inline_reap = off");
        assert!(claim("ir", "").is_empty());
        assert_eq!(state_of("ir", timer).as_deref(), Some("scheduled"));
        assert_eq!(
            ints("SELECT promoted FROM aedb_queue.queue_reap('ir')"),
            vec![1]
        );
        assert_eq!(claim("ir", "").len(), 1);
    }

    // Scan hints (core scan_hint.rs): claims resume after this backend's last
    // position while the hints are fresh.

    fn claim_ids(queue: &str, max: i32) -> Vec<i64> {
        claim(queue, &format!(", max => {max}"))
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    /// A task that becomes ready behind the resume point (here retried at
    /// once) waits while later tasks are served, and is served as soon as a
    /// resumed claim comes up short: skipped for a while, never lost.
    #[pg_test]
    fn a_resumed_claim_serves_a_task_behind_it_once_it_comes_up_short() {
        exec("SET LOCAL aedb_queue.claim_rescan_interval = '1h'");
        exec("SET LOCAL aedb_queue.claim_resume_lag = 0");
        let ids: Vec<i64> = (0..4).map(|_| enqueue("hint_behind", "")).collect();
        let first = claim("hint_behind", ", max => 2");
        assert_eq!(first.iter().map(|t| t.0).collect::<Vec<_>>(), ids[..2]);
        let (a, token) = first[0];
        assert_eq!(
            fail("hint_behind", a, token, ", retry_in => '0'"),
            "applied"
        );
        assert_eq!(
            claim_ids("hint_behind", 1),
            vec![ids[2]],
            "resumes after its last task"
        );
        assert_eq!(claim_ids("hint_behind", 1), vec![ids[3]]);
        assert_eq!(
            claim_ids("hint_behind", 1),
            vec![a],
            "a short resumed claim reads from the head"
        );
        assert!(claim_ids("hint_behind", 1).is_empty());
    }

    /// The same steps with the interval at 0 keep strict service order.
    #[pg_test]
    fn with_a_zero_rescan_interval_claims_keep_strict_order() {
        exec("SET LOCAL aedb_queue.claim_rescan_interval = 0");
        let ids: Vec<i64> = (0..4).map(|_| enqueue("hint_zero", "")).collect();
        let first = claim("hint_zero", ", max => 2");
        let (a, token) = first[0];
        assert_eq!(a, ids[0]);
        assert_eq!(fail("hint_zero", a, token, ", retry_in => '0'"), "applied");
        assert_eq!(claim_ids("hint_zero", 3), vec![a, ids[2], ids[3]]);
    }

    /// Resuming never delays a higher priority: it is read from its head.
    /// Past the hint's priority, the claim moves on to lower ones.
    #[pg_test]
    fn a_resumed_claim_serves_higher_priorities_first_and_moves_on_to_lower() {
        exec("SET LOCAL aedb_queue.claim_rescan_interval = '1h'");
        exec("SET LOCAL aedb_queue.claim_resume_lag = 0");
        let a = enqueue("hint_prio", "");
        let b = enqueue("hint_prio", "");
        assert_eq!(claim_ids("hint_prio", 1), vec![a]);
        let urgent = enqueue("hint_prio", ", priority => 5");
        let low = enqueue("hint_prio", ", priority => -5");
        assert_eq!(claim_ids("hint_prio", 1), vec![urgent]);
        assert_eq!(claim_ids("hint_prio", 2), vec![b, low]);
        assert!(claim_ids("hint_prio", 1).is_empty());
    }

    /// Without an old snapshot (the default `claim_resume_lag`) or a pile of
    /// dead rows (off here: the test database's count depends on the tests
    /// before), claims read the ready index from its head: a task that
    /// became ready behind the last position is served first, in strict order.
    #[pg_test]
    fn without_a_lagging_snapshot_claims_read_from_the_head() {
        exec("SET LOCAL aedb_queue.claim_rescan_interval = '1h'");
        exec("SET LOCAL aedb_queue.claim_resume_dead_rows = 0");
        let ids: Vec<i64> = (0..4).map(|_| enqueue("head", "")).collect();
        let first = claim("head", ", max => 2");
        let (a, token) = first[0];
        assert_eq!(fail("head", a, token, ", retry_in => '0'"), "applied");
        assert_eq!(
            claim_ids("head", 1),
            vec![a],
            "served at once, not after the position"
        );
        // With a lag this test's own transaction reaches (it holds an xid),
        // the claim resumes after its position instead.
        exec("SET LOCAL aedb_queue.claim_resume_lag = 1");
        let token: i64 = one(&format!(
            "SELECT fencing_token FROM aedb_queue.task WHERE task_id = {a}"
        ));
        assert_eq!(fail("head", a, token, ", retry_in => '0'"), "applied");
        assert_eq!(
            claim_ids("head", 1),
            vec![ids[2]],
            "resumed after the position"
        );
    }

    /// While claims are served in full, the check for due timers and expired
    /// leases runs once per hint lifetime; a claim that comes up short runs
    /// it at once and serves what it promoted.
    #[pg_test]
    fn a_busy_queue_checks_for_due_timers_once_per_interval_and_a_short_claim_at_once() {
        exec("SET LOCAL aedb_queue.claim_rescan_interval = '1h'");
        let ready: Vec<i64> = (0..3).map(|_| enqueue("busy", "")).collect();
        let timer = enqueue("busy", ", delay => '1 hour'");
        assert_eq!(
            claim_ids("busy", 1),
            vec![ready[0]],
            "first claim: checked, nothing due"
        );
        // Falls due after that check (calls read the real clock).
        exec(&format!(
            "UPDATE aedb_queue.task SET not_before = clock_timestamp() + interval '20 milliseconds'
             WHERE task_id = {timer}"
        ));
        exec("SELECT pg_sleep(0.05)");
        assert_eq!(
            claim_ids("busy", 1),
            vec![ready[1]],
            "served in full: no check"
        );
        assert_eq!(state_of("busy", timer).as_deref(), Some("scheduled"));
        let last = claim_ids("busy", 5);
        assert_eq!(
            last,
            vec![ready[2], timer],
            "short: checked, promoted and served"
        );
    }
}
