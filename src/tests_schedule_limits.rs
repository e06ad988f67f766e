//! `#[pg_test]`s of what bounds schedules: the length
//! of a pattern, the schedules of one queue, each queue's share of a
//! pass, the payload bytes of one pass, and a listing that parses only the
//! patterns its caller may read. Conventions as in `tests.rs`.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    use crate::tests_schedule::tests::{unfired_for, YEARLY};

    fn upsert(queue: &str, name: &str, extra: &str) {
        exec(&format!(
            "SELECT aedb_queue.queue_schedule_upsert('{queue}', '{name}', '{YEARLY}'{extra})"
        ));
    }

    #[pg_test]
    fn a_pattern_longer_than_the_setting_is_refused_with_54000() {
        // 256 bytes by default: a pattern of ordinary fields fits.
        let long = format!("0 0 1 1 {}", vec!["1"; 200].join(","));
        for call in [
            format!("SELECT aedb_queue.queue_schedule_upsert('lim', 's', '{long}')"),
            format!("SELECT * FROM aedb_queue.queue_cron_preview('{long}')"),
        ] {
            expect_error(
                &call,
                "54000",
                &format!(
                    "argument \"cron\" is {} bytes, longer than 256 (aedb_queue.max_cron_pattern_bytes)",
                    long.len()
                ),
            );
        }
        assert_eq!(count("aedb_queue.schedule WHERE queue = 'lim'"), 0);
        exec("SET LOCAL aedb_queue.max_cron_pattern_bytes = 1024");
        exec(&format!(
            "SELECT aedb_queue.queue_schedule_upsert('lim', 's', '{long}')"
        ));
        assert_eq!(count("aedb_queue.schedule WHERE queue = 'lim'"), 1);
    }

    #[pg_test]
    fn a_queue_holds_at_most_max_schedules_per_queue() {
        exec("SET LOCAL aedb_queue.max_schedules_per_queue = 3");
        for name in ["a", "b", "c"] {
            upsert("full", name, "");
        }
        expect_error(
            &format!("SELECT aedb_queue.queue_schedule_upsert('full', 'd', '{YEARLY}')"),
            "54000",
            "argument \"name\" would be schedule 4 of its queue, more than 3 (aedb_queue.max_schedules_per_queue)",
        );
        // Replacing one it has is no new schedule; another queue has room.
        upsert("full", "b", ", priority => 5");
        upsert("roomy", "d", "");
        assert_eq!(count("aedb_queue.schedule WHERE queue = 'full'"), 3);
        assert_eq!(
            one::<i64>(
                "SELECT priority FROM aedb_queue.schedule WHERE queue = 'full' AND name = 'b'"
            ),
            5
        );
    }

    /// One queue's many due schedules, all due earlier than another
    /// queue's one, do not take a pass's whole budget: each queue with due
    /// schedules gets its share (once, earliest first).
    #[pg_test]
    fn each_queue_gets_a_share_of_a_pass() {
        for i in 0..20 {
            let name = format!("s{i}");
            upsert("hog", &name, "");
            unfired_for("hog", &name, 5);
        }
        upsert("small", "only", "");
        unfired_for("small", "only", 1);
        let fired: i64 = one("SELECT fired FROM aedb_queue.queue_reap(max => 10)");
        assert!(fired <= 11, "fired {fired}");
        assert_eq!(count("aedb_queue.task WHERE queue = 'small'"), 1);
        assert_eq!(count("aedb_queue.task WHERE queue = 'hog'"), fired - 1);
    }

    /// A catch-up of many fire times with large payloads is spread over
    /// passes (64 MiB of payloads each), every fire time fired once.
    #[pg_test]
    fn one_pass_fires_a_bounded_amount_of_payload() {
        upsert(
            "heavy",
            "big",
            ", payload => jsonb_build_object('pad', repeat('x', 200000)), missed => 'catch_up', \
             catch_up_limit => 1000, fire_time_key => 'at'",
        );
        // Owes 1,000 yearly fire times: 200 MB of payloads in all.
        unfired_for("heavy", "big", 1000);
        let first: i64 = one("SELECT fired FROM aedb_queue.queue_reap()");
        assert!(
            (1..=400).contains(&first),
            "the first pass fired {first} of 1,000"
        );
        let mut passes = 1;
        let mut total = first;
        while total < 1000 && passes < 20 {
            total += one::<i64>("SELECT fired FROM aedb_queue.queue_reap()");
            passes += 1;
        }
        assert_eq!(total, 1000, "after {passes} passes");
        assert_eq!(one::<i64>("SELECT fired FROM aedb_queue.queue_reap()"), 0);
        assert_eq!(
            one::<i64>(
                "SELECT count(DISTINCT payload->>'at') FROM aedb_queue.task WHERE queue = 'heavy'"
            ),
            1000
        );
    }

    /// A listing of every schedule the caller may read parses only those
    /// schedules' patterns: another tenant's stored pattern, however bad,
    /// neither costs nor breaks it (each row was once parsed).
    #[pg_test]
    fn a_listing_parses_only_what_its_caller_may_read() {
        exec("CREATE ROLE lister LOGIN IN ROLE aedb_queue_worker");
        exec("SELECT aedb_queue.queue_grant('mine.*', 'lister', 'worker')");
        upsert("mine.q", "s", "");
        upsert("theirs.q", "s", "");
        // A pattern no parser accepts, as a restore or a later parser
        // could leave it.
        exec("UPDATE aedb_queue.schedule SET cron = 'not a pattern' WHERE queue = 'theirs.q'");
        exec("SET LOCAL SESSION AUTHORIZATION lister");
        let listed: Vec<i64> = ints("SELECT count(*) FROM aedb_queue.queue_schedule_list()");
        exec("RESET SESSION AUTHORIZATION");
        assert_eq!(listed, vec![1]);
    }
}
