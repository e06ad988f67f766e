//! `statement_timeout` and `lock_timeout` firing inside our calls
//! (docs/chaos.md): while a call waits for a row or key another session
//! holds, and while a call is busy writing or claiming thousands of rows.
//! Each must end with a clean 57014 (`query_canceled`) or 55P03
//! (`lock_not_available`), change nothing (seen from another session), and
//! leave its session usable: the next calls in the same session work and
//! hand out every task exactly once.

use std::collections::HashSet;
use std::time::Instant;

use aedb_queue_itests::chaos::recovery::report;
use aedb_queue_itests::*;

/// Which limit a case sets, and the SQLSTATE it must raise.
#[derive(Clone, Copy, Debug)]
enum Limit {
    Statement,
    Lock,
}

impl Limit {
    fn setting(self) -> &'static str {
        match self {
            Limit::Statement => "statement_timeout",
            Limit::Lock => "lock_timeout",
        }
    }

    /// Runs `call` (a query of one column) with this limit at `ms` for the
    /// call alone; its values, as an array's text (NULL: no rows).
    ///
    /// A statement starts its statement_timeout from the value in force
    /// when it starts, so a limit SET for the session also timed the
    /// statements that set it back: under load a 2 ms timer fired inside
    /// the reset's own `SET`, before any interrupt check, and the reset's
    /// next statement, re-arming the timer, cleared the timeout's mark
    /// while the cancel stayed pending: 57014 "canceling statement due to
    /// user request". So the limit is `SET LOCAL` in the call's own
    /// implicit transaction (one query string): it ends with the call. The
    /// call's statement turns it off once done, and a last statement
    /// checks for interrupts, so a limit firing after the call's last
    /// check fails this call (57014, rolled back), not the session's next
    /// command.
    fn run(self, c: &mut Client, ms: u32, call: &str) -> Result<Option<String>, postgres::Error> {
        let setting = self.setting();
        let messages = c.simple_query(&format!(
            "SET LOCAL {setting} = {ms};
             SELECT pg_catalog.array_agg(r.v)::text, pg_catalog.set_config('{setting}', '0', true)
             FROM ({call}) AS r(v);
             SELECT pg_catalog.pg_sleep(0)"
        ))?;
        let values = messages.iter().find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) if r.len() == 2 => {
                Some(r.get(0).map(str::to_string))
            }
            _ => None,
        });
        Ok(values.expect("the call's row"))
    }

    fn sqlstate(self) -> &'static str {
        match self {
            Limit::Statement => "57014",
            Limit::Lock => "55P03",
        }
    }
}

/// A SQL string literal.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The ids of an array's text (`{1,2}`; NULL: none).
fn ids_of(values: Option<String>) -> Vec<i64> {
    let Some(v) = values else { return Vec::new() };
    v.trim_matches(|c| c == '{' || c == '}')
        .split(',')
        .map(|id| id.parse().expect("an id"))
        .collect()
}

fn expect_code<T: std::fmt::Debug>(r: Result<T, postgres::Error>, limit: Limit, what: &str) {
    match r {
        Ok(v) => panic!("{what} under {limit:?} timeout returned {v:?}"),
        Err(e) => assert_eq!(
            sqlstate(&e).as_deref(),
            Some(limit.sqlstate()),
            "{what}: {}",
            describe(&e)
        ),
    }
}

/// The session answers and its next call works.
fn usable(c: &mut Client) {
    let one: i32 = c.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1);
}

/// A completion waits for the row an admin's uncommitted `queue_cancel`
/// holds; the limit fires inside `queue_complete`.
fn complete_waiting_for_a_cancel(cluster: &Cluster, limit: Limit) {
    let q = unique_queue("timeout_complete");
    let mut p = cluster.connect_as(PRODUCER);
    let mut w = cluster.connect_as(WORKER);
    let mut observer = cluster.connect_as(WORKER);
    let id = enqueue(&mut p, &q, &json!("held")).task_id;
    let t = claim_one(&mut w, &q, "w", "5 minutes").unwrap();
    let before = get(&mut observer, &q, id).unwrap();

    let mut admin = cluster.connect_as(ADMIN);
    let mut cancel_tx = admin.transaction().unwrap();
    assert!(cancel(&mut cancel_tx, &q, id));
    let started = Instant::now();
    let r = limit.run(
        &mut w,
        300,
        &format!(
            "SELECT aedb_queue.queue_complete({}, {id}, {})::text",
            literal(&q),
            t.fencing_token
        ),
    );
    let waited = started.elapsed();
    expect_code(r, limit, "queue_complete waiting for a cancel");
    assert_eq!(get(&mut observer, &q, id).as_ref(), Some(&before));
    cancel_tx.rollback().unwrap();
    assert_eq!(
        get(&mut observer, &q, id).as_ref(),
        Some(&before),
        "the timed-out completion changed the task"
    );
    let again = Instant::now();
    usable(&mut w);
    assert_eq!(complete(&mut w, &q, id, t.fencing_token), Outcome::Applied);
    assert!(get(&mut observer, &q, id).is_none());
    report(
        "timeouts",
        &format!("{limit:?} timeout (300 ms) in queue_complete waiting for a cancel"),
        "the error",
        &format!(
            "{} after {} ms; the session's next call applied {} ms later",
            limit.sqlstate(),
            waited.as_millis(),
            again.elapsed().as_millis()
        ),
    );
}

/// A second enqueue of an idempotency key waits for the first's open
/// transaction; the limit fires inside `queue_enqueue`.
fn keyed_enqueue_waiting_for_another(cluster: &Cluster, limit: Limit) {
    let q = unique_queue("timeout_key");
    let key = EnqueueOpts::default().key("order-1");
    let mut first = cluster.connect_as(PRODUCER);
    let mut second = cluster.connect_as(PRODUCER);
    let mut su = cluster.connect();
    let mut tx = first.transaction().unwrap();
    let uncommitted = enqueue_with(&mut tx, &q, Some(&json!("first")), &key);
    let r = limit.run(
        &mut second,
        300,
        &format!(
            "SELECT task_id FROM aedb_queue.queue_enqueue({}, '\"second\"'::jsonb, \
                                                       idempotency_key => 'order-1')",
            literal(&q)
        ),
    );
    expect_code(r, limit, "queue_enqueue waiting for the key");
    tx.rollback().unwrap();
    let rows: i64 = su
        .query_one(
            "SELECT (SELECT count(*) FROM aedb_queue.task WHERE queue = $1) \
                  + (SELECT count(*) FROM aedb_queue.idempotency_key WHERE queue = $1)",
            &[&q],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "a task or key of the timed-out enqueue is left");
    usable(&mut second);
    let e = enqueue_with(&mut second, &q, Some(&json!("second")), &key);
    assert!(!e.deduplicated && e.task_id != uncommitted.task_id, "{e:?}");
    let w = &mut cluster.connect_as(WORKER);
    let t = claim_one(w, &q, "w", "1 minute").unwrap();
    assert_eq!((t.task_id, t.payload), (e.task_id, Some(json!("second"))));
}

/// Payloads in one batch enqueue.
const BATCH: usize = 10_000;

/// Timeouts in ms from 2 up by a fifth each, to 20 s: some fire before
/// the call has done anything, some while it works, the last ones never.
fn growing_timeouts() -> impl Iterator<Item = u32> {
    std::iter::successors(Some(2.0f64), |ms| Some(ms * 1.2))
        .take_while(|ms| *ms < 20_000.0)
        .map(|ms| ms as u32)
}

/// `statement_timeout`s from 2 ms up, each on a batch enqueue of 10,000
/// payloads, some firing while the bulk writer works: each call commits
/// all its rows or none. Returns (timed out, succeeded) and the ids.
fn batch_enqueues_under_statement_timeouts(cluster: &Cluster, q: &str) -> (usize, usize, Vec<i64>) {
    let mut p = cluster.connect_as(PRODUCER);
    let mut su = cluster.connect();
    let call = format!(
        "SELECT id FROM aedb_queue.queue_enqueue_batch({}, ARRAY(
             SELECT pg_catalog.jsonb_build_object('i', i, 'pad', pg_catalog.repeat('y', 60))
             FROM pg_catalog.generate_series(0, {}) i ORDER BY i)) AS id",
        literal(q),
        BATCH - 1
    );
    let (mut timed_out, mut ok, mut ids) = (0, 0, Vec::new());
    for ms in growing_timeouts() {
        match Limit::Statement.run(&mut p, ms, &call) {
            Ok(values) => {
                let made = ids_of(values);
                assert_eq!(made.len(), BATCH);
                ids.extend(made);
                ok += 1;
            }
            Err(e) => {
                assert_eq!(sqlstate(&e).as_deref(), Some("57014"), "{}", describe(&e));
                timed_out += 1;
            }
        }
        let seen: i64 = su
            .query_one(
                "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
                &[&q],
            )
            .unwrap()
            .get(0);
        assert_eq!(seen as usize, ids.len(), "after a {ms} ms timeout");
        // The session's next (small) batch works and is all there.
        let small = enqueue_batch(&mut p, q, &[json!("after"), json!("after")]);
        assert_eq!(small.len(), 2);
        ids.extend(small);
        if ok >= 2 && timed_out >= 3 {
            break;
        }
    }
    (timed_out, ok, ids)
}

/// `statement_timeout`s on claims of up to 10,000 tasks, then the same
/// session drains the queue: every task handed out once (claims that
/// timed out handed out nothing).
fn claims_under_statement_timeouts(cluster: &Cluster, q: &str, ids: &[i64]) -> (usize, usize) {
    let mut w = cluster.connect_as(WORKER);
    let mut su = cluster.connect();
    let mut handed: HashSet<i64> = HashSet::new();
    let (mut timed_out, mut ok) = (0, 0);
    let call = format!(
        "SELECT task_id FROM aedb_queue.queue_claim({}, 'w', '10 minutes', 5000)",
        literal(q)
    );
    for ms in growing_timeouts() {
        match Limit::Statement.run(&mut w, ms, &call) {
            Ok(values) => {
                for id in ids_of(values) {
                    assert!(handed.insert(id), "task handed out twice");
                }
                ok += 1;
            }
            Err(e) => {
                assert_eq!(sqlstate(&e).as_deref(), Some("57014"), "{}", describe(&e));
                timed_out += 1;
            }
        }
        let in_flight: i64 = su
            .query_one(
                "SELECT count(*) FROM aedb_queue.task WHERE queue = $1 AND state = 'in_flight'",
                &[&q],
            )
            .unwrap()
            .get(0);
        assert_eq!(in_flight as usize, handed.len(), "after a {ms} ms timeout");
        if ok >= 1 && timed_out >= 3 {
            break;
        }
    }
    // The rest, from the same session (a timed-out claim's tasks may wait
    // behind its scan position for claim_rescan_interval; none is lost).
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while handed.len() < ids.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {} handed out",
            handed.len(),
            ids.len()
        );
        let got = claim(&mut w, q, "w", "10 minutes", 1000);
        if got.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        for t in got {
            assert!(
                handed.insert(t.task_id),
                "task {} handed out twice",
                t.task_id
            );
        }
    }
    let want: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(
        handed, want,
        "the tasks handed out are not the tasks enqueued"
    );
    (timed_out, ok)
}

#[test]
fn lock_and_statement_timeouts_inside_calls_are_clean() {
    let cluster = Cluster::start();
    for limit in [Limit::Lock, Limit::Statement] {
        complete_waiting_for_a_cancel(&cluster, limit);
        keyed_enqueue_waiting_for_another(&cluster, limit);
    }
    let q = unique_queue("timeout_bulk");
    let (enq_timeouts, enq_ok, ids) = batch_enqueues_under_statement_timeouts(&cluster, &q);
    assert!(
        enq_timeouts > 0 && enq_ok > 0,
        "{enq_timeouts} timed out, {enq_ok} done"
    );
    let (claim_timeouts, claim_ok) = claims_under_statement_timeouts(&cluster, &q, &ids);
    assert!(
        claim_timeouts > 0 && claim_ok > 0,
        "{claim_timeouts} timed out, {claim_ok} done"
    );
    report(
        "timeouts",
        "statement_timeout 2 ms and up on batch enqueues of 10,000 and claims of 5,000",
        "the error",
        &format!(
            "{enq_timeouts} enqueues and {claim_timeouts} claims timed out (57014, nothing changed), \
             {enq_ok} and {claim_ok} completed; the next call in the same session worked at once"
        ),
    );
}
