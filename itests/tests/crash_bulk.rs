//! Crash recovery of the batched enqueue, whose rows are written the way COPY
//! writes them (`heap_multi_insert`, one WAL record per page, then each
//! index; docs/design.md): batches that committed, batches of a
//! transaction still open at the crash, of a transaction rolled back before
//! it and of a rolled-back savepoint, interleaved in the same queues and
//! pages, with small, page-sized and TOASTed payloads. After `pg_ctl stop -m
//! immediate` and WAL replay:
//!
//! - the heap holds every committed task exactly once, with its payload,
//!   state and priority, and nothing else of those queues;
//! - amcheck finds every index of `aedb_queue.task` (and its TOAST index)
//!   consistent with the heap (`bt_index_check(.., heapallindexed => true)`)
//!   and `verify_heapam` finds no corrupt tuple;
//! - the tasks are claimed in service order, each once, and complete;
//! - new ids do not reuse any id handed out before the crash.
//!
//! Its own cluster: crashing the shared one would break parallel tests.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use aedb_queue_itests::*;

/// What the heap holds for a task: (queue, payload, state, priority).
type Row = (String, Value, String, i64);

fn batch_sql() -> &'static str {
    "SELECT b.id::int8 FROM aedb_queue.queue_enqueue_batch($1::text, $2::jsonb[], \
     delay => $3::text::interval, priority => $4::int8) WITH ORDINALITY AS b(id, ord) \
     ORDER BY b.ord"
}

/// `queue_enqueue_batch` with a delay and a priority; ids in payload order.
fn batch(
    c: &mut impl GenericClient,
    queue: &str,
    payloads: &[Value],
    delay: &str,
    priority: i64,
) -> Vec<i64> {
    let ids: Vec<i64> = c
        .query(batch_sql(), &[&queue, &payloads, &delay, &priority])
        .unwrap_or_else(|e| panic!("queue_enqueue_batch {queue}: {}", describe(&e)))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), payloads.len(), "ids returned by the batch");
    ids
}

/// Payloads tagged with the batch, `{"batch": tag, "i": i, "pad": ...}`:
/// `pad` bytes of padding, random hex when `incompressible` (so that large
/// ones are stored out of line, in the TOAST table).
fn payloads(tag: &str, n: usize, pad: usize, incompressible: bool) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let pad: String = if incompressible {
                (0..pad / 8)
                    .map(|_| format!("{:08x}", rand::random::<u32>()))
                    .collect()
            } else {
                "x".repeat(pad)
            };
            json!({ "batch": tag, "i": i, "pad": pad })
        })
        .collect()
}

/// The expected rows of a committed batch.
fn expect(
    into: &mut BTreeMap<i64, Row>,
    queue: &str,
    ids: &[i64],
    payloads: &[Value],
    state: &str,
    priority: i64,
) {
    for (id, p) in ids.iter().zip(payloads) {
        let old = into.insert(
            *id,
            (queue.to_string(), p.clone(), state.to_string(), priority),
        );
        assert!(old.is_none(), "task id {id} handed out twice");
    }
}

/// Every task of `queues` as the heap holds it, read with a sequential scan
/// (no index involved); panics on a task id that appears twice.
fn heap_rows(su: &mut Client, queues: &[&str]) -> BTreeMap<i64, Row> {
    let mut tx = su.transaction().unwrap();
    tx.batch_execute(
        "SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off; \
         SET LOCAL enable_indexonlyscan = off; SET LOCAL enable_seqscan = on",
    )
    .unwrap();
    let queues: Vec<String> = queues.iter().map(|q| q.to_string()).collect();
    let plan: String = tx
        .query(
            "EXPLAIN SELECT task_id FROM aedb_queue.task WHERE queue = ANY($1::text[])",
            &[&queues],
        )
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(plan.contains("Seq Scan"), "not a heap scan:\n{plan}");
    let rows = tx
        .query(
            "SELECT task_id, queue::text, payload, state::text, priority::int8 \
             FROM aedb_queue.task WHERE queue = ANY($1::text[])",
            &[&queues],
        )
        .unwrap();
    tx.commit().unwrap();
    let mut out = BTreeMap::new();
    for r in rows {
        let id: i64 = r.get(0);
        let row: Row = (r.get(1), r.get(2), r.get(3), r.get(4));
        if let Some(first) = out.insert(id, row.clone()) {
            panic!("task id {id} is in the heap twice: {first:?} and {row:?}");
        }
    }
    out
}

/// amcheck over every index of `aedb_queue.task` and of its TOAST table,
/// each also checked against the heap (`heapallindexed`), and over the heap
/// itself (with its TOAST pointers). Returns the indexes checked.
fn amcheck(su: &mut Client) -> Vec<String> {
    su.batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        .unwrap_or_else(|e| panic!("CREATE EXTENSION amcheck: {}", describe(&e)));
    let indexes: Vec<String> = first_column(
        su,
        "SELECT c.oid::regclass::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
         WHERE i.indrelid IN ('aedb_queue.task'::regclass, \
             (SELECT reltoastrelid FROM pg_class WHERE oid = 'aedb_queue.task'::regclass)) \
         ORDER BY 1",
        &[],
    );
    for index in &indexes {
        su.execute("SELECT bt_index_check($1::text::regclass, true)", &[index])
            .unwrap_or_else(|e| {
                panic!("bt_index_check({index}, heapallindexed): {}", describe(&e))
            });
    }
    let corrupt: Vec<String> = first_column(
        su,
        "SELECT format('block %s offset %s attnum %s: %s', blkno, offnum, attnum, msg) \
         FROM verify_heapam('aedb_queue.task', check_toast => true)",
        &[],
    );
    assert!(
        corrupt.is_empty(),
        "verify_heapam(aedb_queue.task): {corrupt:?}"
    );
    indexes
}

#[test]
fn batched_enqueues_survive_a_crash_exactly_as_committed() {
    let cluster = Cluster::start();
    let mut su = cluster.connect();
    let mut p = cluster.connect_as(PRODUCER);
    let tag = unique_queue("b");
    let q_main = format!("bulk_main_{tag}");
    let q_timer = format!("bulk_timer_{tag}");
    let q_toast = format!("bulk_toast_{tag}");
    let queues = [q_main.as_str(), q_timer.as_str(), q_toast.as_str()];

    let mut committed: BTreeMap<i64, Row> = BTreeMap::new();
    let mut not_committed: HashSet<i64> = HashSet::new();

    // WAL from here on is what recovery replays: each heap page the batches
    // fill is new since this checkpoint.
    su.batch_execute("CHECKPOINT; CREATE EXTENSION pg_walinspect")
        .unwrap();
    let wal_start: String = su
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);

    // The transaction still open at the crash, interleaved with committed
    // batches so that its rows share heap and index pages with theirs.
    let mut open_conn = cluster.connect_as(PRODUCER);
    let mut open = open_conn.transaction().unwrap();
    let mut rolled_back_conn = cluster.connect_as(PRODUCER);

    struct Spec<'a> {
        queue: &'a str,
        name: &'a str,
        count: usize,
        pad: usize,
        incompressible: bool,
        delay: &'a str,
        priority: i64,
    }
    let spec = |queue, name, count, pad, incompressible, delay, priority| Spec {
        queue,
        name,
        count,
        pad,
        incompressible,
        delay,
        priority,
    };
    let specs = [
        spec(&q_main, "one", 1, 0, false, "0", 0),
        spec(&q_main, "small", 1000, 20, false, "0", 0),
        spec(&q_main, "prio", 300, 200, false, "0", 5),
        spec(&q_main, "pages", 120, 1500, false, "0", 0),
        spec(&q_timer, "timers", 400, 50, false, "2 seconds", 0),
        spec(&q_toast, "toast", 12, 12_000, true, "0", 0),
        spec(&q_main, "last", 50, 20, false, "0", 0),
    ];
    for (k, s) in specs.iter().enumerate() {
        let state = if s.delay == "0" { "ready" } else { "scheduled" };
        let make = |name: String, n: usize| payloads(&name, n, s.pad, s.incompressible);

        // Committed on its own.
        let ps = make(s.name.to_string(), s.count);
        let ids = batch(&mut p, s.queue, &ps, s.delay, s.priority);
        expect(&mut committed, s.queue, &ids, &ps, state, s.priority);

        // Uncommitted at the crash: the open transaction.
        let ps = make(format!("open-{}", s.name), s.count.min(200));
        not_committed.extend(batch(&mut open, s.queue, &ps, s.delay, s.priority));

        // Rolled back before the crash.
        let mut tx = rolled_back_conn.transaction().unwrap();
        let ps = make(format!("rolled-back-{}", s.name), s.count.min(100));
        not_committed.extend(batch(&mut tx, s.queue, &ps, s.delay, s.priority));
        tx.rollback().unwrap();

        // One committed transaction of several batches, one of them in a
        // savepoint that rolls back.
        let mut tx = p.transaction().unwrap();
        let ps = make(format!("tx-{k}-a"), 7);
        let ids = batch(&mut tx, s.queue, &ps, s.delay, s.priority);
        expect(&mut committed, s.queue, &ids, &ps, state, s.priority);
        let mut sp = tx.savepoint("sp").unwrap();
        let ps = make(format!("tx-{k}-savepoint"), 9);
        not_committed.extend(batch(&mut sp, s.queue, &ps, s.delay, s.priority));
        sp.rollback().unwrap();
        let ps = make(format!("tx-{k}-b"), 11);
        let ids = batch(&mut tx, s.queue, &ps, s.delay, s.priority);
        expect(&mut committed, s.queue, &ids, &ps, state, s.priority);
        tx.commit().unwrap();
    }
    assert!(
        committed.keys().all(|id| !not_committed.contains(id)),
        "an id was handed out to a committed and an uncommitted task"
    );

    // Before the crash: the committed rows are all there (a sanity check
    // of the expectations themselves), read by another session.
    assert_eq!(heap_rows(&mut su, &queues), committed, "before the crash");
    // The rows really went through heap_multi_insert (not the INSERT the
    // bulk writer falls back to): Heap2 MULTI_INSERT records in the WAL (up
    // to what is flushed, which covers every commit; pg_walinspect refuses
    // an end past it).
    let multi_inserts: i64 = su
        .query_one(
            "SELECT count(*) FROM pg_get_wal_records_info($1::text::pg_lsn, pg_current_wal_flush_lsn()) \
             WHERE resource_manager = 'Heap2' AND record_type LIKE 'MULTI_INSERT%'",
            &[&wal_start],
        )
        .unwrap()
        .get(0);
    assert!(
        multi_inserts >= specs.len() as i64,
        "{multi_inserts} MULTI_INSERT WAL records since {wal_start}"
    );
    eprintln!("{multi_inserts} Heap2 MULTI_INSERT WAL records before the crash");
    let toasted: i64 = su
        .query_one(
            "SELECT count(*) FROM aedb_queue.task \
             WHERE queue = $1 AND pg_column_size(payload) < 2000",
            &[&q_toast],
        )
        .unwrap()
        .get(0);
    let stored: i64 = su
        .query_one(
            "SELECT pg_relation_size(reltoastrelid) FROM pg_class \
             WHERE oid = 'aedb_queue.task'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        stored > 0 && toasted == 0,
        "the large payloads are not stored out of line (TOAST size {stored}, \
         {toasted} stored inline)"
    );

    cluster.stop_immediate();
    drop(open);
    drop(open_conn);
    drop(rolled_back_conn);
    drop(p);
    drop(su);
    cluster.start_again();
    assert!(
        cluster.server_log().contains("not properly shut down"),
        "the restart did not go through crash recovery:\n{}",
        cluster.server_log()
    );

    let mut su = cluster.connect();
    let after = heap_rows(&mut su, &queues);
    let missing: Vec<_> = committed
        .keys()
        .filter(|id| !after.contains_key(id))
        .take(10)
        .collect();
    let extra: Vec<_> = after
        .keys()
        .filter(|id| !committed.contains_key(id))
        .take(10)
        .collect();
    let resurrected: Vec<_> = after
        .keys()
        .filter(|id| not_committed.contains(id))
        .take(10)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "after the crash: {} of {} committed tasks missing (e.g. {missing:?}), {} unexpected (e.g. {extra:?}; \
         uncommitted among them: {resurrected:?})",
        committed.keys().filter(|id| !after.contains_key(id)).count(),
        committed.len(),
        after.keys().filter(|id| !committed.contains_key(id)).count(),
    );
    for (id, want) in &committed {
        assert_eq!(&after[id], want, "task {id} changed across the crash");
    }
    let indexes = amcheck(&mut su);
    assert!(
        indexes.len() >= 5,
        "expected the primary key, the four state indexes and the TOAST index: {indexes:?}"
    );
    eprintln!(
        "{} committed tasks recovered, {} uncommitted gone; amcheck passed on {indexes:?}",
        committed.len(),
        not_committed.len()
    );

    // The queues work: every committed task is handed out once, in service
    // order (priority first, then id), and completes.
    let mut w = cluster.connect_as(WORKER);
    let due: std::time::SystemTime = su
        .query_one(
            "SELECT max(not_before) FROM aedb_queue.task WHERE queue = $1",
            &[&q_timer],
        )
        .unwrap()
        .get(0);
    sleep_until_server_time(&mut su, due, Duration::from_millis(300));
    let mut handed_out: HashSet<i64> = HashSet::new();
    for q in queues {
        let mut order: Vec<i64> = Vec::new();
        loop {
            let got = claim(&mut w, q, "after-crash", "5 minutes", 100);
            if got.is_empty() {
                break;
            }
            for t in &got {
                let (queue, payload, _, priority) = &committed[&t.task_id];
                assert_eq!(queue, q);
                assert_eq!(t.payload.as_ref(), Some(payload), "task {}", t.task_id);
                assert_eq!(t.priority, *priority);
                assert_eq!(t.attempts, 1);
                assert!(
                    handed_out.insert(t.task_id),
                    "task {} handed out twice",
                    t.task_id
                );
            }
            let ids: Vec<i64> = got.iter().map(|t| t.task_id).collect();
            let tokens: Vec<i64> = got.iter().map(|t| t.fencing_token).collect();
            let outcomes: Vec<String> = w
                .query(
                    "SELECT outcome::text FROM aedb_queue.queue_complete_batch($1::text, \
                     $2::int8[], $3::int8[])",
                    &[&q, &ids, &tokens],
                )
                .unwrap_or_else(|e| panic!("queue_complete_batch: {}", describe(&e)))
                .iter()
                .map(|r| r.get(0))
                .collect();
            assert!(
                outcomes.iter().all(|o| o == "applied"),
                "completions: {outcomes:?}"
            );
            order.extend(ids);
        }
        let mut service_order = order.clone();
        service_order.sort_by_key(|id| (-committed[id].3, *id));
        assert!(
            order == service_order,
            "{q}: not handed out in service order"
        );
        assert!(
            all_tasks(&mut w, q).is_empty(),
            "{q}: tasks left after the drain"
        );
    }
    assert_eq!(
        handed_out.len(),
        committed.len(),
        "not every committed task was handed out"
    );
    amcheck(&mut su);

    // The id sequence went past every id handed out before the crash.
    let mut p = cluster.connect_as(PRODUCER);
    let fresh = batch(&mut p, &q_main, &payloads("fresh", 20, 0, false), "0", 0);
    let before_max = committed
        .keys()
        .chain(&not_committed)
        .max()
        .copied()
        .unwrap();
    assert!(
        fresh.iter().all(|id| *id > before_max),
        "ids {fresh:?} after the crash, {before_max} handed out before"
    );
}
