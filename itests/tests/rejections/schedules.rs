//! Refused schedule upserts change nothing: a role without the admin's
//! rights, a confined admin outside its queues, and bad arguments leave the
//! queue's schedule as it was (the case of `tests_schedule.rs`, seen from
//! another session). An upsert that got through would rewrite the
//! fixture's schedule (its payload, pattern and next fire time) or add one.

use super::*;

fn upsert_sql(queue: &str, args: &str) -> String {
    format!("SELECT 1 FROM aedb_queue.queue_schedule_upsert('{queue}', '{SCHEDULE}', {args})")
}

/// The valid upsert that follows, and what it must have written.
fn then_upsert(c: Case, queue: &str) -> Case {
    c.then(upsert_sql(queue, r#"'0 0 1 1 *', payload => '{"v": 2}'"#))
        .then_check(format!(
            "SELECT payload = '{{\"v\": 2}}'::jsonb FROM aedb_queue.schedule \
             WHERE queue = '{queue}' AND name = '{SCHEDULE}'"
        ))
}

#[test]
fn refused_schedule_upserts_change_nothing() {
    let cluster = Cluster::shared();
    run_cases(cluster, |fx| {
        let (a, b) = (&fx.a.name, &fx.b.name);
        let bad = |what: &str, sqlstate: &'static str, args: &str| {
            then_upsert(
                Case::new(format!("upsert with {what}"), ADMIN, sqlstate)
                    .call(upsert_sql(a, &format!("{args}, payload => '{{\"v\": 9}}'"))),
                a,
            )
        };
        vec![
            Case::new("a worker upserts (no EXECUTE)", WORKER, "42501")
                .call(upsert_sql(a, "'* * * * *'"))
                .then(claim_sql(a)),
            Case::new("a producer upserts (no EXECUTE)", PRODUCER, "42501")
                .call(upsert_sql(&fx.fresh, "'* * * * *'"))
                .then(enqueue_sql(a, "{}")),
            then_upsert(
                Case::new(
                    "a confined admin upserts into another tenant's queue",
                    CADMIN,
                    "42501",
                )
                .warm_up(upsert_sql(a, "'0 0 1 1 *'"))
                .call(upsert_sql(b, "'* * * * *'")),
                a,
            ),
            then_upsert(
                Case::new(
                    "a confined admin upserts into a fresh queue outside its grant",
                    CADMIN,
                    "42501",
                )
                .call(upsert_sql(&fx.b_fresh, "'* * * * *'")),
                a,
            ),
            bad("a minute of 61", "22023", "'61 * * * *'"),
            bad(
                "an unknown time zone",
                "22023",
                "'* * * * *', time_zone => 'Nowhere/Land'",
            ),
            bad(
                "an unknown missed policy",
                "22023",
                "'* * * * *', missed => 'later'",
            ),
            bad("max_attempts 0", "22023", "'* * * * *', max_attempts => 0"),
            bad("a NULL pattern", "22004", "NULL"),
            then_upsert(
                Case::new(
                    "upsert with a payload over the queue's limit",
                    ADMIN,
                    "54000",
                )
                .call(upsert_sql(
                    a,
                    &format!("'* * * * *', payload => {}", big(2000)),
                )),
                a,
            ),
        ]
    });
}
