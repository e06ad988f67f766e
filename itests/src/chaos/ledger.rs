//! What must hold after a fault: the full ledger check (nothing
//! acknowledged lost, nothing completed twice, every follow-up enqueued
//! and done once, nothing left behind), and amcheck over every index of the
//! extension's tables.

use std::thread;
use std::time::{Duration, Instant};

use postgres::Client;

use super::load::Names;
use crate::{describe, first_column};

/// Figures of a ledger that passed [`check_ledger`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerFigures {
    pub acked: usize,
    /// Tasks of the main queue that committed (acknowledged or not).
    pub produced: i64,
    pub completed: i64,
    pub follow_ups: i64,
    /// Completions at a later attempt than the first (a holder was killed
    /// or lost its connection, its lease expired and the task was claimed
    /// again).
    pub after_expiry: i64,
}

/// Waits until no task of the run's queues is left (the killed workers'
/// leases expire and are reclaimed); panics after `bound` with what is left.
pub fn wait_drained(su: &mut Client, names: &Names, bound: Duration) {
    let deadline = Instant::now() + bound;
    loop {
        let left = tasks_left(su, names);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not drained after {bound:?}: {left:?}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// (queue, state, count) of every task of the run's queues still there.
pub fn tasks_left(su: &mut Client, names: &Names) -> Vec<(String, String, i64)> {
    su.query(
        "SELECT queue::text, state::text, count(*) FROM aedb_queue.task \
         WHERE queue IN ($1, $2) GROUP BY 1, 2 ORDER BY 1, 2",
        &[&names.main_queue, &names.follow_queue],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// The full check once the queues are drained:
/// - every acknowledged enqueue committed (it is in `produced`), once;
/// - every committed task of the main queue was completed exactly once,
///   and nothing else was;
/// - every follow-up task was completed exactly once, each parent
///   completed with a follow-up has exactly one, and no follow-up has
///   another parent;
/// - no task is left in either queue.
pub fn check_ledger(su: &mut Client, names: &Names, acked: &[i64]) -> LedgerFigures {
    let Names {
        main_queue: main,
        follow_queue: follow,
        ledger: l,
        produced: p,
    } = names;
    let ids = |sql: &str, c: &mut Client, params: &[&(dyn postgres::types::ToSql + Sync)]| {
        first_column::<i64>(c, sql, params)
    };
    let lost = ids(
        &format!(
            "SELECT a FROM unnest($1::int8[]) a EXCEPT SELECT task_id FROM {p} ORDER BY 1 LIMIT 20"
        ),
        su,
        &[&acked],
    );
    assert!(lost.is_empty(), "acknowledged enqueues lost: {lost:?}");
    let twice_produced = ids(
        &format!("SELECT task_id FROM {p} GROUP BY 1 HAVING count(*) > 1 LIMIT 20"),
        su,
        &[],
    );
    assert!(
        twice_produced.is_empty(),
        "ids handed out twice: {twice_produced:?}"
    );
    let never_done = ids(
        &format!(
            "SELECT task_id FROM {p} EXCEPT SELECT task_id FROM {l} WHERE queue = $1 \
             ORDER BY 1 LIMIT 20"
        ),
        su,
        &[main],
    );
    assert!(
        never_done.is_empty(),
        "committed tasks never completed: {never_done:?}"
    );
    let strays = ids(
        &format!(
            "SELECT task_id FROM {l} WHERE queue = $1 EXCEPT SELECT task_id FROM {p} \
             ORDER BY 1 LIMIT 20"
        ),
        su,
        &[main],
    );
    assert!(
        strays.is_empty(),
        "completions of tasks never enqueued: {strays:?}"
    );
    let doubles: Vec<String> = first_column(
        su,
        &format!(
            "SELECT format('%s task %s: %s times by %s', queue, task_id, count(*), \
                           string_agg(worker || ' ' || how, ', ')) \
             FROM {l} GROUP BY queue, task_id HAVING count(*) > 1 LIMIT 20"
        ),
        &[],
    );
    assert!(doubles.is_empty(), "tasks completed twice: {doubles:?}");
    check_follow_ups(su, names);
    let left = tasks_left(su, names);
    assert!(left.is_empty(), "tasks left: {left:?}");
    let count =
        |c: &mut Client, sql: String| -> i64 { c.query_one(sql.as_str(), &[]).unwrap().get(0) };
    LedgerFigures {
        acked: acked.len(),
        produced: count(su, format!("SELECT count(*) FROM {p}")),
        completed: count(
            su,
            format!("SELECT count(*) FROM {l} WHERE queue = '{main}'"),
        ),
        follow_ups: count(
            su,
            format!("SELECT count(*) FROM {l} WHERE queue = '{follow}'"),
        ),
        after_expiry: count(su, format!("SELECT count(*) FROM {l} WHERE attempt > 1")),
    }
}

fn check_follow_ups(su: &mut Client, names: &Names) {
    let (main, follow, l) = (&names.main_queue, &names.follow_queue, &names.ledger);
    let missing: Vec<i64> = first_column(
        su,
        &format!(
            "SELECT task_id FROM {l} WHERE queue = $1 AND how = 'follow_up' \
             EXCEPT SELECT parent FROM {l} WHERE queue = $2 ORDER BY 1 LIMIT 20"
        ),
        &[main, follow],
    );
    assert!(
        missing.is_empty(),
        "parents whose follow-up was never done: {missing:?}"
    );
    let orphans: Vec<String> = first_column(
        su,
        &format!(
            "SELECT format('follow-up %s of parent %s', f.task_id, f.parent) FROM {l} f \
             WHERE f.queue = $2 AND NOT EXISTS (SELECT 1 FROM {l} p \
                 WHERE p.queue = $1 AND p.how = 'follow_up' AND p.task_id = f.parent) LIMIT 20"
        ),
        &[main, follow],
    );
    assert!(
        orphans.is_empty(),
        "follow-ups of no committed completion: {orphans:?}"
    );
    let doubled: Vec<i64> = first_column(
        su,
        &format!(
            "SELECT parent FROM {l} WHERE queue = $1 GROUP BY parent HAVING count(*) > 1 LIMIT 20"
        ),
        &[follow],
    );
    assert!(
        doubled.is_empty(),
        "parents with two follow-ups: {doubled:?}"
    );
}

/// amcheck over every B-tree index of every table of schema `aedb_queue`
/// and of their TOAST tables, each also against its heap
/// (`heapallindexed`), and `verify_heapam` (with TOAST) over every table.
/// Returns how many indexes were checked.
pub fn amcheck_all(su: &mut Client) -> usize {
    su.batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        .unwrap_or_else(|e| panic!("CREATE EXTENSION amcheck: {}", describe(&e)));
    let tables: Vec<String> = first_column(
        su,
        "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'aedb_queue' AND c.relkind = 'r' ORDER BY 1",
        &[],
    );
    let indexes: Vec<String> = first_column(
        su,
        "SELECT i.indexrelid::regclass::text FROM pg_index i \
         JOIN pg_class t ON t.oid = i.indrelid \
         JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam \
         WHERE am.amname = 'btree' AND (t.relnamespace = 'aedb_queue'::regnamespace \
               OR t.oid IN (SELECT reltoastrelid FROM pg_class \
                            WHERE relnamespace = 'aedb_queue'::regnamespace)) ORDER BY 1",
        &[],
    );
    for index in &indexes {
        su.execute("SELECT bt_index_check($1::text::regclass, true)", &[index])
            .unwrap_or_else(|e| {
                panic!("bt_index_check({index}, heapallindexed): {}", describe(&e))
            });
    }
    for table in &tables {
        let corrupt: Vec<String> = first_column(
            su,
            "SELECT format('block %s offset %s attnum %s: %s', blkno, offnum, attnum, msg) \
             FROM verify_heapam($1::text::regclass, check_toast => true)",
            &[table],
        );
        assert!(corrupt.is_empty(), "verify_heapam({table}): {corrupt:?}");
    }
    assert!(
        indexes.iter().any(|i| i.contains("task_ready_idx")),
        "amcheck missed the task indexes: {indexes:?}"
    );
    indexes.len()
}
