//! `#[pg_test]`s of `store::bulk`, the COPY-style writer behind
//! `queue_enqueue_batch`: called directly on scratch tables (rows, indexes,
//! constraints, when it declines), then through the SQL function (it is the
//! path taken, and the executor's INSERT takes over when a trigger needs it).
//! Same conventions as `tests.rs`: one transaction per test, rolled back.

#[pgrx::pg_schema]
mod tests {
    use pgrx::pg_sys;
    use pgrx::prelude::*;

    use crate::store::am::insert::{self as bulk, Values, WRITES};
    use crate::store::am::Admission;
    use crate::tests::tests::{count, exec, ints, one};

    /// id (primary key, positive), kind (NOT NULL), note; partial indexes on
    /// kind and on an expression, for odd ids.
    fn scratch(name: &str) {
        exec(&format!(
            "CREATE TABLE {name} (id bigint PRIMARY KEY CHECK (id > 0), kind text NOT NULL, note text)"
        ));
        exec(&format!(
            "CREATE INDEX {name}_odd ON {name} (kind) WHERE id % 2 = 1"
        ));
        exec(&format!(
            "CREATE INDEX {name}_odd_desc ON {name} ((-id)) WHERE id % 2 = 1"
        ));
    }

    fn relid(table: &str) -> pg_sys::Oid {
        one::<pg_sys::Oid>(&format!("SELECT '{table}'::regclass::oid"))
    }

    fn datums<T: IntoDatum + Copy>(values: &[T]) -> Vec<Option<pg_sys::Datum>> {
        values.iter().map(|v| v.into_datum()).collect()
    }

    /// Writes rows (id, kind) to `table` with `kind` the same in each.
    fn write(table: &str, ids: &[i64], kind: Option<&str>) -> bool {
        let ids = datums(ids);
        let kind = kind.and_then(IntoDatum::into_datum);
        let kinds = vec![kind; ids.len()];
        let columns = [
            (c"id", Values::PerRow(&ids)),
            (c"kind", Values::PerRow(&kinds)),
        ];
        bulk::write(relid(table), &columns, ids.len(), &Admission::any()).is_ok()
    }

    fn amcheck(index: &str) {
        exec("CREATE EXTENSION IF NOT EXISTS amcheck");
        // heapallindexed: every heap row the index should hold is in it.
        exec(&format!("SELECT bt_index_check('{index}'::regclass, true)"));
    }

    #[pg_test]
    fn writes_each_row_with_its_values_and_null_in_the_columns_left_out() {
        scratch("s");
        let ids: Vec<i64> = (1..=150).collect(); // several heap_multi_insert calls
        assert!(write("s", &ids, Some("a")));
        assert_eq!(ints("SELECT id FROM s ORDER BY id"), ids);
        assert_eq!(count("s WHERE kind = 'a' AND note IS NULL"), 150);
    }

    #[pg_test]
    fn every_index_gets_the_rows_its_predicate_admits() {
        scratch("s");
        assert!(write("s", &(1..=150).collect::<Vec<_>>(), Some("a")));
        amcheck("s_pkey");
        amcheck("s_odd");
        // heapallindexed recomputes each entry's expression from its row.
        amcheck("s_odd_desc");
        exec("SET LOCAL enable_seqscan = off");
        exec("SET LOCAL enable_bitmapscan = off");
        let through_partial_index = "SELECT count(*) FROM s WHERE kind = 'a' AND id % 2 = 1";
        let plan = format!("{:?}", Spi::explain(through_partial_index).unwrap().0);
        assert!(plan.contains("s_odd"), "{plan}");
        assert_eq!(one::<i64>(through_partial_index), 75);
        let through_expression = "SELECT count(*) FROM s WHERE -id < -100 AND id % 2 = 1";
        let plan = format!("{:?}", Spi::explain(through_expression).unwrap().0);
        assert!(plan.contains("s_odd_desc"), "{plan}");
        assert_eq!(one::<i64>(through_expression), 25);
        assert_eq!(
            one::<i64>("SELECT count(*) FROM s WHERE id BETWEEN 1 AND 150"),
            150
        );
    }

    /// The indexes are kept between writes (`store::index_cache`); one
    /// created or dropped after a write is seen by the next.
    #[pg_test]
    fn a_write_after_an_index_is_created_or_dropped_fills_the_indexes_there_are() {
        scratch("s");
        assert!(write("s", &[1, 3], Some("a")));
        exec("CREATE INDEX s_kind ON s (kind, id) WHERE id > 2");
        assert!(write("s", &[5, 7], Some("b")));
        amcheck("s_kind");
        exec("SET LOCAL enable_seqscan = off");
        exec("SET LOCAL enable_bitmapscan = off");
        let through_new = "SELECT count(*) FROM s WHERE kind = 'b' AND id > 2";
        let plan = format!("{:?}", Spi::explain(through_new).unwrap().0);
        assert!(plan.contains("s_kind"), "{plan}");
        assert_eq!(one::<i64>(through_new), 2);
        exec("DROP INDEX s_odd");
        assert!(write("s", &[9], Some("c")));
        amcheck("s_pkey");
        amcheck("s_kind");
        amcheck("s_odd_desc");
        assert_eq!(count("s"), 5);
    }

    /// An index of another kind than btree is filled too (such a table's
    /// indexes are opened on every write, not kept).
    #[pg_test]
    fn a_hash_index_is_filled() {
        scratch("s");
        exec("CREATE INDEX s_kind_hash ON s USING hash (kind)");
        assert!(write("s", &[1, 2, 3], Some("h")));
        assert!(write("s", &[4], Some("h")));
        exec("SET LOCAL enable_seqscan = off");
        exec("SET LOCAL enable_bitmapscan = off");
        let through_hash = "SELECT count(*) FROM s WHERE kind = 'h'";
        let plan = format!("{:?}", Spi::explain(through_hash).unwrap().0);
        assert!(plan.contains("s_kind_hash"), "{plan}");
        assert_eq!(one::<i64>(through_hash), 4);
        amcheck("s_odd");
    }

    #[pg_test]
    fn rows_written_are_visible_to_the_next_statement_of_the_transaction() {
        scratch("s");
        assert!(write("s", &[1, 2], Some("a")));
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM s").unwrap(),
            Some(2)
        );
    }

    #[pg_test(error = "cannot execute INSERT in a read-only transaction")]
    fn a_read_only_transaction_is_refused() {
        scratch("s");
        exec("SET LOCAL transaction_read_only = on");
        write("s", &[1], Some("a"));
    }

    #[pg_test(error = "duplicate key value violates unique constraint \"s_pkey\"")]
    fn a_duplicate_key_is_an_error() {
        scratch("s");
        write("s", &[1, 2, 1], Some("a"));
    }

    #[pg_test(error = "new row for relation \"s\" violates check constraint \"s_id_check\"")]
    fn a_check_constraint_is_enforced() {
        scratch("s");
        write("s", &[1, 0], Some("a"));
    }

    #[pg_test(
        error = "null value in column \"kind\" of relation \"s\" violates not-null constraint"
    )]
    fn a_not_null_column_is_enforced() {
        scratch("s");
        write("s", &[1], None);
    }

    /// Each case on its own table: `write` returns false and writes nothing.
    #[pg_test]
    fn declines_whatever_needs_the_executor() {
        let cases: [(&str, &[&str]); 4] = [
            (
                "a trigger",
                &[
                    "CREATE FUNCTION pg_temp.noop() RETURNS trigger LANGUAGE plpgsql
                     AS 'BEGIN RETURN NEW; END'",
                    "CREATE TRIGGER t BEFORE INSERT ON d1 FOR EACH ROW EXECUTE FUNCTION pg_temp.noop()",
                ],
            ),
            ("row-level security", &["ALTER TABLE d2 ENABLE ROW LEVEL SECURITY"]),
            (
                "a default on a column left out",
                &["ALTER TABLE d3 ADD COLUMN made timestamptz DEFAULT now()"],
            ),
            (
                "a NOT NULL column left out",
                &["ALTER TABLE d4 ADD COLUMN owner text NOT NULL"],
            ),
        ];
        for (i, (case, ddl)) in cases.iter().enumerate() {
            let table = format!("d{}", i + 1);
            scratch(&table);
            for statement in ddl.iter() {
                exec(statement);
            }
            assert!(!write(&table, &[1, 2], Some("a")), "{case}");
            assert_eq!(count(&table), 0, "{case}");
        }
        // A column that does not exist.
        scratch("d5");
        let ids = datums(&[1i64]);
        let columns = [
            (c"id", Values::PerRow(&ids)),
            (c"colour", Values::Same(pg_sys::Datum::from(0usize))),
        ];
        assert!(!bulk::write(relid("d5"), &columns, 1, &Admission::any()).is_ok());
        assert_eq!(count("d5"), 0);
    }

    /// Columns are found by name in whatever order they are named, past a
    /// dropped column; a prefix of a column's name is not its name, and a
    /// column named twice is declined.
    #[pg_test]
    fn finds_each_column_by_its_whole_name_in_any_order() {
        scratch("o");
        exec("ALTER TABLE o ADD COLUMN gone int, ADD COLUMN kindness text");
        exec("ALTER TABLE o DROP COLUMN gone");
        let ids = datums(&[1i64, 2]);
        let kind = "a".into_datum().unwrap();
        let notes = vec!["n".into_datum(); 2];
        let columns = [
            (c"kindness", Values::PerRow(&notes)),
            (c"note", Values::PerRow(&notes)),
            (c"kind", Values::Same(kind)),
            (c"id", Values::PerRow(&ids)),
        ];
        assert!(bulk::write(relid("o"), &columns, 2, &Admission::any()).is_ok());
        assert_eq!(
            count("o WHERE kind = 'a' AND note = 'n' AND kindness = 'n'"),
            2
        );
        let prefix = [(c"id", Values::PerRow(&ids)), (c"kin", Values::Same(kind))];
        assert!(!bulk::write(relid("o"), &prefix, 2, &Admission::any()).is_ok());
        let twice = [
            (c"id", Values::PerRow(&ids)),
            (c"kind", Values::Same(kind)),
            (c"kind", Values::Same(kind)),
        ];
        assert!(!bulk::write(relid("o"), &twice, 2, &Admission::any()).is_ok());
        assert_eq!(count("o"), 2);
    }

    // ------------------------------------------------------------------
    // Through queue_enqueue_batch.
    // ------------------------------------------------------------------

    /// A trigger on the task table that records each new row in
    /// `pg_temp.seen`, in insert order (triggers run under the extension's
    /// pinned search_path, hence `pg_temp.`).
    fn record_task_inserts() {
        exec(
            "CREATE TEMP TABLE seen (n serial, task_id bigint, state text, payload jsonb,
                                     key text, due interval)",
        );
        exec(
            "CREATE FUNCTION pg_temp.record() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO pg_temp.seen (task_id, state, payload, key, due)
                 VALUES (NEW.task_id, NEW.state::text, NEW.payload, NEW.idempotency_key,
                         NEW.not_before - NEW.created_at);
                 RETURN NEW;
             END $$",
        );
        exec(
            "CREATE TRIGGER record AFTER INSERT ON aedb_queue.task
             FOR EACH ROW EXECUTE FUNCTION pg_temp.record()",
        );
    }

    fn writes() -> u64 {
        WRITES.with(|w| w.get())
    }

    #[pg_test]
    fn enqueue_batch_writes_through_bulk() {
        let before = writes();
        let ids = ints(
            "SELECT aedb_queue.queue_enqueue_batch('bulk',
                 ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 150) g))",
        );
        assert_eq!(writes(), before + 1);
        assert_eq!(
            ints("SELECT task_id FROM aedb_queue.task WHERE queue = 'bulk' ORDER BY (payload->>'n')::int"),
            ids
        );
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'bulk' AND state = 'ready'"),
            150
        );
        amcheck("aedb_queue.task_pkey");
        amcheck("aedb_queue.task_ready_idx");
        amcheck("aedb_queue.task_scheduled_idx");
        assert_eq!(
            crate::tests::tests::claim("bulk", ", max => 200").len(),
            150
        );
    }

    /// With a trigger on the task table the batch goes through INSERT, with
    /// the same rows: the trigger sees each, in payload order. (Triggers run
    /// under the extension's pinned search_path, hence `pg_temp.seen`.)
    #[pg_test]
    fn enqueue_batch_uses_insert_when_the_task_table_has_a_trigger() {
        record_task_inserts();
        let before = writes();
        let ids = ints(
            r#"SELECT aedb_queue.queue_enqueue_batch('trig', ARRAY['{"a": 1}', NULL, '{"a": 3}']::jsonb[],
                   delay => '1 minute', priority => 4, max_attempts => 2)"#,
        );
        assert_eq!(writes(), before);
        assert_eq!(ints("SELECT task_id FROM seen ORDER BY n"), ids);
        assert_eq!(
            count(
                "seen WHERE state = 'scheduled' AND due = '1 minute'
                 AND payload IS NOT DISTINCT FROM CASE n WHEN 1 THEN '{\"a\": 1}'::jsonb
                                                         WHEN 3 THEN '{\"a\": 3}'::jsonb END"
            ),
            3
        );
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'trig' AND priority = 4 AND max_attempts = 2"),
            3
        );
    }

    /// The task's row, column by column, as one text.
    fn task_row(task_id: i64) -> String {
        one::<String>(&format!(
            "SELECT concat_ws('|', queue, state, priority, attempts, max_attempts, backoff_base,
                              backoff_max, fencing_token, owner_id IS NULL, lease_deadline IS NULL,
                              payload, progress IS NULL, last_error IS NULL, idempotency_key,
                              not_before - created_at, created_at = updated_at)
             FROM aedb_queue.task WHERE task_id = {task_id}"
        ))
    }

    fn enqueued_id(sql: &str) -> i64 {
        one::<i64>(&format!("SELECT (aedb_queue.queue_enqueue({sql})).task_id"))
    }

    /// A single enqueue takes the same path as a batch: every column is what
    /// the INSERT wrote, and each index holds the entries its state needs.
    #[pg_test]
    fn enqueue_writes_one_row_through_bulk() {
        let before = writes();
        let ready = enqueued_id(r#"'one', '{"n": 1}', priority => 3, max_attempts => 4"#);
        let later = enqueued_id(
            r#"'one', NULL, delay => '5 minutes', backoff_base => '2 seconds', backoff_max => '1 minute'"#,
        );
        let keyed = enqueued_id(r#"'one', '{"n": 3}', idempotency_key => 'k1'"#);
        assert_eq!(writes(), before + 3);
        assert_eq!(
            task_row(ready),
            r#"one|ready|3|0|4|00:00:01|00:01:00|0|t|t|{"n": 1}|t|t|00:00:00|t"#
        );
        assert_eq!(
            task_row(later),
            "one|scheduled|0|0|5|00:00:02|00:01:00|0|t|t|t|t|00:05:00|t"
        );
        assert_eq!(
            task_row(keyed),
            r#"one|ready|0|0|5|00:00:01|00:01:00|0|t|t|{"n": 3}|t|t|k1|00:00:00|t"#
        );
        // The same key again finds the task written above.
        assert_eq!(
            one::<i64>("SELECT task_id FROM aedb_queue.queue_enqueue('one', NULL, idempotency_key => 'k1')"),
            keyed
        );
        for index in [
            "task_pkey",
            "task_ready_idx",
            "task_scheduled_idx",
            "task_in_flight_idx",
            "task_dead_idx",
        ] {
            amcheck(&format!("aedb_queue.{index}"));
        }
        exec("SET LOCAL enable_seqscan = off");
        exec("SET LOCAL enable_bitmapscan = off");
        // Through each partial index: a row in the wrong one would count.
        assert_eq!(
            ints("SELECT task_id FROM aedb_queue.task WHERE queue = 'one' AND state = 'ready' ORDER BY task_id"),
            vec![ready, keyed]
        );
        assert_eq!(
            ints("SELECT task_id FROM aedb_queue.task WHERE queue = 'one' AND state = 'scheduled' ORDER BY not_before"),
            vec![later]
        );
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'one' AND state = 'dead' AND task_id > 0"),
            0
        );
        let claimed = crate::tests::tests::claim("one", ", max => 5");
        assert_eq!(claimed.len(), 2);
    }

    /// With a trigger on the task table a single enqueue goes through the
    /// INSERT, key and delay included.
    #[pg_test]
    fn enqueue_uses_insert_when_the_task_table_has_a_trigger() {
        record_task_inserts();
        let before = writes();
        let id = enqueued_id("'trig', NULL, delay => '1 minute', idempotency_key => 'k2'");
        assert_eq!(writes(), before);
        assert_eq!(
            one::<String>("SELECT concat_ws('|', task_id, state, key, due) FROM seen"),
            format!("{id}|scheduled|k2|00:01:00")
        );
        assert_eq!(
            task_row(id),
            "trig|scheduled|0|0|5|00:00:01|00:01:00|0|t|t|t|t|k2|00:01:00|t"
        );
    }
}
