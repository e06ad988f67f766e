//! Reaping with pg_cron: `schedule_reaper` creates one pg_cron job that runs
//! `queue_reap()`, so an abandoned lease is requeued while no worker calls
//! anything; scheduling again updates that one job; `unschedule_reaper`
//! removes it; an interval cron cannot express is rejected and changes
//! nothing.
//!
//! The harness preloads pg_cron with `cron.database_name` = the test
//! database; where pg_cron is not installed (a major other than 15 without
//! it, docs/postgres-majors.md), each test says so and returns. Every test here reads or changes the one job named
//! `aedb_queue_reaper`, so they take turns (see [`exclusive`]).

use aedb_queue_itests::*;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const JOB_NAME: &str = "aedb_queue_reaper";

/// pg_cron starts jobs at minute boundaries: a lease that expires just after
/// one is reaped at the next, about a minute later. Two boundaries and some:
/// a loaded machine may start a run late, only a broken job misses both.
const REAP_WAIT: Duration = Duration::from_secs(150);

/// Serializes the tests of this file (they share the one reaper job) and
/// starts each with pg_cron installed and no reaper job. `c` is the
/// superuser's session (CREATE EXTENSION pg_cron is set-up).
fn exclusive(c: &mut Client) -> MutexGuard<'static, ()> {
    static JOB: Mutex<()> = Mutex::new(());
    let guard = JOB.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
        .unwrap_or_else(|e| panic!("CREATE EXTENSION pg_cron: {}", describe(&e)));
    unschedule_reaper(c);
    guard
}

fn try_schedule_reaper(c: &mut Client, every: Option<&str>) -> Result<i64, postgres::Error> {
    c.query_one(
        "SELECT aedb_queue.schedule_reaper($1::text::interval)",
        &[&every],
    )
    .map(|row| row.get(0))
}

fn schedule_reaper(c: &mut Client, every: &str) -> i64 {
    try_schedule_reaper(c, Some(every))
        .unwrap_or_else(|e| panic!("schedule_reaper({every}): {}", describe(&e)))
}

fn unschedule_reaper(c: &mut Client) -> bool {
    c.query_one("SELECT aedb_queue.unschedule_reaper()", &[])
        .unwrap_or_else(|e| panic!("unschedule_reaper: {}", describe(&e)))
        .get(0)
}

#[derive(Debug, PartialEq)]
struct Job {
    jobid: i64,
    schedule: String,
    command: String,
    database: String,
    username: String,
    active: bool,
}

/// Every pg_cron job named `aedb_queue_reaper`, whoever owns it.
fn reaper_jobs(c: &mut Client) -> Vec<Job> {
    c.query(
        "SELECT jobid, schedule, command, database, username, active \
         FROM cron.job WHERE jobname = $1::text ORDER BY jobid",
        &[&JOB_NAME],
    )
    .unwrap_or_else(|e| panic!("read cron.job: {}", describe(&e)))
    .iter()
    .map(|r| Job {
        jobid: r.get(0),
        schedule: r.get(1),
        command: r.get(2),
        database: r.get(3),
        username: r.get(4),
        active: r.get(5),
    })
    .collect()
}

/// The schedules of the reaper jobs (one, when all is well).
fn reaper_schedules(c: &mut Client) -> Vec<String> {
    reaper_jobs(c).into_iter().map(|j| j.schedule).collect()
}

/// (status, return_message) of every recorded run of job `jobid`.
fn runs(c: &mut Client, jobid: i64) -> Vec<(String, Option<String>)> {
    c.query(
        "SELECT status, return_message FROM cron.job_run_details \
         WHERE jobid = $1 ORDER BY runid",
        &[&jobid],
    )
    .unwrap_or_else(|e| panic!("read cron.job_run_details: {}", describe(&e)))
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[test]
fn the_scheduled_reaper_requeues_an_abandoned_lease_with_no_worker_polling() {
    if skip_without_pg_cron("the_scheduled_reaper_requeues_an_abandoned_lease_with_no_worker_polling") {
        return;
    }
    let cluster = Cluster::shared();
    // `c` (the superuser) reads cron's tables; the operator schedules.
    let mut c = cluster.connect();
    let _turn = exclusive(&mut c);
    let mut admin = cluster.connect_as(ADMIN);
    let mut producer = cluster.connect_as(PRODUCER);
    let mut worker = cluster.connect_as(WORKER);
    let mut watcher = cluster.connect_as(WORKER);

    let jobid = schedule_reaper(&mut admin, "1 minute");
    assert_eq!(
        reaper_jobs(&mut c),
        vec![Job {
            jobid,
            schedule: "*/1 * * * *".into(),
            command: "SELECT aedb_queue.queue_reap()".into(),
            database: "aedb_itests".into(),
            username: "postgres".into(),
            active: true,
        }]
    );

    let queue = unique_queue("cron_reap");
    let id = enqueue(&mut producer, &queue, &json!("abandoned")).task_id;
    let lease =
        claim_one(&mut worker, &queue, "vanishing-worker", "1 second").expect("claim the task");
    assert_eq!(lease.task_id, id);

    // Only reads from here on: no claim (which would reclaim inline), no
    // reap call. Only the pg_cron job can requeue the task.
    let started = Instant::now();
    let task = loop {
        let task = get(&mut watcher, &queue, id).expect("the task must still exist");
        if task.state != "in_flight" || started.elapsed() > REAP_WAIT {
            break task;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        task.state,
        "ready",
        "the reaper job did not requeue the expired lease within {REAP_WAIT:?}; \
         runs of job {jobid}: {:?}",
        runs(&mut c, jobid)
    );
    eprintln!(
        "requeued by pg_cron after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(task.last_error.as_deref(), Some("lease expired; requeued"));
    assert_eq!(
        task.attempts, 1,
        "a reclaim is not a failure: no attempt added"
    );
    assert_eq!(task.owner_id, None);
    assert_eq!(task.lease_deadline, None);
    // The vanished worker's token no longer fences.
    assert_eq!(
        complete(&mut worker, &queue, id, lease.fencing_token),
        Outcome::LeaseLost
    );

    // pg_cron writes the run's status just after the run commits (however
    // late a loaded machine lets it: a generous bound).
    let started = Instant::now();
    let mut history = runs(&mut c, jobid);
    while !history.iter().any(|(status, _)| status == "succeeded")
        && started.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(300));
        history = runs(&mut c, jobid);
    }
    assert!(
        history.iter().any(|(status, _)| status == "succeeded"),
        "no succeeded run of job {jobid}: {history:?}"
    );
    assert!(
        history.iter().all(|(status, _)| status != "failed"),
        "a run of job {jobid} failed: {history:?}"
    );

    assert!(unschedule_reaper(&mut admin));
}

#[test]
fn scheduling_again_updates_the_one_job() {
    if skip_without_pg_cron("scheduling_again_updates_the_one_job") {
        return;
    }
    let cluster = Cluster::shared();
    let mut c = cluster.connect();
    let _turn = exclusive(&mut c);
    let mut admin = cluster.connect_as(ADMIN);

    let jobid = admin
        .query_one("SELECT aedb_queue.schedule_reaper()", &[])
        .unwrap_or_else(|e| panic!("schedule_reaper(): {}", describe(&e)))
        .get::<_, i64>(0);
    assert_eq!(
        reaper_schedules(&mut c),
        ["*/1 * * * *"],
        "default: 1 minute"
    );

    for (every, schedule) in [
        ("5 minutes", "*/5 * * * *"),
        ("5 minutes", "*/5 * * * *"),
        ("2 hours", "0 */2 * * *"),
        ("1 day", "0 0 * * *"),
        ("7 minutes", "*/7 * * * *"),
    ] {
        assert_eq!(
            schedule_reaper(&mut admin, every),
            jobid,
            "{every}: same job"
        );
        assert_eq!(reaper_schedules(&mut c), [schedule], "{every}");
    }
    let job = reaper_jobs(&mut c).remove(0);
    assert_eq!(job.command, "SELECT aedb_queue.queue_reap()");
    assert!(job.active);

    assert!(unschedule_reaper(&mut admin));
}

#[test]
fn unscheduling_removes_the_job_and_says_whether_there_was_one() {
    if skip_without_pg_cron("unscheduling_removes_the_job_and_says_whether_there_was_one") {
        return;
    }
    let cluster = Cluster::shared();
    let mut c = cluster.connect();
    let _turn = exclusive(&mut c);
    let mut admin = cluster.connect_as(ADMIN);

    assert!(!unschedule_reaper(&mut admin), "no job yet");
    schedule_reaper(&mut admin, "5 minutes");
    assert_eq!(reaper_jobs(&mut c).len(), 1);

    assert!(unschedule_reaper(&mut admin));
    assert!(reaper_jobs(&mut c).is_empty());
    assert!(!unschedule_reaper(&mut admin), "already removed");

    // It can be scheduled again afterwards.
    schedule_reaper(&mut admin, "1 minute");
    assert_eq!(reaper_schedules(&mut c), ["*/1 * * * *"]);
    assert!(unschedule_reaper(&mut admin));
}

#[test]
fn an_interval_cron_cannot_express_is_rejected_and_changes_nothing() {
    if skip_without_pg_cron("an_interval_cron_cannot_express_is_rejected_and_changes_nothing") {
        return;
    }
    let cluster = Cluster::shared();
    let mut c = cluster.connect();
    let _turn = exclusive(&mut c);
    let mut admin = cluster.connect_as(ADMIN);

    let bad = [
        None,
        Some("0"),
        Some("30 seconds"),
        Some("90 seconds"),
        Some("-1 minute"),
        Some("61 minutes"),
        Some("25 hours"),
        Some("2 days"),
        Some("1 month"),
    ];
    let check = |c: &mut Client, every: Option<&str>| {
        let e = try_schedule_reaper(c, every)
            .expect_err(&format!("schedule_reaper({every:?}) was accepted"));
        assert_eq!(
            sqlstate(&e).as_deref(),
            Some("22023"),
            "{every:?}: {}",
            describe(&e)
        );
        let message = e.as_db_error().unwrap().message().to_string();
        assert!(
            message.starts_with("invalid argument \"every\": must be 1 to 59 whole minutes"),
            "{every:?}: {message}"
        );
    };

    // No job is created...
    for every in bad {
        check(&mut admin, every);
        assert!(reaper_jobs(&mut c).is_empty(), "{every:?} created a job");
    }
    // ... and an existing one keeps its schedule.
    schedule_reaper(&mut admin, "5 minutes");
    for every in bad {
        check(&mut admin, every);
        assert_eq!(reaper_schedules(&mut c), ["*/5 * * * *"], "{every:?}");
    }
    assert!(unschedule_reaper(&mut admin));
}

#[test]
fn without_pg_cron_in_the_database_scheduling_says_what_is_missing() {
    if skip_without_pg_cron("without_pg_cron_in_the_database_scheduling_says_what_is_missing") {
        return;
    }
    let cluster = Cluster::shared();
    let mut c = cluster.connect();
    let _turn = exclusive(&mut c);
    let mut admin = cluster.connect_as(ADMIN);
    let expect_55000 = |c: &mut Client, message: &str| {
        for e in [
            try_schedule_reaper(c, Some("1 minute")).expect_err("schedule_reaper worked"),
            c.query_one("SELECT aedb_queue.unschedule_reaper()", &[])
                .expect_err("unschedule_reaper worked"),
        ] {
            assert_eq!(sqlstate(&e).as_deref(), Some("55000"), "{}", describe(&e));
            assert_eq!(e.as_db_error().unwrap().message(), message);
        }
    };

    // The library is loaded and serves this database, but the extension is
    // not created (exclusive() creates it again for the next test).
    c.batch_execute("DROP EXTENSION pg_cron").unwrap();
    expect_55000(
        &mut admin,
        "pg_cron is not installed in database \"aedb_itests\": run CREATE EXTENSION pg_cron",
    );

    // Another database: pg_cron keeps its jobs in aedb_itests only.
    let other = unique_queue("nocron_db");
    c.batch_execute(&format!("CREATE DATABASE {other}"))
        .unwrap();
    let mut o = cluster.connect_to(&other, SUPERUSER);
    o.batch_execute("CREATE EXTENSION aedb_queue").unwrap();
    drop(o);
    let mut o = cluster.connect_to(&other, ADMIN);
    expect_55000(
        &mut o,
        &format!("pg_cron serves database \"aedb_itests\" (cron.database_name), not \"{other}\""),
    );
    drop(o);
    c.batch_execute(&format!("DROP DATABASE {other}")).unwrap();
}
