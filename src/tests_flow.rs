//! `#[pg_test]`s of concurrency keys: every path that ends a task's slot
//! hands it to the key's next blocked task (and the paths that keep it do
//! not), due tasks of a full key wait, limits apply at once, and what a
//! claim reads does not grow with a key's blocked tasks. pg_regress
//! `concurrency_keys.sql` shows them as an example; the isolation spec
//! `last-slot-of-a-key` and the itest `concurrency_keys.rs` the races.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    fn keyed(queue: &str, key: &str) -> i64 {
        enqueue(queue, &format!(", concurrency_key => '{key}'"))
    }

    /// Key `k` of `queue` (limit 1): the first task holds the slot, in
    /// flight; the second waits. Returns (holder, its token, waiter).
    fn holder_and_waiter(queue: &str) -> (i64, i64, i64) {
        let holder = keyed(queue, "k");
        let waiter = keyed(queue, "k");
        assert_eq!(state_of(queue, waiter).as_deref(), Some("blocked"));
        let claimed = claim(queue, ", max => 5");
        assert_eq!(claimed.len(), 1, "only the holder is claimable");
        assert_eq!(claimed[0].0, holder);
        assert_task_invariants("the holder claimed");
        (holder, claimed[0].1, waiter)
    }

    /// Runs `path` on the holder and checks whether the waiter got the slot.
    fn frees_the_slot(queue: &str, path: impl FnOnce(i64, i64), freed: bool) {
        let expected = if freed { "ready" } else { "blocked" };
        waiter_after(queue, path, expected);
    }

    /// Runs `path` on the holder; the waiter is then in state `expected`.
    fn waiter_after(queue: &str, path: impl FnOnce(i64, i64), expected: &str) {
        let (holder, token, waiter) = holder_and_waiter(queue);
        path(holder, token);
        assert_eq!(
            state_of(queue, waiter).as_deref(),
            Some(expected),
            "the waiter after the holder's path"
        );
        assert_task_invariants(queue);
    }

    #[pg_test]
    fn completing_frees_the_slot_on_every_completion_path() {
        frees_the_slot(
            "fl.complete",
            |id, t| assert_eq!(complete("fl.complete", id, t, ""), "applied"),
            true,
        );
        frees_the_slot(
            "fl.batch",
            |id, t| {
                exec(&format!(
                    "SELECT aedb_queue.queue_complete_batch('fl.batch', ARRAY[{id}], ARRAY[{t}])"
                ))
            },
            true,
        );
        // The call claims what its completion unblocked.
        waiter_after(
            "fl.and_claim",
            |id, t| {
                exec(&format!(
                    "SELECT * FROM aedb_queue.queue_complete_and_claim('fl.and_claim', 'w', {id}, {t})"
                ))
            },
            "in_flight",
        );
        exec("SELECT aedb_queue.queue_configure('fl.kept', keep_completed => '1 hour')");
        frees_the_slot(
            "fl.kept",
            |id, t| assert_eq!(complete("fl.kept", id, t, ", result => '{}'"), "applied"),
            true,
        );
        // A stale token frees nothing.
        frees_the_slot(
            "fl.stale",
            |id, t| assert_eq!(complete("fl.stale", id, t + 1, ""), "lease_lost"),
            false,
        );
    }

    /// The settle-and-claim call frees the slot before it claims: the
    /// waiter is what it claims next.
    #[pg_test]
    fn settle_and_claim_claims_the_task_its_completion_unblocked() {
        let (holder, token, waiter) = holder_and_waiter("fl.next");
        let next: i64 = one(&format!(
            "SELECT task_id FROM aedb_queue.queue_complete_and_claim('fl.next', 'w', {holder}, {token})"
        ));
        assert_eq!(next, waiter);
        assert_task_invariants("settle and claim");
    }

    #[pg_test]
    fn failing_frees_the_slot_unless_the_task_stays_ready() {
        frees_the_slot(
            "fl.retry_later",
            |id, t| {
                fail("fl.retry_later", id, t, ", retry_in => '1 hour'");
            },
            true,
        );
        frees_the_slot(
            "fl.dead",
            |id, t| {
                fail("fl.dead", id, t, ", dead_letter => true");
            },
            true,
        );
        // Retried at once, it is ready again and keeps its slot.
        frees_the_slot(
            "fl.retry_now",
            |id, t| {
                fail("fl.retry_now", id, t, ", retry_in => '0'");
            },
            false,
        );
    }

    #[pg_test]
    fn a_reclaimed_lease_keeps_the_slot_and_a_dead_letter_frees_it() {
        frees_the_slot(
            "fl.reclaim",
            |id, _| {
                expire_lease(id);
                exec("SELECT aedb_queue.queue_reap('fl.reclaim')");
                assert_eq!(state_of("fl.reclaim", id).as_deref(), Some("ready"));
            },
            false,
        );
        frees_the_slot(
            "fl.exhausted",
            |id, _| {
                exec(&format!(
                    "UPDATE aedb_queue.task SET max_attempts = 1 WHERE task_id = {id}"
                ));
                expire_lease(id);
                exec("SELECT aedb_queue.queue_reap('fl.exhausted')");
                assert_eq!(state_of("fl.exhausted", id).as_deref(), Some("dead"));
            },
            true,
        );
    }

    #[pg_test]
    fn cancelling_or_purging_a_holder_frees_the_slot() {
        frees_the_slot("fl.cancel", |id, _| assert!(cancel("fl.cancel", id)), true);
        frees_the_slot(
            "fl.purge",
            |_, _| exec("SELECT aedb_queue.queue_purge('fl.purge', 'in_flight', force => true)"),
            true,
        );
        frees_the_slot(
            "fl.heartbeat",
            |id, t| assert_eq!(heartbeat("fl.heartbeat", id, t, "1 hour", ""), "applied"),
            false,
        );
        // A blocked task leaves without touching the holder's slot.
        let (holder, _, waiter) = holder_and_waiter("fl.cancel_waiter");
        assert!(cancel("fl.cancel_waiter", waiter));
        assert_eq!(
            state_of("fl.cancel_waiter", holder).as_deref(),
            Some("in_flight")
        );
        assert_task_invariants("a waiter cancelled");
    }

    /// Timers, retries, released children and re-driven dead tasks become
    /// due through the key: blocked when it is full.
    #[pg_test]
    fn tasks_that_become_due_wait_for_a_full_key() {
        let (holder, token, waiter) = holder_and_waiter("fl.due");
        let delayed = enqueue("fl.due", ", delay => '1 hour', concurrency_key => 'k'");
        make_due(delayed);
        exec("SELECT aedb_queue.queue_reap('fl.due')");
        assert_eq!(state_of("fl.due", delayed).as_deref(), Some("blocked"));

        let parent = enqueue("fl.parent", "");
        let child: i64 = one(&format!(
            "SELECT task_id FROM aedb_queue.queue_enqueue('fl.due', wait_for => ARRAY[{parent}],
                                                         concurrency_key => 'k')"
        ));
        let (_, parent_token) = claim_one("fl.parent");
        assert_eq!(complete("fl.parent", parent, parent_token, ""), "applied");
        assert_eq!(state_of("fl.due", child).as_deref(), Some("blocked"));

        let dead = keyed("fl.due", "other");
        let (_, dead_token) = claim_one("fl.due");
        fail("fl.due", dead, dead_token, ", dead_letter => true");
        let blocker = keyed("fl.due", "other");
        exec(&format!(
            "SELECT aedb_queue.queue_retry_dead('fl.due', {dead})"
        ));
        assert_eq!(state_of("fl.due", blocker).as_deref(), Some("ready"));
        assert_eq!(state_of("fl.due", dead).as_deref(), Some("blocked"));
        assert_task_invariants("every kind of due task");

        // The slot goes to the first in service order: the waiter, then the
        // timer, then the child.
        assert_eq!(complete("fl.due", holder, token, ""), "applied");
        assert_eq!(state_of("fl.due", waiter).as_deref(), Some("ready"));
        assert_eq!(state_of("fl.due", delayed).as_deref(), Some("blocked"));
        assert_task_invariants("the holder completed");
    }

    /// A higher priority is served first within a key as in the queue.
    #[pg_test]
    fn a_freed_slot_goes_to_the_keys_first_task_in_service_order() {
        let (holder, token, low) = holder_and_waiter("fl.order");
        let high = enqueue("fl.order", ", priority => 5, concurrency_key => 'k'");
        assert_eq!(complete("fl.order", holder, token, ""), "applied");
        assert_eq!(state_of("fl.order", high).as_deref(), Some("ready"));
        assert_eq!(state_of("fl.order", low).as_deref(), Some("blocked"));
    }

    /// The claim reads the ready index only: a key's blocked tasks, however
    /// many, are not in it. 2,000 blocked tasks enqueued ahead of one
    /// eligible task cost the claim the same buffers as none.
    #[pg_test]
    fn a_saturated_keys_blocked_tasks_are_not_read_by_a_claim() {
        let read = |queue: &str| -> i64 {
            without_scan_hints();
            let plan: pgrx::Json = one(&format!(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
                 SELECT * FROM aedb_queue.queue_claim('{queue}', 'w')"
            ));
            let top = &plan.0[0]["Plan"];
            top["Shared Hit Blocks"].as_i64().unwrap_or(0)
                + top["Shared Read Blocks"].as_i64().unwrap_or(0)
        };
        exec("SELECT aedb_queue.queue_enqueue('fl.clean', '{}')");
        exec("SELECT aedb_queue.queue_enqueue('fl.clutter', '{}', concurrency_key => 'hot')");
        exec(
            "SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fl.clutter',
                 ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 2000)), concurrency_key => 'hot')",
        );
        let (_, _) = claim_one("fl.clutter");
        exec("SELECT aedb_queue.queue_enqueue('fl.clutter', '{}')");
        assert_eq!(count("aedb_queue.task WHERE queue = 'fl.clutter' AND state = 'blocked'"), 2000);
        exec("SELECT aedb_queue.queue_enqueue('fl.clean', '{}')");
        let clean = read("fl.clean");
        let clutter = read("fl.clutter");
        assert!(
            clutter <= clean + 2,
            "a claim behind 2,000 blocked tasks read {clutter} buffers, a clean one {clean}"
        );
    }

    #[pg_test]
    fn raising_a_limit_unblocks_and_lowering_it_blocks_ready_tasks() {
        let ids: Vec<i64> = (0..4).map(|_| keyed("fl.limit", "k")).collect();
        let states = || -> Vec<String> {
            ids.iter()
                .map(|&id| state_of("fl.limit", id).unwrap_or_default())
                .collect()
        };
        assert_eq!(states(), ["ready", "blocked", "blocked", "blocked"]);
        exec("SELECT aedb_queue.queue_configure('fl.limit', concurrency_limit => 3)");
        assert_eq!(states(), ["ready", "ready", "ready", "blocked"]);
        claim_one("fl.limit");
        exec("SELECT aedb_queue.queue_configure_key('fl.limit', 'k', 1)");
        // The task in flight keeps running; the ready ones go back.
        assert_eq!(states(), ["in_flight", "blocked", "blocked", "blocked"]);
        assert_task_invariants("the key's limit lowered");
        exec("SELECT aedb_queue.queue_configure_key('fl.limit', 'k', NULL)");
        assert_eq!(states(), ["in_flight", "ready", "ready", "blocked"]);
        exec("SELECT aedb_queue.queue_configure('fl.limit', reset => true)");
        assert_eq!(states(), ["in_flight", "blocked", "blocked", "blocked"]);
        assert_task_invariants("the queue's limit reset");
    }

    /// A key's row goes with its last slot unless it holds a limit.
    #[pg_test]
    fn a_keys_row_lives_while_it_has_a_slot_taken_or_a_limit() {
        let id = keyed("fl.rows", "k");
        assert_eq!(count("aedb_queue.concurrency_slot WHERE queue = 'fl.rows'"), 1);
        assert!(cancel("fl.rows", id));
        assert_eq!(count("aedb_queue.concurrency_slot WHERE queue = 'fl.rows'"), 0);
        exec("SELECT aedb_queue.queue_configure_key('fl.rows', 'k', 4)");
        assert_eq!(count("aedb_queue.concurrency_slot WHERE queue = 'fl.rows'"), 1);
        exec("SELECT aedb_queue.queue_configure_key('fl.rows', 'k', NULL)");
        assert_eq!(count("aedb_queue.concurrency_slot WHERE queue = 'fl.rows'"), 0);
    }

    #[pg_test]
    fn keys_and_limits_are_checked_naming_the_argument() {
        expect_error(
            "SELECT aedb_queue.queue_enqueue('fl.bad', concurrency_key => '')",
            "22023",
            "invalid argument \"concurrency_key\": must not be empty",
        );
        expect_error(
            "SELECT aedb_queue.queue_enqueue_batch('fl.bad', ARRAY['{}']::jsonb[], concurrency_key => '')",
            "22023",
            "invalid argument \"concurrency_key\": must not be empty",
        );
        expect_error(
            "SELECT aedb_queue.queue_configure('fl.bad', concurrency_limit => 0)",
            "22023",
            "invalid argument \"concurrency_limit\": must be at least 1, got 0",
        );
        expect_error(
            "SELECT aedb_queue.queue_configure_key('fl.bad', repeat('k', 300), 1)",
            "22023",
            "invalid argument \"concurrency_key\": is 300 bytes, longer than 128",
        );
        expect_error(
            "SELECT aedb_queue.queue_configure_key('fl.bad', NULL, 1)",
            "22004",
            "argument \"concurrency_key\" must not be NULL",
        );
        assert_eq!(count("aedb_queue.concurrency_slot WHERE queue = 'fl.bad'"), 0);
    }

    // ------------------------------------------------------------------
    // Rate limits.
    // ------------------------------------------------------------------

    fn tokens(queue: &str) -> i64 {
        one(&format!(
            "SELECT rate_tokens FROM aedb_queue.queue_stats WHERE queue = '{queue}'"
        ))
    }

    /// A burst, then tokens at the rate (1 per millisecond here, at most 2
    /// held): a claim after a pause of 5 ms gets the burst back, not 5.
    #[pg_test]
    fn the_bucket_refills_at_the_rate_up_to_the_burst() {
        exec("SELECT count(*) FROM aedb_queue.queue_enqueue_batch('rl.refill', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 20)))");
        exec("SELECT aedb_queue.queue_configure('rl.refill', rate_limit => 1000, rate_interval => '1 second', rate_burst => 2)");
        assert_eq!(claim("rl.refill", ", max => 10").len(), 2, "the burst");
        exec("SELECT pg_sleep(0.005)");
        assert_eq!(claim("rl.refill", ", max => 10").len(), 2, "refilled to the burst");
        assert_task_invariants("rate-limited claims");
    }

    /// Every claiming call takes tokens: settle-and-claim as well; a paused
    /// queue's claims take none.
    #[pg_test]
    fn settle_and_claim_takes_tokens_and_a_paused_queue_takes_none() {
        exec("SELECT count(*) FROM aedb_queue.queue_enqueue_batch('rl.loop', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5)))");
        exec("SELECT aedb_queue.queue_configure('rl.loop', rate_limit => 2, rate_interval => '1 hour')");
        exec("SELECT aedb_queue.queue_pause('rl.loop')");
        assert_eq!(claim("rl.loop", ", max => 5").len(), 0);
        assert_eq!(tokens("rl.loop"), 2, "a paused queue's claim took no tokens");
        exec("SELECT aedb_queue.queue_resume('rl.loop')");
        let (id, token) = claim_one("rl.loop");
        let next: Vec<i64> = ints(&format!(
            "SELECT unnest(ARRAY[task_id, fencing_token])
             FROM aedb_queue.queue_complete_and_claim('rl.loop', 'w', {id}, {token}, max => 5)
             WHERE task_id IS NOT NULL"
        ));
        assert_eq!(next.len(), 2, "one token left for the loop");
        assert_eq!(tokens("rl.loop"), 0);
        let settled: Vec<String> = Spi::connect(|c| {
            c.select(
                &format!(
                    "SELECT settled::text FROM aedb_queue.queue_complete_and_claim('rl.loop', 'w', {}, {})",
                    next[0], next[1]
                ),
                None,
                &[],
            )
            .unwrap()
            .map(|r| r.get::<String>(1).unwrap().unwrap())
            .collect()
        });
        assert_eq!(settled, ["applied"], "settled, nothing claimed");
        assert_eq!(count("aedb_queue.task WHERE queue = 'rl.loop' AND state = 'ready'"), 3);
    }

    /// Claims of other queues, and queues without a limit, touch no bucket.
    #[pg_test]
    fn only_limited_queues_have_buckets() {
        exec("SELECT aedb_queue.queue_enqueue('rl.none', '{}')");
        claim_one("rl.none");
        exec("SELECT aedb_queue.queue_configure('rl.none', max_attempts => 3)");
        assert_eq!(count("aedb_queue.rate_bucket WHERE queue = 'rl.none'"), 0);
        exec("SELECT aedb_queue.queue_configure('rl.some', rate_limit => 7)");
        assert_eq!(
            one::<i64>("SELECT micro_tokens FROM aedb_queue.rate_bucket WHERE queue = 'rl.some'"),
            7_000_000,
            "a new limit starts with a full burst"
        );
        // A bucket lost (restored without it) is made again, full.
        exec("DELETE FROM aedb_queue.rate_bucket WHERE queue = 'rl.some'");
        exec("SELECT count(*) FROM aedb_queue.queue_enqueue_batch('rl.some', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 9)))");
        assert_eq!(claim("rl.some", ", max => 9").len(), 7);
    }
}
