//! `#[pg_test]`s of the task life cycle in one session: claim order and
//! leases, completion with follow-ups and strict mode, failures and
//! backoff, heartbeats, cancel, inspection, reaping, transactions. The
//! conventions (one rolled-back transaction, a clock that stands still,
//! the helpers) are those of `tests.rs`.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    // ------------------------------------------------------------------
    // Claim: order of service, lease fields, isolation.
    // ------------------------------------------------------------------

    /// Results are written in one call (src/srf.rs): the rows arrive
    /// wherever the call is written, and a rescanned call claims anew.
    #[pg_test]
    fn claimed_rows_arrive_in_from_in_the_select_list_and_per_lateral_rescan() {
        for _ in 0..5 {
            enqueue("srf", "");
        }
        let ids = |sql: &str| {
            one::<Vec<i64>>(&format!(
                "SELECT array_agg(task_id ORDER BY task_id) FROM ({sql}) c"
            ))
        };
        let from = ids("SELECT task_id FROM aedb_queue.queue_claim('srf', 'w', max => 2)");
        let select_list = ids("SELECT (aedb_queue.queue_claim('srf', 'w')).task_id");
        let lateral = ids("SELECT c.task_id FROM generate_series(1, 2) g, \
             LATERAL aedb_queue.queue_claim('srf', 'w' || g) c");
        assert_eq!(from.len(), 2, "{from:?}");
        assert_eq!(select_list.len(), 1, "{select_list:?}");
        assert_eq!(lateral.len(), 2, "one claim per rescan: {lateral:?}");
        let mut all: Vec<i64> = [from, select_list, lateral].concat();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 5, "each task claimed once: {all:?}");
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'srf' AND state = 'in_flight'"),
            5
        );
        // An empty result is no row, also in the select list.
        assert_eq!(count("(SELECT aedb_queue.queue_claim('srf', 'w')) s"), 0);
    }

    #[pg_test]
    fn claim_serves_higher_priority_first_then_fifo() {
        let a = enqueue("q", ", priority => 0");
        let b = enqueue("q", ", priority => 5");
        let c = enqueue("q", ", priority => 0");
        let d = enqueue("q", ", priority => 5");
        let e = enqueue("q", ", priority => -1");
        let claimed: Vec<i64> = claim("q", ", max => 10")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(claimed, vec![b, d, a, c, e]);
    }

    #[pg_test]
    fn one_at_a_time_claims_follow_the_same_order() {
        let a = enqueue("q", ", priority => 1");
        let b = enqueue("q", ", priority => 9");
        let c = enqueue("q", ", priority => 1");
        let order: Vec<i64> = (0..3).map(|_| claim_one("q").0).collect();
        assert_eq!(order, vec![b, a, c]);
        assert!(claim("q", "").is_empty());
    }

    /// A matured timer competes by priority, not by when it became due.
    #[pg_test]
    fn a_matured_timer_competes_by_priority_and_enqueue_order() {
        let early_timer = enqueue("q", ", delay => '1 hour'");
        let ready_low = enqueue("q", ", priority => 0");
        let late_timer_high = enqueue("q", ", delay => '1 hour', priority => 3");
        make_due(early_timer);
        make_due(late_timer_high);
        let claimed: Vec<i64> = claim("q", ", max => 10")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        // high priority first; then, at priority 0, the timer enqueued earlier.
        assert_eq!(claimed, vec![late_timer_high, early_timer, ready_low]);
    }

    #[pg_test]
    fn claim_honours_max() {
        for _ in 0..5 {
            enqueue("q", "");
        }
        assert_eq!(claim("q", ", max => 2").len(), 2);
        assert_eq!(count("aedb_queue.task WHERE state = 'ready'"), 3);
        assert_eq!(count("aedb_queue.task WHERE state = 'in_flight'"), 2);
        assert_eq!(claim("q", ", max => 10").len(), 3);
        assert!(claim("q", ", max => 10").is_empty());
    }

    #[pg_test]
    fn claim_bumps_attempts_and_token_and_sets_the_lease() {
        let id = enqueue("q", ", '{\"job\": \"x\"}', priority => 2");
        let row = Spi::connect_mut(|c| {
            let t = c
                .update(
                    "SELECT task_id, payload::text, attempts, fencing_token,
                            lease_deadline BETWEEN statement_timestamp() + interval '45 seconds'
                                               AND clock_timestamp() + interval '45 seconds',
                            priority, enqueued_at::text, progress::text
                     FROM aedb_queue.queue_claim('q', 'worker-7', lease => '45 seconds')",
                    None,
                    &[],
                )
                .unwrap();
            assert_eq!(t.len(), 1);
            let r = t.first();
            (
                r.get::<i64>(1).unwrap(),
                r.get::<String>(2).unwrap(),
                r.get::<i32>(3).unwrap(),
                r.get::<i64>(4).unwrap(),
                r.get::<bool>(5).unwrap(),
                r.get::<i64>(6).unwrap(),
                r.get::<String>(7).unwrap(),
                r.get::<String>(8).unwrap(),
            )
        });
        assert_eq!(row.0, Some(id));
        assert_eq!(row.1.as_deref(), Some("{\"job\": \"x\"}"));
        assert_eq!(row.2, Some(1), "attempts");
        assert_eq!(row.3, Some(1), "fencing_token");
        assert_eq!(
            row.4,
            Some(true),
            "lease_deadline = time of the call + lease"
        );
        assert_eq!(row.5, Some(2), "priority");
        assert_eq!(
            row.6,
            text_field(id, "created_at"),
            "enqueued_at is created_at"
        );
        assert_eq!(row.7, None, "no progress yet");
        assert_eq!(state_of("q", id).as_deref(), Some("in_flight"));
        assert_eq!(text_field(id, "owner_id").as_deref(), Some("worker-7"));
        assert_eq!(
            text_field(id, "lease_deadline - updated_at").as_deref(),
            Some("00:00:45")
        );
        assert_eq!(field::<i32>(id, "attempts"), Some(1));
        assert_eq!(field::<i64>(id, "fencing_token"), Some(1));
    }

    #[pg_test]
    fn claim_default_lease_is_thirty_seconds() {
        let id = enqueue("q", "");
        claim_one("q");
        assert_eq!(
            text_field(id, "lease_deadline - updated_at").as_deref(),
            Some("00:00:30")
        );
    }

    #[pg_test]
    fn claim_only_serves_its_own_queue() {
        let a = enqueue("qa", "");
        assert!(claim("qb", ", max => 10").is_empty());
        assert_eq!(state_of("qa", a).as_deref(), Some("ready"));
        assert_eq!(claim_one("qa").0, a);
    }

    #[pg_test]
    fn claim_of_an_empty_or_unknown_queue_returns_no_rows() {
        assert!(claim("never-used", ", max => 5").is_empty());
    }

    /// Payloads pass through as raw datums: a large (TOASTed) one must come back intact.
    #[pg_test]
    fn claim_returns_a_large_payload_intact() {
        let id = enqueue("q", &format!(", {}", big_json(200_000)));
        let same: bool = one(&format!(
            "SELECT c.payload = {} AND c.task_id = {id} FROM aedb_queue.queue_claim('q', 'w') c",
            big_json(200_000)
        ));
        assert!(same);
    }

    /// Every row of a multi-row claim carries its own payload and progress.
    #[pg_test]
    fn a_multi_row_claim_returns_each_tasks_payload_and_progress() {
        let ids = ints(
            "SELECT * FROM aedb_queue.queue_enqueue_batch('q',
                 ARRAY(SELECT jsonb_build_object('n', g, 'pad', repeat('x', g * 100)) FROM generate_series(1, 40) g))",
        );
        assert_eq!(ids.len(), 40);
        // Give every other task a checkpoint, then put them all back.
        for (id, token) in claim("q", ", max => 40") {
            let n = ids.iter().position(|x| *x == id).unwrap() + 1;
            if n % 2 == 0 {
                let progress = format!(", progress => jsonb_build_object('done', {n})");
                assert_eq!(heartbeat("q", id, token, "1 minute", &progress), "applied");
            }
            assert_eq!(fail("q", id, token, ", retry_in => '0'"), "applied");
        }
        let (payloads, progress): (Option<String>, Option<String>) = Spi::get_two(
            "SELECT string_agg(payload->>'n', ',' ORDER BY task_id)
                        || ':' || bool_and(payload->>'pad' = repeat('x', (payload->>'n')::int * 100)),
                    string_agg(coalesce(progress->>'done', '-'), ',' ORDER BY task_id)
             FROM aedb_queue.queue_claim('q', 'w', max => 40)",
        )
        .unwrap();
        let expected: Vec<String> = (1..=40).map(|n| n.to_string()).collect();
        assert_eq!(payloads, Some(format!("{}:true", expected.join(","))));
        let expected_progress: Vec<String> = (1..=40)
            .map(|n| {
                if n % 2 == 0 {
                    n.to_string()
                } else {
                    "-".into()
                }
            })
            .collect();
        assert_eq!(progress, Some(expected_progress.join(",")));
    }

    // ------------------------------------------------------------------
    // Complete: fencing, follow-ups, strict mode.
    // ------------------------------------------------------------------

    #[pg_test]
    fn complete_removes_the_task_and_a_second_complete_is_lease_lost() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        assert_eq!(
            complete("q", id, token, ", result => '{\"ok\": true}'"),
            "applied"
        );
        assert_eq!(state_of("q", id), None);
        assert_eq!(count(&format!("aedb_queue.task WHERE task_id = {id}")), 0);
        assert_eq!(complete("q", id, token, ""), "lease_lost");
    }

    #[pg_test]
    fn complete_with_a_wrong_token_is_lease_lost_and_changes_nothing() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        let before = text_field(
            id,
            "(state, attempts, fencing_token, owner_id, lease_deadline, updated_at)",
        );
        assert_eq!(complete("q", id, token + 1, ""), "lease_lost");
        assert_eq!(complete("q", id, token - 1, ""), "lease_lost");
        assert_eq!(
            text_field(
                id,
                "(state, attempts, fencing_token, owner_id, lease_deadline, updated_at)"
            ),
            before
        );
        assert_eq!(complete("q", id, token, ""), "applied");
    }

    #[pg_test]
    fn complete_names_the_queue_too() {
        let id = enqueue("qa", "");
        let (_, token) = claim_one("qa");
        assert_eq!(complete("qb", id, token, ""), "lease_lost");
        assert_eq!(state_of("qa", id).as_deref(), Some("in_flight"));
    }

    #[pg_test]
    fn complete_of_a_task_that_is_not_in_flight_is_lease_lost() {
        let ready = enqueue("q", "");
        assert_eq!(complete("q", ready, 0, ""), "lease_lost");
        assert_eq!(state_of("q", ready).as_deref(), Some("ready"));
        let scheduled = enqueue("q", ", delay => '1 hour'");
        assert_eq!(complete("q", scheduled, 0, ""), "lease_lost");
        assert_eq!(state_of("q", scheduled).as_deref(), Some("scheduled"));
        assert_eq!(complete("q", 999_999_999, 1, ""), "lease_lost");
    }

    #[pg_test]
    fn complete_enqueues_follow_ups_with_their_options() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        let outcome = complete(
            "q",
            id,
            token,
            r#", follow_ups => '[
                 {"queue": "next", "payload": {"step": 2}, "priority": 3, "delay": "5 minutes",
                  "max_attempts": 2, "backoff_base": "2 s", "backoff_max": 10},
                 {"queue": "other", "payload": [1, 2]},
                 {"queue": "other", "delay": 0.5}
               ]'"#,
        );
        assert_eq!(outcome, "applied");
        assert_eq!(state_of("q", id), None);

        let next = ints("SELECT task_id FROM aedb_queue.task WHERE queue = 'next'");
        assert_eq!(next.len(), 1);
        let n = next[0];
        assert_eq!(state_of("next", n).as_deref(), Some("scheduled"));
        assert_eq!(text_field(n, "payload").as_deref(), Some("{\"step\": 2}"));
        assert_eq!(field::<i64>(n, "priority"), Some(3));
        assert_eq!(
            text_field(n, "not_before - created_at").as_deref(),
            Some("00:05:00")
        );
        assert_eq!(field::<i32>(n, "max_attempts"), Some(2));
        assert_eq!(text_field(n, "backoff_base").as_deref(), Some("00:00:02"));
        assert_eq!(text_field(n, "backoff_max").as_deref(), Some("00:00:10"));

        let other =
            ints("SELECT task_id FROM aedb_queue.task WHERE queue = 'other' ORDER BY task_id");
        assert_eq!(other.len(), 2);
        assert_eq!(state_of("other", other[0]).as_deref(), Some("ready"));
        assert_eq!(text_field(other[0], "payload").as_deref(), Some("[1, 2]"));
        assert_eq!(field::<i32>(other[0], "max_attempts"), Some(5));
        assert_eq!(state_of("other", other[1]).as_deref(), Some("scheduled"));
        assert_eq!(
            text_field(other[1], "not_before - created_at").as_deref(),
            Some("00:00:00.5")
        );
        assert_eq!(text_field(other[1], "payload"), None);
        // Follow-up queues are registered, so queue_reap() of all queues sees them.
        assert_eq!(count("aedb_queue.queue WHERE name IN ('next', 'other')"), 2);
    }

    #[pg_test]
    fn follow_ups_null_or_empty_mean_none() {
        for follow_ups in ["'null'::jsonb", "'[]'::jsonb", "NULL"] {
            let id = enqueue("q", "");
            let (_, token) = claim_one("q");
            assert_eq!(
                complete("q", id, token, &format!(", follow_ups => {follow_ups}")),
                "applied"
            );
            assert_eq!(count("aedb_queue.task"), 0, "follow_ups => {follow_ups}");
        }
    }

    #[pg_test]
    fn a_follow_up_with_a_taken_idempotency_key_is_deduplicated() {
        let (existing, _) = enqueue_dedup("next", ", idempotency_key => 'step-2'");
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        let outcome = complete(
            "q",
            id,
            token,
            r#", follow_ups => '[{"queue": "next", "idempotency_key": "step-2"},
                                 {"queue": "next", "idempotency_key": "step-3"}]'"#,
        );
        assert_eq!(outcome, "applied");
        assert_eq!(count("aedb_queue.task WHERE queue = 'next'"), 2);
        assert_eq!(
            count(&format!(
                "aedb_queue.task WHERE queue = 'next' AND task_id = {existing}"
            )),
            1
        );
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'next' AND idempotency_key = 'step-3'"),
            1
        );
    }

    /// A fenced-out completion must not enqueue its follow-ups.
    #[pg_test]
    fn a_fenced_out_complete_enqueues_no_follow_ups() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        let outcome = complete(
            "q",
            id,
            token + 1,
            r#", follow_ups => '[{"queue": "next"}]'"#,
        );
        assert_eq!(outcome, "lease_lost");
        assert_eq!(count("aedb_queue.task WHERE queue = 'next'"), 0);
        assert_eq!(state_of("q", id).as_deref(), Some("in_flight"));
    }

    #[pg_test]
    fn strict_complete_applies_like_complete_when_the_fence_holds() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        assert_eq!(complete("q", id, token, ", strict => true"), "applied");
        assert_eq!(state_of("q", id), None);
    }

    /// Strict mode raises SQLSTATE 40002 naming the task and token.
    #[pg_test]
    fn strict_complete_fenced_out_raises_40002() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        expect_error(
            &format!(
                "SELECT aedb_queue.queue_complete('q', {id}, {}, strict => true)",
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
    }

    /// The outbox guarantee: in strict mode the caller's own writes in the
    /// same transaction roll back when the fence fails, and commit with it.
    #[pg_test]
    fn strict_complete_takes_the_callers_writes_down_with_it() {
        exec("CREATE TEMP TABLE side_effects (task_id bigint)");
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        let block = |tok: i64| {
            format!(
                "DO $b$ BEGIN
                     INSERT INTO side_effects VALUES ({id});
                     PERFORM aedb_queue.queue_complete('q', {id}, {tok}, strict => true);
                 EXCEPTION WHEN SQLSTATE '40002' THEN NULL;
                 END $b$"
            )
        };
        exec(&block(token + 1));
        assert_eq!(
            count("side_effects"),
            0,
            "fenced out: the caller's write is rolled back"
        );
        assert_eq!(state_of("q", id).as_deref(), Some("in_flight"));
        exec(&block(token));
        assert_eq!(
            count("side_effects"),
            1,
            "fence holds: the caller's write stays"
        );
        assert_eq!(state_of("q", id), None);
    }

    #[pg_test(error = "lease lost: task 999999999 is no longer in flight under fencing token 1")]
    fn strict_complete_of_an_unknown_task_raises() {
        exec("SELECT aedb_queue.queue_complete('q', 999999999, 1, strict => true)");
    }

    // ------------------------------------------------------------------
    // Fail: backoff, retry_in, dead-lettering.
    // ------------------------------------------------------------------

    #[pg_test]
    fn first_failure_retries_after_the_default_one_second() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        assert_eq!(fail("q", id, token, ""), "applied");
        assert_eq!(state_of("q", id).as_deref(), Some("scheduled"));
        assert_eq!(
            text_field(id, "not_before - updated_at").as_deref(),
            Some("00:00:01")
        );
        assert_eq!(text_field(id, "last_error").as_deref(), Some("boom"));
        assert_eq!(
            field::<bool>(id, "owner_id IS NULL AND lease_deadline IS NULL"),
            Some(true)
        );
        assert_eq!(field::<i32>(id, "attempts"), Some(1));
        assert_eq!(field::<i64>(id, "fencing_token"), Some(1));
        // Not claimable before the backoff elapses.
        assert!(claim("q", "").is_empty());
    }

    #[pg_test]
    fn second_failure_doubles_the_default_backoff() {
        let id = enqueue("q", "");
        let (_, t1) = claim_one("q");
        assert_eq!(fail("q", id, t1, ""), "applied");
        make_due(id);
        let (again, t2) = claim_one("q");
        assert_eq!(again, id);
        assert_eq!(t2, t1 + 1);
        assert_eq!(fail("q", id, t2, ""), "applied");
        assert_eq!(
            text_field(id, "not_before - updated_at").as_deref(),
            Some("00:00:02")
        );
        assert_eq!(field::<i32>(id, "attempts"), Some(2));
    }

    /// base * 2^(attempts-1), clamped to backoff_max: 10 s, 20 s, then 35 s, 35 s.
    #[pg_test]
    fn backoff_follows_the_formula_and_is_clamped() {
        let id = enqueue(
            "q",
            ", max_attempts => 10, backoff_base => '10 seconds', backoff_max => '35 seconds'",
        );
        for expected in ["00:00:10", "00:00:20", "00:00:35", "00:00:35"] {
            let (claimed, token) = claim_one("q");
            assert_eq!(claimed, id);
            assert_eq!(fail("q", id, token, ""), "applied");
            assert_eq!(state_of("q", id).as_deref(), Some("scheduled"));
            assert_eq!(
                text_field(id, "not_before - updated_at").as_deref(),
                Some(expected)
            );
            make_due(id);
        }
    }

    #[pg_test]
    fn retry_in_overrides_the_backoff() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        assert_eq!(fail("q", id, token, ", retry_in => '7 seconds'"), "applied");
        assert_eq!(state_of("q", id).as_deref(), Some("scheduled"));
        assert_eq!(
            text_field(id, "not_before - updated_at").as_deref(),
            Some("00:00:07")
        );
    }

    #[pg_test]
    fn retry_in_zero_makes_the_task_ready_and_claimable_at_once() {
        let id = enqueue("q", "");
        let (_, t1) = claim_one("q");
        assert_eq!(fail("q", id, t1, ", retry_in => '0'"), "applied");
        assert_eq!(state_of("q", id).as_deref(), Some("ready"));
        let (again, t2) = claim_one("q");
        assert_eq!(again, id);
        assert_eq!(t2, t1 + 1);
        assert_eq!(field::<i32>(id, "attempts"), Some(2));
        // The old token is fenced out now.
        assert_eq!(complete("q", id, t1, ""), "lease_lost");
        assert_eq!(complete("q", id, t2, ""), "applied");
    }

    #[pg_test]
    fn dead_letter_moves_the_task_to_dead_with_its_error() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        assert_eq!(fail("q", id, token, ", dead_letter => true"), "applied");
        assert_eq!(state_of("q", id).as_deref(), Some("dead"));
        assert_eq!(text_field(id, "last_error").as_deref(), Some("boom"));
        assert_eq!(field::<i32>(id, "attempts"), Some(1));
        assert_eq!(
            field::<bool>(id, "owner_id IS NULL AND lease_deadline IS NULL"),
            Some(true)
        );
        assert!(claim("q", "").is_empty(), "dead tasks are not served");
        assert_eq!(
            fail("q", id, token, ""),
            "lease_lost",
            "no longer in flight"
        );
    }

    #[pg_test]
    fn failing_the_last_attempt_dead_letters() {
        let id = enqueue("q", ", max_attempts => 2");
        let (_, t1) = claim_one("q");
        assert_eq!(fail("q", id, t1, ", retry_in => '0'"), "applied");
        assert_eq!(state_of("q", id).as_deref(), Some("ready"));
        let (_, t2) = claim_one("q");
        // retry_in does not extend the budget.
        assert_eq!(fail("q", id, t2, ", retry_in => '0'"), "applied");
        assert_eq!(state_of("q", id).as_deref(), Some("dead"));
        assert_eq!(field::<i32>(id, "attempts"), Some(2));
        assert_eq!(text_field(id, "last_error").as_deref(), Some("boom"));
    }

    #[pg_test]
    fn max_attempts_one_dies_on_first_failure() {
        let id = enqueue("q", ", max_attempts => 1");
        let (_, token) = claim_one("q");
        assert_eq!(fail("q", id, token, ""), "applied");
        assert_eq!(state_of("q", id).as_deref(), Some("dead"));
    }

    #[pg_test]
    fn fail_with_a_wrong_token_is_lease_lost_and_changes_nothing() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        let snapshot =
            "(state, attempts, fencing_token, not_before, last_error, owner_id, lease_deadline)";
        let before = text_field(id, snapshot);
        assert_eq!(fail("q", id, token + 1, ""), "lease_lost");
        assert_eq!(
            fail("q", id, token + 1, ", dead_letter => true"),
            "lease_lost"
        );
        assert_eq!(fail("other", id, token, ""), "lease_lost", "wrong queue");
        assert_eq!(text_field(id, snapshot), before);
        assert_eq!(
            fail("q", id, token, ""),
            "applied",
            "the right token still works"
        );
    }

    #[pg_test]
    fn fail_after_complete_is_lease_lost() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        assert_eq!(complete("q", id, token, ""), "applied");
        assert_eq!(fail("q", id, token, ""), "lease_lost");
        assert_eq!(count("aedb_queue.task"), 0);
    }

    // ------------------------------------------------------------------
    // Heartbeat: lease extension and durable progress.
    // ------------------------------------------------------------------

    #[pg_test]
    fn heartbeat_extends_the_lease_and_stores_progress() {
        let id = enqueue("q", "");
        claim("q", ", lease => '10 seconds'");
        let token: i64 = field(id, "fencing_token").unwrap();
        assert_eq!(
            heartbeat(
                "q",
                id,
                token,
                "5 minutes",
                ", progress => '{\"done\": 40}'"
            ),
            "applied"
        );
        assert_eq!(
            text_field(id, "lease_deadline - updated_at").as_deref(),
            Some("00:05:00")
        );
        assert_eq!(
            text_field(id, "progress").as_deref(),
            Some("{\"done\": 40}")
        );
        assert_eq!(state_of("q", id).as_deref(), Some("in_flight"));
        assert_eq!(
            field::<i64>(id, "fencing_token"),
            Some(token),
            "heartbeat does not bump the token"
        );
        assert_eq!(complete("q", id, token, ""), "applied");
    }

    #[pg_test]
    fn heartbeat_without_progress_keeps_the_last_checkpoint() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        assert_eq!(
            heartbeat("q", id, token, "1 minute", ", progress => '{\"page\": 3}'"),
            "applied"
        );
        assert_eq!(heartbeat("q", id, token, "2 minutes", ""), "applied");
        assert_eq!(text_field(id, "progress").as_deref(), Some("{\"page\": 3}"));
        assert_eq!(
            text_field(id, "lease_deadline - updated_at").as_deref(),
            Some("00:02:00")
        );
    }

    /// A resumed worker continues from the last checkpoint.
    #[pg_test]
    fn progress_is_returned_by_the_next_claim() {
        let id = enqueue("q", "");
        let (_, t1) = claim_one("q");
        assert_eq!(
            heartbeat("q", id, t1, "1 minute", ", progress => '{\"step\": 3}'"),
            "applied"
        );
        assert_eq!(fail("q", id, t1, ", retry_in => '0'"), "applied");
        let progress: Option<String> = opt(&format!(
            "SELECT progress::text FROM aedb_queue.queue_claim('q', 'w2') WHERE task_id = {id}"
        ));
        assert_eq!(progress.as_deref(), Some("{\"step\": 3}"));
    }

    #[pg_test]
    fn heartbeat_with_a_wrong_token_is_lease_lost_and_changes_nothing() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        let before = text_field(id, "(lease_deadline, progress, updated_at)");
        assert_eq!(
            heartbeat("q", id, token + 1, "1 hour", ", progress => '1'"),
            "lease_lost"
        );
        assert_eq!(
            heartbeat("other", id, token, "1 hour", ", progress => '1'"),
            "lease_lost"
        );
        assert_eq!(
            text_field(id, "(lease_deadline, progress, updated_at)"),
            before
        );
    }

    #[pg_test]
    fn heartbeat_of_a_task_not_in_flight_is_lease_lost() {
        let id = enqueue("q", "");
        assert_eq!(heartbeat("q", id, 0, "1 minute", ""), "lease_lost");
        assert_eq!(state_of("q", id).as_deref(), Some("ready"));
    }

    // ------------------------------------------------------------------
    // Cancel: removes in any state and fences out the holder.
    // ------------------------------------------------------------------

    #[pg_test]
    fn cancel_removes_an_in_flight_task_and_fences_out_its_worker() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        assert!(cancel("q", id));
        assert_eq!(state_of("q", id), None);
        assert_eq!(complete("q", id, token, ""), "lease_lost");
        assert_eq!(heartbeat("q", id, token, "1 minute", ""), "lease_lost");
        assert_eq!(fail("q", id, token, ""), "lease_lost");
        assert!(!cancel("q", id), "second cancel finds nothing");
    }

    #[pg_test]
    fn cancel_removes_ready_scheduled_and_dead_tasks() {
        let dead = enqueue("q", ", max_attempts => 1");
        let (claimed, token) = claim_one("q");
        assert_eq!(claimed, dead);
        assert_eq!(fail("q", dead, token, ""), "applied");
        assert_eq!(state_of("q", dead).as_deref(), Some("dead"));
        let ready = enqueue("q", "");
        let scheduled = enqueue("q", ", delay => '1 day'");
        for id in [ready, scheduled, dead] {
            assert!(cancel("q", id), "cancel {id}");
            assert_eq!(state_of("q", id), None);
        }
        assert_eq!(count("aedb_queue.task"), 0);
    }

    #[pg_test]
    fn cancel_of_an_unknown_id_is_false() {
        assert!(!cancel("q", 999_999_999));
    }

    #[pg_test]
    fn cancel_in_another_queue_is_false_and_keeps_the_task() {
        let id = enqueue("qa", "");
        assert!(!cancel("qb", id));
        assert_eq!(state_of("qa", id).as_deref(), Some("ready"));
    }

    // ------------------------------------------------------------------
    // Inspection: queue_get / queue_list.
    // ------------------------------------------------------------------

    #[pg_test]
    fn queue_get_returns_the_task_row() {
        let id = enqueue(
            "q",
            ", '{\"a\": 1}', priority => 4, idempotency_key => 'k1'",
        );
        let row: String = one(&format!(
            "SELECT concat_ws('|', task_id, queue, state, priority, attempts, max_attempts, fencing_token,
                              payload, idempotency_key, backoff_base, backoff_max)
             FROM aedb_queue.queue_get('q', {id})"
        ));
        assert_eq!(
            row,
            format!("{id}|q|ready|4|0|5|0|{{\"a\": 1}}|k1|00:00:01|00:01:00")
        );
    }

    #[pg_test]
    fn queue_get_does_not_see_another_queues_task() {
        let id = enqueue("qa", "");
        assert_eq!(count(&format!("aedb_queue.queue_get('qb', {id})")), 0);
        assert_eq!(count(&format!("aedb_queue.queue_get('qa', {id})")), 1);
        assert_eq!(count("aedb_queue.queue_get('qa', 999999999)"), 0);
    }

    #[pg_test]
    fn queue_list_filters_by_state() {
        let ready = enqueue("q", "");
        let scheduled = enqueue("q", ", delay => '1 hour'");
        let in_flight = enqueue("q", ", priority => 10");
        claim_one("q");
        let dead = enqueue("q", ", max_attempts => 1, priority => 10");
        let (_, token) = claim_one("q");
        fail("q", dead, token, "");
        enqueue("other", "");
        for (state, id) in [
            ("ready", ready),
            ("scheduled", scheduled),
            ("in_flight", in_flight),
            ("dead", dead),
        ] {
            assert_eq!(
                ints(&format!(
                    "SELECT task_id FROM aedb_queue.queue_list('q', '{state}')"
                )),
                vec![id],
                "state {state}"
            );
        }
        let mut all = ints("SELECT task_id FROM aedb_queue.queue_list('q')");
        all.sort();
        assert_eq!(all, vec![ready, scheduled, in_flight, dead]);
        assert_eq!(count("aedb_queue.queue_list('q', NULL)"), 4);
    }

    #[pg_test]
    fn queue_list_honours_limit_and_lists_ready_in_service_order() {
        let a = enqueue("q", "");
        let b = enqueue("q", ", priority => 2");
        let c = enqueue("q", "");
        enqueue("q", ", delay => '1 hour'");
        assert_eq!(
            ints("SELECT task_id FROM aedb_queue.queue_list('q', 'ready')"),
            vec![b, a, c]
        );
        assert_eq!(
            ints("SELECT task_id FROM aedb_queue.queue_list('q', 'ready', 2)"),
            vec![b, a]
        );
        assert_eq!(count("aedb_queue.queue_list('q', \"limit\" => 3)"), 3);
        assert_eq!(count("aedb_queue.queue_list('q', NULL, 1)"), 1);
        assert_eq!(count("aedb_queue.queue_list('q')"), 4);
    }

    #[pg_test]
    fn queue_list_orders_timers_by_due_time_and_leases_by_deadline() {
        let late = enqueue("q", ", delay => '2 hours'");
        let soon = enqueue("q", ", delay => '1 hour'");
        assert_eq!(
            ints("SELECT task_id FROM aedb_queue.queue_list('q', 'scheduled')"),
            vec![soon, late]
        );
        let long = enqueue("q", "");
        claim("q", ", lease => '10 minutes'");
        let short = enqueue("q", "");
        claim("q", ", lease => '1 minute'");
        assert_eq!(
            ints("SELECT task_id FROM aedb_queue.queue_list('q', 'in_flight')"),
            vec![short, long]
        );
    }

    // ------------------------------------------------------------------
    // Reaping: expired leases and due timers, per queue and for all.
    // ------------------------------------------------------------------

    fn reap(args: &str) -> (i64, i64, i64) {
        let sql =
            format!("SELECT promoted, reclaimed, dead_lettered FROM aedb_queue.queue_reap({args})");
        match Spi::get_three::<i64, i64, i64>(&sql).unwrap_or_else(|e| panic!("{sql}: {e}")) {
            (Some(p), Some(r), Some(d)) => (p, r, d),
            other => panic!("{sql}: {other:?}"),
        }
    }

    /// The worker vanished; the work did not fail: back to ready, no backoff.
    #[pg_test]
    fn reap_returns_an_expired_lease_to_ready_keeping_attempts() {
        let id = enqueue("q", "");
        let (_, t1) = claim_one("q");
        expire_lease(id);
        assert_eq!(reap("'q'"), (0, 1, 0));
        assert_eq!(state_of("q", id).as_deref(), Some("ready"));
        assert_eq!(field::<i32>(id, "attempts"), Some(1));
        assert_eq!(
            field::<bool>(id, "owner_id IS NULL AND lease_deadline IS NULL"),
            Some(true)
        );
        assert_eq!(
            text_field(id, "last_error").as_deref(),
            Some("lease expired; requeued")
        );
        assert_eq!(
            field::<bool>(id, "not_before <= updated_at"),
            Some(true),
            "no backoff"
        );
        // The old holder is fenced out; the next claim gets a new token.
        assert_eq!(complete("q", id, t1, ""), "lease_lost");
        let (again, t2) = claim_one("q");
        assert_eq!((again, t2), (id, t1 + 1));
        assert_eq!(field::<i32>(id, "attempts"), Some(2));
    }

    #[pg_test]
    fn reap_dead_letters_an_expired_lease_with_no_attempt_left() {
        let id = enqueue("q", ", max_attempts => 1");
        claim_one("q");
        expire_lease(id);
        assert_eq!(reap("'q'"), (0, 0, 1));
        assert_eq!(state_of("q", id).as_deref(), Some("dead"));
        assert_eq!(
            text_field(id, "last_error").as_deref(),
            Some("lease expired; attempts exhausted")
        );
    }

    #[pg_test]
    fn reap_promotes_a_due_timer() {
        let id = enqueue("q", ", delay => '1 microsecond'");
        assert_eq!(state_of("q", id).as_deref(), Some("scheduled"));
        make_due(id);
        assert_eq!(reap("'q'"), (1, 0, 0));
        assert_eq!(state_of("q", id).as_deref(), Some("ready"));
        assert_eq!(field::<i32>(id, "attempts"), Some(0));
    }

    #[pg_test]
    fn reap_leaves_future_timers_and_live_leases_alone() {
        let timer = enqueue("q", ", delay => '1 minute'");
        let leased = enqueue("q", "");
        claim_one("q");
        assert_eq!(reap("'q'"), (0, 0, 0));
        assert_eq!(reap(""), (0, 0, 0));
        assert_eq!(state_of("q", timer).as_deref(), Some("scheduled"));
        assert_eq!(state_of("q", leased).as_deref(), Some("in_flight"));
    }

    #[pg_test]
    fn reap_of_all_queues_covers_every_queue() {
        let timer = enqueue("qa", ", delay => '1 hour'");
        let leased = enqueue("qb", "");
        claim_one("qb");
        let follow = enqueue("qc", "");
        let (_, token) = claim_one("qc");
        complete(
            "qc",
            follow,
            token,
            r#", follow_ups => '[{"queue": "qd", "delay": "1 hour"}]'"#,
        );
        let follow_up = ints("SELECT task_id FROM aedb_queue.task WHERE queue = 'qd'")[0];
        make_due(timer);
        make_due(follow_up);
        expire_lease(leased);
        assert_eq!(reap("queue => NULL"), (2, 1, 0));
        assert_eq!(state_of("qa", timer).as_deref(), Some("ready"));
        assert_eq!(state_of("qb", leased).as_deref(), Some("ready"));
        assert_eq!(state_of("qd", follow_up).as_deref(), Some("ready"));
    }

    #[pg_test]
    fn reap_of_one_queue_leaves_the_others() {
        let a = enqueue("qa", ", delay => '1 hour'");
        let b = enqueue("qb", ", delay => '1 hour'");
        make_due(a);
        make_due(b);
        assert_eq!(reap("'qa'"), (1, 0, 0));
        assert_eq!(state_of("qb", b).as_deref(), Some("scheduled"));
    }

    #[pg_test]
    fn reap_max_bounds_the_work() {
        let timers: Vec<i64> = (0..3)
            .map(|_| enqueue("q", ", delay => '1 hour'"))
            .collect();
        timers.iter().for_each(|id| make_due(*id));
        assert_eq!(reap("'q', max => 2"), (2, 0, 0));
        assert_eq!(reap("max => 2"), (1, 0, 0));
        assert_eq!(count("aedb_queue.task WHERE state = 'ready'"), 3);
    }

    /// Claims reclaim and promote inline, without waiting for the reaper.
    #[pg_test]
    fn claim_reclaims_an_expired_lease_inline_and_fences_the_zombie() {
        let id = enqueue("q", "");
        let (_, zombie) = claim_one("q");
        expire_lease(id);
        let got = Spi::get_two::<i64, i64>(
            "SELECT task_id, fencing_token FROM aedb_queue.queue_claim('q', 'w2')",
        )
        .unwrap();
        assert_eq!(got, (Some(id), Some(zombie + 1)));
        assert_eq!(text_field(id, "owner_id").as_deref(), Some("w2"));
        assert_eq!(heartbeat("q", id, zombie, "1 minute", ""), "lease_lost");
        assert_eq!(complete("q", id, zombie, ""), "lease_lost");
        assert_eq!(complete("q", id, zombie + 1, ""), "applied");
    }

    #[pg_test]
    fn claim_promotes_a_due_timer_inline() {
        let id = enqueue("q", ", delay => '1 hour'");
        make_due(id);
        assert_eq!(claim_one("q").0, id);
    }

    #[pg_test]
    fn an_expired_lease_with_no_attempt_left_is_not_served_again() {
        let id = enqueue("q", ", max_attempts => 1");
        claim_one("q");
        expire_lease(id);
        assert!(claim("q", ", max => 10").is_empty());
        assert_eq!(state_of("q", id).as_deref(), Some("dead"));
    }

    /// A claim's inline reap is scoped to its own queue.
    #[pg_test]
    fn a_claim_reaps_only_its_own_queue() {
        let timer = enqueue("qa", ", delay => '1 hour'");
        let leased = enqueue("qa", "");
        claim_one("qa");
        make_due(timer);
        expire_lease(leased);
        assert!(claim("qb", ", max => 10").is_empty());
        assert_eq!(state_of("qa", timer).as_deref(), Some("scheduled"));
        assert_eq!(state_of("qa", leased).as_deref(), Some("in_flight"));
    }

    /// Due timers compete by priority even when more of them are due than
    /// one claim promotes inline (the backlog case).
    #[pg_test]
    fn a_due_high_priority_timer_beats_a_backlog_of_older_due_timers() {
        let backlog = ints(
            "SELECT * FROM aedb_queue.queue_enqueue_batch('q', array_fill('{}'::jsonb, ARRAY[150]),
                 delay => '1 hour')",
        );
        let urgent = enqueue("q", ", delay => '1 hour', priority => 10");
        // All are due; the backlog fell due first.
        without_scan_hints();
        exec(&format!(
            "UPDATE aedb_queue.task SET not_before = statement_timestamp() - interval '1 hour'
             WHERE task_id IN ({})",
            backlog
                .iter()
                .map(|id| id.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ));
        exec(&format!(
            "UPDATE aedb_queue.task SET not_before = statement_timestamp() - interval '1 second'
             WHERE task_id = {urgent}"
        ));
        let (first, _) = claim_one("q");
        assert_eq!(
            first,
            urgent,
            "claimed backlog task {first} (priority 0) while the due priority-10 timer {urgent} is still {:?}",
            state_of("q", urgent)
        );
    }

    // ------------------------------------------------------------------
    // Transactions: an enqueue is part of the caller's transaction.
    // ------------------------------------------------------------------

    /// A rolled-back enqueue leaves no task and releases its idempotency key.
    #[pg_test]
    fn a_rolled_back_enqueue_leaves_nothing_and_frees_its_key() {
        exec(
            "DO $b$ BEGIN
                 PERFORM aedb_queue.queue_enqueue('q', '1', idempotency_key => 'k');
                 RAISE EXCEPTION 'caller aborts';
             EXCEPTION WHEN raise_exception THEN NULL;
             END $b$",
        );
        assert_eq!(count("aedb_queue.task"), 0);
        assert_eq!(count("aedb_queue.idempotency_key"), 0);
        let (id, dedup) = enqueue_dedup("q", ", '2', idempotency_key => 'k'");
        assert!(!dedup);
        assert_eq!(text_field(id, "payload").as_deref(), Some("2"));
    }

    // ------------------------------------------------------------------
    // Invariants: the task table has no CHECK constraints (sql/schema.sql),
    // so every statement must keep its rows consistent. A seeded random mix
    // of every call that writes tasks, checked after each step.
    // ------------------------------------------------------------------

    #[pg_test]
    fn every_write_path_keeps_the_task_invariants() {
        without_scan_hints();
        let mut seed: u64 = 0x5eed_a3db;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let in_flight = || -> Vec<(i64, i64)> {
            Spi::connect_mut(|c| {
                c.update(
                    "SELECT task_id, fencing_token FROM aedb_queue.task WHERE state = 'in_flight' ORDER BY task_id",
                    None,
                    &[],
                )
                .unwrap()
                .map(|r| (r.get::<i64>(1).unwrap().unwrap(), r.get::<i64>(2).unwrap().unwrap()))
                .collect()
            })
        };
        let mut steps = std::collections::BTreeMap::<&str, usize>::new();
        for _ in 0..400 {
            let held = in_flight();
            let pick = |i: u64| held[(i as usize) % held.len().max(1)];
            let stale = next(4) == 0;
            let step = match next(12) {
                0 | 1 => {
                    let delay = if next(3) == 0 { "1 hour" } else { "0" };
                    enqueue(
                        "inv",
                        &format!(", delay => '{delay}', max_attempts => {}", 1 + next(3)),
                    );
                    "enqueue"
                }
                2 => {
                    exec("SELECT aedb_queue.queue_enqueue_batch('inv', ARRAY['1', '2']::jsonb[], max_attempts => 2)");
                    "enqueue_batch"
                }
                3 => {
                    claim("inv", &format!(", max => {}", 1 + next(3)));
                    "claim"
                }
                _ if held.is_empty() => "nothing held",
                4 => {
                    let (id, token) = pick(next(64));
                    complete("inv", id, token + stale as i64, "");
                    "complete"
                }
                5 => {
                    let (id, token) = pick(next(64));
                    let how = [", dead_letter => true", ", retry_in => '0'", ""][next(3) as usize];
                    fail("inv", id, token + stale as i64, how);
                    "fail"
                }
                6 => {
                    let (id, token) = pick(next(64));
                    exec(&format!("SELECT * FROM aedb_queue.queue_complete_and_claim('inv', 'w2', {id}, {}, max => 2)", token + stale as i64));
                    "complete_and_claim"
                }
                7 => {
                    let (id, token) = pick(next(64));
                    exec(&format!("SELECT * FROM aedb_queue.queue_fail_and_claim('inv', 'w2', {id}, {}, 'e', retry_in => '0')", token + stale as i64));
                    "fail_and_claim"
                }
                8 => {
                    let (id, token) = pick(next(64));
                    heartbeat(
                        "inv",
                        id,
                        token + stale as i64,
                        "1 minute",
                        ", progress => '{\"p\": 1}'",
                    );
                    "heartbeat"
                }
                9 => {
                    cancel("inv", pick(next(64)).0);
                    "cancel"
                }
                10 => {
                    expire_lease(pick(next(64)).0);
                    exec("UPDATE aedb_queue.task SET not_before = statement_timestamp() - interval '1 second' WHERE state = 'scheduled'");
                    exec("SELECT aedb_queue.queue_reap('inv')");
                    "reap"
                }
                _ => {
                    exec("SELECT aedb_queue.queue_retry_dead('inv')");
                    "retry_dead"
                }
            };
            *steps.entry(step).or_default() += 1;
            assert_task_invariants(step);
        }
        // Every kind of step ran, so each write path was checked.
        for step in [
            "enqueue",
            "enqueue_batch",
            "claim",
            "complete",
            "fail",
            "complete_and_claim",
            "fail_and_claim",
            "heartbeat",
            "cancel",
            "reap",
            "retry_dead",
        ] {
            assert!(
                steps.get(step).copied().unwrap_or(0) > 3,
                "{step} ran too rarely: {steps:?}"
            );
        }
        assert!(
            count("aedb_queue.task WHERE state = 'dead'")
                + count("aedb_queue.task WHERE state = 'scheduled'")
                > 0
        );
    }
}
