//! A confined admin administers the queues of its grants only: another
//! tenant's queues, roles not confined within its queues, the extension's
//! group roles and confinement itself are out of its reach, and a refused
//! call changes nothing (the cases of `tests_security.rs`, seen from
//! another session).

use super::*;

/// The grant a valid `queue_grant` of [`CADMIN`] makes in a case: a
/// pattern of its own fixture, so no other case sees it.
fn grant_in_a(fx: &Fixture) -> String {
    format!("t_a.g_{}", fx.a_out.trim_start_matches("t_a.out."))
}

#[test]
fn a_confined_admin_changes_nothing_outside_its_queues() {
    let cluster = Cluster::shared();
    run_cases(cluster, |fx| {
        let (a, b) = (&fx.a.name, &fx.b.name);
        // The same kind of call on its own queue goes through.
        let then_key = |c: Case| {
            c.then(format!(
                "SELECT aedb_queue.queue_configure_key('{a}', 'acct', 50)"
            ))
            .then_check(format!(
                "SELECT EXISTS (SELECT FROM aedb_queue.concurrency_slot \
                 WHERE queue = '{a}' AND key = 'acct' AND concurrency_limit = 50)"
            ))
        };
        let granted = grant_in_a(fx);
        let then_grant = |c: Case| {
            c.then(format!(
                "SELECT aedb_queue.queue_grant('{granted}', '{CWORKER}', 'worker')"
            ))
            .then_check(format!(
                "SELECT EXISTS (SELECT FROM aedb_queue.queue_grant WHERE role = '{CWORKER}'::regrole \
                 AND pattern = '{granted}' AND privilege = 'worker')"
            ))
        };
        vec![
            then_key(
                Case::new("configure_key of another tenant's queue", CADMIN, "42501")
                    .warm_up(format!(
                        "SELECT aedb_queue.queue_configure_key('{a}', 'warm', 2)"
                    ))
                    .call(format!(
                        "SELECT aedb_queue.queue_configure_key('{b}', 'acct', 50)"
                    )),
            ),
            Case::new(
                "configure_fairness of another tenant's queue",
                CADMIN,
                "42501",
            )
            .call(format!(
                "SELECT aedb_queue.queue_configure_fairness('{b}', 'acct', 1000)"
            ))
            .then(format!(
                "SELECT aedb_queue.queue_configure_fairness('{a}', 'acct', 1000)"
            ))
            .then_check(format!(
                "SELECT EXISTS (SELECT FROM aedb_queue.fairness_key \
                     WHERE queue = '{a}' AND key = 'acct' AND weight = 1000)"
            )),
            Case::new("purge of another tenant's queue", CADMIN, "42501")
                .call(format!("SELECT aedb_queue.queue_purge('{b}', 'ready')"))
                .then(format!("SELECT aedb_queue.queue_purge('{a}', 'ready')"))
                .then_check(format!(
                    "SELECT NOT EXISTS (SELECT FROM aedb_queue.task \
                     WHERE queue = '{a}' AND state = 'ready')"
                )),
            then_key(
                Case::new("forced purge of another tenant's leases", CADMIN, "42501").call(
                    format!("SELECT aedb_queue.queue_purge('{b}', 'in_flight', force => true)"),
                ),
            ),
            then_key(
                Case::new("configure of another tenant's queue", CADMIN, "42501").call(format!(
                    "SELECT * FROM aedb_queue.queue_configure('{b}', notify => false)"
                )),
            ),
            then_key(
                Case::new("retry_dead in another tenant's queue", CADMIN, "42501")
                    .call(format!("SELECT aedb_queue.queue_retry_dead('{b}')")),
            ),
            then_grant(
                Case::new("grant of another tenant's queues", CADMIN, "42501").call(format!(
                    "SELECT aedb_queue.queue_grant('t_b.*', '{CWORKER}', 'worker')"
                )),
            ),
            then_grant(
                Case::new("grant that would confine a free role", CADMIN, "42501")
                    .call("SELECT aedb_queue.queue_grant('t_a.x', 'app_worker', 'worker')"),
            ),
            then_grant(
                Case::new("grant to one of the extension's roles", CADMIN, "22023")
                    .call("SELECT aedb_queue.queue_grant('t_a.x', 'aedb_queue_worker', 'worker')"),
            ),
            then_grant(
                Case::new("grant to a superuser", CADMIN, "22023")
                    .call("SELECT aedb_queue.queue_grant('t_a.x', 'postgres', 'worker')"),
            ),
            then_grant(
                Case::new("revoke of another tenant's grant", CADMIN, "42501").call(format!(
                    "SELECT aedb_queue.queue_revoke('t_b.*', '{BWORKER}', 'worker')"
                )),
            ),
            then_grant(
                Case::new("confine a free role", CADMIN, "42501")
                    .call("SELECT aedb_queue.queue_confine('app_worker')"),
            ),
            then_grant(
                Case::new("confine another tenant's role", CADMIN, "42501")
                    .call(format!("SELECT aedb_queue.queue_confine('{BWORKER}')")),
            ),
            then_grant(
                Case::new("unconfine a role of its own tenant", CADMIN, "42501")
                    .call(format!("SELECT aedb_queue.queue_unconfine('{CWORKER}')")),
            ),
            then_grant(
                Case::new("unconfine itself", CADMIN, "42501")
                    .call(format!("SELECT aedb_queue.queue_unconfine('{CADMIN}')")),
            ),
        ]
    });
}

/// Revoking its own last grant leaves an admin confined to nothing, not
/// free: it may administer neither another tenant's queues nor its former
/// ones.
#[test]
fn an_admin_that_revoked_its_own_grant_administers_nothing() {
    let cluster = Cluster::shared();
    run_cases(cluster, |fx| {
        let (a, b) = (&fx.a.name, &fx.b.name);
        let shed = |c: Case| {
            // It still reads what it may: nothing.
            c.then("SELECT count(*) FROM aedb_queue.queue_stats")
                .then_check(format!(
                    "SELECT EXISTS (SELECT FROM aedb_queue.confined_role \
                 WHERE role = '{CADMIN_SHED}'::regrole) \
                 AND NOT EXISTS (SELECT FROM aedb_queue.queue_grant \
                 WHERE role = '{CADMIN_SHED}'::regrole)"
                ))
        };
        vec![
            shed(
                Case::new("purge of another tenant's queue", CADMIN_SHED, "42501")
                    .call(format!("SELECT aedb_queue.queue_purge('{b}', 'ready')")),
            ),
            shed(
                Case::new("purge of its former queue", CADMIN_SHED, "42501")
                    .call(format!("SELECT aedb_queue.queue_purge('{a}', 'ready')")),
            ),
            shed(
                Case::new("grant itself its former queues back", CADMIN_SHED, "42501").call(
                    format!("SELECT aedb_queue.queue_grant('t_a.*', '{CADMIN_SHED}', 'admin')"),
                ),
            ),
            shed(
                Case::new("unconfine itself", CADMIN_SHED, "42501").call(format!(
                    "SELECT aedb_queue.queue_unconfine('{CADMIN_SHED}')"
                )),
            ),
        ]
    });
}
