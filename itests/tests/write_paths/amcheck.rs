//! amcheck on the task table's btree indexes, shared by the write-path tests.

use aedb_queue_itests::{describe, first_column, Client};

/// The btree indexes of `aedb_queue.task`, the extension's and any a user
/// added, by name.
pub fn task_btree_indexes(su: &mut Client) -> Vec<String> {
    first_column(
        su,
        "SELECT i.indexrelid::regclass::text FROM pg_catalog.pg_index i
         JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
         JOIN pg_catalog.pg_am am ON am.oid = c.relam
         WHERE i.indrelid = 'aedb_queue.task'::regclass AND am.amname = 'btree'
         ORDER BY 1",
        &[],
    )
}

/// `bt_index_parent_check(index, heapallindexed => true)` on every btree
/// index of the task table (superuser `su`, amcheck created): every heap
/// row is in every index it belongs to, and the trees are sound. Returns
/// the indexes checked; panics naming the first that fails.
pub fn check_task_indexes(su: &mut Client) -> Vec<String> {
    su.batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        .unwrap_or_else(|e| panic!("CREATE EXTENSION amcheck: {}", describe(&e)));
    let indexes = task_btree_indexes(su);
    for index in &indexes {
        su.execute(
            "SELECT bt_index_parent_check($1::text::regclass, heapallindexed => true)",
            &[index],
        )
        .unwrap_or_else(|e| panic!("bt_index_parent_check({index}): {}", describe(&e)));
    }
    indexes
}
