//! `#[pg_test]`s of the pg_cron functions (`sql/cron.sql`) in a cluster
//! without pg_cron, which is what the pgrx test cluster is: the argument
//! checks, the cron expressions, the "pg_cron is not installed" error and
//! the functions' privileges. Scheduling against a running pg_cron is tested
//! in `itests/tests/cron.rs`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// Runs `call` in a PL/pgSQL block that catches its error (a
    /// subtransaction, so nothing of the failed call remains) and returns
    /// (SQLSTATE, message), or `None` when it succeeded.
    fn error_of(call: &str) -> Option<(String, String)> {
        Spi::run(&format!(
            "DO $cron_test$
             BEGIN
                 PERFORM set_config('aedb_test.cron_error', '', true);
                 PERFORM {call};
             EXCEPTION WHEN others THEN
                 PERFORM set_config('aedb_test.cron_error', SQLSTATE || ' ' || SQLERRM, true);
             END
             $cron_test$"
        ))
        .unwrap_or_else(|e| panic!("{call}: {e}"));
        let error = Spi::get_one::<String>("SELECT current_setting('aedb_test.cron_error')")
            .expect("read aedb_test.cron_error")
            .unwrap_or_default();
        error
            .split_once(' ')
            .map(|(state, message)| (state.to_string(), message.to_string()))
    }

    fn cron_schedule(every: &str) -> String {
        let sql = format!("SELECT aedb_queue.reaper_cron_schedule({every})");
        Spi::get_one::<String>(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .unwrap_or_else(|| panic!("{sql}: NULL"))
    }

    #[pg_test]
    fn every_maps_to_a_cron_expression() {
        for (every, expected) in [
            ("'1 minute'", "*/1 * * * *"),
            ("'7 minutes'", "*/7 * * * *"),
            ("'59 minutes'", "*/59 * * * *"),
            ("'60 minutes'", "0 */1 * * *"),
            ("'1 hour'", "0 */1 * * *"),
            ("'2 hours'", "0 */2 * * *"),
            ("'23 hours'", "0 */23 * * *"),
            ("'1 day'", "0 0 * * *"),
            ("'24 hours'", "0 0 * * *"),
            ("'5 minutes 0 seconds'", "*/5 * * * *"),
        ] {
            assert_eq!(
                cron_schedule(&format!("{every}::interval")),
                expected,
                "{every}"
            );
        }
    }

    /// Checked before pg_cron's presence, so these are 22023 here too.
    #[pg_test]
    fn an_every_cron_cannot_express_is_rejected_naming_it() {
        for every in [
            "NULL",
            "'0'",
            "'30 seconds'",
            "'90 seconds'",
            "'1 minute 0.5 seconds'",
            "'-1 minute'",
            "'-5 minutes'",
            "'61 minutes'",
            "'25 hours'",
            "'2 days'",
            "'1 week'",
            "'1 month'",
        ] {
            let call = format!("aedb_queue.schedule_reaper({every}::interval)");
            let (state, message) = error_of(&call).unwrap_or_else(|| panic!("{call} was accepted"));
            assert_eq!(state, "22023", "{call}: {message}");
            assert!(
                message.starts_with(
                    "invalid argument \"every\": must be 1 to 59 whole minutes, \
                                     1 to 23 whole hours, or 1 day; got "
                ),
                "{call}: {message}"
            );
        }
        let (_, message) = error_of("aedb_queue.schedule_reaper('90 seconds')").unwrap();
        assert!(message.ends_with("got 00:01:30"), "{message}");
        let (_, message) = error_of("aedb_queue.schedule_reaper(NULL)").unwrap();
        assert!(message.ends_with("got NULL"), "{message}");
    }

    #[pg_test]
    fn without_pg_cron_scheduling_says_what_to_install() {
        for call in [
            "aedb_queue.schedule_reaper()",
            "aedb_queue.schedule_reaper('5 minutes')",
            "aedb_queue.unschedule_reaper()",
        ] {
            let (state, message) =
                error_of(call).unwrap_or_else(|| panic!("{call} worked without pg_cron"));
            assert_eq!(state, "55000", "{call}: {message}");
            assert!(
                message.starts_with("pg_cron is not installed in database \"")
                    && message
                        .ends_with("\": install pg_cron and add it to shared_preload_libraries"),
                "{call}: {message}"
            );
        }
    }

    /// The job runs as the extension's owner: the functions that change it
    /// run as that owner with a fixed search_path, and PUBLIC cannot call them.
    #[pg_test]
    fn scheduling_runs_as_the_owner_and_is_not_granted_to_public() {
        for f in [
            "aedb_queue.schedule_reaper(interval)",
            "aedb_queue.unschedule_reaper()",
        ] {
            let sql = format!(
                "SELECT prosecdef
                        AND proconfig = ARRAY['search_path=aedb_queue, pg_catalog, pg_temp']
                        AND proacl IS NOT NULL
                        AND NOT EXISTS (SELECT 1 FROM aclexplode(proacl) a WHERE a.grantee = 0)
                   FROM pg_proc WHERE oid = '{f}'::regprocedure"
            );
            assert_eq!(Spi::get_one::<bool>(&sql), Ok(Some(true)), "{f}");
        }
    }
}
