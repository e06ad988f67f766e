//! Per-queue grants and queue settings changed in one session apply to the
//! very next call of every other session, although each backend keeps its
//! own copy of them (src/cache.rs): a confined tenant is locked out at once,
//! a revoked grant stops at once, an unconfined tenant is free at once, a
//! paused queue stops handing out work at once.

use aedb_queue_itests::*;

fn sqlstate_of(result: Result<Vec<postgres::Row>, postgres::Error>) -> Option<String> {
    result.err().and_then(|e| sqlstate(&e))
}

/// Grants, revokes and `queue_unconfine` committed by an admin reach the
/// worker's very next call. Since 0.3.0 confinement is a state of the role:
/// the first grant confines it, a revoke never unconfines (a confined role
/// with no grant left may use no queue), `queue_unconfine` lifts it.
#[test]
fn a_grant_or_revoke_committed_elsewhere_applies_to_the_next_call() {
    let cluster = Cluster::shared();
    let role = unique_queue("tenant_worker");
    let own = format!("{role}.jobs");
    let other = unique_queue("other_tenant");
    // Set-up: a tenant's login role, a worker (CREATE ROLE needs more than
    // an aedb_queue admin has).
    cluster
        .connect()
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; GRANT aedb_queue_worker TO {role};"
        ))
        .unwrap();
    let mut admin = cluster.connect_as(ADMIN);
    let mut producer = cluster.connect_as(PRODUCER);
    for n in 0..3 {
        enqueue(&mut producer, &own, &json!({ "own": n }));
        enqueue(&mut producer, &other, &json!({ "other": n }));
    }
    let admin_call = |admin: &mut Client, function: &str, pattern: &str| {
        let sql = format!("SELECT aedb_queue.{function}($1::text, $2::text, 'worker')");
        let changed: bool = admin
            .query_one(sql.as_str(), &[&pattern, &role])
            .unwrap_or_else(|e| panic!("{function}({pattern}): {}", describe(&e)))
            .get(0);
        assert!(changed, "{function}({pattern}) changed nothing");
    };

    let mut worker = cluster.connect_as(&role);
    let claim_sql = "SELECT task_id FROM aedb_queue.queue_claim($1::text, 'w')";
    let mut claims = |queue: &str| -> Result<usize, String> {
        match worker.query(claim_sql, &[&queue]) {
            Ok(rows) => Ok(rows.len()),
            Err(e) => Err(sqlstate(&e).unwrap_or_else(|| describe(&e))),
        }
    };
    let denied = Err("42501".to_string());
    // No grant yet: not confined, and this backend has now cached that.
    assert_eq!(claims(&other), Ok(1), "before any grant");

    admin_call(&mut admin, "queue_grant", &format!("{role}.*"));
    assert_eq!(
        claims(&other),
        denied,
        "the grant made in another session must confine this one at once"
    );
    assert_eq!(claims(&own), Ok(1), "inside the grant");

    admin_call(&mut admin, "queue_grant", &other);
    assert_eq!(claims(&other), Ok(1), "a second grant applies at once");
    admin_call(&mut admin, "queue_revoke", &other);
    assert_eq!(claims(&other), denied, "the revoke applies at once");
    assert_eq!(claims(&own), Ok(1), "the other grant still holds");

    admin_call(&mut admin, "queue_revoke", &format!("{role}.*"));
    assert_eq!(
        claims(&own),
        denied,
        "a revoke never unconfines: no grant left, no queue"
    );
    assert_eq!(
        claims(&other),
        denied,
        "still confined after the last revoke"
    );

    let changed: bool = admin
        .query_one("SELECT aedb_queue.queue_unconfine($1::text)", &[&role])
        .unwrap_or_else(|e| panic!("queue_unconfine: {}", describe(&e)))
        .get(0);
    assert!(changed, "queue_unconfine changed nothing");
    assert_eq!(claims(&other), Ok(1), "unconfined at once");
    assert_eq!(claims(&own), Ok(1), "unconfined at once");
}

#[test]
fn a_pause_committed_elsewhere_stops_the_next_claim() {
    let cluster = Cluster::shared();
    let queue = unique_queue("paused");
    let mut admin = cluster.connect_as(ADMIN);
    let mut producer = cluster.connect_as(PRODUCER);
    let mut worker = cluster.connect_as(WORKER);
    for n in 0..3 {
        enqueue(&mut producer, &queue, &json!({ "n": n }));
    }
    assert!(claim_one(&mut worker, &queue, "w", "30 seconds").is_some());

    admin
        .query_one("SELECT aedb_queue.queue_pause($1::text)", &[&queue])
        .unwrap();
    assert!(
        claim_one(&mut worker, &queue, "w", "30 seconds").is_none(),
        "a paused queue handed out a task"
    );
    // Not committed yet: the resume is invisible to the worker.
    let mut tx = admin.transaction().unwrap();
    tx.query_one("SELECT aedb_queue.queue_resume($1::text)", &[&queue])
        .unwrap();
    assert!(claim_one(&mut worker, &queue, "w", "30 seconds").is_none());
    tx.commit().unwrap();
    assert!(claim_one(&mut worker, &queue, "w", "30 seconds").is_some());
}

/// A role chosen at connect time (`PGOPTIONS='-c role=aedb_queue_admin'`,
/// or a pooler's startup options) keeps the login role confined: every
/// identity of the session is checked, the login role among them.
#[test]
fn a_role_option_at_connect_time_does_not_free_a_confined_login() {
    let cluster = Cluster::shared();
    let tenant = unique_queue("connect_tenant");
    let own = format!("{tenant}.jobs");
    let other = unique_queue("connect_other");
    cluster
        .connect()
        .batch_execute(&format!(
            "CREATE ROLE {tenant} LOGIN; GRANT aedb_queue_admin TO {tenant};"
        ))
        .unwrap();
    let mut admin = cluster.connect_as(ADMIN);
    admin
        .query_one(
            "SELECT aedb_queue.queue_grant($1::text, $2::text, 'admin')",
            &[&format!("{tenant}.*"), &tenant],
        )
        .unwrap();
    let mut producer = cluster.connect_as(PRODUCER);
    enqueue(&mut producer, &own, &json!({ "own": 1 }));
    enqueue(&mut producer, &other, &json!({ "other": 1 }));

    let mut session = cluster.connect_as_with_role_option(&tenant, "aedb_queue_admin");
    let who = session
        .query_one("SELECT current_user::text, session_user::text", &[])
        .unwrap();
    assert_eq!(who.get::<_, String>(0), "aedb_queue_admin");
    assert_eq!(who.get::<_, String>(1), tenant);
    for sql in [
        "SELECT task_id FROM aedb_queue.queue_claim($1::text, 'w')",
        "SELECT aedb_queue.queue_purge($1::text, 'ready')",
        "SELECT task_id FROM aedb_queue.queue_list($1::text)",
    ] {
        assert_eq!(
            sqlstate_of(session.query(sql, &[&other])),
            Some("42501".to_string()),
            "{sql} on another tenant's queue"
        );
    }
    let own_claim = session
        .query(
            "SELECT task_id FROM aedb_queue.queue_claim($1::text, 'w')",
            &[&own],
        )
        .unwrap();
    assert_eq!(own_claim.len(), 1, "its own queue still works");
}
