//! `#[pg_test]`s of error text and panics: an argument of any
//! size is echoed in a few dozen bytes (`aedb_queue_core::error::quoted`),
//! a caller without the right learns nothing of its arguments, and inputs
//! that made a Rust panic reach the client (XX000) get their own SQLSTATE.
//! Conventions as in `tests.rs`.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    /// Longest message a rejected call may report.
    const SHORT: usize = 300;

    /// 10 MB of one character: plain, and the newlines that made one
    /// report per line in the server log.
    const HUGE: [&str; 2] = ["repeat('x', 10000000)", "repeat(E'\\n', 10000000)"];

    /// Each call with `{v}` where the huge text goes, and its SQLSTATE.
    /// `{id}` and `{token}` are a claimed task of queue `q`.
    const CALLS: &[(&str, &str)] = &[
        ("aedb_queue.queue_enqueue({v})", "22023"),
        (
            "aedb_queue.queue_enqueue('q', on_parent_failure => {v})",
            "22023",
        ),
        (
            "aedb_queue.queue_enqueue('q', idempotency_key => {v})",
            "22023",
        ),
        (
            "aedb_queue.queue_enqueue('q', concurrency_key => {v})",
            "22023",
        ),
        (
            "aedb_queue.queue_enqueue('q', ordering_key => {v})",
            "22023",
        ),
        (
            "aedb_queue.queue_enqueue('q', fairness_key => {v})",
            "22023",
        ),
        (
            "aedb_queue.queue_enqueue_batch('q', ARRAY['1'::jsonb], on_parent_failure => {v})",
            "22023",
        ),
        ("aedb_queue.queue_list('q', state => {v})", "22023"),
        ("aedb_queue.queue_tasks('q', state => {v})", "22023"),
        ("aedb_queue.queue_tasks('q', payload_has_key => {v})", "54000"),
        ("aedb_queue.queue_purge('q', {v})", "22023"),
        (
            "aedb_queue.queue_configure('q', ordering_on_dead => {v})",
            "22023",
        ),
        ("aedb_queue.queue_configure_key('q', {v}, 2)", "22023"),
        ("aedb_queue.queue_configure_fairness('q', {v}, 2)", "22023"),
        ("aedb_queue.queue_grant('q', 'someone', {v})", "22023"),
        ("aedb_queue.queue_grant({v}, 'someone', 'worker')", "22023"),
        ("aedb_queue.queue_grant('q', {v}, 'worker')", "42704"),
        ("aedb_queue.queue_revoke('q', {v}, 'worker')", "42704"),
        ("aedb_queue.queue_confine({v})", "42704"),
        ("aedb_queue.queue_unconfine({v})", "42704"),
        // Over aedb_queue.max_cron_pattern_bytes.
        ("aedb_queue.queue_schedule_upsert('q', 's', {v})", "54000"),
        (
            "aedb_queue.queue_schedule_upsert('q', {v}, '* * * * *')",
            "22023",
        ),
        (
            "aedb_queue.queue_schedule_upsert('q', 's', '* * * * *', time_zone => {v})",
            "22023",
        ),
        (
            "aedb_queue.queue_schedule_upsert('q', 's', '* * * * *', missed => {v})",
            "22023",
        ),
        ("aedb_queue.queue_cron_preview({v})", "54000"),
        ("aedb_queue.queue_cron_preview('* * * * *', {v})", "22023"),
        ("aedb_queue.queue_fail('q', {id}, {token}, {v})", "54000"),
        (
            "aedb_queue.queue_complete('q', {id}, {token},
                 follow_ups => jsonb_build_array(jsonb_build_object({v}, 1)))",
            "22023",
        ),
        (
            "aedb_queue.queue_complete('q', {id}, {token},
                 follow_ups => jsonb_build_array(jsonb_build_object('queue', 'q', 'delay', {v})))",
            "22023",
        ),
        (
            "aedb_queue.queue_complete('q', {id}, {token},
                 follow_ups => jsonb_build_array(jsonb_build_object('queue', 'q',
                     'wait_for', jsonb_build_array(1), 'on_parent_failure', {v})))",
            "22023",
        ),
        (
            "aedb_queue.queue_complete('q', {id}, {token},
                 follow_ups => jsonb_build_array(jsonb_build_object('queue', {v})))",
            "22023",
        ),
    ];

    /// Every call that echoed a text argument, with 10 MB of it: its own
    /// SQLSTATE, and a message of a few hundred bytes at most, on one line.
    #[pg_test]
    fn a_huge_argument_is_echoed_in_a_few_dozen_bytes() {
        exec("CREATE ROLE someone NOLOGIN");
        enqueue("q", "");
        let (id, token) = claim_one("q");
        for (call, sqlstate) in CALLS {
            for huge in HUGE {
                let query = format!(
                    "SELECT * FROM {}",
                    call.replace("{v}", huge)
                        .replace("{id}", &id.to_string())
                        .replace("{token}", &token.to_string())
                );
                let (state, message) =
                    error_of(&query).unwrap_or_else(|| panic!("{query} should fail"));
                let start: String = message.chars().take(200).collect();
                assert_eq!(&state, sqlstate, "{query}: {start}");
                assert!(
                    message.len() < SHORT,
                    "{query}: {} bytes: {start}",
                    message.len()
                );
                assert!(!message.contains('\n'), "{query}: {message}");
            }
        }
    }

    /// A caller without the right on the queue gets 42501, whatever else is
    /// wrong with its arguments: nothing of them is echoed to it.
    #[pg_test]
    fn rights_are_checked_before_an_argument_is_echoed() {
        exec("CREATE ROLE outsider LOGIN");
        exec("GRANT aedb_queue_admin TO outsider");
        exec("GRANT aedb_queue_producer TO outsider");
        exec("SELECT aedb_queue.queue_grant('a.*', 'outsider', 'admin')");
        exec("CREATE ROLE someone NOLOGIN");
        let calls = [
            "aedb_queue.queue_enqueue_batch('b', ARRAY['1'::jsonb], on_parent_failure => 'bogus')",
            "aedb_queue.queue_list('b', state => 'bogus')",
            "aedb_queue.queue_tasks('b', state => 'bogus', after_task_id => 1, before_task_id => 2)",
            "aedb_queue.queue_purge('b', 'bogus')",
            "aedb_queue.queue_configure('b', ordering_on_dead => 'bogus')",
            "aedb_queue.queue_grant('b', 'someone', 'bogus')",
            "aedb_queue.queue_grant('b', 'no_such_role', 'worker')",
            "aedb_queue.queue_confine('no_such_role')",
            "aedb_queue.queue_unconfine('no_such_role')",
            "aedb_queue.queue_schedule_upsert('b', 's', 'bogus')",
            "aedb_queue.queue_schedule_upsert('b', 's', '* * * * *', time_zone => 'bogus')",
            "aedb_queue.schedule_reaper('90 seconds')",
        ];
        exec("SET LOCAL SESSION AUTHORIZATION outsider");
        let refused: Vec<_> = calls
            .iter()
            .map(|call| (call, error_of(&format!("SELECT * FROM {call}"))))
            .collect();
        exec("RESET SESSION AUTHORIZATION");
        for (call, error) in refused {
            let (state, message) = error.unwrap_or_else(|| panic!("{call} should fail"));
            assert_eq!(state, "42501", "{call}: {message}");
            let echoed = ["bogus", "no_such_role", "00:01:30"]
                .iter()
                .any(|value| message.contains(value));
            assert!(!echoed, "{call}: {message}");
        }
    }

    /// A PostgreSQL error of any size, caught where one queue's reap or
    /// one schedule's fire fails (`in_subtransaction`), comes back bounded:
    /// it goes on into a WARNING, the reaper's LOG and `last_error`.
    #[pg_test]
    fn a_huge_caught_error_comes_back_bounded() {
        let caught = crate::subtransaction::in_subtransaction(|| {
            Spi::run("DO $$ BEGIN RAISE EXCEPTION '%', repeat(E'no\\n', 5000000); END $$")
                .map_err(crate::errors::internal)
        });
        let message = caught.expect_err("the block raises").message;
        assert!(
            message.starts_with("no\nno\n"),
            "{}",
            message.chars().take(100).collect::<String>()
        );
        assert!(message.len() <= 1100, "{} bytes", message.len());
    }

    /// `queue_cron_preview` searches fire times in the years 1 to 4999
    /// (croner's range); an `after` outside them is 22008 naming it, not
    /// an empty answer (or, for an instant chrono cannot hold, a panic).
    #[pg_test]
    fn a_preview_from_outside_the_searched_years_is_22008() {
        for after in [
            "infinity",
            "-infinity",
            "294000-01-01",
            "262143-12-31",
            "5000-01-01 00:00 UTC",
            "4713-01-01 BC",
            "0001-12-31 23:59:59.999999 UTC BC",
        ] {
            let query = format!(
                "SELECT * FROM aedb_queue.queue_cron_preview('* * * * *', 'UTC', '{after}')"
            );
            let (state, message) = error_of(&query).unwrap_or_else(|| panic!("{query} answered"));
            assert_eq!(state, "22008", "{query}: {message}");
            assert!(
                message.starts_with("argument \"after\" must be in the years 1 to 4999"),
                "{message}"
            );
        }
        assert_eq!(
            one::<i64>(
                "SELECT count(*) FROM aedb_queue.queue_cron_preview('* * * * *', 'UTC', '4999-12-31 23:58 UTC', 5)"
            ),
            2,
            "up to croner's last searched instant"
        );
        assert_eq!(
            one::<i64>(
                "SELECT count(*) FROM aedb_queue.queue_cron_preview('* * * * *', 'UTC', '0001-01-01 00:00 UTC', 5)"
            ),
            5
        );
    }
}
