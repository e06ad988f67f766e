//! `#[pg_test]`s of the trust model (docs/security.md), written the way a
//! hostile tenant would attack it: a login role in one of our roles,
//! confined to `a.*`, that switches roles, revokes, grants, sends oversized
//! and odd input. Each test runs in one rolled-back transaction; sessions
//! are played with `SET LOCAL SESSION AUTHORIZATION` (the login role) and
//! `SET LOCAL ROLE`.
//!
//! A refused call raises in a subtransaction that is rolled back
//! (`error_of`), so nothing read after it here could show what it wrote:
//! that a refusal changes nothing is checked from another session, after
//! the failed call's transaction ended, in itests/tests/rejections.rs.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::tests::{
        assert_task_invariants, claim_one, count, enqueue, error_of, exec, expect_error, ints,
        make_due, one, state_of, text_field,
    };

    fn sqlstate_of(query: &str) -> Option<String> {
        error_of(query).map(|(state, _)| state)
    }

    fn role(name: &str, groups: &[&str]) {
        exec(&format!("CREATE ROLE {name} LOGIN"));
        for group in groups {
            exec(&format!("GRANT {group} TO {name}"));
        }
    }

    /// Runs `body` in a session of login role `login`, after `SET ROLE
    /// set_role` if given, then back as the test's superuser.
    fn as_login<R>(login: &str, set_role: Option<&str>, body: impl FnOnce() -> R) -> R {
        exec(&format!("SET LOCAL SESSION AUTHORIZATION {login}"));
        if let Some(role) = set_role {
            exec(&format!("SET LOCAL ROLE {role}"));
        }
        let result = body();
        exec("RESET SESSION AUTHORIZATION");
        result
    }

    /// tenant_admin: admin confined to a.*; tenant_worker, tenant_producer likewise.
    fn tenants() {
        role("tenant_admin", &["aedb_queue_admin"]);
        role("tenant_worker", &["aedb_queue_worker"]);
        role("tenant_producer", &["aedb_queue_producer"]);
        exec("SELECT aedb_queue.queue_grant('a.*', 'tenant_admin', 'admin')");
        exec("SELECT aedb_queue.queue_grant('a.*', 'tenant_worker', 'worker')");
        exec("SELECT aedb_queue.queue_grant('a.*', 'tenant_producer', 'producer')");
    }

    /// A confined producer may make its tasks wait for its own tenant's
    /// tasks; another tenant's task is refused exactly as an id that was
    /// never a task.
    #[pg_test]
    fn another_tenants_task_cannot_be_waited_for_nor_probed() {
        tenants();
        let own = enqueue("a.p", "");
        let secret = enqueue("b.secret", "");
        let never = 9_999_999_999i64;
        let refused = |id: i64| {
            as_login("tenant_producer", None, || {
                error_of(&format!(
                    "SELECT aedb_queue.queue_enqueue('a.c', wait_for => ARRAY[{id}])"
                ))
            })
        };
        let (state, message) = refused(secret).expect("refused");
        let (never_state, never_message) = refused(never).expect("refused");
        assert_eq!(state, "22023");
        assert_eq!(
            (state, message.replace(&secret.to_string(), "N")),
            (never_state, never_message.replace(&never.to_string(), "N")),
            "another tenant's task reads as one that never was"
        );
        // That the refused call marks and links nothing is seen from another
        // session: itests/tests/rejections.rs.
        let child: i64 = as_login("tenant_producer", None, || {
            one(&format!(
                "SELECT task_id FROM aedb_queue.queue_enqueue('a.c', wait_for => ARRAY[{own}])"
            ))
        });
        assert_eq!(text_field(child, "state::text").as_deref(), Some("waiting"));
    }

    /// A confined worker cannot hand back another tenant's task, neither
    /// naming that tenant's queue (refused, 42501) nor its own (the task is
    /// not in it: lease_lost, as for a task that never was); a producer
    /// cannot hand back at all. The task stays leased to its holder.
    #[pg_test]
    fn a_tenant_cannot_hand_back_another_tenants_task() {
        tenants();
        role("plain_producer", &["aedb_queue_producer"]);
        let secret = enqueue("b.secret", "");
        let (_, token) = claim_one("b.secret");
        let before = text_field(
            secret,
            "(state, attempts, fencing_token, owner_id, lease_deadline)",
        );
        let (own_queue, other_queue) = as_login("tenant_worker", None, || {
            (
                one::<String>(&format!(
                    "SELECT aedb_queue.queue_release('a.jobs', {secret}, {token})::text"
                )),
                sqlstate_of(&format!(
                    "SELECT aedb_queue.queue_release('b.secret', {secret}, {token})"
                )),
            )
        });
        assert_eq!(own_queue, "lease_lost");
        assert_eq!(other_queue.as_deref(), Some("42501"));
        let producer = as_login("plain_producer", None, || {
            sqlstate_of(&format!(
                "SELECT aedb_queue.queue_release('b.secret', {secret}, {token})"
            ))
        });
        assert_eq!(
            producer.as_deref(),
            Some("42501"),
            "no EXECUTE for producers"
        );
        assert_eq!(
            text_field(
                secret,
                "(state, attempts, fencing_token, owner_id, lease_deadline)"
            ),
            before
        );
    }

    /// A confined worker reading a child's parents sees only those in its
    /// own tenant's queues.
    #[pg_test]
    fn queue_parents_leaves_out_another_tenants_parents() {
        tenants();
        let own = enqueue("a.p", "");
        let secret = enqueue("b.secret", "");
        let child: i64 = one(&format!(
            "SELECT task_id FROM aedb_queue.queue_enqueue('a.c', wait_for => ARRAY[{own}, {secret}])"
        ));
        let seen = as_login("tenant_worker", None, || {
            ints(&format!(
                "SELECT task_id FROM aedb_queue.queue_parents('a.c', {child})"
            ))
        });
        assert_eq!(seen, vec![own]);
        as_login("tenant_worker", None, || {
            expect_error(
                &format!("SELECT * FROM aedb_queue.queue_parents('b.secret', {secret})"),
                "42501",
                "permission denied to read on queue \"b.secret\": no aedb_queue grant of this role covers it",
            )
        });
    }

    /// Keys are per queue: a tenant's task under another tenant's key name
    /// neither waits for nor takes that tenant's slots. A confined admin
    /// cannot set another tenant's key limit (refused, nothing written), nor
    /// see its keys in `concurrency_keys`; a confined producer cannot put a
    /// task on another tenant's key.
    #[pg_test]
    fn a_tenant_cannot_block_take_or_see_another_tenants_keys() {
        tenants();
        let theirs = enqueue("b.jobs", ", concurrency_key => 'acct'");
        assert_eq!(state_of("b.jobs", theirs).as_deref(), Some("ready"));
        let (mine, mine_too) = as_login("tenant_producer", None, || {
            (
                one::<i64>("SELECT task_id FROM aedb_queue.queue_enqueue('a.jobs', concurrency_key => 'acct')"),
                one::<i64>("SELECT task_id FROM aedb_queue.queue_enqueue('a.jobs', concurrency_key => 'acct')"),
            )
        });
        assert_eq!(
            state_of("a.jobs", mine).as_deref(),
            Some("ready"),
            "its own slot"
        );
        assert_eq!(state_of("a.jobs", mine_too).as_deref(), Some("blocked"));
        assert_eq!(
            state_of("b.jobs", theirs).as_deref(),
            Some("ready"),
            "untouched"
        );
        as_login("tenant_producer", None, || {
            assert_eq!(
                sqlstate_of("SELECT aedb_queue.queue_enqueue('b.jobs', concurrency_key => 'acct')"),
                Some("42501".into())
            );
        });
        as_login("tenant_admin", None, || {
            expect_error(
                "SELECT aedb_queue.queue_configure_key('b.jobs', 'acct', 50)",
                "42501",
                "permission denied to administer on queue \"b.jobs\": no aedb_queue grant of this role covers it",
            );
            assert_eq!(
                count("aedb_queue.concurrency_keys WHERE queue = 'b.jobs'"),
                0,
                "another tenant's keys are not shown"
            );
            assert_eq!(
                count("aedb_queue.concurrency_keys WHERE queue = 'a.jobs'"),
                1
            );
        });
        // Ordering keys likewise: another tenant's line of the same name
        // neither holds up nor is held up by this one's.
        let their_head = enqueue("b.jobs", ", ordering_key => 'acct'");
        let my_head: i64 = as_login("tenant_producer", None, || {
            one("SELECT task_id FROM aedb_queue.queue_enqueue('a.jobs', ordering_key => 'acct')")
        });
        assert_eq!(state_of("a.jobs", my_head).as_deref(), Some("ready"));
        assert_eq!(state_of("b.jobs", their_head).as_deref(), Some("ready"));
        as_login("tenant_admin", None, || {
            assert_eq!(count("aedb_queue.ordering_keys WHERE queue = 'b.jobs'"), 0);
            assert_eq!(count("aedb_queue.ordering_keys WHERE queue = 'a.jobs'"), 1);
        });
        // Fair share likewise: weights are per queue, set by its admin only.
        exec("SELECT aedb_queue.queue_configure('b.jobs', fair_share => true)");
        as_login("tenant_admin", None, || {
            expect_error(
                "SELECT aedb_queue.queue_configure_fairness('b.jobs', 'acct', 1000)",
                "42501",
                "permission denied to administer on queue \"b.jobs\": no aedb_queue grant of this role covers it",
            );
            assert!(one::<bool>(
                "SELECT aedb_queue.queue_configure_fairness('a.jobs', 'acct', 1000)"
            ));
            assert_eq!(count("aedb_queue.fairness_keys WHERE queue = 'b.jobs'"), 0);
        });
        assert_task_invariants("tenants' keys");
    }

    const GROUP_ROLES: [&str; 3] = [
        "aedb_queue_producer",
        "aedb_queue_worker",
        "aedb_queue_admin",
    ];

    // ------------------------------------------------------------------
    // 1. Confinement cannot be shed.
    // ------------------------------------------------------------------

    #[pg_test]
    fn revoking_its_own_last_grant_does_not_free_a_confined_admin() {
        tenants();
        let b = enqueue("b.jobs", "");
        as_login("tenant_admin", None, || {
            assert!(one::<bool>(
                "SELECT aedb_queue.queue_revoke('a.*', 'tenant_admin', 'admin')"
            ));
            for call in [
                "SELECT count(*) FROM aedb_queue.queue_list('b.jobs')".to_string(),
                "SELECT aedb_queue.queue_purge('b.jobs', 'ready')".to_string(),
                format!("SELECT * FROM aedb_queue.queue_get('b.jobs', {b})"),
                "SELECT count(*) FROM aedb_queue.queue_list('a.jobs')".to_string(),
                "SELECT count(*) FROM aedb_queue.queue_tasks('b.jobs')".to_string(),
                "SELECT count(*) FROM aedb_queue.queue_tasks('a.jobs')".to_string(),
            ] {
                assert_eq!(sqlstate_of(&call), Some("42501".into()), "{call}");
            }
            assert_eq!(count("aedb_queue.queue_stats"), 0, "sees no queue");
        });
    }

    #[pg_test]
    fn set_role_to_a_group_role_keeps_the_login_confined() {
        tenants();
        enqueue("b.jobs", "");
        let switches = GROUP_ROLES.iter().map(|g| ("tenant_admin", *g)).chain([
            ("tenant_worker", "aedb_queue_worker"),
            ("tenant_producer", "aedb_queue_producer"),
        ]);
        for (login, group) in switches {
            {
                as_login(login, Some(group), || {
                    assert_eq!(one::<String>("SELECT current_user::text"), group);
                    for call in [
                        "SELECT * FROM aedb_queue.queue_enqueue('b.jobs', idempotency_key => 'squat')",
                        "SELECT * FROM aedb_queue.queue_claim('b.jobs', 'w')",
                        "SELECT count(*) FROM aedb_queue.queue_list('b.jobs')",
                        "SELECT count(*) FROM aedb_queue.queue_tasks('b.jobs')",
                        "SELECT aedb_queue.queue_purge('b.jobs', 'ready')",
                    ] {
                        let (state, message) = error_of(call).unwrap_or_else(|| panic!("{login} as {group}: {call} was allowed"));
                        assert_eq!(state, "42501", "{login} as {group}: {call}: {message}");
                    }
                });
            }
        }
    }

    #[pg_test]
    fn membership_chains_carry_confinement() {
        tenants();
        // login -> team -> tenant_worker (confined), with and without INHERIT.
        role("team", &["tenant_worker"]);
        role("member_login", &["team"]);
        exec("CREATE ROLE noinherit_login LOGIN NOINHERIT");
        exec("GRANT team TO noinherit_login");
        // Rights of its own, since it inherits none.
        exec("GRANT USAGE ON SCHEMA aedb_queue TO noinherit_login");
        exec("GRANT EXECUTE ON FUNCTION aedb_queue.queue_claim TO noinherit_login");
        enqueue("a.jobs", "");
        enqueue("b.jobs", "");
        for login in ["member_login", "noinherit_login"] {
            as_login(login, None, || {
                expect_error(
                    "SELECT * FROM aedb_queue.queue_claim('b.jobs', 'w')",
                    "42501",
                    "permission denied to work on queue \"b.jobs\": no aedb_queue grant of this role covers it",
                );
            });
        }
        as_login("member_login", None, || assert!(claim_one("a.jobs").0 > 0));
    }

    #[pg_test]
    fn a_security_definer_function_of_an_unconfined_role_does_not_free_its_caller() {
        tenants();
        role("free_owner", &["aedb_queue_worker"]);
        enqueue("b.jobs", "");
        exec(
            "CREATE FUNCTION public.claim_b() RETURNS bigint LANGUAGE sql SECURITY DEFINER
             AS $$ SELECT count(*) FROM aedb_queue.queue_claim('b.jobs', 'w') $$",
        );
        exec("ALTER FUNCTION public.claim_b() OWNER TO free_owner");
        exec("GRANT EXECUTE ON FUNCTION public.claim_b() TO tenant_worker");
        as_login("tenant_worker", None, || {
            assert_eq!(sqlstate_of("SELECT public.claim_b()"), Some("42501".into()));
        });
        as_login("free_owner", None, || {
            assert_eq!(one::<i64>("SELECT public.claim_b()"), 1)
        });
    }

    // ------------------------------------------------------------------
    // 2. A confined admin changes rights only within its own patterns.
    // ------------------------------------------------------------------

    #[pg_test]
    fn a_confined_admin_cannot_confine_free_roles_or_group_roles() {
        tenants();
        role("free_worker", &["aedb_queue_worker"]);
        role("other_tenant", &["aedb_queue_worker"]);
        exec("SELECT aedb_queue.queue_grant('b.*', 'other_tenant', 'worker')");
        as_login("tenant_admin", None, || {
            expect_error(
                "SELECT aedb_queue.queue_grant('a.x', 'free_worker', 'worker')",
                "42501",
                "permission denied to change the grants of role \"free_worker\": it is not confined within the queues you administer",
            );
            for group in GROUP_ROLES {
                let call = format!("SELECT aedb_queue.queue_grant('a.x', '{group}', 'worker')");
                assert_eq!(sqlstate_of(&call), Some("22023".into()), "{call}");
            }
            // A tenant straddling a.* and b.*: not within a.* alone.
            let call = "SELECT aedb_queue.queue_revoke('b.*', 'other_tenant', 'worker')";
            assert_eq!(sqlstate_of(call), Some("42501".into()));
            exec("SELECT aedb_queue.queue_grant('a.y', 'tenant_worker', 'producer')");
            assert_eq!(
                sqlstate_of("SELECT aedb_queue.queue_grant('b.y', 'tenant_worker', 'worker')"),
                Some("42501".into())
            );
            for call in [
                "SELECT aedb_queue.queue_confine('free_worker')",
                "SELECT aedb_queue.queue_unconfine('tenant_worker')",
            ] {
                assert_eq!(sqlstate_of(call), Some("42501".into()), "{call}");
            }
        });
        for group in GROUP_ROLES {
            let call = format!("SELECT aedb_queue.queue_confine('{group}')");
            assert_eq!(sqlstate_of(&call), Some("22023".into()), "{call}");
        }
        assert_eq!(
            sqlstate_of("SELECT aedb_queue.queue_grant('a.*', 'postgres', 'worker')"),
            Some("22023".into()),
            "superusers are never confined"
        );
    }

    #[pg_test]
    fn confine_and_unconfine_are_explicit() {
        role("someone", &["aedb_queue_worker"]);
        enqueue("q", "");
        assert!(one::<bool>("SELECT aedb_queue.queue_confine('someone')"));
        assert!(
            !one::<bool>("SELECT aedb_queue.queue_confine('someone')"),
            "already"
        );
        as_login("someone", None, || {
            assert_eq!(
                sqlstate_of("SELECT * FROM aedb_queue.queue_claim('q', 'w')"),
                Some("42501".into())
            );
        });
        assert!(one::<bool>("SELECT aedb_queue.queue_unconfine('someone')"));
        assert!(
            !one::<bool>("SELECT aedb_queue.queue_unconfine('someone')"),
            "already free"
        );
        as_login("someone", None, || assert!(claim_one("q").0 > 0));
    }

    // ------------------------------------------------------------------
    // 3. Follow-ups are enqueues.
    // ------------------------------------------------------------------

    #[pg_test]
    fn follow_ups_need_the_rights_of_queue_enqueue() {
        role("plain_worker", &["aedb_queue_worker"]);
        let id = enqueue("w.jobs", "");
        as_login("plain_worker", None, || {
            let (_, token) = claim_one("w.jobs");
            expect_error(
                &format!(
                    "SELECT aedb_queue.queue_complete('w.jobs', {id}, {token},
                         follow_ups => '[{{\"queue\": \"anywhere\", \"priority\": 1000000}}]')"
                ),
                "42501",
                "permission denied to enqueue follow_ups: follow-ups are enqueues, and this role may not call queue_enqueue",
            );
            // No follow-ups, or JSON null, need nothing more.
            assert_eq!(
                one::<String>(&format!(
                    "SELECT aedb_queue.queue_complete('w.jobs', {id}, {token}, follow_ups => 'null')::text"
                )),
                "applied"
            );
        });
        assert_eq!(count("aedb_queue.task WHERE queue = 'anywhere'"), 0);
    }

    #[pg_test]
    fn follow_ups_of_a_confined_worker_need_an_enqueue_grant_on_each_target() {
        tenants();
        exec("GRANT aedb_queue_producer TO tenant_worker");
        let id = enqueue("a.jobs", "");
        as_login("tenant_worker", None, || {
            let (_, token) = claim_one("a.jobs");
            for target in ["a.next", "b.next"] {
                let call = format!(
                    "SELECT aedb_queue.queue_complete('a.jobs', {id}, {token},
                         follow_ups => '[{{\"queue\": \"{target}\"}}]')"
                );
                assert_eq!(sqlstate_of(&call), Some("42501".into()), "{call}");
            }
        });
        exec("SELECT aedb_queue.queue_grant('a.next', 'tenant_worker', 'producer')");
        as_login("tenant_worker", None, || {
            let token: i64 = one(&format!(
                "SELECT fencing_token FROM aedb_queue.queue_get('a.jobs', {id})"
            ));
            let call = format!(
                "SELECT aedb_queue.queue_complete('a.jobs', {id}, {token},
                     follow_ups => '[{{\"queue\": \"a.next\"}}]')::text"
            );
            assert_eq!(one::<String>(&call), "applied");
        });
        assert_eq!(count("aedb_queue.task WHERE queue = 'a.next'"), 1);
        assert_eq!(count("aedb_queue.task WHERE queue = 'b.next'"), 0);
    }

    #[pg_test]
    fn follow_up_payloads_are_stored_byte_for_byte() {
        let id = enqueue("fu", "");
        let (_, token) = claim_one("fu");
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        let payloads = [
            "12345678901234567890123".to_string(),
            "{\"amount\": 0.10000000000000000000001, \"n\": 1.50}".to_string(),
            deep,
            "\"text\"".to_string(),
        ];
        let specs = payloads
            .iter()
            .map(|p| format!("{{\"queue\": \"fu.next\", \"payload\": {p}}}"))
            .collect::<Vec<_>>()
            .join(", ");
        let call = format!(
            "SELECT aedb_queue.queue_complete('fu', {id}, {token}, follow_ups => $j$[{specs}]$j$)::text"
        );
        assert_eq!(one::<String>(&call), "applied");
        for p in &payloads {
            let same = format!(
                "SELECT count(*) FROM aedb_queue.task WHERE queue = 'fu.next'
                   AND payload::text = ($j${p}$j$::jsonb)::text"
            );
            assert_eq!(one::<i64>(&same), 1, "{p}");
        }
        assert_eq!(
            one::<String>("SELECT payload::text FROM aedb_queue.task WHERE queue = 'fu.next' ORDER BY task_id LIMIT 1"),
            "12345678901234567890123"
        );
    }

    // ------------------------------------------------------------------
    // 4. What spans every queue is for unconfined admins.
    // ------------------------------------------------------------------

    #[pg_test]
    fn reaping_every_queue_is_for_unconfined_admins() {
        tenants();
        as_login("tenant_admin", Some("aedb_queue_admin"), || {
            expect_error(
                "SELECT * FROM aedb_queue.queue_reap()",
                "42501",
                "permission denied to reap every queue: only an unconfined aedb_queue admin may, and this session's roles are confined to some queues",
            );
            assert_eq!(
                one::<i64>("SELECT promoted FROM aedb_queue.queue_reap('a.jobs')"),
                0
            );
            assert_eq!(
                sqlstate_of("SELECT * FROM aedb_queue.queue_reap('b.jobs')"),
                Some("42501".into())
            );
        });
    }

    // ------------------------------------------------------------------
    // 5. Names resolve in pg_catalog only; no SECURITY DEFINER functions.
    // ------------------------------------------------------------------

    #[pg_test]
    fn no_function_runs_with_a_search_path_a_caller_controls() {
        let unsafe_definers: i64 = one(
            "SELECT count(*) FROM pg_proc
              WHERE pronamespace = 'aedb_queue'::regnamespace AND prosecdef
                AND (proconfig IS NULL OR NOT proconfig @> ARRAY['search_path=pg_catalog, pg_temp'])",
        );
        assert_eq!(unsafe_definers, 0);
    }

    /// `\df aedb_queue.*` is the API: helpers live in aedb_queue_internal.
    #[pg_test]
    fn the_api_schema_holds_the_api_only() {
        let names: String = one(
            "SELECT string_agg(proname, ' ' ORDER BY proname) FROM pg_proc
              WHERE pronamespace = 'aedb_queue'::regnamespace",
        );
        assert_eq!(
            names,
            "queue_access queue_await_event queue_await_tasks queue_cancel queue_children queue_claim queue_complete \
             queue_complete_and_claim queue_complete_batch \
             queue_configure queue_configure_fairness queue_configure_key queue_confine queue_counters queue_cron_preview \
             queue_emit queue_enqueue queue_enqueue_batch queue_errors queue_events_purge queue_fail queue_fail_and_claim queue_find queue_get queue_grant \
             queue_heartbeat queue_list queue_overview queue_parents queue_pause queue_purge queue_reap queue_release queue_resume \
             queue_retry_dead queue_retry_from_step queue_revoke queue_schedule_delete queue_schedule_list \
             queue_schedule_pause queue_schedule_resume queue_schedule_upsert queue_shard queue_shard_assign queue_sleep \
             queue_step_record queue_steps queue_tasks queue_unconfine queue_waits \
             queue_write_path schedule_reaper unschedule_reaper"
        );
    }

    #[pg_test]
    fn an_error_inside_our_statement_restores_the_callers_user_and_path() {
        role("trapper", &["aedb_queue_producer"]);
        // A trigger that fails inside our INSERT, caught by the caller.
        exec(
            "CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql
             AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$",
        );
        exec("CREATE TRIGGER refuse BEFORE INSERT ON aedb_queue.task FOR EACH ROW EXECUTE FUNCTION public.refuse()");
        as_login("trapper", None, || {
            exec("SET LOCAL search_path = public");
            exec(
                "DO $$ BEGIN
                     PERFORM aedb_queue.queue_enqueue('trap');
                 EXCEPTION WHEN others THEN NULL;
                 END $$",
            );
            assert_eq!(one::<String>("SELECT current_user::text"), "trapper");
            assert_eq!(
                one::<String>("SELECT current_schemas(false)::text"),
                "{public}"
            );
            assert_eq!(
                one::<String>("SELECT current_setting('enable_seqscan')"),
                "on"
            );
        });
    }

    #[pg_test]
    fn our_planner_settings_do_not_leak_into_the_session() {
        exec("SET LOCAL enable_seqscan = on");
        exec("SET LOCAL plan_cache_mode = force_custom_plan");
        enqueue("q", "");
        claim_one("q");
        assert_eq!(
            one::<String>("SELECT current_setting('enable_seqscan')"),
            "on"
        );
        assert_eq!(
            one::<String>("SELECT current_setting('plan_cache_mode')"),
            "force_custom_plan"
        );
    }

    // ------------------------------------------------------------------
    // 6. Inputs are bounded before work that grows with them.
    // ------------------------------------------------------------------

    #[pg_test]
    fn oversized_inputs_are_refused_with_54000() {
        let id = enqueue("big", "");
        for (call, message) in [
            (
                "SELECT count(*) FROM aedb_queue.queue_enqueue_batch('big', array_fill('{}'::jsonb, ARRAY[10001]))".to_string(),
                "argument \"payloads\" has 10001 elements, more than 10000",
            ),
            (
                "SELECT count(*) FROM aedb_queue.queue_complete_batch('big',
                     array_fill(1::bigint, ARRAY[10001]), array_fill(1::bigint, ARRAY[10001]))".to_string(),
                "argument \"task_ids\" has 10001 elements, more than 10000",
            ),
            (
                format!("SELECT aedb_queue.queue_fail('big', {id}, 1, repeat('x', 65537))"),
                "argument \"error\" is 65537 bytes, more than 65536",
            ),
        ] {
            expect_error(&call, "54000", message);
        }
        let (state, message) = error_of(&format!(
            "SELECT aedb_queue.queue_complete('big', {id}, 1, follow_ups =>
                 jsonb_build_array(jsonb_build_object('queue', 'big', 'payload', repeat('x', 17 * 1024 * 1024))))"
        ))
        .expect("17 MiB of follow-ups refused");
        assert_eq!(state, "54000");
        assert!(
            message.starts_with("argument \"follow_ups\" is ")
                && message.ends_with(" bytes, more than 16777216"),
            "{message}"
        );
        assert_eq!(count("aedb_queue.task WHERE queue = 'big'"), 1);
    }

    // ------------------------------------------------------------------
    // 7. The reaper: isolated per queue, fair, and only where work is.
    // ------------------------------------------------------------------

    fn timers(queue: &str, n: usize) -> Vec<i64> {
        let ids: Vec<i64> = (0..n)
            .map(|_| enqueue(queue, ", delay => '1 hour'"))
            .collect();
        exec(&format!(
            "UPDATE aedb_queue.task SET not_before = statement_timestamp() - interval '1 second'
              WHERE queue = '{queue}' AND state = 'scheduled'"
        ));
        make_due(ids[0]);
        ids
    }

    #[pg_test]
    fn one_queues_error_does_not_stop_the_others() {
        let bad = timers("bad", 1)[0];
        let good = timers("good", 1)[0];
        // The bad queue's completed-task expiry fails (think: corrupt data).
        exec("SELECT * FROM aedb_queue.queue_configure('bad', keep_completed => '1 second')");
        exec(
            "INSERT INTO aedb_queue.completed_task (task_id, queue, priority, attempts, max_attempts,
                 fencing_token, created_at, completed_at)
             VALUES (999999, 'bad', 0, 1, 1, 1, now() - interval '1 day', now() - interval '1 day')",
        );
        exec(
            "CREATE FUNCTION public.broken() RETURNS trigger LANGUAGE plpgsql
             AS $$ BEGIN RAISE EXCEPTION 'broken row in %', OLD.queue; END $$",
        );
        exec(
            "CREATE TRIGGER broken BEFORE DELETE ON aedb_queue.completed_task
             FOR EACH ROW EXECUTE FUNCTION public.broken()",
        );
        assert_eq!(
            one::<i64>("SELECT promoted FROM aedb_queue.queue_reap()"),
            1
        );
        assert_eq!(state_of("good", good).as_deref(), Some("ready"));
        assert_eq!(
            state_of("bad", bad).as_deref(),
            Some("scheduled"),
            "its part rolled back"
        );
    }

    #[pg_test]
    fn every_queue_with_due_work_gets_a_part_of_the_budget() {
        timers("a.many", 1500);
        let lone = timers("z.one", 1)[0];
        let promoted: i64 = one("SELECT promoted FROM aedb_queue.queue_reap(max => 1000)");
        assert!(promoted <= 1000, "{promoted}");
        assert_eq!(
            state_of("z.one", lone).as_deref(),
            Some("ready"),
            "the lone timer was not starved"
        );
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'a.many' AND state = 'ready'"),
            999
        );
    }

    #[pg_test]
    fn the_reaper_reads_only_queues_with_work() {
        exec("INSERT INTO aedb_queue.queue (name) SELECT 'idle.' || g FROM generate_series(1, 20000) g");
        exec("ANALYZE aedb_queue.queue");
        let plan = format!(
            "{:?}",
            crate::store::explain(&crate::store::QUEUES_WITH_WORK).unwrap()
        );
        assert!(!plan.contains("Seq Scan"), "{plan}");
        assert!(plan.contains("queue_keeps_keys_idx"), "{plan}");
        timers("busy", 1);
        assert_eq!(
            one::<i64>("SELECT promoted FROM aedb_queue.queue_reap()"),
            1
        );
    }

    // ------------------------------------------------------------------
    // 8. One rule for durations.
    // ------------------------------------------------------------------

    #[pg_test]
    fn durations_are_their_length_with_a_30_day_month() {
        let kept: String = one(
            "SELECT keep_completed::text FROM aedb_queue.queue_configure('d',
                 keep_completed => '7000 years -2519999 days')",
        );
        assert_eq!(kept, "24:00:00", "checked and stored as the same one day");
        let accepted: String = one(
            "SELECT keep_completed::text FROM aedb_queue.queue_configure('d', keep_completed => '101 years')",
        );
        assert_eq!(accepted, "872640:00:00");
        assert_eq!(
            one::<i64>("SELECT count(*) FROM aedb_queue.queue_reap()"),
            1,
            "reap still runs"
        );
        for (arg, value) in [
            // A year is 360 days by this rule, so 101 years pass the cap and 102 do not.
            ("keep_completed", "'102 years'"),
            ("default_lease", "'1200 months 501 days'"),
            ("keep_idempotency_keys", "'36501 days'"),
        ] {
            let call = format!("SELECT * FROM aedb_queue.queue_configure('d', {arg} => {value})");
            assert_eq!(sqlstate_of(&call), Some("22023".into()), "{call}");
        }
        enqueue("d", "");
        let leased: i64 =
            one("SELECT task_id FROM aedb_queue.queue_claim('d', 'w', lease => '1 month')");
        let deadline_ok: bool = one(&format!(
            "SELECT lease_deadline - updated_at = interval '720 hours'
               FROM aedb_queue.task WHERE task_id = {leased}"
        ));
        assert!(deadline_ok, "a month of lease is 30 days, as checked");
        for call in [
            "SELECT * FROM aedb_queue.queue_claim('d', 'w', lease => '1200 months 501 days')",
            "SELECT * FROM aedb_queue.queue_enqueue('d', delay => '101 years 141 days')",
        ] {
            assert_eq!(sqlstate_of(call), Some("22023".into()), "{call}");
        }
    }

    // ------------------------------------------------------------------
    // 9. A rights check costs what the caller's own roles hold.
    // ------------------------------------------------------------------

    /// 50,000 grants of other roles: the caller's rights are read through
    /// the primary keys, bounded by the roles it belongs to, never by
    /// scanning everyone's grants.
    #[pg_test]
    fn a_rights_check_reads_only_the_callers_own_rows() {
        role("crowd", &["aedb_queue_worker"]);
        exec("SELECT aedb_queue.queue_confine('crowd')");
        exec(
            "INSERT INTO aedb_queue.queue_grant (role, pattern, privilege)
             SELECT 'crowd'::regrole, 'crowd.' || g, 'worker' FROM generate_series(1, 50000) g",
        );
        exec("ANALYZE aedb_queue.queue_grant");
        for (name, stmt, index) in [
            ("CONFINED", &crate::store::CONFINED, "confined_role_pkey"),
            ("GRANTS", &crate::store::GRANTS, "queue_grant_pkey"),
        ] {
            let plan = format!("{:?}", crate::store::explain(stmt).unwrap());
            assert!(!plan.contains("Seq Scan"), "{name}: {plan}");
            assert!(plan.contains(index), "{name} does not read {index}: {plan}");
        }
        tenants();
        enqueue("a.jobs", "");
        as_login("tenant_worker", None, || assert!(claim_one("a.jobs").0 > 0));
    }

    // ------------------------------------------------------------------
    // A key that expires between the reserve and the lookup.
    // ------------------------------------------------------------------

    /// The reserve finds the key taken; before the lookup, the key expires
    /// (here a statement trigger deletes it once, as queue_reap would). The
    /// enqueue reserves again and creates the task, instead of failing.
    #[pg_test]
    fn a_key_expired_between_reserve_and_lookup_is_reserved_again() {
        let first = enqueue("exp", ", idempotency_key => 'k'");
        let (_, token) = claim_one("exp");
        crate::tests::tests::complete("exp", first, token, "");
        exec("CREATE TEMP TABLE expire_once (armed bool)");
        exec("INSERT INTO pg_temp.expire_once VALUES (true)");
        exec(
            "CREATE FUNCTION public.expire_key_once() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF EXISTS (SELECT 1 FROM pg_temp.expire_once WHERE armed) THEN
                     UPDATE pg_temp.expire_once SET armed = false;
                     DELETE FROM aedb_queue.idempotency_key WHERE queue = 'exp' AND key = 'k';
                 END IF;
                 RETURN NULL;
             END $$",
        );
        exec(
            "CREATE TRIGGER expire_once AFTER INSERT ON aedb_queue.idempotency_key
             FOR EACH STATEMENT EXECUTE FUNCTION public.expire_key_once()",
        );
        let (id, deduplicated): (Option<i64>, Option<bool>) =
            Spi::get_two("SELECT * FROM aedb_queue.queue_enqueue('exp', idempotency_key => 'k')")
                .unwrap();
        assert_eq!(deduplicated, Some(false), "a new task under the freed key");
        assert_ne!(id, Some(first));
        assert_eq!(state_of("exp", id.unwrap()).as_deref(), Some("ready"));
        assert!(
            one::<bool>("SELECT NOT armed FROM pg_temp.expire_once"),
            "the key did expire once"
        );
    }

    // ------------------------------------------------------------------
    // 10. A batch settles each task at most once.
    // ------------------------------------------------------------------

    #[pg_test]
    fn a_batch_naming_a_task_twice_settles_it_once() {
        let id = enqueue("dup", "");
        let (_, token) = claim_one("dup");
        let outcomes: Vec<String> = Spi::connect(|c| {
            c.select(
                &format!(
                    "SELECT outcome::text FROM aedb_queue.queue_complete_batch('dup',
                         ARRAY[{id}, {id}, {id}], ARRAY[{stale}, {token}, {token}])",
                    stale = token - 1
                ),
                None,
                &[],
            )
            .unwrap()
            .map(|r| r.get::<String>(1).unwrap().unwrap())
            .collect()
        });
        assert_eq!(outcomes, ["lease_lost", "applied", "lease_lost"]);
        let id = enqueue("dup", "");
        let (_, token) = claim_one("dup");
        expect_error(
            &format!(
                "SELECT * FROM aedb_queue.queue_complete_batch('dup', ARRAY[{id}, {id}], ARRAY[{token}, {token}], strict => true)"
            ),
            "40002",
            &format!("lease lost: task {id} is no longer in flight under fencing token {token}"),
        );
    }
}
