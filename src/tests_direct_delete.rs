//! `#[pg_test]`s of `store::am::delete`, the statement-free DELETE behind
//! a completion: called directly on scratch tables (what it deletes, what
//! it reads, when it declines), then through `queue_complete` and
//! `queue_complete_batch` (the statement takes over when a trigger needs
//! it).
//! A concurrent update is in tests/isolation/specs/
//! complete-after-concurrent-update.spec. Same conventions as `tests.rs`:
//! one transaction per test, rolled back.

#[pgrx::pg_schema]
mod tests {
    use pgrx::pg_sys;
    use pgrx::prelude::*;

    use crate::store::am::delete::{self as direct_delete, CALLS};
    use crate::store::am::{Admission, Row};
    use crate::tests::tests::{claim_one, count, enqueue, exec, one};

    fn scratch(name: &str) {
        exec(&format!(
            "CREATE TABLE {name} (id bigint PRIMARY KEY, kind text, n int)"
        ));
        exec(&format!(
            "INSERT INTO {name} SELECT g, 'k' || g, g * 10 FROM generate_series(1, 5) g"
        ));
    }

    fn relid(table: &str) -> pg_sys::Oid {
        one::<pg_sys::Oid>(&format!("SELECT '{table}'::regclass::oid"))
    }

    /// Deletes row `id` of `table` if its kind is `kind`; returns its n.
    fn delete(table: &str, id: i64, kind: &str) -> Option<Option<i64>> {
        direct_delete::delete_by_key(
            relid(table),
            id,
            &Admission::any(),
            |row: &Row| row.text(c"kind").as_deref() == Some(kind),
            |row: &Row| row.int8(c"id").expect("id") * 1000,
        )
        .ok()
    }

    fn ids(table: &str) -> String {
        one::<String>(&format!(
            "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM {table}"
        ))
    }

    #[pg_test]
    fn deletes_the_row_only_when_it_holds_and_reads_the_deleted_version() {
        scratch("s");
        assert_eq!(delete("s", 2, "k2"), Some(Some(2000)));
        assert_eq!(
            delete("s", 3, "k2"),
            Some(None),
            "held by a row of another kind"
        );
        assert_eq!(delete("s", 9, "k9"), Some(None), "no such row");
        assert_eq!(delete("s", 2, "k2"), Some(None), "already deleted");
        assert_eq!(ids("s"), "1,3,4,5", "visible to the next statement");
    }

    /// Many keys in one call: each judged on its own row, read in the order
    /// of the keys; a missing key and a key named again delete nothing.
    #[pg_test]
    fn deletes_many_keys_each_judged_on_its_row() {
        scratch("s");
        let read = direct_delete::delete_by_keys(
            relid("s"),
            &[4, 9, 1, 2, 4],
            &Admission::any(),
            |row: &Row| row.int8(c"n") != Some(20),
            |row: &Row| (row.int8(c"id").expect("id"), row.text(c"kind")),
        );
        assert_eq!(
            read,
            Ok(vec![(4, Some("k4".into())), (1, Some("k1".into()))]),
            "2 held by n = 20; 9 missing; 4 once"
        );
        assert_eq!(ids("s"), "2,3,5");
        let none = direct_delete::delete_by_keys(
            relid("s"),
            &[],
            &Admission::any(),
            |_: &Row| true,
            |_: &Row| (),
        );
        assert_eq!(none, Ok(vec![]));
    }

    #[pg_test]
    fn sees_the_writes_of_earlier_statements_of_the_transaction() {
        scratch("s");
        exec("UPDATE s SET kind = 'changed' WHERE id = 4");
        assert_eq!(delete("s", 4, "k4"), Some(None));
        assert_eq!(delete("s", 4, "changed"), Some(Some(4000)));
        exec("INSERT INTO s VALUES (7, 'new', 0)");
        assert_eq!(delete("s", 7, "new"), Some(Some(7000)));
        assert_eq!(ids("s"), "1,2,3,5");
    }

    #[pg_test]
    fn null_and_missing_columns_read_as_none() {
        scratch("s");
        exec("UPDATE s SET kind = NULL WHERE id = 1");
        let read = direct_delete::delete_by_key(
            relid("s"),
            1,
            &Admission::any(),
            |row: &Row| row.text(c"kind").is_none() && row.get(c"colour").is_none(),
            |row: &Row| (row.text(c"kind"), row.int8(c"n")),
        );
        assert_eq!(read, Ok(Some((None, Some(10)))));
    }

    #[pg_test(error = "cannot execute DELETE in a read-only transaction")]
    fn a_delete_in_a_read_only_transaction_is_refused() {
        scratch("s");
        exec("SET LOCAL transaction_read_only = on");
        delete("s", 1, "k1");
    }

    /// Each case on its own table: None, and every row is still there.
    #[pg_test]
    fn a_delete_declines_whatever_needs_the_executor() {
        let cases: [(&str, &str); 5] = [
            (
                "a trigger",
                "CREATE TRIGGER t BEFORE DELETE ON d1 FOR EACH ROW EXECUTE FUNCTION pg_temp.keep()",
            ),
            (
                "row-level security",
                "ALTER TABLE d2 ENABLE ROW LEVEL SECURITY",
            ),
            ("no primary key", "ALTER TABLE d3 DROP CONSTRAINT d3_pkey"),
            (
                "a two-column primary key",
                "ALTER TABLE d4 DROP CONSTRAINT d4_pkey, ADD PRIMARY KEY (id, n)",
            ),
            (
                "a primary key not of bigint",
                "ALTER TABLE d5 DROP CONSTRAINT d5_pkey, ADD PRIMARY KEY (n)",
            ),
        ];
        exec(
            "CREATE FUNCTION pg_temp.keep() RETURNS trigger LANGUAGE plpgsql
             AS 'BEGIN RETURN OLD; END'",
        );
        for (i, (case, ddl)) in cases.iter().enumerate() {
            let table = format!("d{}", i + 1);
            scratch(&table);
            exec(ddl);
            assert_eq!(delete(&table, 1, "k1"), None, "{case}");
            assert_eq!(ids(&table), "1,2,3,4,5", "{case}");
        }
    }

    fn calls() -> u64 {
        CALLS.with(|c| c.get())
    }

    fn complete(queue: &str, task_id: i64, token: i64) -> String {
        one::<String>(&format!(
            "SELECT aedb_queue.queue_complete('{queue}', {task_id}, {token})::text"
        ))
    }

    /// Each part of the fence on the direct path: the queue, the token, the
    /// state; every call tries the direct path, and an applied one runs no
    /// statement.
    #[pg_test]
    fn queue_complete_deletes_directly_under_the_fence() {
        let id = enqueue("dd", "");
        let ready = enqueue("dd", "");
        let (claimed, token) = claim_one("dd");
        assert_eq!(claimed, id);
        let before = calls();
        assert_eq!(complete("other", id, token), "lease_lost", "another queue");
        assert_eq!(complete("dd", id, token + 1), "lease_lost", "another token");
        assert_eq!(complete("dd", ready, 0), "lease_lost", "not in flight");
        assert_eq!(count("aedb_queue.task WHERE queue = 'dd'"), 2);
        let statements = crate::store::statements_run();
        assert_eq!(complete("dd", id, token), "applied");
        assert_eq!(
            crate::store::statements_run(),
            statements,
            "applied without one"
        );
        assert_eq!(complete("dd", id, token), "lease_lost", "gone");
        // A fenced-out one is also tried as a parent (a statement).
        assert_eq!(calls() - before, 5);
        assert_eq!(
            one::<i64>("SELECT task_id FROM aedb_queue.task WHERE queue = 'dd'"),
            ready
        );
    }

    fn complete_batch(queue: &str, pairs: &[(i64, i64)]) -> String {
        let ids: Vec<String> = pairs.iter().map(|p| p.0.to_string()).collect();
        let tokens: Vec<String> = pairs.iter().map(|p| p.1.to_string()).collect();
        one::<String>(&format!(
            "SELECT string_agg(outcome::text, ',' ORDER BY n)
             FROM aedb_queue.queue_complete_batch('{queue}', '{{{}}}', '{{{}}}')
                  WITH ORDINALITY AS b(task_id, outcome, n)",
            ids.join(","),
            tokens.join(",")
        ))
    }

    /// A batch on the direct path: one call for the batch, each task under
    /// its own token and fence (queue, state, token), a pair named twice
    /// applied once.
    #[pg_test]
    fn queue_complete_batch_deletes_directly_under_the_fence() {
        let a = enqueue("db", "");
        let b = enqueue("db", "");
        let elsewhere = enqueue("db_other", "");
        let stale = enqueue("db", "");
        let ready = enqueue("db", "");
        let (_, token_a) = claim_one("db");
        let (_, token_b) = claim_one("db");
        let (_, token_e) = claim_one("db_other");
        let (_, token_s) = claim_one("db");
        let before = calls();
        let outcomes = complete_batch(
            "db",
            &[
                (b, token_b),
                (a, token_a + 1),
                (stale, token_s + 1),
                (elsewhere, token_e),
                (ready, 0),
                (b, token_b),
                (a, token_a),
            ],
        );
        assert_eq!(
            outcomes,
            "applied,lease_lost,lease_lost,lease_lost,lease_lost,lease_lost,applied"
        );
        assert_eq!(calls() - before, 1, "one call for the batch");
        assert_eq!(
            one::<String>("SELECT string_agg(task_id::text, ',' ORDER BY task_id) FROM aedb_queue.task WHERE queue IN ('db', 'db_other')"),
            format!("{elsewhere},{stale},{ready}"),
            "the ones fenced out are still there"
        );
    }

    /// With a trigger on the task table the completion is the DELETE
    /// statement, and the trigger sees it.
    #[pg_test]
    fn queue_complete_uses_the_statement_when_the_task_table_has_a_trigger() {
        exec("CREATE TEMP TABLE gone (task_id bigint)");
        exec(
            "CREATE FUNCTION pg_temp.record() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO pg_temp.gone VALUES (OLD.task_id); RETURN OLD; END $$",
        );
        exec(
            "CREATE TRIGGER record AFTER DELETE ON aedb_queue.task
             FOR EACH ROW EXECUTE FUNCTION pg_temp.record()",
        );
        let id = enqueue("dt", "");
        let (_, token) = claim_one("dt");
        let before = (calls(), crate::store::statements_run());
        assert_eq!(complete("dt", id, token), "applied");
        assert_eq!(calls(), before.0, "declined before counting");
        assert!(crate::store::statements_run() > before.1);
        assert_eq!(one::<i64>("SELECT task_id FROM gone"), id);
        let batch = enqueue("dt", "");
        let (_, token) = claim_one("dt");
        let before = calls();
        assert_eq!(complete_batch("dt", &[(batch, token)]), "applied");
        assert_eq!(calls(), before, "the batch declined too");
        assert_eq!(count(&format!("gone WHERE task_id = {batch}")), 1);
    }
}
