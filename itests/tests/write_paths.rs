//! The direct writes (`src/store/am`) against the statements they replace:
//! one cluster, two databases made alike, one with `aedb_queue.direct_writes
//! = on` and one with `off`, the same user-added indexes on the task table
//! (partial, expression, unique, hash, GIN), the same seeded sequence of
//! calls through both as application roles. Every reply, the final rows,
//! the table's statistics counters, the decoded WAL of the task table and
//! amcheck on every btree index must be the same: the direct path leaves
//! the traces the statements leave.

#[path = "write_paths/amcheck.rs"]
mod amcheck;
#[path = "write_paths/ops.rs"]
mod ops;
#[path = "write_paths/side.rs"]
mod side;

use aedb_queue_itests::*;
use side::Side;

/// `AEDB_PATHS_SEED` and `AEDB_PATHS_OPERATIONS` override these, for other
/// and longer sequences in local runs.
const SEED: u64 = 0x43;
const OPERATIONS: usize = 400;

fn from_env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
const QUEUE: &str = "paths";

/// Logical decoding for the slots; no autovacuum, which would prune and
/// count in one database and not the other.
const CONF: &str = "wal_level = logical\nmax_replication_slots = 4\nmax_wal_senders = 4\n\
                    autovacuum = off";

/// Indexes a user may add: each kind the index cache and the executor
/// treat apart, and two that refuse some enqueues (23505, 23P01).
const USER_INDEXES: &str = "
    CREATE INDEX user_partial_idx ON aedb_queue.task (priority, task_id) WHERE attempts > 0;
    CREATE INDEX user_expression_idx ON aedb_queue.task ((payload->>'kind'), lower(owner_id));
    CREATE UNIQUE INDEX user_unique_idx ON aedb_queue.task (queue, idempotency_key);
    CREATE INDEX user_hash_idx ON aedb_queue.task USING hash (owner_id);
    CREATE INDEX user_gin_idx ON aedb_queue.task USING gin (payload jsonb_path_ops);
    CREATE UNIQUE INDEX user_payload_unique_idx ON aedb_queue.task ((payload->>'uniq'));
    ALTER TABLE aedb_queue.task
        ADD CONSTRAINT user_exclusion EXCLUDE USING btree ((payload->>'excl') WITH =);
";

#[test]
fn the_two_write_paths_leave_the_same_traces() {
    let cluster = Cluster::start_with(CONF);
    let mut sides = [
        prepare(&cluster, "paths_direct", "on"),
        prepare(&cluster, "paths_statements", "off"),
    ];
    let seed = from_env("AEDB_PATHS_SEED", SEED);
    let operations = from_env("AEDB_PATHS_OPERATIONS", OPERATIONS);
    ops::run_sequence(&mut sides, seed, operations, QUEUE);
    let errors = sides[0].errors.clone();

    let traces = sides.map(|side| Traces::of(&cluster, side));
    let [direct, statements] = &traces;
    eprintln!(
        "seed {seed}, {operations} operations: {} task rows left, {} lines of WAL, {:?}",
        direct.rows.len(),
        direct.wal.len(),
        direct.counters
    );
    assert_same("task rows", &direct.rows, &statements.rows);
    assert_same(
        "statistics counters",
        &direct.counters,
        &statements.counters,
    );
    assert_same("decoded WAL", &direct.wal, &statements.wal);
    assert_eq!(direct.indexes, statements.indexes, "the same btree indexes");
    assert!(
        direct.indexes.iter().any(|i| i.contains("user_")),
        "user-added btree indexes are checked: {:?}",
        direct.indexes
    );
    // The sequence reached what it is meant to reach.
    for (what, pattern) in [
        ("unique violations", "23505"),
        ("exclusion violations", "23P01"),
    ] {
        assert!(errors.iter().any(|e| e.contains(pattern)), "no {what} met");
    }
    for (what, pattern) in [
        ("TOASTed payloads", "unchanged-toast-datum"),
        ("claims", "state[aedb_queue.task_state]:'in_flight'"),
        ("dead letters", "state[aedb_queue.task_state]:'dead'"),
        ("deletes", "DELETE:"),
    ] {
        assert!(
            direct.wal.iter().any(|l| l.contains(pattern)),
            "no {what} in the decoded WAL"
        );
    }
}

/// A batch refused by a unique index: the statement (`INSERT ... SELECT`,
/// row by row) inserts the rows up to the refused one and stops. The
/// direct write used to put every row of the batch in the heap first
/// (`heap_multi_insert`, then the indexes, as COPY), so `n_tup_ins` and
/// the dead rows left differed; where an index can refuse a row it now
/// writes the rows one by one (`am::insert::can_refuse_a_row`).
#[test]
fn a_refused_batch_counts_what_its_statement_counts() {
    let cluster = Cluster::start();
    let mut su = cluster.connect();
    su.batch_execute(
        "CREATE UNIQUE INDEX user_payload_unique_idx ON aedb_queue.task ((payload->>'uniq'))",
    )
    .unwrap();
    let mut counted = Vec::new();
    for mode in ["on", "off"] {
        su.batch_execute(&format!(
            "ALTER ROLE {PRODUCER} SET aedb_queue.direct_writes = {mode}"
        ))
        .unwrap();
        let mut producer = cluster.connect_as(PRODUCER);
        let queue = unique_queue("refused");
        let before = inserted(&mut su);
        enqueue(&mut producer, &queue, &json!({ "uniq": mode }));
        let batch: Vec<Value> = (0..8)
            .map(|n| json!({ "n": n, "uniq": (n == 2).then_some(mode) }))
            .collect();
        let e = producer
            .query(
                "SELECT aedb_queue.queue_enqueue_batch($1, $2)",
                &[&queue, &batch],
            )
            .expect_err("the batch is refused");
        assert_eq!(sqlstate(&e).as_deref(), Some("23505"), "{}", describe(&e));
        producer
            .batch_execute("SELECT pg_stat_force_next_flush()")
            .unwrap();
        producer.batch_execute("SELECT 1").unwrap();
        counted.push(inserted(&mut su) - before);
    }
    assert_eq!(
        counted[0], counted[1],
        "rows counted inserted by one enqueue and a batch refused at its third row \
         (direct, statement)"
    );
}

/// `n_tup_ins` of the task table, read afresh.
fn inserted(su: &mut Client) -> i64 {
    su.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
    su.query_one(
        "SELECT n_tup_ins FROM pg_catalog.pg_stat_user_tables
         WHERE relid = 'aedb_queue.task'::regclass",
        &[],
    )
    .unwrap()
    .get(0)
}

/// A new database with the extension, amcheck, the user indexes, a
/// logical slot and `direct_writes = mode`; checked to take the path
/// `mode` names.
fn prepare(cluster: &Cluster, db: &str, mode: &str) -> Side {
    cluster
        .connect_to("postgres", SUPERUSER)
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .unwrap();
    let mut su = cluster.connect_to(db, SUPERUSER);
    su.batch_execute(&format!(
        "CREATE EXTENSION aedb_queue CASCADE; CREATE EXTENSION amcheck;
         ALTER DATABASE {db} SET aedb_queue.direct_writes = {mode};
         -- Claims do not promote due work (a retry or release in 0 s): when
         -- a claim looks for it depends on the session's scan hints and the
         -- clock, which differ between the two sides under load.
         ALTER DATABASE {db} SET aedb_queue.inline_reap = off;
         {USER_INDEXES}"
    ))
    .unwrap_or_else(|e| panic!("preparing {db}: {}", describe(&e)));
    su.execute(
        "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
        &[&db],
    )
    .unwrap();
    let path: Vec<(String, bool)> = cluster
        .connect_to(db, ADMIN)
        .query(
            "SELECT operation, direct FROM aedb_queue.queue_write_path() ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(path.len(), 3, "{db}: {path:?}");
    assert!(
        path.iter().all(|(_, direct)| *direct == (mode == "on")),
        "{db} with direct_writes = {mode}: {path:?}"
    );
    Side {
        db: db.to_string(),
        producer: cluster.connect_to(db, PRODUCER),
        worker: cluster.connect_to(db, WORKER),
        service: cluster.connect_to(db, SERVICE),
        errors: Vec::new(),
    }
}

/// What a database's writes left behind.
struct Traces {
    rows: Vec<String>,
    counters: Vec<String>,
    wal: Vec<String>,
    indexes: Vec<String>,
}

impl Traces {
    fn of(cluster: &Cluster, mut side: Side) -> Traces {
        // Each session sends its statistics before its next reply.
        for c in [&mut side.producer, &mut side.worker, &mut side.service] {
            c.batch_execute("SELECT pg_stat_force_next_flush()")
                .unwrap();
            c.batch_execute("SELECT 1").unwrap();
        }
        let mut su = cluster.connect_to(&side.db, SUPERUSER);
        su.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
        let counters = text_rows(
            &mut su,
            "SELECT format('ins %s upd %s del %s hot %s', n_tup_ins, n_tup_upd, n_tup_del,
                           n_tup_hot_upd)
             FROM pg_catalog.pg_stat_user_tables WHERE relid = 'aedb_queue.task'::regclass",
            &[],
        );
        let rows = text_rows(
            &mut su,
            "SELECT to_jsonb(t)::text FROM aedb_queue.task t ORDER BY task_id",
            &[],
        );
        let wal = by_transaction(text_rows(
            &mut su,
            "SELECT data FROM pg_catalog.pg_logical_slot_get_changes($1, NULL, NULL,
                 'include-xids', '0', 'skip-empty-xacts', '1')
             WHERE data LIKE 'table aedb_queue.task:%' OR data IN ('BEGIN', 'COMMIT')",
            &[&side.db],
        ));
        let indexes = amcheck::check_task_indexes(&mut su);
        Traces {
            rows,
            counters,
            wal,
            indexes,
        }
    }
}

/// The rows of a one-text-column query, times masked.
fn text_rows(
    c: &mut Client,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> Vec<String> {
    first_column::<String>(c, sql, params)
        .into_iter()
        .map(|s| masked(&s))
        .collect()
}

/// The task table's changes, transaction by transaction, each sorted: a
/// claim of several tasks updates them in service order on the direct
/// path and in the order its statement's plan finds them on the other.
fn by_transaction(lines: Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut changes: Vec<String> = Vec::new();
    for line in lines {
        match line.as_str() {
            "BEGIN" => changes.clear(),
            "COMMIT" if !changes.is_empty() => {
                changes.sort();
                out.push("BEGIN".to_string());
                out.append(&mut changes);
                out.push("COMMIT".to_string());
            }
            "COMMIT" => {}
            _ => changes.push(line),
        }
    }
    assert!(
        changes.is_empty(),
        "changes after the last COMMIT: {changes:?}"
    );
    out
}

/// Panics with the first difference between the two databases' `what`.
fn assert_same(what: &str, direct: &[String], statements: &[String]) {
    if direct == statements {
        return;
    }
    let at = direct
        .iter()
        .zip(statements)
        .position(|(a, b)| a != b)
        .unwrap_or(direct.len().min(statements.len()));
    let show = |lines: &[String]| lines.iter().skip(at).take(3).cloned().collect::<Vec<_>>();
    panic!(
        "{what} differ at line {at} (direct: {} lines, statements: {} lines)\n\
         direct:     {:#?}\nstatements: {:#?}",
        direct.len(),
        statements.len(),
        show(direct),
        show(statements)
    );
}

/// `text` with every timestamp (`2024-05-01 06:08:26.12+00`, JSON's
/// `2024-05-01T06:08:26.12+00:00`) replaced by `<time>`: times differ
/// between the databases; only whether one is there is compared.
pub fn masked(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        match timestamp_len(&b[i..]) {
            Some(len) => {
                out.push_str(&text[copied..i]);
                out.push_str("<time>");
                i += len;
                copied = i;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The length of the timestamp `b` starts with, if it does.
fn timestamp_len(b: &[u8]) -> Option<usize> {
    const SHAPE: &[u8] = b"dddd-dd-dd_dd:dd:dd";
    if b.len() < SHAPE.len() {
        return None;
    }
    for (&c, &s) in b.iter().zip(SHAPE) {
        let fits = match s {
            b'd' => c.is_ascii_digit(),
            b'_' => c == b' ' || c == b'T',
            _ => c == s,
        };
        if !fits {
            return None;
        }
    }
    let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let mut len = SHAPE.len();
    if b.get(len) == Some(&b'.') {
        len += 1 + digits(len + 1);
    }
    if matches!(b.get(len), Some(b'+') | Some(b'-')) {
        len += 1 + digits(len + 1);
        if b.get(len) == Some(&b':') {
            len += 1 + digits(len + 1);
        }
    }
    Some(len)
}
