//! `#[pg_test]`s of the pg_cron functions (`src/api/cron.rs`) in a cluster
//! without pg_cron, which is what the pgrx test cluster is: the argument
//! checks, the "pg_cron is not installed" error, who may call them. The cron
//! expressions are unit-tested in `core/src/reaper.rs`; scheduling against a
//! running pg_cron is tested in `itests/tests/cron.rs`.

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

    /// Every interval a cron field can express passes the argument check,
    /// so the call gets as far as looking for pg_cron (55000 here).
    #[pg_test]
    fn every_a_cron_field_can_express_is_accepted() {
        for every in [
            "'1 minute'",
            "'7 minutes'",
            "'59 minutes'",
            "'60 minutes'",
            "'1 hour'",
            "'23 hours'",
            "'1 day'",
            "'24 hours'",
            "'5 minutes 0 seconds'",
        ] {
            let call = format!("aedb_queue.schedule_reaper({every}::interval)");
            let (state, message) =
                error_of(&call).unwrap_or_else(|| panic!("{call} worked without pg_cron"));
            assert_eq!(state, "55000", "{call}: {message}");
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

    /// The job runs as the extension's owner and spans every queue: PUBLIC
    /// cannot call the functions, and a confined admin is refused before
    /// pg_cron is even looked for.
    #[pg_test]
    fn scheduling_is_for_unconfined_admins_only() {
        for f in [
            "aedb_queue.schedule_reaper(interval)",
            "aedb_queue.unschedule_reaper()",
        ] {
            let sql = format!(
                "SELECT NOT prosecdef AND proacl IS NOT NULL
                        AND NOT EXISTS (SELECT 1 FROM aclexplode(proacl) a WHERE a.grantee = 0)
                   FROM pg_proc WHERE oid = '{f}'::regprocedure"
            );
            assert_eq!(Spi::get_one::<bool>(&sql), Ok(Some(true)), "{f}");
        }
        Spi::run("CREATE ROLE cron_tenant NOLOGIN; GRANT aedb_queue_admin TO cron_tenant").unwrap();
        Spi::run("SELECT aedb_queue.queue_grant('t.*', 'cron_tenant', 'admin')").unwrap();
        Spi::run("SET LOCAL ROLE cron_tenant").unwrap();
        for call in [
            "aedb_queue.schedule_reaper()",
            "aedb_queue.unschedule_reaper()",
        ] {
            let (state, message) = error_of(call).unwrap_or_else(|| panic!("{call} was allowed"));
            assert_eq!(state, "42501", "{call}: {message}");
            assert!(
                message.contains("only an unconfined aedb_queue admin"),
                "{message}"
            );
        }
        Spi::run("RESET ROLE").unwrap();
    }
}
