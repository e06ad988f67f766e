//! `#[pg_test]`s of `queue_complete_and_claim` and `queue_fail_and_claim`:
//! each must behave as its settle call followed by `queue_claim`, in one
//! call. Same conventions as `tests.rs` (one transaction per test, frozen
//! statement clock). The concurrent drain with its exactly-once ledger is
//! `itests/tests/settle_and_claim.rs`; strict rollback seen from another
//! session is `tests/pg_regress/sql/settle_and_claim.sql`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::tests::{
        claim, claim_one, count, enqueue, error_of, exec, expire_lease, field, one, state_of,
        text_field,
    };

    /// One returned row: (settled, task_id, fencing_token, attempts).
    type Row = (String, Option<i64>, Option<i64>, Option<i32>);

    fn rows(call: &str) -> Vec<Row> {
        let sql = format!("SELECT settled::text, task_id, fencing_token, attempts FROM {call}");
        Spi::connect_mut(|c| {
            let table = c
                .update(&sql, None, &[])
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            table
                .into_iter()
                .map(|row| {
                    (
                        row.get::<String>(1).unwrap().unwrap(),
                        row.get::<i64>(2).unwrap(),
                        row.get::<i64>(3).unwrap(),
                        row.get::<i32>(4).unwrap(),
                    )
                })
                .collect()
        })
    }

    fn complete_and_claim(queue: &str, id: i64, token: i64, extra: &str) -> Vec<Row> {
        rows(&format!(
            "aedb_queue.queue_complete_and_claim('{queue}', 'w1', {id}, {token}{extra})"
        ))
    }

    fn fail_and_claim(queue: &str, id: i64, token: i64, extra: &str) -> Vec<Row> {
        rows(&format!(
            "aedb_queue.queue_fail_and_claim('{queue}', 'w1', {id}, {token}, 'boom'{extra})"
        ))
    }

    /// The claimed task ids of `rows`, checking every row reports `settled`.
    fn claimed(rows: &[Row], settled: &str) -> Vec<i64> {
        assert!(
            !rows.is_empty(),
            "a settle-and-claim returns at least one row"
        );
        for row in rows {
            assert_eq!(row.0, settled, "{rows:?}");
        }
        rows.iter().filter_map(|row| row.1).collect()
    }

    fn sqlstate_of(query: &str) -> Option<String> {
        error_of(query).map(|(state, _)| state)
    }

    // ------------------------------------------------------------------
    // Complete, then claim.
    // ------------------------------------------------------------------

    #[pg_test]
    fn complete_and_claim_removes_the_held_task_and_leases_the_next_in_service_order() {
        let a = enqueue("q", ", priority => 0");
        let b = enqueue("q", ", priority => 5");
        let c = enqueue("q", ", priority => 0");
        let (held, token) = claim_one("q");
        assert_eq!(held, b);
        let got = complete_and_claim("q", b, token, "");
        assert_eq!(claimed(&got, "applied"), vec![a]);
        assert_eq!(state_of("q", b), None, "the held task is gone");
        assert_eq!(state_of("q", a).as_deref(), Some("in_flight"));
        assert_eq!(got[0].3, Some(1), "first attempt");
        assert_eq!(
            field::<i64>(a, "fencing_token"),
            got[0].2,
            "the returned token is the task's"
        );
        assert_eq!(text_field(a, "owner_id").as_deref(), Some("w1"));
        let got = complete_and_claim("q", a, got[0].2.unwrap(), ", max => 10");
        assert_eq!(claimed(&got, "applied"), vec![c]);
    }

    #[pg_test]
    fn complete_and_claim_hands_out_up_to_max_and_reports_an_empty_queue_in_one_row() {
        let ids: Vec<i64> = (0..4).map(|_| enqueue("q", "")).collect();
        let (held, token) = claim_one("q");
        let got = complete_and_claim("q", held, token, ", max => 2");
        assert_eq!(claimed(&got, "applied"), ids[1..3].to_vec());
        let (last, last_token) = (got[1].1.unwrap(), got[1].2.unwrap());
        let got = complete_and_claim("q", got[0].1.unwrap(), got[0].2.unwrap(), ", max => 5");
        assert_eq!(claimed(&got, "applied"), vec![ids[3]]);
        complete_and_claim("q", ids[3], got[0].2.unwrap(), "");
        let got = complete_and_claim("q", last, last_token, "");
        assert_eq!(got, vec![("applied".into(), None, None, None)]);
        assert_eq!(count("aedb_queue.task"), 0);
    }

    #[pg_test]
    fn a_stale_token_settles_nothing_and_reports_lease_lost_but_still_claims() {
        let a = enqueue("q", "");
        let b = enqueue("q", "");
        let (_, old) = claim_one("q");
        expire_lease(a);
        exec("SELECT aedb_queue.queue_reap('q')");
        let (again, current) = claim_one("q");
        assert_eq!(again, a, "reclaimed and claimed by another worker");
        let got = complete_and_claim("q", a, old, "");
        assert_eq!(claimed(&got, "lease_lost"), vec![b]);
        assert_eq!(
            state_of("q", a).as_deref(),
            Some("in_flight"),
            "a is untouched"
        );
        assert_eq!(field::<i64>(a, "fencing_token"), Some(current));
        // A task that does not exist, or one of another queue, is fenced out too.
        let other = enqueue("other", "");
        let (_, other_token) = claim_one("other");
        let got = complete_and_claim("q", other, other_token, "");
        assert_eq!(claimed(&got, "lease_lost"), Vec::<i64>::new());
        assert_eq!(state_of("other", other).as_deref(), Some("in_flight"));
    }

    #[pg_test]
    fn strict_with_a_stale_token_raises_40002() {
        let a = enqueue("q", "");
        let b = enqueue("q", "");
        let (_, token) = claim_one("q");
        let call = format!(
            "SELECT * FROM aedb_queue.queue_complete_and_claim('q', 'w1', {a}, {}, strict => true)",
            token + 1
        );
        let (state, message) = error_of(&call).expect("strict raises");
        assert_eq!(state, "40002", "{message}");
        assert!(message.contains(&a.to_string()), "{message}");
        // That nothing was settled or claimed is seen from another session:
        // itests/tests/rejections.rs.
        // With the right token, strict applies like the plain call.
        let got = complete_and_claim("q", a, token, ", strict => true");
        assert_eq!(claimed(&got, "applied"), vec![b]);
    }

    #[pg_test]
    fn complete_and_claim_keeps_the_result_and_enqueues_follow_ups_it_may_claim() {
        exec("SELECT aedb_queue.queue_configure('q', keep_completed => '1 hour')");
        let a = enqueue("q", "");
        let b = enqueue("q", "");
        let (_, token) = claim_one("q");
        let got = complete_and_claim(
            "q",
            a,
            token,
            r#", result => '{"sent": true}',
                follow_ups => '[{"queue": "q", "payload": {"step": 2}, "priority": 9},
                                {"queue": "audit", "payload": {"of": 1}}]', max => 2"#,
        );
        let ids = claimed(&got, "applied");
        assert_eq!(ids.len(), 2);
        assert_eq!(
            one::<String>(&format!(
                "SELECT payload::text FROM aedb_queue.queue_get('q', {})",
                ids[0]
            )),
            r#"{"step": 2}"#,
            "the follow-up, priority 9, is served first by this very call"
        );
        assert_eq!(ids[1], b);
        assert_eq!(
            one::<String>(&format!(
                "SELECT result::text FROM aedb_queue.completed_task WHERE task_id = {a}"
            )),
            r#"{"sent": true}"#
        );
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'audit' AND state = 'ready'"),
            1
        );
    }

    #[pg_test]
    fn a_lease_lost_completion_enqueues_no_follow_ups() {
        let a = enqueue("q", "");
        let (_, token) = claim_one("q");
        let got = complete_and_claim(
            "q",
            a,
            token + 7,
            r#", follow_ups => '[{"queue": "next"}]'"#,
        );
        assert_eq!(claimed(&got, "lease_lost"), Vec::<i64>::new());
        assert_eq!(count("aedb_queue.task WHERE queue = 'next'"), 0);
    }

    #[pg_test]
    fn a_paused_queue_settles_but_hands_out_nothing() {
        let a = enqueue("q", "");
        enqueue("q", "");
        let (_, token) = claim_one("q");
        exec("SELECT aedb_queue.queue_pause('q')");
        let got = complete_and_claim("q", a, token, "");
        assert_eq!(got, vec![("applied".into(), None, None, None)]);
        assert_eq!(state_of("q", a), None);
        assert_eq!(count("aedb_queue.task WHERE state = 'ready'"), 1);
    }

    #[pg_test]
    fn the_lease_comes_from_the_call_then_the_queue_then_30_seconds() {
        exec("SELECT aedb_queue.queue_configure('q', default_lease => '5 minutes')");
        let a = enqueue("q", "");
        let b = enqueue("q", "");
        let c = enqueue("q", "");
        let (_, token) = claim_one("q");
        let lease_of = |id: i64| -> String {
            one(&format!(
                "SELECT to_char(lease_deadline - updated_at, 'HH24:MI:SS') FROM aedb_queue.task WHERE task_id = {id}"
            ))
        };
        let got = complete_and_claim("q", a, token, "");
        assert_eq!(lease_of(b), "00:05:00");
        complete_and_claim("q", b, got[0].2.unwrap(), ", lease => '42 seconds'");
        assert_eq!(lease_of(c), "00:00:42");
    }

    // ------------------------------------------------------------------
    // Fail, then claim.
    // ------------------------------------------------------------------

    #[pg_test]
    fn fail_and_claim_schedules_the_retry_and_leases_the_next() {
        let a = enqueue("q", ", backoff_base => '10 seconds'");
        let b = enqueue("q", "");
        let (_, token) = claim_one("q");
        let got = fail_and_claim("q", a, token, "");
        assert_eq!(claimed(&got, "applied"), vec![b]);
        assert_eq!(state_of("q", a).as_deref(), Some("scheduled"));
        assert_eq!(text_field(a, "last_error").as_deref(), Some("boom"));
        assert_eq!(text_field(a, "owner_id"), None);
    }

    #[pg_test]
    fn fail_and_claim_dead_letters_or_retries_at_once_as_asked() {
        let a = enqueue("q", "");
        let b = enqueue("q", "");
        let (_, token) = claim_one("q");
        let got = fail_and_claim("q", a, token, ", dead_letter => true");
        assert_eq!(claimed(&got, "applied"), vec![b]);
        assert_eq!(state_of("q", a).as_deref(), Some("dead"));
        // Retried at once, the failed task is ready again, and this very
        // call may hand it back (a second attempt).
        let got = fail_and_claim("q", b, got[0].2.unwrap(), ", retry_in => '0'");
        assert_eq!(claimed(&got, "applied"), vec![b]);
        assert_eq!(got[0].3, Some(2));
    }

    #[pg_test]
    fn fail_and_claim_is_fenced_and_strict_raises_40002() {
        let a = enqueue("q", "");
        let b = enqueue("q", "");
        let (_, token) = claim_one("q");
        let got = fail_and_claim("q", a, token + 1, "");
        assert_eq!(claimed(&got, "lease_lost"), vec![b]);
        assert_eq!(state_of("q", a).as_deref(), Some("in_flight"));
        assert_eq!(text_field(a, "last_error"), None);
        let call = format!(
            "SELECT * FROM aedb_queue.queue_fail_and_claim('q', 'w1', {a}, {}, 'e', strict => true)",
            token + 1
        );
        assert_eq!(sqlstate_of(&call).as_deref(), Some("40002"));
        assert_eq!(state_of("q", a).as_deref(), Some("in_flight"));
    }

    // ------------------------------------------------------------------
    // Arguments and grants: checked before anything is touched.
    // ------------------------------------------------------------------

    #[pg_test]
    fn bad_arguments_name_themselves_and_change_nothing() {
        let a = enqueue("q", "");
        let b = enqueue("q", "");
        let (_, t) = claim_one("q");
        let cases = [
            (format!("aedb_queue.queue_complete_and_claim('q', 'w1', NULL, {t})"), "22004", "\"held_task_id\""),
            (format!("aedb_queue.queue_complete_and_claim('q', 'w1', {a}, NULL)"), "22004", "\"held_fencing_token\""),
            (format!("aedb_queue.queue_complete_and_claim('q', NULL, {a}, {t})"), "22004", "\"owner_id\""),
            (format!("aedb_queue.queue_complete_and_claim('', 'w1', {a}, {t})"), "22023", "\"queue\""),
            (format!("aedb_queue.queue_complete_and_claim('q', 'w1', {a}, {t}, max => 0)"), "22023", "\"max\""),
            (format!("aedb_queue.queue_complete_and_claim('q', 'w1', {a}, {t}, lease => '-1 second')"), "22023", "\"lease\""),
            (format!("aedb_queue.queue_complete_and_claim('q', 'w1', {a}, {t}, strict => NULL)"), "22004", "\"strict\""),
            (format!("aedb_queue.queue_complete_and_claim('q', 'w1', {a}, {t}, follow_ups => '[{{\"queue\": \"\"}}]')"), "22023", "follow_ups[0].queue"),
            (format!("aedb_queue.queue_fail_and_claim('q', 'w1', {a}, {t}, NULL)"), "22004", "\"error\""),
            (format!("aedb_queue.queue_fail_and_claim('q', 'w1', {a}, {t}, 'e', retry_in => '-1 second')"), "22023", "\"retry_in\""),
            (format!("aedb_queue.queue_fail_and_claim('q', 'w1', {a}, {t}, 'e', max => 100000)"), "22023", "\"max\""),
        ];
        for (call, sqlstate, names) in cases {
            let query = format!("SELECT * FROM {call}");
            let (state, message) =
                error_of(&query).unwrap_or_else(|| panic!("{query} was accepted"));
            assert_eq!(state, sqlstate, "{query}: {message}");
            assert!(message.contains(names), "{query}: {message}");
        }
        assert_eq!(state_of("q", a).as_deref(), Some("in_flight"));
        assert_eq!(field::<i64>(a, "fencing_token"), Some(t));
        assert_eq!(state_of("q", b).as_deref(), Some("ready"));
    }

    #[pg_test]
    fn a_worker_granted_queue_a_cannot_settle_or_claim_in_queue_b() {
        let a = enqueue("tenant_a.jobs", "");
        let b = enqueue("tenant_b.jobs", "");
        let (_, token_b) = claim("tenant_b.jobs", "")[0];
        exec("CREATE ROLE worker_a NOLOGIN");
        exec("GRANT aedb_queue_worker TO worker_a");
        exec("CREATE ROLE producer_only NOLOGIN");
        exec("GRANT aedb_queue_producer TO producer_only");
        exec("SELECT aedb_queue.queue_grant('tenant_a.*', 'worker_a', 'worker')");
        exec("SET LOCAL ROLE worker_a");
        for call in [
            format!("SELECT * FROM aedb_queue.queue_complete_and_claim('tenant_b.jobs', 'w', {b}, {token_b})"),
            format!("SELECT * FROM aedb_queue.queue_fail_and_claim('tenant_b.jobs', 'w', {b}, {token_b}, 'e')"),
        ] {
            let (state, message) = error_of(&call).unwrap_or_else(|| panic!("{call} was allowed"));
            assert_eq!(state, "42501", "{call}: {message}");
            assert!(message.contains("tenant_b.jobs"), "{message}");
        }
        // Its own queue works, and the held task's id cannot reach across:
        // B's task named under queue A is fenced out.
        let (held, token) = claim_one("tenant_a.jobs");
        assert_eq!(held, a);
        let got = complete_and_claim("tenant_a.jobs", b, token_b, "");
        assert_eq!(claimed(&got, "lease_lost"), Vec::<i64>::new());
        let got = complete_and_claim("tenant_a.jobs", a, token, "");
        assert_eq!(claimed(&got, "applied"), Vec::<i64>::new());
        exec("RESET ROLE");
        assert_eq!(state_of("tenant_b.jobs", b).as_deref(), Some("in_flight"));
        assert_eq!(field::<i64>(b, "fencing_token"), Some(token_b));
        // A producer may not call it at all.
        exec("SET LOCAL ROLE producer_only");
        let call = format!("SELECT * FROM aedb_queue.queue_complete_and_claim('tenant_a.jobs', 'w', {b}, {token_b})");
        assert_eq!(sqlstate_of(&call).as_deref(), Some("42501"));
        exec("RESET ROLE");
    }
}
