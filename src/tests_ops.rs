//! `#[pg_test]`s of operations and security: queue settings, pause, dead
//! letters, purges, kept completed tasks, the psql views, roles, per-queue
//! grants and search_path safety. Same conventions as `tests.rs` (one
//! transaction per test, frozen clock); roles are created inside the test
//! and vanish with its rollback. Wake-ups (NOTIFY) need commits and a
//! listener, so they are tested in `itests/tests/notify.rs`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::tests::{
        claim, claim_one, complete, count, enqueue, error_of, exec, expect_error, fail, ints, one,
        state_of,
    };

    fn sqlstate_of(query: &str) -> Option<String> {
        error_of(query).map(|(state, _)| state)
    }

    /// Runs `body` as `role` (SET LOCAL ROLE), then back as the test's superuser.
    fn as_role<R>(role: &str, body: impl FnOnce() -> R) -> R {
        exec(&format!("SET LOCAL ROLE {role}"));
        let result = body();
        exec("RESET ROLE");
        result
    }

    /// A login-less role that is a member of `groups`.
    fn role(name: &str, groups: &[&str]) {
        exec(&format!("CREATE ROLE {name} NOLOGIN"));
        for group in groups {
            exec(&format!("GRANT {group} TO {name}"));
        }
    }

    // ------------------------------------------------------------------
    // Queue settings.
    // ------------------------------------------------------------------

    #[pg_test]
    fn queue_defaults_apply_to_new_tasks_and_task_options_win() {
        let row: (Option<i32>, Option<String>, Option<String>) = Spi::get_three(
            "SELECT max_attempts, backoff_base::text, backoff_max::text
             FROM aedb_queue.queue_configure('conf', max_attempts => 9,
                  backoff_base => '2 seconds', backoff_max => '10 seconds')",
        )
        .unwrap();
        assert_eq!(
            row,
            (Some(9), Some("00:00:02".into()), Some("00:00:10".into()))
        );
        let default = enqueue("conf", "");
        let own = enqueue("conf", ", max_attempts => 2, backoff_base => '20 seconds'");
        let policy = |id: i64| -> String {
            one(&format!(
                "SELECT max_attempts || ' ' || backoff_base || ' ' || backoff_max
                 FROM aedb_queue.queue_get('conf', {id})"
            ))
        };
        assert_eq!(policy(default), "9 00:00:02 00:00:10");
        assert_eq!(
            policy(own),
            "2 00:00:20 00:00:20",
            "the task's base lifts the queue's ceiling"
        );
        // Another queue keeps the extension's defaults.
        let other = enqueue("plain", "");
        assert_eq!(
            one::<String>(&format!(
                "SELECT max_attempts || ' ' || backoff_base || ' ' || backoff_max
                 FROM aedb_queue.queue_get('plain', {other})"
            )),
            "5 00:00:01 00:01:00"
        );
    }

    #[pg_test]
    fn configure_changes_only_what_it_is_given_and_reset_clears_the_rest() {
        exec("SELECT aedb_queue.queue_configure('conf', max_attempts => 3, default_lease => '5 minutes')");
        let lease: String = one("SELECT max_attempts || ' ' || default_lease
             FROM aedb_queue.queue_configure('conf', notify => true)");
        assert_eq!(lease, "3 00:05:00");
        let after_reset: (Option<i32>, Option<bool>) = Spi::get_two(
            "SELECT max_attempts, notify FROM aedb_queue.queue_configure('conf', reset => true)",
        )
        .unwrap();
        assert_eq!(after_reset, (None, Some(false)));
    }

    #[pg_test]
    fn bad_settings_are_rejected_naming_them_and_change_nothing() {
        exec("SELECT aedb_queue.queue_configure('conf', backoff_max => '10 seconds')");
        for (call, arg) in [
            ("max_attempts => 0", "max_attempts"),
            ("backoff_base => '-1 second'", "backoff_base"),
            ("default_lease => '0'", "default_lease"),
            ("max_payload_bytes => 0", "max_payload_bytes"),
            ("keep_completed => '-1 day'", "keep_completed"),
            // Checked against the ceiling already set.
            ("backoff_base => '1 minute'", "backoff_max"),
        ] {
            let (state, message) = error_of(&format!(
                "SELECT * FROM aedb_queue.queue_configure('conf', {call})"
            ))
            .unwrap_or_else(|| panic!("{call} was accepted"));
            assert_eq!(state, "22023", "{call}: {message}");
            assert!(message.contains(&format!("\"{arg}\"")), "{call}: {message}");
        }
        let kept: (Option<String>, Option<String>) = Spi::get_two(
            "SELECT backoff_base::text, backoff_max::text FROM aedb_queue.queue WHERE name = 'conf'",
        )
        .unwrap();
        assert_eq!(kept, (None, Some("00:00:10".into())));
        expect_error(
            "SELECT * FROM aedb_queue.queue_configure(NULL)",
            "22004",
            "argument \"queue\" must not be NULL",
        );
    }

    #[pg_test]
    fn a_claim_without_a_lease_uses_the_queues_default_lease() {
        exec("SELECT aedb_queue.queue_configure('lease', default_lease => '7 minutes')");
        enqueue("lease", "");
        enqueue("plain", "");
        let lease = |queue: &str| -> String {
            let id: i64 = one(&format!(
                "SELECT task_id FROM aedb_queue.queue_claim('{queue}', 'w')"
            ));
            one(&format!(
                "SELECT (lease_deadline - updated_at)::text FROM aedb_queue.task WHERE task_id = {id}"
            ))
        };
        assert_eq!(lease("lease"), "00:07:00");
        assert_eq!(lease("plain"), "00:00:30");
    }

    #[pg_test]
    fn a_queues_payload_limit_applies_below_the_servers() {
        exec("SELECT aedb_queue.queue_configure('small', max_payload_bytes => 64)");
        let big = "jsonb_build_object('x', repeat('a', 100))";
        assert_eq!(
            sqlstate_of(&format!(
                "SELECT * FROM aedb_queue.queue_enqueue('small', {big})"
            )),
            Some("54000".into())
        );
        assert_eq!(count("aedb_queue.task WHERE queue = 'small'"), 0);
        enqueue("other", &format!(", payload => {big}"));
        // A queue cannot lift the operator's limit.
        exec("SELECT aedb_queue.queue_configure('large', max_payload_bytes => 1000000)");
        exec("SET LOCAL aedb_queue.max_payload_bytes = 64");
        assert_eq!(
            sqlstate_of(&format!(
                "SELECT * FROM aedb_queue.queue_enqueue('large', {big})"
            )),
            Some("54000".into())
        );
    }

    // ------------------------------------------------------------------
    // Pause and resume.
    // ------------------------------------------------------------------

    #[pg_test]
    fn a_paused_queue_accepts_enqueues_but_hands_out_nothing() {
        let first = enqueue("p", "");
        assert!(one::<bool>("SELECT aedb_queue.queue_pause('p')"));
        assert!(
            !one::<bool>("SELECT aedb_queue.queue_pause('p')"),
            "already paused"
        );
        let second = enqueue("p", "");
        assert!(claim("p", ", max => 10").is_empty());
        assert_eq!(state_of("p", first).as_deref(), Some("ready"));
        assert!(one::<bool>("SELECT aedb_queue.queue_resume('p')"));
        let claimed: Vec<i64> = claim("p", ", max => 10").into_iter().map(|t| t.0).collect();
        assert_eq!(claimed, vec![first, second]);
        assert!(
            !one::<bool>("SELECT aedb_queue.queue_resume('p')"),
            "already running"
        );
    }

    // ------------------------------------------------------------------
    // Dead letters and purges.
    // ------------------------------------------------------------------

    fn dead_task(queue: &str) -> (i64, i64) {
        let id = enqueue(queue, ", max_attempts => 1");
        let (claimed, token) = claim_one(queue);
        assert_eq!(claimed, id);
        assert_eq!(fail(queue, id, token, ""), "applied");
        assert_eq!(state_of(queue, id).as_deref(), Some("dead"));
        (id, token)
    }

    #[pg_test]
    fn retry_dead_moves_one_or_all_back_to_ready_with_fresh_attempts() {
        let (a, token_a) = dead_task("dl");
        let (b, _) = dead_task("dl");
        dead_task("dl");
        assert_eq!(
            one::<i64>(&format!("SELECT aedb_queue.queue_retry_dead('dl', {a})")),
            1
        );
        assert_eq!(state_of("dl", a).as_deref(), Some("ready"));
        assert_eq!(state_of("dl", b).as_deref(), Some("dead"));
        assert_eq!(
            one::<i64>(&format!("SELECT aedb_queue.queue_retry_dead('dl', {a})")),
            0,
            "no longer dead"
        );
        assert_eq!(
            one::<i64>("SELECT aedb_queue.queue_retry_dead('dl', max => 1)"),
            1
        );
        assert_eq!(one::<i64>("SELECT aedb_queue.queue_retry_dead('dl')"), 1);
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'dl' AND state = 'dead'"),
            0
        );
        let (again, token) = claim_one("dl");
        assert_eq!(again, a);
        assert!(token > token_a, "fencing tokens keep counting up");
        assert_eq!(
            one::<i32>(&format!(
                "SELECT attempts FROM aedb_queue.queue_get('dl', {a})"
            )),
            1
        );
        // The retried task has its full attempts again: one failure kills it.
        assert_eq!(fail("dl", a, token, ""), "applied");
        assert_eq!(state_of("dl", a).as_deref(), Some("dead"));
    }

    #[pg_test]
    fn purge_deletes_one_state_and_in_flight_only_when_forced() {
        dead_task("pg");
        dead_task("pg");
        let ready = enqueue("pg", "");
        let busy = enqueue("pg", "");
        let (first, _) = claim_one("pg");
        assert_eq!(first, ready);
        assert_eq!(one::<i64>("SELECT aedb_queue.queue_purge('pg', 'dead')"), 2);
        assert_eq!(count("aedb_queue.task WHERE queue = 'pg'"), 2);
        let (state, message) =
            error_of("SELECT aedb_queue.queue_purge('pg', 'in_flight')").unwrap();
        assert_eq!(state, "22023");
        assert!(message.contains("force"), "{message}");
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'pg' AND state = 'in_flight'"),
            1
        );
        let (_, token) = claim_one("pg");
        assert_eq!(
            one::<i64>("SELECT aedb_queue.queue_purge('pg', 'in_flight', force => true)"),
            2
        );
        assert_eq!(
            complete("pg", busy, token, ""),
            "lease_lost",
            "the purged task's worker is fenced out"
        );
        assert_eq!(
            sqlstate_of("SELECT aedb_queue.queue_purge('pg', 'finished')"),
            Some("22023".into())
        );
    }

    // ------------------------------------------------------------------
    // Kept completed tasks and key retention.
    // ------------------------------------------------------------------

    #[pg_test]
    fn a_queue_that_keeps_completed_tasks_shows_them_until_reaped() {
        exec("SELECT aedb_queue.queue_configure('keep', keep_completed => '1 day')");
        let id = enqueue("keep", ", payload => '{\"n\": 1}'");
        let (_, token) = claim_one("keep");
        assert_eq!(
            complete("keep", id, token, ", result => '{\"ok\": true}'"),
            "applied"
        );
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'keep'"),
            0,
            "it left the hot table"
        );
        let shown: String = one(&format!(
            "SELECT state || ' ' || owner_id || ' ' || attempts || ' ' || result::text || ' '
                    || (completed_at BETWEEN statement_timestamp() AND clock_timestamp()) || ' ' || payload::text
             FROM aedb_queue.queue_get('keep', {id})"
        ));
        assert_eq!(shown, "completed w1 1 {\"ok\": true} true {\"n\": 1}");
        assert_eq!(
            ints("SELECT task_id FROM aedb_queue.queue_list('keep', 'completed')"),
            vec![id]
        );
        // A second completion with the old token is fenced out as before.
        assert_eq!(complete("keep", id, token, ""), "lease_lost");
        // Within the window the reaper keeps it; past it, the reaper deletes it.
        exec("SELECT * FROM aedb_queue.queue_reap('keep')");
        assert_eq!(count("aedb_queue.completed_task"), 1);
        exec(&format!(
            "UPDATE aedb_queue.completed_task SET completed_at = completed_at - interval '2 days'
             WHERE task_id = {id}"
        ));
        exec("SELECT * FROM aedb_queue.queue_reap()");
        assert_eq!(count("aedb_queue.completed_task"), 0);
        assert!(state_of("keep", id).is_none());
    }

    #[pg_test]
    fn a_batch_completion_keeps_its_tasks_too_and_fences_each() {
        exec("SELECT aedb_queue.queue_configure('keepb', keep_completed => '1 hour')");
        let a = enqueue("keepb", "");
        let b = enqueue("keepb", "");
        let claimed = claim("keepb", ", max => 2");
        let (ids, tokens): (Vec<i64>, Vec<i64>) = claimed.into_iter().unzip();
        assert_eq!(ids, vec![a, b]);
        let outcomes: Vec<String> = Spi::connect(|c| {
            c.select(
                &format!(
                    "SELECT outcome::text FROM aedb_queue.queue_complete_batch('keepb',
                         ARRAY[{a}, {b}], ARRAY[{}, {}]) ORDER BY task_id",
                    tokens[0],
                    tokens[1] + 1
                ),
                None,
                &[],
            )
            .unwrap()
            .map(|row| row.get::<String>(1).unwrap().unwrap())
            .collect()
        });
        assert_eq!(outcomes, vec!["applied", "lease_lost"]);
        assert_eq!(
            ints("SELECT task_id FROM aedb_queue.queue_list('keepb', 'completed')"),
            vec![a]
        );
        assert_eq!(state_of("keepb", b).as_deref(), Some("in_flight"));
    }

    /// The reaper's retention work is bounded by its `max`, per queue.
    #[pg_test]
    fn expiring_kept_tasks_is_bounded_by_the_reapers_max() {
        exec("SELECT aedb_queue.queue_configure('keepmax', keep_completed => '1 hour')");
        for _ in 0..3 {
            let id = enqueue("keepmax", "");
            let (_, token) = claim_one("keepmax");
            assert_eq!(complete("keepmax", id, token, ""), "applied");
        }
        exec(
            "UPDATE aedb_queue.completed_task SET completed_at = completed_at - interval '2 hours'",
        );
        exec("SELECT * FROM aedb_queue.queue_reap('keepmax', max => 2)");
        assert_eq!(count("aedb_queue.completed_task"), 1);
        exec("SELECT * FROM aedb_queue.queue_reap('keepmax', max => 2)");
        assert_eq!(count("aedb_queue.completed_task"), 0);
    }

    /// Pausing stops hand-outs, not housekeeping: the reaper still
    /// requeues an abandoned lease of a paused queue.
    #[pg_test]
    fn the_reaper_still_reclaims_expired_leases_of_a_paused_queue() {
        let id = enqueue("pz", "");
        claim_one("pz");
        exec("SELECT aedb_queue.queue_pause('pz')");
        crate::tests::tests::expire_lease(id);
        assert_eq!(
            ints("SELECT reclaimed FROM aedb_queue.queue_reap('pz')"),
            vec![1]
        );
        assert_eq!(state_of("pz", id).as_deref(), Some("ready"));
        assert!(claim("pz", "").is_empty(), "still paused");
    }

    #[pg_test]
    fn queues_that_do_not_keep_completed_tasks_archive_nothing() {
        let id = enqueue("nokeep", "");
        let (_, token) = claim_one("nokeep");
        assert_eq!(complete("nokeep", id, token, ", result => '1'"), "applied");
        assert_eq!(count("aedb_queue.completed_task"), 0);
        assert!(state_of("nokeep", id).is_none());
    }

    #[pg_test]
    fn expired_idempotency_keys_are_reaped_only_once_their_task_is_gone() {
        exec("SELECT aedb_queue.queue_configure('keys', keep_idempotency_keys => '1 hour')");
        let done = enqueue("keys", ", idempotency_key => 'done'");
        let live = enqueue("keys", ", idempotency_key => 'live', delay => '1 day'");
        let (_, token) = claim_one("keys");
        assert_eq!(complete("keys", done, token, ""), "applied");
        exec("UPDATE aedb_queue.idempotency_key SET created_at = created_at - interval '2 hours'");
        exec("SELECT * FROM aedb_queue.queue_reap('keys')");
        assert_eq!(
            ints("SELECT task_id FROM aedb_queue.idempotency_key WHERE queue = 'keys'"),
            vec![live]
        );
        // With the key gone, the same key enqueues a new task.
        let (again, dedup): (Option<i64>, Option<bool>) = Spi::get_two(
            "SELECT task_id, deduplicated FROM aedb_queue.queue_enqueue('keys', idempotency_key => 'done')",
        )
        .unwrap();
        assert_eq!(dedup, Some(false));
        assert_ne!(again, Some(done));
    }

    // ------------------------------------------------------------------
    // The psql views.
    // ------------------------------------------------------------------

    #[pg_test]
    fn queue_stats_counts_each_state_and_reports_due_times_and_expired_leases() {
        dead_task("st");
        enqueue("st", "");
        enqueue("st", "");
        enqueue("st", ", delay => '1 hour'");
        let (busy, _) = claim_one("st");
        exec(&format!(
            "UPDATE aedb_queue.task SET lease_deadline = statement_timestamp() - interval '1 second'
             WHERE task_id = {busy}"
        ));
        exec("SELECT aedb_queue.queue_pause('st')");
        let row: String = one(
            "SELECT scheduled || ' ' || ready || ' ' || in_flight || ' ' || dead || ' '
                    || completed_kept || ' ' || expired_leases || ' ' || paused || ' '
                    || (next_due = (SELECT created_at + interval '1 hour' FROM aedb_queue.task
                                    WHERE queue = 'st' AND state = 'scheduled'))
                    || ' ' || (oldest_ready_age IS NOT NULL)
             FROM aedb_queue.queue_stats WHERE queue = 'st'",
        );
        assert_eq!(row, "1 1 1 1 0 1 true true true");
    }

    #[pg_test]
    fn the_tasks_view_shows_ages_and_short_previews() {
        let id = enqueue(
            "view",
            ", payload => jsonb_build_object('text', repeat('x', 100)), delay => '90 seconds'",
        );
        let row: (Option<String>, Option<String>, Option<String>) = Spi::get_three(&format!(
            "SELECT attempts, due_in::text, payload FROM aedb_queue.tasks WHERE task_id = {id}"
        ))
        .unwrap();
        assert_eq!(row.0.as_deref(), Some("0/5"));
        assert_eq!(row.1.as_deref(), Some("00:01:30"));
        let payload = row.2.unwrap();
        assert_eq!(payload.chars().count(), 40, "{payload}");
        assert!(payload.ends_with('…'));
    }

    // ------------------------------------------------------------------
    // Roles and privileges.
    // ------------------------------------------------------------------

    #[pg_test]
    fn the_extension_creates_its_roles_and_revokes_execute_from_public() {
        assert_eq!(
            count(
                "pg_roles WHERE rolname IN ('aedb_queue_producer', 'aedb_queue_worker', 'aedb_queue_admin')"
            ),
            3
        );
        // No function of the extension is executable by PUBLIC.
        let functions = "pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'aedb_queue'";
        assert!(count(functions) > 10);
        assert_eq!(
            count(&format!(
                "{functions} AND has_function_privilege('public', p.oid, 'EXECUTE')"
            )),
            0
        );
    }

    #[pg_test]
    fn a_role_without_an_aedb_queue_role_can_call_nothing_and_changes_nothing() {
        enqueue("q", "");
        role("nobody", &[]);
        as_role("nobody", || {
            for call in [
                "SELECT * FROM aedb_queue.queue_enqueue('q')",
                "SELECT * FROM aedb_queue.queue_claim('q', 'w')",
                "SELECT * FROM aedb_queue.queue_get('q', 1)",
                "SELECT * FROM aedb_queue.queue_purge('q', 'ready')",
                "SELECT * FROM aedb_queue.task",
                "SELECT * FROM aedb_queue.tasks",
            ] {
                assert_eq!(sqlstate_of(call), Some("42501".into()), "{call}");
            }
        });
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'q' AND state = 'ready'"),
            1
        );
    }

    #[pg_test]
    fn each_role_can_do_its_part_only() {
        role("app_producer", &["aedb_queue_producer"]);
        role("app_worker", &["aedb_queue_worker"]);
        role("app_admin", &["aedb_queue_admin"]);
        let id: i64 = as_role("app_producer", || {
            assert_eq!(
                sqlstate_of("SELECT * FROM aedb_queue.queue_claim('q', 'w')"),
                Some("42501".into())
            );
            one("SELECT task_id FROM aedb_queue.queue_enqueue('q', '{}')")
        });
        as_role("app_worker", || {
            assert_eq!(
                sqlstate_of("SELECT * FROM aedb_queue.queue_enqueue('q')"),
                Some("42501".into())
            );
            assert_eq!(
                sqlstate_of(&format!("SELECT aedb_queue.queue_cancel('q', {id})")),
                Some("42501".into())
            );
            assert_eq!(
                sqlstate_of("SELECT * FROM aedb_queue.task"),
                Some("42501".into())
            );
            let (claimed, token) = claim_one("q");
            assert_eq!(claimed, id);
            assert_eq!(complete("q", id, token, ""), "applied");
        });
        as_role("app_admin", || {
            let other = enqueue("q", "");
            assert!(one::<bool>(&format!(
                "SELECT aedb_queue.queue_cancel('q', {other})"
            )));
            assert_eq!(count("aedb_queue.queue_stats WHERE queue = 'q'"), 1);
        });
    }

    // ------------------------------------------------------------------
    // Per-queue grants.
    // ------------------------------------------------------------------

    #[pg_test]
    fn a_worker_granted_queue_a_cannot_claim_read_or_cancel_queue_b() {
        let a = enqueue("tenant_a.jobs", "");
        let b = enqueue("tenant_b.jobs", "");
        role("worker_a", &["aedb_queue_worker"]);
        assert!(one::<bool>(
            "SELECT aedb_queue.queue_grant('tenant_a.*', 'worker_a', 'worker')"
        ));
        assert!(
            !one::<bool>("SELECT aedb_queue.queue_grant('tenant_a.*', 'worker_a', 'worker')"),
            "already granted"
        );
        as_role("worker_a", || {
            for call in [
                "SELECT * FROM aedb_queue.queue_claim('tenant_b.jobs', 'w')".to_string(),
                format!("SELECT * FROM aedb_queue.queue_get('tenant_b.jobs', {b})"),
                "SELECT * FROM aedb_queue.queue_list('tenant_b.jobs')".to_string(),
                format!("SELECT aedb_queue.queue_complete('tenant_b.jobs', {b}, 1)"),
            ] {
                let (state, message) =
                    error_of(&call).unwrap_or_else(|| panic!("{call} was allowed"));
                assert_eq!(state, "42501", "{call}: {message}");
                assert!(message.contains("tenant_b.jobs"), "{message}");
            }
            let (claimed, token) = claim_one("tenant_a.jobs");
            assert_eq!(claimed, a);
            assert_eq!(complete("tenant_a.jobs", a, token, ""), "applied");
        });
        // That the refused calls changed nothing in B is seen from another
        // session: itests/tests/rejections.rs (a confined worker).
        // Revoking the only grant does not unconfine: the role may use no queue.
        assert!(one::<bool>(
            "SELECT aedb_queue.queue_revoke('tenant_a.*', 'worker_a', 'worker')"
        ));
        as_role("worker_a", || {
            for queue in ["tenant_a.jobs", "tenant_b.jobs"] {
                let call = format!("SELECT * FROM aedb_queue.queue_claim('{queue}', 'w')");
                assert_eq!(sqlstate_of(&call), Some("42501".into()), "{call}");
            }
        });
        // Only an unconfined admin lifts the confinement.
        assert!(one::<bool>("SELECT aedb_queue.queue_unconfine('worker_a')"));
        as_role("worker_a", || assert_eq!(claim_one("tenant_b.jobs").0, b));
    }

    #[pg_test]
    fn a_confined_admin_sees_and_grants_only_its_own_queues() {
        enqueue("a.x", "");
        enqueue("b.x", "");
        role("admin_a", &["aedb_queue_admin"]);
        role("helper", &[]);
        exec("SELECT aedb_queue.queue_grant('a.*', 'admin_a', 'admin')");
        as_role("admin_a", || {
            assert_eq!(ints("SELECT ready FROM aedb_queue.queue_stats"), vec![1]);
            assert_eq!(count("aedb_queue.tasks WHERE queue = 'b.x'"), 0);
            assert_eq!(
                sqlstate_of("SELECT aedb_queue.queue_purge('b.x', 'ready')"),
                Some("42501".into())
            );
            // helper is not confined: a grant would lock it out of every other queue.
            expect_error(
                "SELECT aedb_queue.queue_grant('a.sub.*', 'helper', 'worker')",
                "42501",
                "permission denied to change the grants of role \"helper\": it is not confined within the queues you administer",
            );
        });
        assert!(one::<bool>("SELECT aedb_queue.queue_confine('helper')"));
        as_role("admin_a", || {
            assert!(one::<bool>(
                "SELECT aedb_queue.queue_grant('a.sub.*', 'helper', 'worker')"
            ));
            assert_eq!(
                sqlstate_of("SELECT aedb_queue.queue_grant('*', 'helper', 'worker')"),
                Some("42501".into())
            );
        });
        assert_eq!(count("aedb_queue.queue_grant"), 2);
    }

    #[pg_test]
    fn grant_arguments_are_checked() {
        role("someone", &[]);
        assert_eq!(
            sqlstate_of("SELECT aedb_queue.queue_grant('q', 'someone', 'owner')"),
            Some("22023".into())
        );
        assert_eq!(
            sqlstate_of("SELECT aedb_queue.queue_grant('', 'someone', 'worker')"),
            Some("22023".into())
        );
        assert_eq!(
            sqlstate_of("SELECT aedb_queue.queue_grant('q', 'no_such_role', 'worker')"),
            Some("42704".into())
        );
        assert_eq!(
            sqlstate_of("SELECT aedb_queue.queue_grant('q', NULL, 'worker')"),
            Some("22004".into())
        );
        assert_eq!(count("aedb_queue.queue_grant"), 0);
    }

    /// Queue names are values, never SQL: quotes, semicolons, backslashes,
    /// unicode and the full 128 bytes round-trip through every call, and a
    /// pattern with `_` or `%` matches literally.
    #[pg_test]
    fn hostile_queue_names_are_plain_names() {
        let long = format!("'{}'", "é".repeat(64)); // 128 bytes
        for name in [
            "'it''s; DROP TABLE aedb_queue.task; --'",
            "'back\\slash \"quoted\"'",
            "'名前 🚀'",
            long.as_str(),
            "'%_'",
        ] {
            let id: i64 = one(&format!(
                "SELECT task_id FROM aedb_queue.queue_enqueue({name})"
            ));
            let (claimed, token): (Option<i64>, Option<i64>) = Spi::get_two(&format!(
                "SELECT task_id, fencing_token FROM aedb_queue.queue_claim({name}, 'w')"
            ))
            .unwrap();
            assert_eq!(claimed, Some(id), "{name}");
            assert_eq!(
                one::<String>(&format!(
                    "SELECT queue FROM aedb_queue.queue_get({name}, {id})"
                )),
                one::<String>(&format!("SELECT {name}::text"))
            );
            assert_eq!(
                one::<String>(&format!(
                    "SELECT aedb_queue.queue_complete({name}, {id}, {})::text",
                    token.unwrap()
                )),
                "applied"
            );
        }
        assert_eq!(count("aedb_queue.task"), 0, "the task table is intact");
        role("pct", &["aedb_queue_worker"]);
        exec("SELECT aedb_queue.queue_grant('%_', 'pct', 'worker')");
        enqueue("%x", "");
        as_role("pct", || {
            assert_eq!(
                sqlstate_of("SELECT * FROM aedb_queue.queue_claim('%x', 'w')"),
                Some("42501".into())
            );
        });
    }

    /// A caller who puts their own schema ahead of pg_catalog, with look-alike
    /// functions, operators and tables, changes nothing our functions do.
    #[pg_test]
    fn a_shadowing_search_path_cannot_hijack_extension_functions() {
        role("mallory", &["aedb_queue_admin"]);
        exec("CREATE SCHEMA evil AUTHORIZATION mallory");
        exec("CREATE TABLE evil.hijacked (what text)");
        exec("GRANT ALL ON evil.hijacked TO PUBLIC");
        as_role("mallory", || {
            exec(
                "CREATE FUNCTION evil.statement_timestamp() RETURNS timestamptz LANGUAGE sql
                 AS $$ INSERT INTO evil.hijacked VALUES ('statement_timestamp'); SELECT '2000-01-01'::timestamptz $$",
            );
            exec(
                "CREATE FUNCTION evil.texteq_evil(text, text) RETURNS boolean LANGUAGE sql
                 AS $$ INSERT INTO evil.hijacked VALUES ('='); SELECT true $$",
            );
            exec("CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.texteq_evil)");
            exec("CREATE TEMP TABLE task (task_id bigint)");
            exec("CREATE TEMP TABLE queue (name text)");
            exec("SET LOCAL search_path = evil, pg_temp, pg_catalog, aedb_queue");
            let id: i64 =
                one("SELECT task_id FROM aedb_queue.queue_enqueue('victim', delay => '1 hour')");
            assert!(claim("victim", "").is_empty(), "the timer is not due");
            assert_eq!(
                one::<String>(&format!(
                    "SELECT state FROM aedb_queue.queue_get('victim', {id})"
                )),
                "scheduled"
            );
            exec("SELECT * FROM aedb_queue.queue_reap()");
            exec("SELECT * FROM aedb_queue.queue_configure('victim', max_attempts => 2)");
            exec("RESET search_path");
        });
        assert_eq!(count("evil.hijacked"), 0, "no look-alike was ever called");
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'victim' AND state = 'scheduled'"),
            1
        );
    }
}
