//! Schedules under concurrent firers: eight admin sessions over TCP reap
//! one queue and every queue as fast as they can while per-second
//! schedules come due; some firers roll back. The ledger (each task's
//! schedule and fire time, from its payload) must hold every fire time
//! exactly once: none twice, none missing between the first and the last.
//! The firers run until every schedule has fired [`FIRES`] times, seen
//! from another session (however slowly a loaded machine lets them).

use aedb_queue_itests::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

const SCHEDULES: usize = 10;
const FIRERS: usize = 8;
/// Committed fires of each schedule before the firers stop.
const FIRES: i64 = 4;
/// Generous: only firers that stopped firing miss it.
const BOUND: Duration = Duration::from_secs(60);

#[test]
fn concurrent_firers_make_exactly_one_task_per_fire_time() {
    let cluster = Cluster::shared();
    let queue = unique_queue("sched");
    let mut admin = cluster.connect_as(ADMIN);
    for i in 0..SCHEDULES {
        let name = format!("s{i}");
        admin
            .execute(
                "SELECT 1 FROM aedb_queue.queue_schedule_upsert($1, $2, '* * * * * *',
                     payload => jsonb_build_object('schedule', $2::text),
                     missed => 'catch_up', catch_up_limit => 1000, fire_time_key => 'at')",
                &[&queue, &name],
            )
            .unwrap_or_else(|e| panic!("upsert {name}: {}", describe(&e)));
    }

    let deadline = Instant::now() + BOUND;
    let enough = AtomicBool::new(false);
    let committed_fires: i64 = thread::scope(|s| {
        let firers: Vec<_> = (0..FIRERS)
            .map(|firer| {
                let (queue, enough) = (&queue, &enough);
                s.spawn(move || {
                    let mut c = cluster.connect_as(ADMIN);
                    let mut committed = 0;
                    let mut round = 0;
                    while !enough.load(Ordering::SeqCst) && Instant::now() < deadline {
                        round += 1;
                        let mut tx = c.transaction().unwrap();
                        // Half reap the queue, half every queue.
                        let one_queue = (firer % 2 == 0).then_some(queue.as_str());
                        let fired = reap(&mut tx, one_queue).fired;
                        // Every seventh round rolls back: its fire times stay owed.
                        if round % 7 == 0 {
                            tx.rollback().unwrap();
                        } else {
                            tx.commit().unwrap();
                            committed += fired;
                        }
                    }
                    committed
                })
            })
            .collect();
        let mut su = cluster.connect();
        while fewest_fires(&mut su, &queue) < FIRES && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(100));
        }
        enough.store(true, Ordering::SeqCst);
        firers.into_iter().map(|f| f.join().unwrap()).sum()
    });

    let mut su = cluster.connect();
    let made: i64 = first_column(
        &mut su,
        "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
        &[&queue],
    )[0];
    assert_eq!(
        made, committed_fires,
        "tasks in the table vs fires the committed reaps reported"
    );
    let per_schedule = su
        .query(
            "SELECT payload->>'schedule', count(*), count(DISTINCT payload->>'at'),
                    extract(epoch FROM max((payload->>'at')::timestamptz)
                                       - min((payload->>'at')::timestamptz))::int8
             FROM aedb_queue.task WHERE queue = $1 GROUP BY 1 ORDER BY 1",
            &[&queue],
        )
        .unwrap();
    assert_eq!(per_schedule.len(), SCHEDULES, "every schedule fired");
    for row in per_schedule {
        let (name, tasks, distinct, span): (String, i64, i64, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        assert_eq!(tasks, distinct, "{name}: a fire time made two tasks");
        assert_eq!(
            tasks,
            span + 1,
            "{name}: a fire time between the first and the last made no task"
        );
        assert!(tasks >= FIRES, "{name}: only {tasks} fires in {BOUND:?}");
    }
}

/// The committed fires of the schedule that fired least (0 until every
/// schedule fired).
fn fewest_fires(su: &mut Client, queue: &str) -> i64 {
    first_column(
        su,
        "SELECT CASE WHEN count(*) = $2 THEN min(n) ELSE 0 END
         FROM (SELECT count(*) AS n FROM aedb_queue.task WHERE queue = $1
               GROUP BY payload->>'schedule') per_schedule",
        &[&queue, &(SCHEDULES as i64)],
    )[0]
}
