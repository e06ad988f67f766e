//! `#[pg_test]`s of periodic schedules: what a fire makes, the policies,
//! what a rejected call leaves, every argument error naming its argument,
//! and the plans a reaper runs on every pass. Conventions as in `tests.rs`;
//! pg_regress `schedules.sql` shows the same as a readable example.

#[pgrx::pg_schema]
pub(crate) mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    fn upsert(queue: &str, name: &str, cron: &str, extra: &str) {
        exec(&format!(
            "SELECT aedb_queue.queue_schedule_upsert('{queue}', '{name}', '{cron}'{extra})"
        ));
    }

    /// Every New Year's midnight: a fire time the tests can count on
    /// whenever they run (an hourly one could pass an hour mid-test).
    pub(crate) const YEARLY: &str = "0 0 1 1 *";

    /// Moves a YEARLY schedule back as if nothing had fired it for `years`
    /// years (the test's stand-in for waiting): `years` fire times owed.
    pub(crate) fn unfired_for(queue: &str, name: &str, years: i32) {
        exec(&format!(
            "UPDATE aedb_queue.schedule
             SET fired_up_to = date_trunc('year', clock_timestamp(), 'UTC') - interval '{years} years' + interval '1 second',
                 next_fire_at = date_trunc('year', clock_timestamp(), 'UTC') - interval '{} years'
             WHERE queue = '{queue}' AND name = '{name}'",
            years - 1
        ));
    }

    fn fire(queue: &str) -> i64 {
        one(&format!(
            "SELECT fired FROM aedb_queue.queue_reap('{queue}')"
        ))
    }

    #[pg_test]
    fn a_fire_is_an_enqueue_with_the_schedules_options() {
        upsert(
            "s",
            "yearly",
            YEARLY,
            ", payload => '{\"k\": 1}', priority => 7, max_attempts => 2, backoff_base => '3 seconds'",
        );
        unfired_for("s", "yearly", 1);
        assert_eq!(fire("s"), 1);
        let id: i64 = one("SELECT task_id FROM aedb_queue.task WHERE queue = 's'");
        assert_eq!(state_of("s", id).as_deref(), Some("ready"));
        assert_eq!(field::<i64>(id, "priority"), Some(7));
        assert_eq!(field::<i32>(id, "max_attempts"), Some(2));
        assert_eq!(
            text_field(id, "backoff_base::text").as_deref(),
            Some("00:00:03")
        );
        assert_eq!(
            text_field(id, "payload::text").as_deref(),
            Some("{\"k\": 1}")
        );
        // No key of the fire time unless asked for.
        assert_eq!(text_field(id, "idempotency_key"), None);
        assert_task_invariants("a fire");
    }

    #[pg_test]
    fn every_due_schedule_of_every_queue_fires_once_per_pass() {
        for queue in ["every.a", "every.b", "every.c"] {
            upsert(
                queue,
                "h",
                YEARLY,
                ", missed => 'catch_up', catch_up_limit => 10",
            );
            unfired_for(queue, "h", 3);
        }
        assert_eq!(one::<i64>("SELECT fired FROM aedb_queue.queue_reap()"), 9);
        assert_eq!(one::<i64>("SELECT fired FROM aedb_queue.queue_reap()"), 0);
        assert_eq!(count("aedb_queue.task WHERE queue LIKE 'every.%'"), 9);
        // One reap's budget bounds the schedules it fires.
        for queue in ["every.a", "every.b", "every.c"] {
            unfired_for(queue, "h", 1);
        }
        assert_eq!(
            one::<i64>("SELECT fired FROM aedb_queue.queue_reap(max => 2)"),
            2
        );
        assert_eq!(
            one::<i64>("SELECT fired FROM aedb_queue.queue_reap(max => 2)"),
            1
        );
    }

    /// A pass fires its schedules together; one that cannot enqueue is
    /// retried alone, gives its fire time up with the reason, and the
    /// others of the pass still fire.
    #[pg_test]
    fn one_schedule_that_cannot_enqueue_stops_no_other_of_its_pass() {
        upsert("pass.a", "fine", YEARLY, ", payload => '{\"k\": 1}'");
        upsert(
            "pass.b",
            "big",
            YEARLY,
            &format!(", payload => {}", big_json(200)),
        );
        upsert("pass.c", "fine", YEARLY, ", fire_time_key => 'at'");
        exec("SELECT aedb_queue.queue_configure('pass.b', max_payload_bytes => 100)");
        for (queue, name) in [("pass.a", "fine"), ("pass.b", "big"), ("pass.c", "fine")] {
            unfired_for(queue, name, 1);
        }
        assert_eq!(one::<i64>("SELECT fired FROM aedb_queue.queue_reap()"), 2);
        assert_eq!(
            count("aedb_queue.task WHERE queue IN ('pass.a', 'pass.c')"),
            2
        );
        assert_eq!(count("aedb_queue.task WHERE queue = 'pass.b'"), 0);
        let error: String =
            one("SELECT last_error FROM aedb_queue.schedule WHERE queue = 'pass.b'");
        assert!(error.contains("over the limit of 100 bytes"), "{error}");
        // Given up, not owed again; the others are clean. (Queue names of
        // their own: tests run at once, and registering a queue another
        // open test registers waits for it.)
        assert!(one::<bool>(
            "SELECT next_fire_at > now() FROM aedb_queue.schedule WHERE queue = 'pass.b'"
        ));
        assert_eq!(count("aedb_queue.schedule WHERE last_error IS NOT NULL"), 1);
        assert_eq!(one::<i64>("SELECT fired FROM aedb_queue.queue_reap()"), 0);
    }

    /// Each bad argument of an upsert is refused with 22023. That the
    /// refused upsert leaves the schedule as it was is seen from another
    /// session: itests/tests/rejections.rs.
    #[pg_test]
    fn a_bad_upsert_argument_is_refused() {
        upsert("s", "n", YEARLY, ", payload => '{\"v\": 1}'");
        for bad in [
            "'61 * * * *'",
            "'* * * * *', time_zone => 'Nowhere/Land'",
            "'* * * * *', missed => 'later'",
            "'* * * * *', max_attempts => 0",
        ] {
            let call = format!(
                "SELECT aedb_queue.queue_schedule_upsert('s', 'n', {bad}, payload => '{{\"v\": 2}}')"
            );
            let refused = error_of(&call).map(|(state, _)| state);
            assert_eq!(refused.as_deref(), Some("22023"), "{bad}");
        }
    }

    #[pg_test]
    fn an_unchanged_pattern_keeps_its_place_and_a_paused_schedule_stays_paused() {
        upsert("s", "n", YEARLY, "");
        unfired_for("s", "n", 2);
        exec("SELECT aedb_queue.queue_schedule_pause('s', 'n')");
        upsert("s", "n", YEARLY, ", payload => '{\"new\": true}'");
        assert!(one::<bool>("SELECT paused FROM aedb_queue.schedule"));
        assert!(one::<bool>(
            "SELECT next_fire_at < now() FROM aedb_queue.schedule"
        ));
        assert_eq!(fire("s"), 0, "paused");
    }

    #[pg_test]
    fn pause_resume_and_delete_of_a_missing_schedule_say_false() {
        for call in ["pause", "resume", "delete"] {
            assert!(!one::<bool>(&format!(
                "SELECT aedb_queue.queue_schedule_{call}('s', 'none')"
            )));
        }
    }

    #[pg_test]
    fn upcoming_lists_five_fire_times_from_the_next() {
        upsert("s", "n", "0 12 * * *", ", time_zone => 'America/New_York'");
        assert_eq!(
            one::<i32>("SELECT cardinality(upcoming) FROM aedb_queue.queue_schedule_list('s')"),
            5
        );
        assert!(one::<bool>(
            "SELECT upcoming[1] = next_fire_at AND upcoming[2] - upcoming[1] BETWEEN interval '23 hours' AND interval '25 hours'
             FROM aedb_queue.queue_schedule_list('s')"
        ));
    }

    #[pg_test]
    fn every_argument_error_names_its_argument() {
        let upsert_with = |args: &str| format!("SELECT aedb_queue.queue_schedule_upsert({args})");
        let cases = [
            (
                upsert_with("NULL, 'n', '* * * * *'"),
                "22004",
                "argument \"queue\" must not be NULL",
            ),
            (
                upsert_with("'s', NULL, '* * * * *'"),
                "22004",
                "argument \"name\" must not be NULL",
            ),
            (
                upsert_with("'s', '', '* * * * *'"),
                "22023",
                "invalid argument \"name\": must not be empty",
            ),
            (
                upsert_with("'s', 'n', NULL"),
                "22004",
                "argument \"cron\" must not be NULL",
            ),
            (
                upsert_with("'s', 'n', '* * * * *', time_zone => NULL"),
                "22004",
                "argument \"time_zone\" must not be NULL",
            ),
            (
                upsert_with("'s', 'n', '* * * * *', missed => NULL"),
                "22004",
                "argument \"missed\" must not be NULL",
            ),
            (
                upsert_with("'s', 'n', '* * * * *', priority => NULL"),
                "22004",
                "argument \"priority\" must not be NULL",
            ),
            (
                upsert_with("'s', 'n', '* * * * *', missed => 'catch_up', catch_up_limit => 1001"),
                "22023",
                "invalid argument \"catch_up_limit\": must be between 1 and 1000",
            ),
            (
                upsert_with("'s', 'n', '* * * * *', catch_up_limit => 5"),
                "22023",
                "invalid argument \"catch_up_limit\": applies only to the policy catch_up",
            ),
            (
                upsert_with("'s', 'n', '* * * * *', max_attempts => 0"),
                "22023",
                "invalid argument \"max_attempts\": must be at least 1, got 0",
            ),
            (
                upsert_with("'s', 'n', '* * * * *', backoff_base => '-1 second'"),
                "22023",
                "invalid argument \"backoff_base\": must be a positive interval",
            ),
            (
                upsert_with("'s', 'n', '* * * * *', fire_time_key => ''"),
                "22023",
                "invalid argument \"fire_time_key\": must not be empty",
            ),
            (
                "SELECT aedb_queue.queue_schedule_pause('s', NULL)".into(),
                "22004",
                "argument \"name\" must not be NULL",
            ),
            (
                "SELECT aedb_queue.queue_schedule_resume(NULL, 'n')".into(),
                "22004",
                "argument \"queue\" must not be NULL",
            ),
            (
                "SELECT aedb_queue.queue_schedule_delete('s', '')".into(),
                "22023",
                "invalid argument \"name\": must not be empty",
            ),
            (
                "SELECT * FROM aedb_queue.queue_schedule_list('')".into(),
                "22023",
                "invalid argument \"queue\": must not be empty",
            ),
            (
                "SELECT * FROM aedb_queue.queue_cron_preview(NULL)".into(),
                "22004",
                "argument \"cron\" must not be NULL",
            ),
            (
                "SELECT * FROM aedb_queue.queue_cron_preview('* * * * *', after => NULL)".into(),
                "22004",
                "argument \"after\" must not be NULL",
            ),
            (
                "SELECT * FROM aedb_queue.queue_cron_preview('* * * * *', count => 1001)".into(),
                "22023",
                "invalid argument \"count\": must be between 1 and 1000, got 1001",
            ),
        ];
        for (query, sqlstate, message) in cases {
            expect_error(&query, sqlstate, message);
        }
        assert_eq!(count("aedb_queue.schedule"), 0);
    }

    #[pg_test]
    fn an_oversized_payload_is_refused_at_upsert() {
        set_payload_limit(100);
        expect_error(
            &format!(
                "SELECT aedb_queue.queue_schedule_upsert('s', 'n', '* * * * *', payload => {})",
                big_json(200)
            ),
            "54000",
            "argument \"payload\" is 213 bytes, over the limit of 100 bytes (aedb_queue.max_payload_bytes)",
        );
    }

    /// With many schedules, a reaper's pass must find the due ones through
    /// an index, whatever the table's statistics say.
    #[pg_test]
    fn the_reapers_schedule_statements_never_scan_the_table() {
        exec(
            "UPDATE pg_catalog.pg_class SET relpages = 0, reltuples = -1, relallvisible = 0
             WHERE oid = 'aedb_queue.schedule'::regclass",
        );
        for (name, stmt) in crate::store::SCHEDULE_STATEMENTS {
            assert_eq!(crate::store::seq_scans_of(stmt), 0, "{name}");
        }
    }
}
