//! `#[pg_test]`s of `store::am::update`, the statement-free `SELECT ...
//! FOR UPDATE SKIP LOCKED` + `UPDATE` behind a claim: called directly on
//! scratch tables (what it updates and in which order, what it reads, the
//! constraints and indexes it keeps, when it declines), then through
//! `queue_claim` (the statement takes over when a trigger needs it).
//! Rows locked by other transactions, and rows changed since a REPEATABLE
//! READ snapshot, are in tests/isolation/specs/claim-skip-locked.spec and
//! claim-repeatable-read.spec. Same conventions as `tests.rs`: one
//! transaction per test, rolled back.

#[pgrx::pg_schema]
mod tests {
    use pgrx::pg_sys::{self, Datum};
    use pgrx::prelude::*;

    use crate::store::am::update::{self as direct_update, Changes, Key, CALLS};
    use crate::store::am::{Admission, Row};
    use crate::tests::tests::{claim, count, enqueue, exec, fail, field, one, text_field};

    /// Rows 1..=5 with n = 10 × id, an index on n, and the constraints a
    /// change can break.
    fn scratch(name: &str) {
        exec(&format!(
            "CREATE TABLE {name} (id bigint PRIMARY KEY, kind text, n int NOT NULL CHECK (n < 100))"
        ));
        exec(&format!("CREATE INDEX {name}_n ON {name} (n)"));
        exec(&format!(
            "INSERT INTO {name} SELECT g, 'k' || g, g * 10 FROM generate_series(1, 5) g"
        ));
    }

    fn oid(name: &str) -> pg_sys::Oid {
        one::<pg_sys::Oid>(&format!("SELECT '{name}'::regclass::oid"))
    }

    /// `id <op> value` on the primary key.
    fn id(strategy: u32, procedure: u32, value: i64) -> Key {
        Key {
            column: 1,
            strategy: strategy as u16,
            procedure: pg_sys::Oid::from(procedure),
            argument: Datum::from(value),
        }
    }

    fn at_least(value: i64) -> Key {
        id(
            pg_sys::BTGreaterEqualStrategyNumber,
            pg_sys::F_INT8GE,
            value,
        )
    }

    fn below(value: i64) -> Key {
        id(pg_sys::BTLessStrategyNumber, pg_sys::F_INT8LT, value)
    }

    /// Adds `by` to n of up to `limit` rows of `table` met in `ranges` of
    /// its primary key whose kind is not `except`; (id, new n) of each.
    fn add(
        table: &str,
        ranges: &[&[Key]],
        limit: usize,
        except: &str,
        by: i32,
    ) -> Option<Vec<(i64, i32)>> {
        direct_update::update_in_order(
            oid(table),
            oid(&format!("{table}_pkey")),
            ranges,
            limit,
            &[],
            &Admission::any(),
            |row: &Row| row.text(c"kind").as_deref() != Some(except),
            |row: &Row, new: &mut Changes<'_>| {
                let n = row.get(c"n").expect("n").value() as i32;
                new.set(c"n", Some(Datum::from(n + by)))
            },
            |row: &Row| {
                let n = row.get(c"n").expect("n").value() as i32;
                (row.int8(c"id").expect("id"), n)
            },
        )
        .ok()
    }

    fn rows(table: &str) -> String {
        one::<String>(&format!(
            "SELECT string_agg(id || ':' || n, ',' ORDER BY id) FROM {table}"
        ))
    }

    /// Rows found by `n = value` through the index on n alone.
    fn by_index(table: &str, value: i32) -> String {
        exec("SET LOCAL enable_seqscan = off");
        exec("SET LOCAL enable_bitmapscan = off");
        let found = one::<String>(&format!(
            "SELECT coalesce(string_agg(id::text, ','), '') FROM {table} WHERE n = {value}"
        ));
        exec("RESET enable_seqscan");
        exec("RESET enable_bitmapscan");
        found
    }

    #[pg_test]
    fn updates_rows_in_index_order_up_to_the_limit_and_reads_the_new_versions() {
        scratch("s");
        assert_eq!(
            add("s", &[&[at_least(2)]], 2, "", 1),
            Some(vec![(2, 21), (3, 31)])
        );
        assert_eq!(rows("s"), "1:10,2:21,3:31,4:40,5:50");
        assert_eq!(by_index("s", 21), "2", "the new version is in the index");
        assert_eq!(by_index("s", 20), "", "the old one is not found there");
    }

    /// A change of a column only a BRIN index covers: from 16 the update is
    /// HOT and heap asks for the summarizing indexes alone (TU_Summarizing,
    /// pg_compat::tuple_update), so the summary must come to cover the new
    /// value while the primary key gets no entry; 15 updates every index.
    #[pg_test]
    fn an_update_of_a_summarized_column_widens_its_summary() {
        exec("CREATE TABLE b (id bigint PRIMARY KEY, kind text, n int NOT NULL)");
        exec("INSERT INTO b SELECT g, 'k' || g, g * 10 FROM generate_series(1, 5) g");
        exec("CREATE INDEX b_n ON b USING brin (n)");
        assert_eq!(
            add("b", &[&[at_least(5)]], 1, "", 1000),
            Some(vec![(5, 1050)])
        );
        assert_eq!(
            add("b", &[&[at_least(5)]], 1, "", 1),
            Some(vec![(5, 1051)]),
            "the primary key still finds the row, once"
        );
        exec("SET LOCAL enable_seqscan = off");
        let found =
            one::<String>("SELECT coalesce(string_agg(id::text, ','), '') FROM b WHERE n = 1051");
        exec("RESET enable_seqscan");
        assert_eq!(found, "5", "the BRIN summary covers the new value");
        // An entry for a heap-only version is never found (a scan does not
        // start a chain there), only counted: one leaf page, its entries.
        exec("CREATE EXTENSION pageinspect");
        let pkey_entries = one::<i64>("SELECT count(*) FROM bt_page_items('b_pkey', 1)");
        // 15 never makes such an update HOT: 5 rows, 2 new versions.
        let expected = if cfg!(feature = "pg15") { 7 } else { 5 };
        assert_eq!(pkey_entries, expected, "entries in the primary key");
    }

    /// Each range is read in turn, in the index's order; rows that do not
    /// hold are passed over and do not count against the limit.
    #[pg_test]
    fn reads_its_ranges_in_turn_and_passes_over_rows_that_do_not_hold() {
        scratch("s");
        let read = add("s", &[&[at_least(4)], &[below(3)]], 3, "k4", 1);
        assert_eq!(read, Some(vec![(5, 51), (1, 11), (2, 21)]));
        assert_eq!(rows("s"), "1:11,2:21,3:30,4:40,5:51");
        assert_eq!(add("s", &[&[at_least(1)]], 0, "", 1), Some(vec![]));
    }

    /// Each call is a statement of its own: it sees what earlier ones wrote,
    /// its own earlier calls included.
    #[pg_test]
    fn sees_the_writes_of_earlier_statements_and_calls() {
        scratch("s");
        exec("UPDATE s SET kind = 'k1' WHERE id = 2");
        assert_eq!(
            add("s", &[&[below(9)]], 9, "k1", 1),
            Some(vec![(3, 31), (4, 41), (5, 51)])
        );
        assert_eq!(
            add("s", &[&[at_least(4)]], 9, "", 1),
            Some(vec![(4, 42), (5, 52)])
        );
        exec("INSERT INTO s VALUES (6, 'k6', 60)");
        assert_eq!(add("s", &[&[at_least(6)]], 9, "", 1), Some(vec![(6, 61)]));
        assert_eq!(by_index("s", 52), "5");
    }

    /// Gives row 1 of a scratch table s the values `change` sets.
    fn change_the_first_row(change: impl Fn(&mut Changes<'_>) -> bool) {
        direct_update::update_in_order(
            oid("s"),
            oid("s_pkey"),
            &[&[at_least(1)]],
            1,
            &[],
            &Admission::any(),
            |_: &Row| true,
            |_: &Row, new: &mut Changes<'_>| change(new),
            |_: &Row| (),
        )
        .expect("the scratch table is admitted");
    }

    #[pg_test(error = "new row for relation \"s\" violates check constraint \"s_n_check\"")]
    fn a_change_that_breaks_a_check_constraint_fails() {
        scratch("s");
        add("s", &[&[at_least(5)]], 1, "", 50);
    }

    #[pg_test(error = "null value in column \"n\" of relation \"s\" violates not-null constraint")]
    fn a_change_that_breaks_a_not_null_constraint_fails() {
        scratch("s");
        change_the_first_row(|new| new.set(c"n", None));
    }

    #[pg_test(error = "duplicate key value violates unique constraint \"s_pkey\"")]
    fn a_change_that_breaks_a_unique_index_fails() {
        scratch("s");
        change_the_first_row(|new| new.set(c"id", Some(Datum::from(5i64))));
    }

    #[pg_test(error = "update_in_order: a change names a column the table does not have")]
    fn a_change_naming_a_missing_column_fails() {
        scratch("s");
        change_the_first_row(|new| new.set(c"colour", None));
    }

    #[pg_test(error = "cannot execute UPDATE in a read-only transaction")]
    fn an_update_in_a_read_only_transaction_is_refused() {
        scratch("s");
        exec("SET LOCAL transaction_read_only = on");
        add("s", &[&[at_least(1)]], 1, "", 1);
    }

    /// Each case on its own table: None, and every row is as it was.
    #[pg_test]
    fn an_update_declines_whatever_needs_the_executor() {
        exec(
            "CREATE FUNCTION pg_temp.keep() RETURNS trigger LANGUAGE plpgsql
             AS 'BEGIN RETURN NEW; END'",
        );
        let cases = [
            (
                "u1",
                "a trigger",
                "CREATE TRIGGER t BEFORE UPDATE ON u1 FOR EACH ROW EXECUTE FUNCTION pg_temp.keep()",
            ),
            (
                "u2",
                "row-level security",
                "ALTER TABLE u2 ENABLE ROW LEVEL SECURITY",
            ),
        ];
        for (table, case, ddl) in cases {
            scratch(table);
            exec(ddl);
            assert_eq!(add(table, &[&[at_least(1)]], 9, "", 1), None, "{case}");
            assert_eq!(rows(table), "1:10,2:20,3:30,4:40,5:50", "{case}");
        }
    }

    /// 18's virtual generated columns are the executor's: declined (before
    /// 18 no table can have one).
    #[pg_test]
    fn an_update_declines_a_virtual_generated_column() {
        if one::<i32>("SELECT current_setting('server_version_num')::int") < 180000 {
            return;
        }
        scratch("v");
        exec("ALTER TABLE v ADD COLUMN twice int GENERATED ALWAYS AS (n * 2) VIRTUAL NOT NULL");
        assert_eq!(add("v", &[&[at_least(1)]], 9, "", 1), None);
        assert_eq!(rows("v"), "1:10,2:20,3:30,4:40,5:50");
    }

    fn calls() -> u64 {
        CALLS.with(|c| c.get())
    }

    fn claimed_ids(queue: &str, max: i32) -> Vec<i64> {
        claim(queue, &format!(", max => {max}"))
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    /// Through `queue_claim`: service order (priority, then enqueue order),
    /// each task put in flight under the next token and a lease, found by
    /// the in-flight index and no longer by the ready one.
    #[pg_test]
    fn queue_claim_puts_tasks_in_flight_directly() {
        exec("SET LOCAL aedb_queue.claim_rescan_interval = 0");
        let a = enqueue("dc", "");
        let b = enqueue("dc", "");
        let urgent = enqueue("dc", ", priority => 5");
        let before = calls();
        assert_eq!(claimed_ids("dc", 2), vec![urgent, a]);
        assert_eq!(calls() - before, 1, "one direct call");
        for id in [urgent, a] {
            assert_eq!(text_field(id, "state").as_deref(), Some("in_flight"));
            assert_eq!(field::<i32>(id, "attempts"), Some(1));
            assert_eq!(field::<i64>(id, "fencing_token"), Some(1));
            assert_eq!(text_field(id, "owner_id").as_deref(), Some("w1"));
            assert_eq!(
                field::<bool>(
                    id,
                    "lease_deadline > updated_at AND updated_at >= created_at"
                ),
                Some(true)
            );
        }
        exec("SET LOCAL enable_seqscan = off");
        exec("SET LOCAL enable_bitmapscan = off");
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'dc' AND state = 'in_flight' AND lease_deadline IS NOT NULL"),
            2,
            "both in the in-flight index"
        );
        assert_eq!(
            count("aedb_queue.task WHERE queue = 'dc' AND state = 'ready'"),
            1,
            "only b in the ready index"
        );
        exec("RESET enable_seqscan");
        exec("RESET enable_bitmapscan");
        // Handed back and claimed again: the next attempt and token.
        let token: i64 = field(a, "fencing_token").expect("token");
        assert_eq!(fail("dc", a, token, ", retry_in => '0'"), "applied");
        assert_eq!(claimed_ids("dc", 5), vec![a, b]);
        assert_eq!(field::<i32>(a, "attempts"), Some(2));
        assert_eq!(field::<i64>(a, "fencing_token"), Some(2));
        assert!(claimed_ids("dc", 5).is_empty());
    }

    /// With an update trigger on the task table the claim is the statement,
    /// and the trigger sees each task put in flight.
    #[pg_test]
    fn queue_claim_uses_the_statement_when_the_task_table_has_a_trigger() {
        exec("CREATE TEMP TABLE put_in_flight (task_id bigint, token bigint)");
        exec(
            "CREATE FUNCTION pg_temp.record() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO pg_temp.put_in_flight VALUES (NEW.task_id, NEW.fencing_token);
             RETURN NEW; END $$",
        );
        exec(
            "CREATE TRIGGER record AFTER UPDATE ON aedb_queue.task
             FOR EACH ROW WHEN (NEW.state = 'in_flight') EXECUTE FUNCTION pg_temp.record()",
        );
        let id = enqueue("dct", "");
        let before = calls();
        assert_eq!(claimed_ids("dct", 1), vec![id]);
        assert_eq!(calls(), before, "declined before counting");
        assert_eq!(
            one::<String>("SELECT task_id || ':' || token FROM put_in_flight"),
            format!("{id}:1")
        );
    }
}
