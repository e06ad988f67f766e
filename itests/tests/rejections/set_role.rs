//! SET ROLE after a real login changes no confinement: a confined login
//! that switches to one of the extension's group roles (which no grant
//! confines) stays confined, and a login that switches to another tenant's
//! role may do only what both allow. Each case logs in over TCP, runs
//! `SET ROLE` (the warm-up, so the session keeps it), then the forbidden
//! call; another session sees that nothing changed (the cases of
//! `tests_security.rs`, seen from outside).

use super::*;

fn set_role(role: &str) -> String {
    format!("SET ROLE {role}")
}

#[test]
fn set_role_to_a_group_role_frees_no_confined_login() {
    let cluster = Cluster::shared();
    run_cases(cluster, |fx| {
        let (a, b) = (&fx.a.name, &fx.b.name);
        let hb = fx.b.held;
        let as_admin = |c: Case| {
            c.warm_up(set_role("aedb_queue_admin"))
                .then(format!(
                    "SELECT aedb_queue.queue_configure_key('{a}', 'acct', 7)"
                ))
                .then_check(format!(
                    "SELECT EXISTS (SELECT FROM aedb_queue.concurrency_slot \
                     WHERE queue = '{a}' AND key = 'acct' AND concurrency_limit = 7)"
                ))
        };
        let ok = r#"{"ok": 1}"#;
        vec![
            as_admin(
                Case::new("SET ROLE aedb_queue_admin, purge another tenant's queue", CADMIN, "42501")
                    .call(format!("SELECT aedb_queue.queue_purge('{b}', 'ready')")),
            ),
            as_admin(
                Case::new("SET ROLE aedb_queue_admin, configure_key of another tenant's queue", CADMIN, "42501")
                    .call(format!("SELECT aedb_queue.queue_configure_key('{b}', 'acct', 50)")),
            ),
            as_admin(
                Case::new("SET ROLE aedb_queue_admin, configure_fairness of another tenant's queue", CADMIN, "42501")
                    .call(format!(
                        "SELECT aedb_queue.queue_configure_fairness('{b}', 'acct', 1000)"
                    )),
            ),
            as_admin(
                Case::new("SET ROLE aedb_queue_admin, grant itself another tenant's queues", CADMIN, "42501")
                    .call(format!("SELECT aedb_queue.queue_grant('t_b.*', '{CADMIN}', 'admin')")),
            ),
            as_admin(
                Case::new("SET ROLE aedb_queue_admin, unconfine itself", CADMIN, "42501")
                    .call(format!("SELECT aedb_queue.queue_unconfine('{CADMIN}')")),
            ),
            as_admin(
                Case::new("SET ROLE aedb_queue_admin, upsert another tenant's schedule", CADMIN, "42501")
                    .call(format!(
                        "SELECT 1 FROM aedb_queue.queue_schedule_upsert('{b}', '{SCHEDULE}', '* * * * *')"
                    )),
            ),
            Case::new("SET ROLE aedb_queue_worker, claim in another tenant's queue", CWORKER, "42501")
                .warm_up(set_role("aedb_queue_worker"))
                .call(claim_sql(b))
                .then(claim_sql(a))
                .then_check(format!(
                    "SELECT EXISTS (SELECT FROM aedb_queue.task WHERE queue = '{a}' \
                     AND owner_id = 'w' AND state = 'in_flight')"
                )),
            Case::new("SET ROLE aedb_queue_worker, complete another tenant's task", CWORKER, "42501")
                .warm_up(set_role("aedb_queue_worker"))
                .call(complete_sql(b, hb))
                .then(claim_sql(a)),
            Case::new("SET ROLE aedb_queue_producer, take a key in another tenant's queue", CPRODUCER, "42501")
                .warm_up(set_role("aedb_queue_producer"))
                .call(format!(
                    "SELECT * FROM aedb_queue.queue_enqueue('{b}', '{{}}', idempotency_key => 'squat')"
                ))
                .then(enqueue_sql(a, ok))
                .then_check(task_exists(a, ok))
                .then_notifies(a),
        ]
    });
}

/// `app_both` may work in `t_a.*` (its own grant) and `t_b.*` (through
/// `app_tenant_b`); after `SET ROLE app_tenant_b` the current role allows
/// `t_b.*` only, and every identity of the session must allow a call. So
/// what it could do as itself is refused until it switches back.
#[test]
fn set_role_to_another_tenants_role_narrows_the_login() {
    let cluster = Cluster::shared();
    run_cases(cluster, |fx| {
        let (a, b) = (&fx.a.name, &fx.b.name);
        let held = fx.a.held;
        // Switched back, the login's own grant applies again.
        let back = |c: Case| {
            c.warm_up(format!("{}; {}", claim_sql(b), set_role(TENANT_B)))
                .then(format!("RESET ROLE; {}", claim_sql(a)))
                .then_check(format!(
                    "SELECT EXISTS (SELECT FROM aedb_queue.task WHERE queue = '{a}' \
                     AND owner_id = 'w' AND state = 'in_flight')"
                ))
        };
        vec![
            back(
                Case::new(
                    "SET ROLE app_tenant_b, claim in its login's queue",
                    BOTH,
                    "42501",
                )
                .call(claim_sql(a)),
            ),
            back(
                Case::new(
                    "SET ROLE app_tenant_b, complete in its login's queue",
                    BOTH,
                    "42501",
                )
                .call(complete_sql(a, held)),
            ),
            back(
                Case::new(
                    "SET ROLE app_tenant_b, read its login's queue",
                    BOTH,
                    "42501",
                )
                .call(format!("SELECT * FROM aedb_queue.queue_list('{a}')")),
            ),
        ]
    });
}
