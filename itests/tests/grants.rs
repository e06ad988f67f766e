//! Per-queue grants and queue settings changed in one session apply to the
//! very next call of every other session, although each backend keeps its
//! own copy of them (src/cache.rs): a revoked tenant is locked out at once,
//! a paused queue stops handing out work at once.

use aedb_queue_itests::*;

fn sqlstate_of(result: Result<Vec<postgres::Row>, postgres::Error>) -> Option<String> {
    result.err().and_then(|e| sqlstate(&e))
}

#[test]
fn a_grant_or_revoke_committed_elsewhere_applies_to_the_next_call() {
    let cluster = Cluster::shared();
    let role = unique_queue("tenant_worker").replace('.', "_");
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
    enqueue(&mut producer, &own, &json!({"n": 1}));
    enqueue(&mut producer, &other, &json!({"n": 2}));
    enqueue(&mut producer, &other, &json!({"n": 3}));

    let mut worker = cluster.connect_as(&role);
    let claim_sql = "SELECT task_id FROM aedb_queue.queue_claim($1::text, 'w')";
    // No grant yet: not confined, and this backend has now cached "no grants".
    assert_eq!(worker.query(claim_sql, &[&other]).unwrap().len(), 1);

    admin
        .query_one(
            "SELECT aedb_queue.queue_grant($1::text, $2::text, 'worker')",
            &[&format!("{role}.*"), &role],
        )
        .unwrap();
    assert_eq!(
        sqlstate_of(worker.query(claim_sql, &[&other])),
        Some("42501".into()),
        "the grant made in another session must confine this one at once"
    );
    assert_eq!(worker.query(claim_sql, &[&own]).unwrap().len(), 1);

    admin
        .query_one(
            "SELECT aedb_queue.queue_revoke($1::text, $2::text, 'worker')",
            &[&format!("{role}.*"), &role],
        )
        .unwrap();
    assert_eq!(worker.query(claim_sql, &[&other]).unwrap().len(), 1);
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
