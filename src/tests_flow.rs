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
        // The fail must apply and leave the holder in `state`, or the
        // waiter's state would say nothing about the fail's path.
        let failed = |queue: &'static str, extra: &'static str, state: &'static str| {
            move |id: i64, t: i64| {
                assert_eq!(fail(queue, id, t, extra), "applied", "{queue}");
                assert_eq!(state_of(queue, id).as_deref(), Some(state), "{queue}");
            }
        };
        frees_the_slot(
            "fl.retry_later",
            failed("fl.retry_later", ", retry_in => '1 hour'", "scheduled"),
            true,
        );
        frees_the_slot(
            "fl.dead",
            failed("fl.dead", ", dead_letter => true", "dead"),
            true,
        );
        // Retried at once, it is ready again and keeps its slot.
        frees_the_slot(
            "fl.retry_now",
            failed("fl.retry_now", ", retry_in => '0'", "ready"),
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
            let blocks = |key: &str| {
                top[key]
                    .as_i64()
                    .unwrap_or_else(|| panic!("no {key:?} in the plan of {queue}: {top}"))
            };
            blocks("Shared Hit Blocks") + blocks("Shared Read Blocks")
        };
        exec("SELECT aedb_queue.queue_enqueue('fl.clean', '{}')");
        exec("SELECT aedb_queue.queue_enqueue('fl.clutter', '{}', concurrency_key => 'hot')");
        exec(
            "SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fl.clutter',
                 ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 2000)), concurrency_key => 'hot')",
        );
        let (_, _) = claim_one("fl.clutter");
        exec("SELECT aedb_queue.queue_enqueue('fl.clutter', '{}')");
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'fl.clutter' AND state = 'blocked'"),
            2000
        );
        exec("SELECT aedb_queue.queue_enqueue('fl.clean', '{}')");
        let clean = read("fl.clean");
        let clutter = read("fl.clutter");
        assert!(clean > 0, "a claim that read no buffers measured nothing");
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
        assert_eq!(
            count("aedb_queue.concurrency_slot WHERE queue = 'fl.rows'"),
            1
        );
        assert!(cancel("fl.rows", id));
        assert_eq!(
            count("aedb_queue.concurrency_slot WHERE queue = 'fl.rows'"),
            0
        );
        exec("SELECT aedb_queue.queue_configure_key('fl.rows', 'k', 4)");
        assert_eq!(
            count("aedb_queue.concurrency_slot WHERE queue = 'fl.rows'"),
            1
        );
        exec("SELECT aedb_queue.queue_configure_key('fl.rows', 'k', NULL)");
        assert_eq!(
            count("aedb_queue.concurrency_slot WHERE queue = 'fl.rows'"),
            0
        );
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
        assert_eq!(
            count("aedb_queue.concurrency_slot WHERE queue = 'fl.bad'"),
            0
        );
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
        assert_eq!(
            claim("rl.refill", ", max => 10").len(),
            2,
            "refilled to the burst"
        );
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
        assert_eq!(
            tokens("rl.loop"),
            2,
            "a paused queue's claim took no tokens"
        );
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
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'rl.loop' AND state = 'ready'"),
            3
        );
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

    // ------------------------------------------------------------------
    // Ordering keys.
    // ------------------------------------------------------------------

    fn in_line(queue: &str, n: usize) -> Vec<i64> {
        (0..n)
            .map(|_| enqueue(queue, ", ordering_key => 'k'"))
            .collect()
    }

    /// The live tasks of `ids` out of line: the head (and a dead task that
    /// released its key).
    fn head_of(_queue: &str, ids: &[i64]) -> Vec<i64> {
        ids.iter()
            .copied()
            .filter(|&id| text_field(id, "state::text").is_some_and(|s| s != "blocked"))
            .collect()
    }

    /// Runs `path` on the head (claimed) of a line of three; returns the
    /// line's tasks that are not blocked afterwards.
    fn line_after(queue: &str, path: impl FnOnce(i64, i64)) -> (Vec<i64>, Vec<i64>) {
        let ids = in_line(queue, 3);
        let (id, token) = claim_one(queue);
        assert_eq!(id, ids[0], "only the head is claimable");
        assert!(claim(queue, ", max => 5").is_empty());
        path(id, token);
        assert_task_invariants(queue);
        (ids.clone(), head_of(queue, &ids))
    }

    #[pg_test]
    fn the_line_moves_when_its_head_completes_on_any_path() {
        let (ids, heads) = line_after("ol.complete", |id, t| {
            assert_eq!(complete("ol.complete", id, t, ""), "applied")
        });
        assert_eq!(heads, [ids[1]]);
        let (ids, heads) = line_after("ol.batch", |id, t| {
            exec(&format!(
                "SELECT aedb_queue.queue_complete_batch('ol.batch', ARRAY[{id}], ARRAY[{t}])"
            ))
        });
        assert_eq!(heads, [ids[1]]);
        exec("SELECT aedb_queue.queue_configure('ol.kept', keep_completed => '1 hour')");
        let (ids, heads) = line_after("ol.kept", |id, t| {
            assert_eq!(complete("ol.kept", id, t, ""), "applied")
        });
        assert_eq!(heads, [ids[1]]);
        // The settle-and-claim call claims the next of the line itself.
        let (ids, heads) = line_after("ol.loop", |id, t| {
            let next: i64 = one(&format!(
                "SELECT task_id FROM aedb_queue.queue_complete_and_claim('ol.loop', 'w', {id}, {t})"
            ));
            assert_eq!(state_of("ol.loop", next).as_deref(), Some("in_flight"));
        });
        assert_eq!(heads, [ids[1]]);
        let (ids, heads) = line_after("ol.cancel", |id, _| assert!(cancel("ol.cancel", id)));
        assert_eq!(heads, [ids[1]]);
        let (ids, heads) = line_after("ol.purge", |_, _| {
            exec("SELECT aedb_queue.queue_purge('ol.purge', 'in_flight', force => true)")
        });
        assert_eq!(heads, [ids[1]]);
    }

    /// Retries, reclaimed leases and (by default) dead letters keep the
    /// key: the line waits for its head.
    #[pg_test]
    fn the_line_waits_while_its_head_retries_is_reclaimed_or_is_dead() {
        let (ids, heads) = line_after("ol.retry", |id, t| {
            fail("ol.retry", id, t, ", retry_in => '1 hour'");
        });
        assert_eq!(heads, [ids[0]]);
        let (ids, heads) = line_after("ol.retry_now", |id, t| {
            fail("ol.retry_now", id, t, ", retry_in => '0'");
        });
        assert_eq!(heads, [ids[0]]);
        let (ids, heads) = line_after("ol.reclaim", |id, _| {
            expire_lease(id);
            exec("SELECT aedb_queue.queue_reap('ol.reclaim')");
        });
        assert_eq!(heads, [ids[0]]);
        assert_eq!(state_of("ol.reclaim", ids[0]).as_deref(), Some("ready"));
        let (ids, heads) = line_after("ol.dead", |id, t| {
            fail("ol.dead", id, t, ", dead_letter => true");
        });
        assert_eq!(heads, [ids[0]], "a dead head blocks its key");
        // Purging the dead head lets the line move.
        exec("SELECT aedb_queue.queue_purge('ol.dead', 'dead')");
        assert_eq!(head_of("ol.dead", &ids), [ids[1]]);
        assert_task_invariants("the dead head purged");
    }

    #[pg_test]
    fn with_release_a_dead_head_lets_the_line_move_on() {
        exec("SELECT aedb_queue.queue_configure('ol.release', ordering_on_dead => 'release')");
        let (ids, heads) = line_after("ol.release", |id, t| {
            fail("ol.release", id, t, ", dead_letter => true");
        });
        assert_eq!(heads, [ids[0], ids[1]], "the dead task and the new head");
        assert_eq!(state_of("ol.release", ids[0]).as_deref(), Some("dead"));
        assert_eq!(state_of("ol.release", ids[1]).as_deref(), Some("ready"));
        // An exhausted lease dead-letters through the reaper: the same.
        exec("SELECT aedb_queue.queue_configure('ol.release2', ordering_on_dead => 'release')");
        let (ids, heads) = line_after("ol.release2", |id, _| {
            exec(&format!(
                "UPDATE aedb_queue.task SET max_attempts = 1 WHERE task_id = {id}"
            ));
            expire_lease(id);
            exec("SELECT aedb_queue.queue_reap('ol.release2')");
        });
        assert_eq!(heads, [ids[0], ids[1]]);
        assert_eq!(state_of("ol.release2", ids[0]).as_deref(), Some("dead"));
    }

    /// A blocked task leaving does not move the line; a delayed head holds
    /// the key while it waits; a child with a key joins the line when its
    /// parents complete; a follow-up joins it too.
    #[pg_test]
    fn tasks_join_the_line_when_they_could_run() {
        let ids = in_line("ol.join", 3);
        assert!(cancel("ol.join", ids[1]));
        assert_eq!(head_of("ol.join", &ids), [ids[0]]);
        let delayed = enqueue("ol.delay", ", delay => '1 hour', ordering_key => 'k'");
        let after = enqueue("ol.delay", ", ordering_key => 'k'");
        assert_eq!(state_of("ol.delay", delayed).as_deref(), Some("scheduled"));
        assert_eq!(state_of("ol.delay", after).as_deref(), Some("blocked"));

        let parent = enqueue("ol.parent", "");
        let child: i64 = one(&format!(
            "SELECT task_id FROM aedb_queue.queue_enqueue('ol.join', wait_for => ARRAY[{parent}],
                                                         ordering_key => 'k')"
        ));
        assert_eq!(state_of("ol.join", child).as_deref(), Some("waiting"));
        let (_, token) = claim_one("ol.parent");
        assert_eq!(complete("ol.parent", parent, token, ""), "applied");
        assert_eq!(state_of("ol.join", child).as_deref(), Some("blocked"));

        let (head, token) = claim_one("ol.join");
        assert_eq!(head, ids[0]);
        assert_eq!(
            complete(
                "ol.join",
                head,
                token,
                r#", follow_ups => '[{"queue": "ol.join", "ordering_key": "k"}]'"#
            ),
            "applied"
        );
        assert_eq!(head_of("ol.join", &ids), [ids[2]]);
        assert_eq!(state_of("ol.join", child).as_deref(), Some("blocked"));
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'ol.join' AND state = 'blocked'"),
            2
        );
        assert_task_invariants("joining the line");
    }

    /// Strict order over a whole line, run one claim at a time with
    /// unrelated tasks interleaved.
    #[pg_test]
    fn a_line_runs_in_enqueue_order() {
        let ids = in_line("ol.order", 6);
        exec("SELECT count(*) FROM aedb_queue.queue_enqueue_batch('ol.order', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 4)), priority => 5)");
        let mut ran = Vec::new();
        while let Some((id, token)) = claim("ol.order", "").first().copied() {
            if ids.contains(&id) {
                ran.push(id);
            }
            assert_eq!(complete("ol.order", id, token, ""), "applied");
        }
        assert_eq!(ran, ids);
        assert_eq!(
            count("aedb_queue.ordering_slot WHERE queue = 'ol.order'"),
            0
        );
    }

    #[pg_test]
    fn ordering_keys_are_checked_naming_the_argument() {
        expect_error(
            "SELECT aedb_queue.queue_enqueue('ol.bad', ordering_key => '')",
            "22023",
            "invalid argument \"ordering_key\": must not be empty",
        );
        expect_error(
            "SELECT aedb_queue.queue_enqueue('ol.bad', ordering_key => 'a', concurrency_key => 'b')",
            "22023",
            "invalid argument \"ordering_key\": cannot be given with concurrency_key: a task has one or the other",
        );
        expect_error(
            r#"SELECT aedb_queue.queue_enqueue('ol.bad', '{}') FROM (SELECT 1) x WHERE false
               UNION ALL SELECT aedb_queue.queue_complete('ol.bad', 1, 1,
                   follow_ups => '[{"queue": "ol.bad", "ordering_key": ["x"]}]')::text::aedb_queue.enqueued"#,
            "22023",
            "invalid argument \"follow_ups[0].ordering_key\": must be a string",
        );
        expect_error(
            "SELECT aedb_queue.queue_configure('ol.bad', ordering_on_dead => 'skip')",
            "22023",
            "invalid argument \"ordering_on_dead\": must be block or release, got \"skip\"",
        );
        assert_eq!(count("aedb_queue.task WHERE queue = 'ol.bad'"), 0);
    }

    // ------------------------------------------------------------------
    // Fair share.
    // ------------------------------------------------------------------

    /// One key with 10,000 ready tasks enqueued first, 20 keys with 10 each
    /// after it: every small key's task is claimed within the first 5 % of
    /// the drain (here within the first 300 of 10,200 claims: 10 rounds of
    /// 21 keys), and the big key is served meanwhile (work-conserving).
    #[pg_test]
    fn small_keys_are_served_within_the_first_five_percent() {
        exec("SELECT aedb_queue.queue_configure('fs.drain', fair_share => true)");
        for s in 0..10 {
            exec(&format!(
                "SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fs.drain',
                     ARRAY(SELECT '{{\"big\": true}}'::jsonb FROM generate_series(1, 1000)),
                     fairness_key => 'big', priority => 0) WHERE {s} >= 0"
            ));
        }
        for k in 0..20 {
            exec(&format!(
                "SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fs.drain',
                     ARRAY(SELECT '{{}}'::jsonb FROM generate_series(1, 10)), fairness_key => 'small-{k}')"
            ));
        }
        let mut claims = 0;
        let mut small_left = 200;
        let mut big_claimed = 0;
        while small_left > 0 {
            let payloads: Vec<bool> = Spi::connect(|c| {
                c.select(
                    "SELECT payload ? 'big' FROM aedb_queue.queue_claim('fs.drain', 'w', max => 10)",
                    None,
                    &[],
                )
                .unwrap()
                .map(|r| r.get::<bool>(1).unwrap().unwrap())
                .collect()
            });
            assert!(
                !payloads.is_empty(),
                "the drain stopped with {small_left} small tasks left"
            );
            claims += payloads.len();
            big_claimed += payloads.iter().filter(|&&big| big).count();
            small_left -= payloads.iter().filter(|&&big| !big).count();
        }
        assert!(
            claims <= 300,
            "the small keys' tasks took {claims} claims of 10,200"
        );
        assert!(
            big_claimed >= 5,
            "the big key got {big_claimed} claims meanwhile"
        );
    }

    /// A key alone gets every claim; a key that was idle gets no credit: it
    /// starts at the queue's head, not before the others' waiting tasks.
    #[pg_test]
    fn an_idle_key_gets_no_credit_and_a_lone_key_every_claim() {
        exec("SELECT aedb_queue.queue_configure('fs.idle', fair_share => true)");
        exec("SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fs.idle', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5)), fairness_key => 'a')");
        assert_eq!(
            claim("fs.idle", ", max => 5").len(),
            5,
            "a lone key gets them all"
        );
        exec("SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fs.idle', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 3)), fairness_key => 'a')");
        // b was never seen; a has had 5 turns already: b does not get its
        // claims in a row for them, it takes turns with a from the head.
        let b: Vec<i64> = (0..3)
            .map(|_| enqueue("fs.idle", ", fairness_key => 'b'"))
            .collect();
        let order: Vec<i64> = (0..6).map(|_| claim_one("fs.idle").0).collect();
        let b_at: Vec<usize> = order
            .iter()
            .enumerate()
            .filter(|(_, id)| b.contains(id))
            .map(|(i, _)| i)
            .collect();
        // a's next three start at 6, 7, 8 (its last was 5); b's at 7, 8, 9
        // (one step after the head, a's 6); ties go to the earlier task.
        assert_eq!(b_at, [2, 4, 5], "turns from the head: {order:?}");
    }

    /// Turned on, fair share gives the tasks already there virtual times;
    /// one left without (enqueued by a backend that had not seen the
    /// change) is still served, ranked by its id. A claim hands its tasks
    /// out in service order. Turned off, the queue is first in, first out
    /// again at once: the times are gone.
    #[pg_test]
    fn fair_share_turned_on_times_the_tasks_there_and_turned_off_drops_the_times() {
        let before = enqueue("fs.late", ", fairness_key => 'x'");
        assert_eq!(field::<i64>(before, "fair_vt"), None);
        exec("SELECT aedb_queue.queue_configure('fs.late', fair_share => true)");
        assert!(field::<i64>(before, "fair_vt").unwrap() > 0);
        let stale = enqueue("fs.late", "");
        exec(&format!(
            "UPDATE aedb_queue.task SET fair_vt = NULL WHERE task_id = {stale}"
        ));
        let mut served = vec![before, stale];
        served.sort_by_key(|&id| field::<i64>(id, "coalesce(fair_vt, task_id)").unwrap());
        let ids: Vec<i64> = claim("fs.late", ", max => 5").iter().map(|t| t.0).collect();
        assert_eq!(ids, served, "both, in service order");

        // x's four tasks, then y's one: fair order serves y before x's last.
        let x: Vec<i64> = (0..4)
            .map(|_| enqueue("fs.late", ", fairness_key => 'x'"))
            .collect();
        let y = enqueue("fs.late", ", fairness_key => 'y'");
        let fair_order: Vec<i64> = one::<String>(
            "SELECT string_agg(task_id::text, ',' ORDER BY coalesce(fair_vt, task_id))
             FROM aedb_queue.task WHERE queue = 'fs.late' AND state = 'ready'",
        )
        .split(',')
        .map(|id| id.parse().unwrap())
        .collect();
        assert!(fair_order[..4].contains(&y), "fair order: {fair_order:?}");
        exec("SELECT aedb_queue.queue_configure('fs.late', fair_share => false)");
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'fs.late' AND fair_vt IS NOT NULL"),
            0
        );
        let order: Vec<i64> = (0..5).map(|_| claim_one("fs.late").0).collect();
        let mut fifo = x.clone();
        fifo.push(y);
        assert_eq!(order, fifo, "first in, first out once fair share is off");
    }
}
