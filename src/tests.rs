//! `#[pg_test]` suite: single-session semantics of every entry point.
//!
//! Each test runs inside one transaction that the harness rolls back, and the
//! whole test body is ONE client statement (`SELECT tests.<name>()`). So
//! `statement_timestamp()` — the clock every queue statement reads — does not
//! move during a test, not even across `pg_sleep`. Where a test needs time to
//! pass (a lease to expire, a timer to fall due) it moves the task's
//! `lease_deadline` / `not_before` into the past with a direct UPDATE
//! ([`tests::expire_lease`], [`tests::make_due`]); the
//! `time_does_not_move_inside_a_test` test pins that assumption down.
//! Multi-connection behaviour (commits, SKIP LOCKED, real lease expiry) lives
//! in the integration tests, not here.

#[pgrx::pg_schema]
pub(crate) mod tests {
    use pgrx::prelude::*;
    use pgrx::{FromDatum, IntoDatum};

    // ------------------------------------------------------------------
    // Helpers: small wrappers over SPI so each test reads as the scenario.
    // ------------------------------------------------------------------

    /// First column of the first row; panics on SQL error or NULL / no row.
    pub(crate) fn one<T: FromDatum + IntoDatum>(sql: &str) -> T {
        opt(sql).unwrap_or_else(|| panic!("no value (NULL or no row) from: {sql}"))
    }

    /// First column of the first row, `None` for NULL or no row.
    pub(crate) fn opt<T: FromDatum + IntoDatum>(sql: &str) -> Option<T> {
        Spi::connect_mut(|c| {
            let table = c
                .update(sql, None, &[])
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            if table.is_empty() {
                return None;
            }
            table
                .first()
                .get_one::<T>()
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
        })
    }

    pub(crate) fn exec(sql: &str) {
        Spi::run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// First column of every row, as i64.
    pub(crate) fn ints(sql: &str) -> Vec<i64> {
        Spi::connect_mut(|c| {
            let table = c
                .update(sql, None, &[])
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            table
                .into_iter()
                .map(|row| {
                    row.get::<i64>(1)
                        .expect("column 1")
                        .expect("non-NULL column 1")
                })
                .collect()
        })
    }

    pub(crate) fn count(sql_from_where: &str) -> i64 {
        one(&format!("SELECT count(*) FROM {sql_from_where}"))
    }

    /// Enqueues one task; `extra` is appended to the argument list (", priority => 5").
    pub(crate) fn enqueue(queue: &str, extra: &str) -> i64 {
        let (id, dedup) = enqueue_dedup(queue, extra);
        assert!(!dedup, "fresh enqueue into {queue} reported deduplicated");
        id
    }

    pub(crate) fn enqueue_dedup(queue: &str, extra: &str) -> (i64, bool) {
        let sql =
            format!("SELECT task_id, deduplicated FROM aedb_queue.queue_enqueue('{queue}'{extra})");
        match Spi::get_two::<i64, bool>(&sql).unwrap_or_else(|e| panic!("{sql}: {e}")) {
            (Some(id), Some(dedup)) => (id, dedup),
            other => panic!("{sql}: unexpected {other:?}"),
        }
    }

    /// Claims with `extra` appended to the arguments; (task_id, fencing_token) in returned order.
    pub(crate) fn claim(queue: &str, extra: &str) -> Vec<(i64, i64)> {
        let sql = format!(
            "SELECT task_id, fencing_token FROM aedb_queue.queue_claim('{queue}', 'w1'{extra})"
        );
        Spi::connect_mut(|c| {
            let table = c
                .update(&sql, None, &[])
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            table
                .into_iter()
                .map(|row| {
                    (
                        row.get::<i64>(1).unwrap().unwrap(),
                        row.get::<i64>(2).unwrap().unwrap(),
                    )
                })
                .collect()
        })
    }

    /// Claims exactly one task and returns (task_id, fencing_token).
    pub(crate) fn claim_one(queue: &str) -> (i64, i64) {
        let got = claim(queue, "");
        assert_eq!(
            got.len(),
            1,
            "expected one claimed task in {queue}, got {got:?}"
        );
        got[0]
    }

    pub(crate) fn complete(queue: &str, id: i64, token: i64, extra: &str) -> String {
        one(&format!(
            "SELECT aedb_queue.queue_complete('{queue}', {id}, {token}{extra})::text"
        ))
    }

    pub(crate) fn fail(queue: &str, id: i64, token: i64, extra: &str) -> String {
        one(&format!(
            "SELECT aedb_queue.queue_fail('{queue}', {id}, {token}, 'boom'{extra})::text"
        ))
    }

    pub(crate) fn heartbeat(queue: &str, id: i64, token: i64, extend: &str, extra: &str) -> String {
        one(&format!(
            "SELECT aedb_queue.queue_heartbeat('{queue}', {id}, {token}, '{extend}'{extra})::text"
        ))
    }

    pub(crate) fn cancel(queue: &str, id: i64) -> bool {
        one(&format!("SELECT aedb_queue.queue_cancel('{queue}', {id})"))
    }

    /// The task's state as `queue_get` reports it; `None` when there is no such task in `queue`.
    pub(crate) fn state_of(queue: &str, id: i64) -> Option<String> {
        opt(&format!(
            "SELECT state::text FROM aedb_queue.queue_get('{queue}', {id})"
        ))
    }

    /// One expression evaluated over the task row (`None` for NULL or no row).
    pub(crate) fn field<T: FromDatum + IntoDatum>(id: i64, expr: &str) -> Option<T> {
        opt(&format!(
            "SELECT {expr} FROM aedb_queue.task WHERE task_id = {id}"
        ))
    }

    pub(crate) fn text_field(id: i64, expr: &str) -> Option<String> {
        field::<String>(id, &format!("({expr})::text"))
    }

    /// Time is frozen inside a test, so a simulated expiry lands behind this
    /// backend's scan hints, which assume time moves forward: read from the head.
    pub(crate) fn without_scan_hints() {
        exec("SET LOCAL aedb_queue.claim_rescan_interval = 0");
    }

    /// Simulates the lease running out (time is frozen inside a test).
    pub(crate) fn expire_lease(id: i64) {
        without_scan_hints();
        exec(&format!(
            "UPDATE aedb_queue.task SET lease_deadline = statement_timestamp() - interval '1 second'
             WHERE task_id = {id} AND state = 'in_flight'"
        ));
    }

    /// Simulates a timer falling due (time is frozen inside a test).
    pub(crate) fn make_due(id: i64) {
        without_scan_hints();
        exec(&format!(
            "UPDATE aedb_queue.task SET not_before = statement_timestamp() - interval '1 second'
             WHERE task_id = {id} AND state = 'scheduled'"
        ));
    }

    /// Runs `query` inside a PL/pgSQL block that catches any error; returns
    /// (SQLSTATE, message) of the error, or `None` when it succeeded. The
    /// block is a subtransaction, so whatever the failed call did is undone,
    /// exactly as for a client that gets the error.
    pub(crate) fn error_of(query: &str) -> Option<(String, String)> {
        exec("SELECT set_config('aedb_test.sqlstate', '', true), set_config('aedb_test.message', '', true)");
        exec(&format!(
            "DO $aedb_test$
             BEGIN
                 PERFORM * FROM ({query}) AS q;
             EXCEPTION WHEN others THEN
                 PERFORM set_config('aedb_test.sqlstate', SQLSTATE, true),
                         set_config('aedb_test.message', SQLERRM, true);
             END
             $aedb_test$"
        ));
        let sqlstate: String = one("SELECT current_setting('aedb_test.sqlstate')");
        let message: String = one("SELECT current_setting('aedb_test.message')");
        (!sqlstate.is_empty()).then_some((sqlstate, message))
    }

    pub(crate) fn expect_error(query: &str, sqlstate: &str, message: &str) {
        match error_of(query) {
            Some((state, msg)) => {
                assert_eq!(state, sqlstate, "SQLSTATE of {query} (message: {msg})");
                assert_eq!(msg, message, "message of {query}");
            }
            None => panic!("expected {query} to fail with {sqlstate}: {message}"),
        }
    }

    fn set_payload_limit(bytes: i32) {
        exec(&format!("SET LOCAL aedb_queue.max_payload_bytes = {bytes}"));
    }

    /// A jsonb literal `{"x": "aaa…"}` whose value has `n` characters.
    pub(crate) fn big_json(n: usize) -> String {
        format!("jsonb_build_object('x', repeat('a', {n}))")
    }

    // ------------------------------------------------------------------
    // Test-environment assumption: time is frozen within one test.
    // ------------------------------------------------------------------

    /// The statement clock stands still inside a test (one top-level
    /// statement); the helpers that move deadlines rely on it. Our calls
    /// run on the call's clock instead (`crate::clock`), so a lease of 1 µs
    /// taken in this same statement is expired for a later call.
    #[pg_test]
    fn the_statement_clock_stands_still_but_calls_read_the_real_one() {
        let before: String = one("SELECT statement_timestamp()::text");
        exec("SELECT pg_sleep(0.01)");
        let after: String = one("SELECT statement_timestamp()::text");
        assert_eq!(before, after);
        let id = enqueue("q", "");
        claim("q", ", lease => '1 microsecond'");
        exec("SELECT pg_sleep(0.01)");
        assert_eq!(
            ints("SELECT reclaimed FROM aedb_queue.queue_reap('q')"),
            vec![1]
        );
        assert_eq!(state_of("q", id).as_deref(), Some("ready"));
    }

    #[pg_test]
    fn enqueue_returns_fresh_ids_not_deduplicated() {
        let (a, da) = enqueue_dedup("q", ", '{\"n\": 1}'");
        let (b, db) = enqueue_dedup("q", ", '{\"n\": 2}'");
        assert!(!da && !db);
        assert!(b > a, "ids follow enqueue order: {a} then {b}");
        assert_eq!(state_of("q", a).as_deref(), Some("ready"));
        assert_eq!(text_field(a, "payload").as_deref(), Some("{\"n\": 1}"));
        assert_eq!(text_field(b, "payload").as_deref(), Some("{\"n\": 2}"));
        assert_eq!(count("aedb_queue.task WHERE queue = 'q'"), 2);
    }

    #[pg_test]
    fn enqueue_stores_defaults() {
        let id = enqueue("q", "");
        assert_eq!(text_field(id, "payload"), None);
        assert_eq!(field::<i64>(id, "priority"), Some(0));
        assert_eq!(field::<i32>(id, "attempts"), Some(0));
        assert_eq!(field::<i32>(id, "max_attempts"), Some(5));
        assert_eq!(field::<i64>(id, "fencing_token"), Some(0));
        assert_eq!(text_field(id, "backoff_base").as_deref(), Some("00:00:01"));
        assert_eq!(text_field(id, "backoff_max").as_deref(), Some("00:01:00"));
        assert_eq!(field::<bool>(id, "not_before = created_at"), Some(true));
        assert_eq!(
            field::<bool>(id, "owner_id IS NULL AND lease_deadline IS NULL"),
            Some(true)
        );
        assert_eq!(text_field(id, "idempotency_key"), None);
    }

    #[pg_test]
    fn enqueue_stores_explicit_options() {
        let id = enqueue(
            "q",
            ", priority => 7, max_attempts => 3, backoff_base => '2 seconds', backoff_max => '30 seconds'",
        );
        assert_eq!(field::<i64>(id, "priority"), Some(7));
        assert_eq!(field::<i32>(id, "max_attempts"), Some(3));
        assert_eq!(text_field(id, "backoff_base").as_deref(), Some("00:00:02"));
        assert_eq!(text_field(id, "backoff_max").as_deref(), Some("00:00:30"));
    }

    /// A base above the default 60 s ceiling lifts the ceiling to the base.
    #[pg_test]
    fn a_large_backoff_base_lifts_the_default_ceiling() {
        let id = enqueue("q", ", backoff_base => '2 minutes'");
        assert_eq!(text_field(id, "backoff_max").as_deref(), Some("00:02:00"));
    }

    /// `queue_reap()` of all queues walks the registry, so enqueue must register.
    #[pg_test]
    fn enqueue_registers_the_queue() {
        assert_eq!(count("aedb_queue.queue WHERE name = 'fresh'"), 0);
        enqueue("fresh", "");
        enqueue("fresh", "");
        assert_eq!(count("aedb_queue.queue WHERE name = 'fresh'"), 1);
    }

    #[pg_test]
    fn a_delayed_task_is_scheduled_and_not_claimed() {
        let id = enqueue("q", ", delay => '1 hour'");
        assert_eq!(state_of("q", id).as_deref(), Some("scheduled"));
        assert_eq!(
            text_field(id, "not_before - created_at").as_deref(),
            Some("01:00:00")
        );
        assert!(claim("q", ", max => 10").is_empty());
        assert_eq!(state_of("q", id).as_deref(), Some("scheduled"));
        assert_eq!(field::<i32>(id, "attempts"), Some(0));
    }

    #[pg_test]
    fn a_zero_delay_is_ready_at_once() {
        let id = enqueue("q", ", delay => '0'");
        assert_eq!(state_of("q", id).as_deref(), Some("ready"));
    }

    #[pg_test]
    fn an_idempotency_key_deduplicates() {
        let (first, d1) = enqueue_dedup("q", ", '{\"v\": 1}', idempotency_key => 'order-42'");
        let (second, d2) = enqueue_dedup("q", ", '{\"v\": 2}', idempotency_key => 'order-42'");
        assert!(!d1);
        assert!(
            d2,
            "second enqueue with the same key must report deduplicated"
        );
        assert_eq!(first, second);
        assert_eq!(count("aedb_queue.task WHERE queue = 'q'"), 1);
        assert_eq!(
            text_field(first, "payload").as_deref(),
            Some("{\"v\": 1}"),
            "first payload kept"
        );
        assert_eq!(
            text_field(first, "idempotency_key").as_deref(),
            Some("order-42")
        );
    }

    /// The key outlives the task: a retried enqueue after completion is still a no-op.
    #[pg_test]
    fn an_idempotency_key_outlives_the_completed_task() {
        let (id, _) = enqueue_dedup("q", ", idempotency_key => 'k'");
        let (claimed, token) = claim_one("q");
        assert_eq!(claimed, id);
        assert_eq!(complete("q", id, token, ""), "applied");
        assert_eq!(count("aedb_queue.task"), 0);
        assert_eq!(enqueue_dedup("q", ", idempotency_key => 'k'"), (id, true));
        assert_eq!(
            count("aedb_queue.task"),
            0,
            "a deduplicated enqueue inserts nothing"
        );
    }

    #[pg_test]
    fn an_idempotency_key_outlives_a_cancelled_task() {
        let (id, _) = enqueue_dedup("q", ", idempotency_key => 'k'");
        assert!(cancel("q", id));
        assert_eq!(enqueue_dedup("q", ", idempotency_key => 'k'"), (id, true));
        assert_eq!(count("aedb_queue.task"), 0);
    }

    #[pg_test]
    fn idempotency_keys_are_per_queue() {
        let (a, da) = enqueue_dedup("qa", ", idempotency_key => 'same'");
        let (b, db) = enqueue_dedup("qb", ", idempotency_key => 'same'");
        assert!(!da && !db);
        assert_ne!(a, b);
        assert_eq!(state_of("qa", a).as_deref(), Some("ready"));
        assert_eq!(state_of("qb", b).as_deref(), Some("ready"));
    }

    #[pg_test]
    fn enqueue_batch_returns_ids_in_payload_order_with_null_elements() {
        let ids = ints(
            "SELECT * FROM aedb_queue.queue_enqueue_batch('q',
                 ARRAY['{\"i\": 0}'::jsonb, NULL, '{\"i\": 2}'::jsonb, '[3]'::jsonb])",
        );
        assert_eq!(ids.len(), 4);
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids ascend in payload order: {ids:?}"
        );
        assert_eq!(text_field(ids[0], "payload").as_deref(), Some("{\"i\": 0}"));
        assert_eq!(text_field(ids[1], "payload"), None);
        assert_eq!(text_field(ids[2], "payload").as_deref(), Some("{\"i\": 2}"));
        assert_eq!(text_field(ids[3], "payload").as_deref(), Some("[3]"));
        // Served FIFO, i.e. in payload order.
        let claimed: Vec<i64> = claim("q", ", max => 10")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(claimed, ids);
        assert_eq!(count("aedb_queue.queue WHERE name = 'q'"), 1);
    }

    #[pg_test]
    fn enqueue_batch_applies_its_options_to_every_task() {
        let ids = ints(
            "SELECT * FROM aedb_queue.queue_enqueue_batch('q', ARRAY['1'::jsonb, '2'::jsonb],
                 delay => '10 minutes', priority => 4, max_attempts => 2, backoff_base => '3 seconds')",
        );
        assert_eq!(ids.len(), 2);
        for id in ids {
            assert_eq!(state_of("q", id).as_deref(), Some("scheduled"));
            assert_eq!(
                text_field(id, "not_before - created_at").as_deref(),
                Some("00:10:00")
            );
            assert_eq!(field::<i64>(id, "priority"), Some(4));
            assert_eq!(field::<i32>(id, "max_attempts"), Some(2));
            assert_eq!(text_field(id, "backoff_base").as_deref(), Some("00:00:03"));
        }
    }

    #[pg_test]
    fn enqueue_batch_of_an_empty_array_returns_nothing() {
        assert!(
            ints("SELECT * FROM aedb_queue.queue_enqueue_batch('q', '{}'::jsonb[])").is_empty()
        );
        assert_eq!(count("aedb_queue.task"), 0);
    }

    // ------------------------------------------------------------------
    // Claim: order of service, lease fields, isolation.
    // ------------------------------------------------------------------

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
        assert_eq!(state_of("q", id).as_deref(), Some("in_flight"));
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
        error = "invalid argument \"state\": must be one of scheduled, ready, in_flight, dead, completed; got \"bogus\""
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
        error = "invalid argument \"follow_ups[1].colour\": is not a known key (expected one of queue, payload, delay, priority, max_attempts, backoff_base, backoff_max, idempotency_key)"
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

    /// 20,000 future timers, 20,000 dead tasks and a few ready ones in one queue.
    fn fill_with_clutter() {
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
        (
            "CLAIM",
            &[("task_ready_idx", "queue"), ("task_pkey", "task_id")],
        ),
        (
            "CLAIM_AFTER",
            &[("task_ready_idx", "task_id"), ("task_pkey", "task_id")],
        ),
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
        ("COMPLETE_MANY", &[("task_pkey", "task_id")]),
        ("LOCK_FOR_FAIL", &[("task_pkey", "task_id")]),
        ("SETTLE_FAILURE", &[("task_pkey", "task_id")]),
        ("HEARTBEAT", &[("task_pkey", "task_id")]),
        ("CANCEL", &[("task_pkey", "task_id")]),
        ("LOOKUP_KEY", &[("idempotency_key_pkey", "key")]),
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
    #[pg_test]
    fn every_task_statement_reads_its_index_on_a_cluttered_table() {
        fill_with_clutter();
        for (name, stmt) in crate::store::LIFECYCLE_STATEMENTS {
            let nodes = nodes_of(&crate::store::explain(stmt).unwrap());
            assert!(
                // The registry rows keeping keys: a partial index, any scan of it.
                nodes.iter().all(|(kind, _, _)| kind != "Seq Scan"
                    && (!kind.starts_with("Bitmap") || *name == "QUEUES_WITH_WORK")),
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
            if *name == "CLAIM_AFTER" {
                assert!(
                    nodes
                        .iter()
                        .all(|(_, used, cond)| used.as_deref() != Some("task_pkey")
                            || cond.as_deref().is_some_and(|c| c.contains("ANY"))),
                    "the resumed pick must not walk the primary key: {nodes:?}"
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

    /// A generic plan lives until the next ANALYZE, so one made while the
    /// task table is empty and never analyzed (a fresh install, workers
    /// started before producers) serves the queue as it fills. None of the
    /// lifecycle statements may scan the table then, or every claim would
    /// read every task: the claim's write, picked by `task_id = ANY(...)`,
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
        }
        // The planner settings are the statement's only: the session's are back.
        assert_eq!(
            Spi::get_one::<String>("SELECT current_setting('enable_seqscan')").unwrap(),
            Some("on".into())
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

    #[pg_test(error = "new row for relation \"task\" violates check constraint \"task_check1\"")]
    fn in_flight_state_and_lease_go_together() {
        let id = enqueue("inv", "");
        exec(&format!(
            "UPDATE aedb_queue.task SET lease_deadline = now() WHERE task_id = {id}"
        ));
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
        let a = enqueue("hint_prio", "");
        let b = enqueue("hint_prio", "");
        assert_eq!(claim_ids("hint_prio", 1), vec![a]);
        let urgent = enqueue("hint_prio", ", priority => 5");
        let low = enqueue("hint_prio", ", priority => -5");
        assert_eq!(claim_ids("hint_prio", 1), vec![urgent]);
        assert_eq!(claim_ids("hint_prio", 2), vec![b, low]);
        assert!(claim_ids("hint_prio", 1).is_empty());
    }
}
