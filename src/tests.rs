//! `#[pg_test]` helpers shared by every test file, the test clock, and enqueue.
//!
//! Each test runs inside one transaction that the harness rolls back, and the
//! whole test body is ONE client statement (`SELECT tests.<name>()`). So
//! `statement_timestamp()` does not move during a test, not even across
//! `pg_sleep`, while our calls read the real clock once per call. Where a
//! test needs time to pass (a lease to expire, a timer to fall due) it moves
//! the task's `lease_deadline` / `not_before` into the past with a direct
//! UPDATE ([`tests::expire_lease`], [`tests::make_due`]); the test
//! `the_statement_clock_stands_still_but_calls_read_the_real_one` pins
//! both down.
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

    /// What the task table's rows must satisfy (the schema has no CHECK
    /// constraints, see sql/schema.sql): the ids of the rows that do not.
    pub(crate) const TASK_INVARIANT_VIOLATIONS: &str = "
        SELECT task_id FROM aedb_queue.task
        WHERE max_attempts < 1
           OR (state = 'in_flight') <> (lease_deadline IS NOT NULL)
           OR (state = 'in_flight' AND owner_id IS NULL)
           OR (state <> 'in_flight' AND owner_id IS NOT NULL)
           OR attempts < 0 OR fencing_token < attempts";

    /// Concurrency keys whose row disagrees with their tasks: taken is not
    /// the count of the key's ready and in-flight tasks, a task is blocked
    /// while a slot is free, or a key with a task holding a slot has no row.
    pub(crate) const SLOT_INVARIANT_VIOLATIONS: &str = "
        WITH held AS (
            SELECT queue, concurrency_key AS key,
                   count(*) FILTER (WHERE state IN ('ready', 'in_flight')) AS taken,
                   count(*) FILTER (WHERE state = 'blocked') AS blocked
            FROM aedb_queue.task WHERE concurrency_key IS NOT NULL GROUP BY 1, 2)
        SELECT hashtext(coalesce(s.queue, h.queue) || '/' || coalesce(s.key, h.key))::bigint
        FROM aedb_queue.concurrency_slot s
        FULL JOIN held h ON h.queue = s.queue AND h.key = s.key
        LEFT JOIN aedb_queue.queue q ON q.name = coalesce(s.queue, h.queue)
        WHERE coalesce(s.taken, 0) <> coalesce(h.taken, 0)
           OR (coalesce(h.blocked, 0) > 0
               AND coalesce(s.taken, 0) < coalesce(s.concurrency_limit, q.concurrency_limit, 1))
           OR (s.key IS NULL AND h.taken + h.blocked > 0)";

    /// Ordering keys whose line disagrees with its head: a task that may
    /// run (ready, in flight, scheduled) but is not its key's head, a task
    /// in line with no head ahead of it, a head that is gone or cannot be
    /// one.
    pub(crate) const LINE_INVARIANT_VIOLATIONS: &str = "
        SELECT t.task_id FROM aedb_queue.task t
        LEFT JOIN aedb_queue.ordering_slot o ON o.queue = t.queue AND o.key = t.ordering_key
        WHERE t.ordering_key IS NOT NULL
          AND ((t.state IN ('ready', 'in_flight', 'scheduled') AND o.head IS DISTINCT FROM t.task_id)
               OR (t.state = 'blocked' AND o.head IS NULL))
        UNION ALL
        SELECT o.head FROM aedb_queue.ordering_slot o
        LEFT JOIN aedb_queue.task t ON t.task_id = o.head
        WHERE t.task_id IS NULL OR t.state NOT IN ('ready', 'in_flight', 'scheduled', 'dead')";

    pub(crate) fn assert_task_invariants(after: &str) {
        let bad = ints(TASK_INVARIANT_VIOLATIONS);
        assert!(
            bad.is_empty(),
            "after {after}: tasks {bad:?} break the invariants"
        );
        let keys: Vec<String> = Spi::connect(|client| {
            client
                .select(
                    "SELECT s.queue || '/' || s.key || ' taken ' || s.taken FROM aedb_queue.concurrency_slot s",
                    None,
                    &[],
                )
                .unwrap()
                .map(|row| row.get::<String>(1).unwrap().unwrap_or_default())
                .collect()
        });
        let bad = ints(LINE_INVARIANT_VIOLATIONS);
        assert!(
            bad.is_empty(),
            "after {after}: tasks {bad:?} break the ordering keys' lines"
        );
        let bad = ints(SLOT_INVARIANT_VIOLATIONS);
        assert!(
            bad.is_empty(),
            "after {after}: {} concurrency keys break the slot invariants (slots: {keys:?})",
            bad.len()
        );
    }

    pub(crate) fn set_payload_limit(bytes: i32) {
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
}
