//! Executor hooks (pg_stat_statements here; pgaudit and auto_explain alike)
//! see only statements. With `aedb_queue.direct_writes = auto`, the default,
//! a backend with a hook installed runs the statements, so the hook sees
//! every INSERT into, UPDATE of and DELETE from the task table; with `on`
//! the calls write directly and the hook sees none of them, the documented
//! cost of `on`.

use aedb_queue_itests::*;

const CONF: &str = "shared_preload_libraries = 'pg_cron,pg_stat_statements'\n\
                    pg_stat_statements.track = all";

const HOOK_REASON: &str = "an executor hook is installed and aedb_queue.direct_writes is auto";

#[test]
fn executor_hooks_see_every_write_in_auto_mode() {
    let cluster = Cluster::start_with(CONF);
    let mut su = cluster.connect();
    // The database's setting wins over a suite's AEDB_DIRECT_WRITES.
    su.batch_execute(
        "CREATE EXTENSION pg_stat_statements;
         ALTER DATABASE aedb_itests SET aedb_queue.direct_writes = auto",
    )
    .unwrap();
    for (operation, direct, reason) in write_path(&cluster) {
        assert!(!direct, "{operation} is direct under a hook in auto mode");
        assert_eq!(reason.as_deref(), Some(HOOK_REASON), "{operation}");
    }
    assert_eq!(
        writes_seen(&cluster, &mut su),
        [true; 3],
        "pg_stat_statements sees the INSERT, UPDATE and DELETE of the task table"
    );

    su.batch_execute("ALTER DATABASE aedb_itests SET aedb_queue.direct_writes = on")
        .unwrap();
    for (operation, direct, reason) in write_path(&cluster) {
        assert!(direct, "{operation} is not direct with `on`: {reason:?}");
    }
    assert_eq!(
        writes_seen(&cluster, &mut su),
        [false; 3],
        "with `on` the writes bypass the executor and its hooks"
    );
}

/// `queue_write_path()` in a new session of the admin.
fn write_path(cluster: &Cluster) -> Vec<(String, bool, Option<String>)> {
    cluster
        .connect_as(ADMIN)
        .query(
            "SELECT operation, direct, reason FROM aedb_queue.queue_write_path()",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// Enqueues (one, then a batch), claims, completes (one, then a batch) in
/// new sessions of the application's roles; whether pg_stat_statements
/// then lists an INSERT into, an UPDATE of and a DELETE from the task
/// table.
fn writes_seen(cluster: &Cluster, su: &mut Client) -> [bool; 3] {
    su.batch_execute("SELECT pg_stat_statements_reset()")
        .unwrap();
    let queue = unique_queue("hooks");
    let mut producer = cluster.connect_as(PRODUCER);
    enqueue(&mut producer, &queue, &json!({"n": 1}));
    enqueue_batch(&mut producer, &queue, &[json!({"n": 2}), json!({"n": 3})]);
    let mut worker = cluster.connect_as(WORKER);
    let claimed = claim(&mut worker, &queue, "hooked", "1 minute", 3);
    assert_eq!(claimed.len(), 3);
    assert_eq!(
        complete(
            &mut worker,
            &queue,
            claimed[0].task_id,
            claimed[0].fencing_token
        ),
        Outcome::Applied
    );
    let (ids, tokens): (Vec<i64>, Vec<i64>) = claimed[1..]
        .iter()
        .map(|t| (t.task_id, t.fencing_token))
        .unzip();
    let applied: i64 = worker
        .query_one(
            "SELECT count(*) FROM aedb_queue.queue_complete_batch($1, $2, $3)
             WHERE outcome = 'applied'",
            &[&queue, &ids, &tokens],
        )
        .unwrap()
        .get(0);
    assert_eq!(applied, 2);
    let row = su
        .query_one(
            "SELECT coalesce(bool_or(query ~ 'INSERT INTO aedb_queue\\.task\\y'), false),
                    coalesce(bool_or(query ~ 'UPDATE aedb_queue\\.task\\y'), false),
                    coalesce(bool_or(query ~ 'DELETE FROM aedb_queue\\.task\\y'), false)
             FROM pg_stat_statements
             WHERE dbid = (SELECT oid FROM pg_catalog.pg_database
                           WHERE datname = current_database())",
            &[],
        )
        .unwrap();
    [row.get(0), row.get(1), row.get(2)]
}
