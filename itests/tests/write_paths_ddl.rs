//! The direct writes keep each backend's set of the task table's indexes
//! (`src/store/am/index_cache.rs`) between calls. Ten workers enqueue,
//! claim and complete on the direct path while one session builds and
//! drops an index with `CREATE` / `DROP INDEX CONCURRENTLY` and another
//! sends relation-cache invalidations with GRANT / REVOKE: no call may
//! fail (a set kept after an invalidation it missed opened a dropped
//! index: `XX000 could not open relation with OID n`), every task is
//! completed exactly once, and every index holds every row.
//!
//! `AEDB_DDL_STRESS_SECS` (default 40) sets how long the DDL runs.

#[path = "write_paths/amcheck.rs"]
mod amcheck;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use aedb_queue_itests::*;
use postgres::types::Type;

const WORKERS: usize = 10;
const CONF: &str = "aedb_queue.direct_writes = on";

fn stress_secs() -> u64 {
    std::env::var("AEDB_DDL_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40)
}

/// Every error any session met, with who met it.
type Errors = Arc<Mutex<Vec<String>>>;

fn note(errors: &Errors, who: &str, e: &postgres::Error) {
    errors
        .lock()
        .unwrap()
        .push(format!("{who}: {}", describe(e)));
}

#[test]
fn concurrent_index_ddl_and_grants_do_not_break_direct_writes() {
    let cluster = Cluster::start_with(CONF);
    let queue = unique_queue("ddl");
    let direct: bool = cluster
        .connect_as(ADMIN)
        .query_one(
            "SELECT bool_and(direct) FROM aedb_queue.queue_write_path()",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(direct, "the workers' calls take the direct path");
    cluster
        .connect()
        .batch_execute("CREATE ROLE ddl_dummy; CREATE TABLE public.unrelated (n int)")
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let errors: Errors = Arc::default();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (mut c, queue) = (cluster.connect_as(SERVICE), queue.clone());
            let (stop, errors) = (stop.clone(), errors.clone());
            thread::spawn(move || work(&mut c, &queue, w, &stop, &errors))
        })
        .collect();
    let side_errors: Errors = Arc::default();
    let ddl = {
        let (mut c, stop, errors) = (cluster.connect(), stop.clone(), side_errors.clone());
        thread::spawn(move || churn_indexes(&mut c, &stop, &errors))
    };
    let grants = {
        let (mut su, mut admin) = (cluster.connect(), cluster.connect_as(ADMIN));
        let (stop, errors) = (stop.clone(), side_errors.clone());
        thread::spawn(move || churn_grants(&mut su, &mut admin, &stop, &errors))
    };
    thread::sleep(Duration::from_secs(stress_secs()));
    stop.store(true, Ordering::Relaxed);
    let index_cycles = ddl.join().expect("ddl");
    let grant_cycles = grants.join().expect("grants");
    let mut enqueued = Vec::new();
    let mut completed = Vec::new();
    for w in workers {
        let (e, c) = w.join().expect("worker");
        enqueued.extend(e);
        completed.extend(c);
    }
    completed.extend(drain(&mut cluster.connect_as(SERVICE), &queue));

    eprintln!(
        "{} tasks enqueued, {} completed; {index_cycles} index builds, {grant_cycles} grant cycles",
        enqueued.len(),
        completed.len()
    );
    let errors = errors.lock().unwrap();
    assert!(
        errors.is_empty(),
        "{} errors from the workers ({index_cycles} index builds, {grant_cycles} grant \
         cycles), the first: {:#?}",
        errors.len(),
        &errors[..errors.len().min(10)]
    );
    assert!(index_cycles > 0 && grant_cycles > 0, "the DDL ran");
    check_ledger(&enqueued, &completed);
    let mut su = cluster.connect();
    let left: i64 = su
        .query_one(
            "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "tasks left behind");
    amcheck::check_task_indexes(&mut su);
    let side_errors = side_errors.lock().unwrap();
    assert!(side_errors.is_empty(), "DDL sessions: {side_errors:#?}");
}

/// A worker's loop: enqueue a few tasks (one by one or in a batch), claim
/// up to five, complete them (one by one or in a batch). Returns the ids
/// it enqueued and those whose completion applied.
fn work(
    c: &mut Client,
    queue: &str,
    w: usize,
    stop: &AtomicBool,
    errors: &Errors,
) -> (Vec<i64>, Vec<i64>) {
    let who = format!("worker {w}");
    let (mut enqueued, mut completed) = (Vec::new(), Vec::new());
    let mut round = 0usize;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        let payloads: Vec<Value> = (0..1 + round % 4)
            .map(|n| json!({"w": w, "n": n}))
            .collect();
        let sent = if round.is_multiple_of(2) {
            c.query_typed(
                "SELECT id FROM aedb_queue.queue_enqueue_batch($1::text, $2::jsonb[]) id",
                &[(&queue, Type::TEXT), (&payloads, Type::JSONB_ARRAY)],
            )
        } else {
            c.query_typed(
                "SELECT task_id FROM aedb_queue.queue_enqueue($1::text, $2::jsonb)",
                &[(&queue, Type::TEXT), (&payloads[0], Type::JSONB)],
            )
        };
        match sent {
            Ok(rows) => enqueued.extend(rows.iter().map(|r| r.get::<_, i64>(0))),
            Err(e) => note(errors, &who, &e),
        }
        match claim_and_complete(c, queue, &format!("w{w}"), round.is_multiple_of(3)) {
            Ok(done) => completed.extend(done),
            Err(e) => note(errors, &who, &e),
        }
    }
    (enqueued, completed)
}

/// Claims up to five tasks and completes them; the ids whose completion
/// applied.
fn claim_and_complete(
    c: &mut Client,
    queue: &str,
    owner: &str,
    batched: bool,
) -> Result<Vec<i64>, postgres::Error> {
    let claimed = c.query_typed(
        "SELECT task_id, fencing_token FROM aedb_queue.queue_claim($1::text, $2::text, \
         '5 minutes', 5)",
        &[(&queue, Type::TEXT), (&owner, Type::TEXT)],
    )?;
    let (ids, tokens): (Vec<i64>, Vec<i64>) = claimed
        .iter()
        .map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1)))
        .unzip();
    let mut applied = Vec::new();
    if batched {
        let rows = c.query_typed(
            "SELECT task_id, outcome::text FROM aedb_queue.queue_complete_batch($1::text, \
             $2::int8[], $3::int8[])",
            &[
                (&queue, Type::TEXT),
                (&ids, Type::INT8_ARRAY),
                (&tokens, Type::INT8_ARRAY),
            ],
        )?;
        for r in rows {
            assert_eq!(
                r.get::<_, &str>(1),
                "applied",
                "task {}",
                r.get::<_, i64>(0)
            );
            applied.push(r.get(0));
        }
        return Ok(applied);
    }
    for (id, token) in ids.into_iter().zip(tokens) {
        let r = c.query_typed_one(
            "SELECT aedb_queue.queue_complete($1::text, $2::int8, $3::int8)::text",
            &[
                (&queue, Type::TEXT),
                (&id, Type::INT8),
                (&token, Type::INT8),
            ],
        )?;
        assert_eq!(r.get::<_, &str>(0), "applied", "task {id}");
        applied.push(id);
    }
    Ok(applied)
}

/// Builds and drops an index on the task table until `stop`, a partial
/// and an expression one in turn; the number built.
fn churn_indexes(c: &mut Client, stop: &AtomicBool, errors: &Errors) -> usize {
    let kinds = [
        "(queue, priority) WHERE state = 'ready'",
        "((payload->>'w'), task_id)",
    ];
    let mut built = 0;
    while !stop.load(Ordering::Relaxed) {
        let create = format!(
            "CREATE INDEX CONCURRENTLY ddl_extra_idx ON aedb_queue.task {}",
            kinds[built % kinds.len()]
        );
        for sql in [
            create.as_str(),
            "DROP INDEX CONCURRENTLY aedb_queue.ddl_extra_idx",
        ] {
            if let Err(e) = c.batch_execute(sql) {
                note(errors, sql, &e);
                return built;
            }
        }
        built += 1;
    }
    built
}

/// (as the admin, the statement): invalidations of the task table, of an
/// unrelated table, and the extension's own grants.
const GRANT_STEPS: [(bool, &str); 3] = [
    (
        false,
        "GRANT SELECT ON aedb_queue.task TO ddl_dummy;
         REVOKE SELECT ON aedb_queue.task FROM ddl_dummy",
    ),
    (
        false,
        "GRANT SELECT ON public.unrelated TO ddl_dummy;
         REVOKE SELECT ON public.unrelated FROM ddl_dummy",
    ),
    (
        true,
        "SELECT aedb_queue.queue_grant('other_*', 'ddl_dummy', 'worker');
         SELECT aedb_queue.queue_revoke('other_*', 'ddl_dummy', 'worker')",
    ),
];

/// GRANT / REVOKE on the task table (relation-cache invalidations of it),
/// on an unrelated table, and the extension's own grants, until `stop`.
fn churn_grants(su: &mut Client, admin: &mut Client, stop: &AtomicBool, errors: &Errors) -> usize {
    let mut cycles = 0;
    while !stop.load(Ordering::Relaxed) {
        for (by_admin, sql) in GRANT_STEPS {
            let c = if by_admin { &mut *admin } else { &mut *su };
            if let Err(e) = c.batch_execute(sql) {
                note(errors, sql, &e);
                return cycles;
            }
        }
        cycles += 1;
        thread::sleep(Duration::from_millis(5));
    }
    cycles
}

/// Claims and completes what is left; the ids completed.
fn drain(c: &mut Client, queue: &str) -> Vec<i64> {
    let mut completed = Vec::new();
    loop {
        let done = claim_and_complete(c, queue, "drain", false)
            .unwrap_or_else(|e| panic!("draining: {}", describe(&e)));
        if done.is_empty() {
            return completed;
        }
        completed.extend(done);
    }
}

/// Every task enqueued was completed once, and nothing else was.
fn check_ledger(enqueued: &[i64], completed: &[i64]) {
    let mut times: HashMap<i64, usize> = enqueued.iter().map(|&id| (id, 0)).collect();
    assert_eq!(times.len(), enqueued.len(), "an id was enqueued twice");
    for id in completed {
        *times
            .get_mut(id)
            .unwrap_or_else(|| panic!("task {id} completed but never enqueued")) += 1;
    }
    let wrong: Vec<_> = times.iter().filter(|(_, &n)| n != 1).collect();
    assert!(
        wrong.is_empty(),
        "{} of {} tasks not completed exactly once (id, times): {:?}",
        wrong.len(),
        enqueued.len(),
        &wrong[..wrong.len().min(20)]
    );
}
