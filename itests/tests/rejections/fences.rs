//! Settlements refused by their fence or their arguments, and enqueues
//! refused for their parents, change nothing (the cases of
//! `tests_release.rs`, `tests_lifecycle.rs`, `tests_settle_and_claim.rs`
//! and `tests_security.rs`, seen from another session). A call that got
//! past its checks would settle the held task, or (settle-and-claim) claim
//! the ready one, promote the due timer and reclaim the expired lease.

use super::*;

fn release_sql(queue: &str, h: Held, args: &str) -> String {
    format!(
        "SELECT aedb_queue.queue_release('{queue}', {}, {}{args})",
        h.id, h.token
    )
}

#[test]
fn fenced_out_and_bad_settlements_change_nothing() {
    let cluster = Cluster::shared();
    run_cases(cluster, |fx| {
        let a = &fx.a.name;
        let held = fx.a.held;
        let stale = Held {
            id: held.id,
            token: held.token + 1,
        };
        let then_complete = |c: Case| c.then(complete_sql(a, held)).then_check(task_gone(held.id));
        let then_release = |c: Case| {
            c.then(release_sql(a, held, ", strict => true"))
                .then_check(format!(
                    "SELECT state = 'ready' FROM aedb_queue.task WHERE task_id = {}",
                    held.id
                ))
        };
        let null_release = |what: &str, args: String| {
            then_complete(
                Case::new(format!("release with a NULL {what}"), WORKER, "22004")
                    .call(format!("SELECT aedb_queue.queue_release({args})")),
            )
        };
        vec![
            then_release(
                Case::new("strict release with a stale token", WORKER, "40002").call(release_sql(
                    a,
                    stale,
                    ", strict => true",
                )),
            ),
            then_release(
                Case::expecting(
                    "release with a stale token",
                    WORKER,
                    Expect::Returns("lease_lost"),
                )
                .call(release_sql(a, stale, "")),
            ),
            then_complete(
                Case::new("release with a negative delay", WORKER, "22023").call(release_sql(
                    a,
                    held,
                    ", delay => '-1 second'",
                )),
            ),
            null_release("queue", format!("NULL, {}, {}", held.id, held.token)),
            null_release("task_id", format!("'{a}', NULL, {}", held.token)),
            null_release("fencing_token", format!("'{a}', {}, NULL", held.id)),
            null_release(
                "delay",
                format!("'{a}', {}, {}, delay => NULL", held.id, held.token),
            ),
            then_complete(
                Case::new("strict complete with a stale token", WORKER, "40002").call(format!(
                    "SELECT aedb_queue.queue_complete('{a}', {}, {}, strict => true)",
                    stale.id, stale.token
                )),
            ),
            then_complete(
                Case::new(
                    "strict complete_and_claim with a stale token",
                    WORKER,
                    "40002",
                )
                .call(format!(
                    "SELECT * FROM aedb_queue.queue_complete_and_claim('{a}', 'w', {}, {}, \
                         strict => true)",
                    stale.id, stale.token
                )),
            ),
        ]
    });
}

/// A confined producer's task may not wait for another tenant's task: the
/// refusal (22023, as for an id that never was a task) neither marks that
/// task as having dependents nor links anything to it.
#[test]
fn waiting_for_another_tenants_task_changes_nothing() {
    let cluster = Cluster::shared();
    run_cases(cluster, |fx| {
        let a = &fx.a.name;
        let wait_for = |id: i64| {
            format!(
                "SELECT * FROM aedb_queue.queue_enqueue('{a}', '{{}}', wait_for => ARRAY[{id}])"
            )
        };
        let ok = r#"{"ok": 1}"#;
        let then_enqueue = |c: Case| {
            c.then(enqueue_sql(a, ok))
                .then_check(task_exists(a, ok))
                .then_notifies(a)
        };
        vec![
            then_enqueue(
                Case::new("wait for another tenant's held task", CPRODUCER, "22023")
                    .warm_up(enqueue_sql(a, r#"{"warm": 1}"#))
                    .call(wait_for(fx.b.held.id)),
            ),
            then_enqueue(
                Case::new("wait for another tenant's timer", CPRODUCER, "22023")
                    .call(wait_for(fx.b.due_timer)),
            ),
            then_enqueue(
                Case::new("enqueue on another tenant's concurrency key", CPRODUCER, "42501").call(
                    format!(
                        "SELECT * FROM aedb_queue.queue_enqueue('{}', '{{}}', concurrency_key => 'acct')",
                        fx.b.name
                    ),
                ),
            ),
        ]
    });
}
