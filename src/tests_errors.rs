//! `#[pg_test]`s of rejected calls: the payload limit, what a rejected
//! call leaves behind, SQLSTATE classes, and every invalid argument with
//! its exact message. Conventions as in `tests.rs`.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    // ------------------------------------------------------------------
    // Payload limit GUC: payload, result, progress, follow-up, batch element.
    // ------------------------------------------------------------------

    #[pg_test]
    fn the_default_payload_limit_is_one_mebibyte() {
        assert_eq!(
            one::<String>("SELECT current_setting('aedb_queue.max_payload_bytes')"),
            "1048576"
        );
    }

    /// `{"x": <200 chars>}` is 213 bytes of jsonb: 4 header + 2×4 entries + 1 key + 200.
    #[pg_test(
        error = "argument \"payload\" is 213 bytes, over the limit of 100 bytes (aedb_queue.max_payload_bytes)"
    )]
    fn an_oversized_payload_is_rejected() {
        set_payload_limit(100);
        exec(&format!(
            "SELECT aedb_queue.queue_enqueue('q', {})",
            big_json(200)
        ));
    }

    #[pg_test]
    fn a_payload_exactly_at_the_limit_is_accepted() {
        let size: i32 = one(&format!("SELECT pg_column_size({}) - 4", big_json(200)));
        assert_eq!(size, 213);
        set_payload_limit(size);
        enqueue("q", &format!(", {}", big_json(200)));
        set_payload_limit(size - 1);
        expect_error(
            &format!("SELECT aedb_queue.queue_enqueue('q', {})", big_json(200)),
            "54000",
            &format!(
                "argument \"payload\" is {size} bytes, over the limit of {} bytes (aedb_queue.max_payload_bytes)",
                size - 1
            ),
        );
        assert_eq!(count("aedb_queue.task"), 1);
    }

    #[pg_test]
    fn the_limit_applies_to_result_progress_follow_ups_and_batch_elements() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        set_payload_limit(100);
        let big = big_json(200);
        let cases = [
            (format!("SELECT aedb_queue.queue_complete('q', {id}, {token}, result => {big})"), "\"result\""),
            (format!("SELECT aedb_queue.queue_heartbeat('q', {id}, {token}, '1 minute', progress => {big})"), "\"progress\""),
            (
                format!(
                    "SELECT aedb_queue.queue_complete('q', {id}, {token},
                         follow_ups => jsonb_build_array(jsonb_build_object('queue', 'next', 'payload', {big})))"
                ),
                "\"follow_ups[0].payload\"",
            ),
            (
                format!("SELECT * FROM aedb_queue.queue_enqueue_batch('q', ARRAY['1'::jsonb, {big}])"),
                "\"payloads[2]\"",
            ),
        ];
        for (query, arg) in cases {
            let (state, message) =
                error_of(&query).unwrap_or_else(|| panic!("{query} should fail"));
            assert_eq!(state, "54000", "{query}: {message}");
            assert!(
                message.starts_with(&format!("argument {arg} is ")),
                "{message}"
            );
            assert!(
                message.ends_with("over the limit of 100 bytes (aedb_queue.max_payload_bytes)"),
                "{message}"
            );
        }
        // None of the rejected calls changed the task or added any.
        assert_eq!(state_of("q", id).as_deref(), Some("in_flight"));
        assert_eq!(field::<i64>(id, "fencing_token"), Some(token));
        assert_eq!(text_field(id, "progress"), None);
        assert_eq!(count("aedb_queue.task"), 1);
    }

    /// The limit is on the uncompressed value, even when it arrives compressed from a table.
    #[pg_test]
    fn the_limit_measures_the_uncompressed_value() {
        exec("CREATE TEMP TABLE src (j jsonb)");
        exec(&format!("INSERT INTO src VALUES ({})", big_json(100_000)));
        let stored: i32 = one("SELECT pg_column_size(j) FROM src");
        assert!(
            stored < 10_000,
            "the test value should be stored compressed, is {stored} bytes"
        );
        set_payload_limit(50_000);
        expect_error(
            "SELECT * FROM aedb_queue.queue_enqueue('q', (SELECT j FROM src))",
            "54000",
            "argument \"payload\" is 100013 bytes, over the limit of 50000 bytes (aedb_queue.max_payload_bytes)",
        );
    }

    /// Out-of-line (TOAST) payloads read from a table go through intact.
    #[pg_test]
    fn a_toasted_payload_from_a_table_round_trips() {
        exec("CREATE TEMP TABLE src (j jsonb)");
        exec("INSERT INTO src SELECT jsonb_agg(md5(g::text)) FROM generate_series(1, 3000) g");
        let id: i64 = one("SELECT task_id FROM src, aedb_queue.queue_enqueue('q', src.j)");
        let same: bool = one(&format!(
            "SELECT c.task_id = {id} AND c.payload = (SELECT j FROM src) FROM aedb_queue.queue_claim('q', 'w') c"
        ));
        assert!(same);
    }

    /// Superuser-only: an application role cannot lift the operator's limit.
    #[pg_test]
    fn an_ordinary_role_cannot_change_the_payload_limit() {
        exec("CREATE ROLE aedb_test_app NOLOGIN");
        exec("SET LOCAL ROLE aedb_test_app");
        let (state, message) =
            error_of("SELECT set_config('aedb_queue.max_payload_bytes', '99999999', true)")
                .expect("must be refused");
        exec("RESET ROLE");
        assert_eq!(state, "42501", "{message}");
        assert_eq!(
            one::<String>("SELECT current_setting('aedb_queue.max_payload_bytes')"),
            "1048576"
        );
    }

    #[pg_test(
        error = "argument \"payloads[2]\" is 213 bytes, over the limit of 100 bytes (aedb_queue.max_payload_bytes)"
    )]
    fn an_oversized_batch_element_is_rejected_by_position() {
        set_payload_limit(100);
        exec(&format!(
            "SELECT * FROM aedb_queue.queue_enqueue_batch('q', ARRAY[NULL, {}, '1'::jsonb])",
            big_json(200)
        ));
    }

    // ------------------------------------------------------------------
    // A rejected call: what can be seen inside the same transaction.
    //
    // `error_of` catches the error in a subtransaction that rolls back
    // every row the call wrote, so row counts after it prove nothing; that a
    // rejected call changes nothing is observed from other sessions in
    // itests/tests/rejections.rs (rows, the task id sequence, keys,
    // notifications). The sequence cannot be watched here: pg_tests run in
    // parallel sessions that take ids all the time. What is left to see is
    // the error, and that the session still works after it.
    // ------------------------------------------------------------------

    #[pg_test]
    fn a_complete_with_a_bad_follow_up_is_refused_and_the_task_can_still_be_settled() {
        let id = enqueue("q", "");
        let (_, token) = claim_one("q");
        for (spec, message) in [
            (
                r#"{"queue": "next", "priority": "high"}"#,
                "invalid argument \"follow_ups[1].priority\": must be an integer",
            ),
            (
                r#"{"queue": "next", "max_attempts": 0}"#,
                "invalid argument \"follow_ups[1].max_attempts\": must be at least 1, got 0",
            ),
            (
                r#"{"queue": "next", "idempotency_key": ""}"#,
                "invalid argument \"follow_ups[1].idempotency_key\": must be 1 to 512 bytes, got 0",
            ),
        ] {
            expect_error(
                &format!(
                    r#"SELECT aedb_queue.queue_complete('q', {id}, {token},
                           follow_ups => '[{{"queue": "next", "idempotency_key": "k"}}, {spec}]')"#
                ),
                "22023",
                message,
            );
        }
        assert_eq!(
            complete("q", id, token, r#", follow_ups => '[{"queue": "next"}]'"#),
            "applied"
        );
        assert_eq!(count("aedb_queue.task WHERE queue = 'next'"), 1);
    }

    #[pg_test]
    fn rejected_enqueues_are_refused_and_the_session_still_enqueues() {
        set_payload_limit(100);
        for extra in [
            ", max_attempts => 0",
            ", delay => '-1 second'",
            ", idempotency_key => ''",
        ] {
            let call = format!("SELECT * FROM aedb_queue.queue_enqueue('fresh'{extra})");
            assert!(error_of(&call).is_some(), "{call}");
        }
        let batch = format!(
            "SELECT * FROM aedb_queue.queue_enqueue_batch('fresh', ARRAY['1'::jsonb, '2'::jsonb, {}])",
            big_json(200)
        );
        let (state, message) = error_of(&batch).expect("batch must fail");
        assert_eq!(state, "54000", "{message}");
        assert!(message.contains("\"payloads[3]\""), "{message}");
        let id = enqueue("fresh", "");
        assert_eq!(state_of("fresh", id).as_deref(), Some("ready"));
    }

    // ------------------------------------------------------------------
    // SQLSTATE classes: clients match on these.
    // ------------------------------------------------------------------

    #[pg_test]
    fn errors_carry_their_sqlstate() {
        expect_error(
            "SELECT * FROM aedb_queue.queue_enqueue(NULL)",
            "22004",
            "argument \"queue\" must not be NULL",
        );
        expect_error(
            "SELECT * FROM aedb_queue.queue_enqueue('')",
            "22023",
            "invalid argument \"queue\": must not be empty",
        );
        set_payload_limit(10);
        let (state, _) =
            error_of("SELECT * FROM aedb_queue.queue_enqueue('q', '[1,2,3,4,5,6,7,8]')").unwrap();
        assert_eq!(state, "54000");
        expect_error(
            "SELECT aedb_queue.queue_complete('q', 999999999, 1, strict => true)",
            "40002",
            "lease lost: task 999999999 is no longer in flight under fencing token 1",
        );
    }

    #[pg_test]
    fn a_batch_settle_with_a_null_element_is_refused_and_settles_nothing() {
        enqueue("nulls", "");
        enqueue("nulls", "");
        let (a, ta) = claim_one("nulls");
        let (b, tb) = claim_one("nulls");
        expect_error(
            &format!("SELECT * FROM aedb_queue.queue_complete_batch('nulls', ARRAY[{a}, NULL, {b}], ARRAY[{ta}, 1, {tb}])"),
            "22023",
            "invalid argument \"task_ids\": must not contain NULL (element 2 is NULL)",
        );
        expect_error(
            &format!("SELECT * FROM aedb_queue.queue_complete_batch('nulls', ARRAY[{a}, {b}], ARRAY[{ta}, NULL])"),
            "22023",
            "invalid argument \"fencing_tokens\": must not contain NULL (element 2 is NULL)",
        );
        // Observed after the failed calls: both tasks are still in flight
        // and settle under their tokens.
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'nulls' AND state = 'in_flight'"),
            2
        );
        let settled = one::<i64>(&format!(
            "SELECT count(*) FROM aedb_queue.queue_complete_batch('nulls', ARRAY[{a}, {b}], ARRAY[{ta}, {tb}]) WHERE outcome = 'applied'"
        ));
        assert_eq!(settled, 2);
    }

    // ------------------------------------------------------------------
    // Every invalid argument: one test each, exact message naming it.
    // ------------------------------------------------------------------

    #[pg_test(error = "invalid argument \"queue\": must not be empty")]
    fn error_empty_queue() {
        exec("SELECT aedb_queue.queue_enqueue('')");
    }

    #[pg_test(error = "invalid argument \"queue\": is 129 bytes, longer than 128")]
    fn error_queue_of_129_bytes() {
        exec("SELECT aedb_queue.queue_enqueue(repeat('q', 129))");
    }

    #[pg_test]
    fn a_queue_of_128_bytes_is_fine() {
        let name = "q".repeat(128);
        let id = enqueue(&name, "");
        assert_eq!(claim_one(&name).0, id);
    }

    #[pg_test(error = "invalid argument \"delay\": must be at most 100 years")]
    fn error_delay_beyond_100_years() {
        exec("SELECT aedb_queue.queue_enqueue('q', delay => '300000 years')");
    }

    #[pg_test(error = "invalid argument \"lease\": must be at most 100 years")]
    fn error_lease_beyond_100_years() {
        exec("SELECT aedb_queue.queue_claim('q', 'w', lease => '1000000 years')");
    }

    #[pg_test(error = "invalid argument \"backoff_base\": must be at most 100 years")]
    fn error_backoff_base_beyond_100_years() {
        exec("SELECT aedb_queue.queue_enqueue('q', backoff_base => '200 years')");
    }

    #[pg_test(error = "argument \"queue\" must not be NULL")]
    fn error_null_queue() {
        exec("SELECT aedb_queue.queue_enqueue(NULL)");
    }

    #[pg_test(error = "invalid argument \"queue\": must not be empty")]
    fn error_empty_queue_in_claim() {
        exec("SELECT aedb_queue.queue_claim('', 'w')");
    }

    #[pg_test(error = "invalid argument \"owner_id\": must not be empty")]
    fn error_empty_owner_id() {
        exec("SELECT aedb_queue.queue_claim('q', '')");
    }

    #[pg_test(error = "argument \"owner_id\" must not be NULL")]
    fn error_null_owner_id() {
        exec("SELECT aedb_queue.queue_claim('q', NULL)");
    }

    #[pg_test(error = "invalid argument \"owner_id\": is 129 bytes, longer than 128")]
    fn error_owner_id_of_129_bytes() {
        exec("SELECT aedb_queue.queue_claim('q', repeat('w', 129))");
    }

    #[pg_test(error = "invalid argument \"lease\": must be a positive interval")]
    fn error_zero_lease() {
        exec("SELECT aedb_queue.queue_claim('q', 'w', lease => '0')");
    }

    #[pg_test(error = "invalid argument \"lease\": must be a positive interval")]
    fn error_negative_lease() {
        exec("SELECT aedb_queue.queue_claim('q', 'w', lease => '-5 seconds')");
    }

    /// Since 0.2.0 a NULL lease means the queue's default lease (30 s unless configured).
    #[pg_test]
    fn a_null_lease_is_the_default_lease() {
        enqueue("q", "");
        let id: i64 = one("SELECT task_id FROM aedb_queue.queue_claim('q', 'w', lease => NULL)");
        assert_eq!(
            text_field(id, "lease_deadline - updated_at").as_deref(),
            Some("00:00:30")
        );
    }

    #[pg_test(error = "invalid argument \"max\": must be between 1 and 10000, got 0")]
    fn error_claim_max_zero() {
        exec("SELECT aedb_queue.queue_claim('q', 'w', max => 0)");
    }

    #[pg_test(error = "invalid argument \"max\": must be between 1 and 10000, got 10001")]
    fn error_claim_max_above_10000() {
        exec("SELECT aedb_queue.queue_claim('q', 'w', max => 10001)");
    }

    #[pg_test(error = "invalid argument \"extend\": must be a positive interval")]
    fn error_zero_extend() {
        exec("SELECT aedb_queue.queue_heartbeat('q', 1, 1, '0')");
    }

    #[pg_test(error = "argument \"extend\" must not be NULL")]
    fn error_null_extend() {
        exec("SELECT aedb_queue.queue_heartbeat('q', 1, 1, NULL)");
    }

    #[pg_test(error = "invalid argument \"delay\": must not be a negative interval")]
    fn error_negative_delay() {
        exec("SELECT aedb_queue.queue_enqueue('q', delay => '-1 second')");
    }

    #[pg_test(error = "argument \"delay\" must not be NULL")]
    fn error_null_delay() {
        exec("SELECT aedb_queue.queue_enqueue('q', delay => NULL)");
    }

    #[pg_test(error = "invalid argument \"delay\": must not be a negative interval")]
    fn error_negative_batch_delay() {
        exec("SELECT aedb_queue.queue_enqueue_batch('q', ARRAY['1'::jsonb], delay => '-1 day')");
    }

    #[pg_test(error = "argument \"payloads\" must not be NULL")]
    fn error_null_batch_payloads() {
        exec("SELECT aedb_queue.queue_enqueue_batch('q', NULL)");
    }

    #[pg_test(error = "invalid argument \"retry_in\": must not be a negative interval")]
    fn error_negative_retry_in() {
        exec("SELECT aedb_queue.queue_fail('q', 1, 1, 'e', retry_in => '-1 second')");
    }

    #[pg_test(error = "invalid argument \"max_attempts\": must be at least 1, got 0")]
    fn error_max_attempts_zero() {
        exec("SELECT aedb_queue.queue_enqueue('q', max_attempts => 0)");
    }

    #[pg_test(error = "invalid argument \"backoff_max\": must not be below backoff_base")]
    fn error_backoff_max_below_base() {
        exec("SELECT aedb_queue.queue_enqueue('q', backoff_base => '10 seconds', backoff_max => '5 seconds')");
    }

    #[pg_test(error = "invalid argument \"backoff_base\": must be a positive interval")]
    fn error_zero_backoff_base() {
        exec("SELECT aedb_queue.queue_enqueue('q', backoff_base => '0')");
    }

    #[pg_test(error = "invalid argument \"idempotency_key\": must be 1 to 512 bytes, got 0")]
    fn error_empty_idempotency_key() {
        exec("SELECT aedb_queue.queue_enqueue('q', idempotency_key => '')");
    }

    #[pg_test(error = "invalid argument \"idempotency_key\": must be 1 to 512 bytes, got 513")]
    fn error_idempotency_key_of_513_bytes() {
        exec("SELECT aedb_queue.queue_enqueue('q', idempotency_key => repeat('k', 513))");
    }

    #[pg_test(error = "invalid argument \"limit\": must be between 1 and 100000, got 0")]
    fn error_list_limit_zero() {
        exec("SELECT * FROM aedb_queue.queue_list('q', NULL, 0)");
    }

    #[pg_test(
        error = "invalid argument \"state\": must be one of waiting, scheduled, blocked, ready, in_flight, dead, completed; got \"bogus\""
    )]
    fn error_list_state_bogus() {
        exec("SELECT * FROM aedb_queue.queue_list('q', 'bogus')");
    }

    #[pg_test(error = "argument \"task_id\" must not be NULL")]
    fn error_null_task_id() {
        exec("SELECT aedb_queue.queue_complete('q', NULL, 1)");
    }

    #[pg_test(error = "argument \"task_id\" must not be NULL")]
    fn error_null_task_id_in_get() {
        exec("SELECT * FROM aedb_queue.queue_get('q', NULL)");
    }

    #[pg_test(error = "argument \"task_id\" must not be NULL")]
    fn error_null_task_id_in_cancel() {
        exec("SELECT aedb_queue.queue_cancel('q', NULL)");
    }

    #[pg_test(error = "argument \"fencing_token\" must not be NULL")]
    fn error_null_fencing_token() {
        exec("SELECT aedb_queue.queue_fail('q', 1, NULL, 'e')");
    }

    #[pg_test(error = "argument \"error\" must not be NULL")]
    fn error_null_error_text() {
        exec("SELECT aedb_queue.queue_fail('q', 1, 1, NULL)");
    }

    #[pg_test(error = "argument \"strict\" must not be NULL")]
    fn error_null_strict() {
        exec("SELECT aedb_queue.queue_complete('q', 1, 1, strict => NULL)");
    }

    #[pg_test(error = "invalid argument \"max\": must be between 1 and 2147483647, got 0")]
    fn error_reap_max_zero() {
        exec("SELECT aedb_queue.queue_reap(max => 0)");
    }

    #[pg_test(error = "invalid argument \"queue\": must not be empty")]
    fn error_reap_empty_queue() {
        exec("SELECT aedb_queue.queue_reap('')");
    }

    #[pg_test(error = "argument \"priority\" must not be NULL")]
    fn error_null_priority() {
        exec("SELECT aedb_queue.queue_enqueue('q', priority => NULL)");
    }

    #[pg_test(error = "argument \"max\" must not be NULL")]
    fn error_null_claim_max() {
        exec("SELECT aedb_queue.queue_claim('q', 'w', max => NULL)");
    }

    #[pg_test(error = "argument \"dead_letter\" must not be NULL")]
    fn error_null_dead_letter() {
        exec("SELECT aedb_queue.queue_fail('q', 1, 1, 'e', dead_letter => NULL)");
    }

    #[pg_test(error = "invalid argument \"limit\": must be between 1 and 100000, got 100001")]
    fn error_list_limit_above_100000() {
        exec("SELECT * FROM aedb_queue.queue_list('q', NULL, 100001)");
    }

    #[pg_test(error = "argument \"follow_ups\" has 1001 specs, more than 1000")]
    fn error_too_many_follow_ups() {
        exec(
            "SELECT aedb_queue.queue_complete('q', 1, 1,
                 follow_ups => (SELECT jsonb_agg(jsonb_build_object('queue', 'a')) FROM generate_series(1, 1001)))",
        );
    }

    #[pg_test(error = "invalid argument \"follow_ups\": must be a JSON array of enqueue specs")]
    fn error_follow_ups_not_an_array() {
        exec(r#"SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '{"queue": "next"}')"#);
    }

    #[pg_test(error = "invalid argument \"follow_ups[0]\": must be a JSON object")]
    fn error_follow_up_not_an_object() {
        exec(r#"SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '["next"]')"#);
    }

    #[pg_test(error = "invalid argument \"follow_ups[0].queue\": is required")]
    fn error_follow_up_missing_queue() {
        exec(r#"SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{"payload": 1}]')"#);
    }

    #[pg_test(
        error = "invalid argument \"follow_ups[1].colour\": is not a known key (expected one of queue, payload, delay, priority, max_attempts, backoff_base, backoff_max, idempotency_key, wait_for, on_parent_failure, concurrency_key, ordering_key, fairness_key)"
    )]
    fn error_follow_up_unknown_key() {
        exec(
            r#"SELECT aedb_queue.queue_complete('q', 1, 1,
                   follow_ups => '[{"queue": "a"}, {"queue": "b", "colour": "red"}]')"#,
        );
    }

    #[pg_test(error = "invalid argument \"follow_ups[0].priority\": must be an integer")]
    fn error_follow_up_priority_not_an_integer() {
        exec(
            r#"SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{"queue": "a", "priority": "high"}]')"#,
        );
    }

    #[pg_test(
        error = "invalid argument \"follow_ups[0].delay\": must be duration text (\"5 minutes\") or a number of seconds"
    )]
    fn error_follow_up_delay_of_the_wrong_type() {
        exec(
            r#"SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{"queue": "a", "delay": true}]')"#,
        );
    }

    #[pg_test(
        error = "invalid argument \"follow_ups[0].delay\": \"soon\" is not a duration like \"5 minutes\" or \"1 hour 30 min\""
    )]
    fn error_follow_up_delay_text_not_a_duration() {
        exec(
            r#"SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{"queue": "a", "delay": "soon"}]')"#,
        );
    }

    #[pg_test(error = "invalid argument \"follow_ups[0].delay\": must not be a negative interval")]
    fn error_follow_up_negative_delay() {
        exec(
            r#"SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{"queue": "a", "delay": -5}]')"#,
        );
    }

    #[pg_test(error = "invalid argument \"follow_ups[0].queue\": must not be empty")]
    fn error_follow_up_empty_queue() {
        exec(r#"SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{"queue": ""}]')"#);
    }

    #[pg_test(error = "invalid argument \"follow_ups[0].queue\": must be a string")]
    fn error_follow_up_queue_not_a_string() {
        exec(r#"SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{"queue": 7}]')"#);
    }

    #[pg_test(
        error = "invalid argument \"follow_ups[0].backoff_max\": must not be below backoff_base"
    )]
    fn error_follow_up_backoff_max_below_base() {
        exec(
            r#"SELECT aedb_queue.queue_complete('q', 1, 1,
                   follow_ups => '[{"queue": "a", "backoff_base": "1 minute", "backoff_max": "1 s"}]')"#,
        );
    }

    #[pg_test(error = "invalid argument \"follow_ups[0].idempotency_key\": must be a string")]
    fn error_follow_up_idempotency_key_not_a_string() {
        exec(
            r#"SELECT aedb_queue.queue_complete('q', 1, 1, follow_ups => '[{"queue": "a", "idempotency_key": 5}]')"#,
        );
    }
}
