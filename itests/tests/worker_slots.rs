//! Running out of background worker slots. Slots are
//! shared with pg_cron's launcher, the logical replication launcher and
//! parallel query: with more databases than slots, the launcher must warn
//! and try again later, never crash (a crash of a preloaded library's
//! worker restarts the whole cluster, every few seconds), and the reapers
//! that did start must go on working.

use aedb_queue_itests::*;
use std::time::{Duration, Instant};

/// Three slots for reapers and parallel workers: pg_cron's launcher (where
/// pg_cron is installed), ours and the logical replication launcher take
/// the others.
fn conf() -> String {
    let launchers = if pg_cron_installed() { 3 } else { 2 };
    format!(
        "shared_preload_libraries = 'pg_cron,aedb_queue'
aedb_queue.reaper_interval = '200ms'
max_worker_processes = {}
max_parallel_workers = 6
max_parallel_workers_per_gather = 2
parallel_setup_cost = 0
parallel_tuple_cost = 0
min_parallel_table_scan_size = 0",
        launchers + 3
    )
}

const DATABASES: usize = 5;

fn launcher_pid(su: &mut Client) -> Option<i32> {
    first_column::<i32>(
        su,
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'aedb_queue launcher'",
        &[],
    )
    .first()
    .copied()
}

fn reaper_databases(su: &mut Client) -> Vec<String> {
    first_column(
        su,
        "SELECT datname::text FROM pg_stat_activity
         WHERE backend_type = 'aedb_queue reaper' ORDER BY 1",
        &[],
    )
}

/// Waits up to `within` for `ok` to hold, polling.
fn eventually(within: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    ok()
}

#[test]
fn more_databases_than_worker_slots_is_a_warning_and_a_retry_never_a_crash() {
    let cluster = Cluster::start_with(&conf());
    let mut postgres_db = cluster.connect_to("postgres", SUPERUSER);
    let names: Vec<String> = (1..=DATABASES).map(|i| format!("slots_{i}")).collect();
    for name in &names {
        postgres_db
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        cluster
            .connect_to(name, SUPERUSER)
            .batch_execute("CREATE EXTENSION aedb_queue")
            .unwrap();
    }
    let mut su = cluster.connect();
    let launcher = launcher_pid(&mut su).expect("the launcher runs");

    // Parallel queries compete for the same slots meanwhile.
    su.batch_execute("CREATE TABLE public.wide AS SELECT g FROM generate_series(1, 200000) g")
        .unwrap();
    let parallel = {
        let mut c = cluster.connect();
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(8);
            while Instant::now() < until {
                c.simple_query("SELECT count(*) FROM public.wide WHERE g % 7 = 3")
                    .unwrap();
            }
        })
    };
    assert!(
        eventually(Duration::from_secs(60), || cluster
            .server_log()
            .contains("no background worker slot left for a reaper")),
        "the launcher warns that it ran out of slots"
    );
    parallel.join().unwrap();
    // Several of the launcher's one-second looks later, it is the same
    // process: it neither crashed nor was restarted.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        launcher_pid(&mut su),
        Some(launcher),
        "the launcher was restarted"
    );
    let log = cluster.server_log();
    for fatal in ["terminated by signal", "PANIC", "panicked at"] {
        assert!(!log.contains(fatal), "the server log has {fatal:?}:\n{log}");
    }

    // A reaper that started goes on serving its database.
    let served = reaper_databases(&mut su);
    assert!(
        !served.is_empty() && served.len() < DATABASES + 1,
        "{served:?}"
    );
    let db = &served[0];
    let mut producer = cluster.connect_to(db, SUPERUSER);
    let queue = unique_queue("slots");
    producer
        .execute(
            "SELECT aedb_queue.queue_enqueue($1::text, '{}'::jsonb, delay => interval '300 milliseconds')",
            &[&queue],
        )
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || {
            first_column::<i64>(
                &mut producer,
                "SELECT count(*) FROM aedb_queue.task WHERE queue = $1 AND state = 'ready'",
                &[&queue],
            ) == vec![1]
        }),
        "the reaper of {db} promoted the timer"
    );

    // Slots freed, the databases left without a reaper get one (a retry).
    let unserved: Vec<&String> = names.iter().filter(|n| !served.contains(n)).collect();
    assert!(
        !unserved.is_empty(),
        "every database got a reaper: {served:?}"
    );
    for name in served.iter().filter(|d| names.contains(d)) {
        postgres_db
            .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .unwrap();
    }
    assert!(
        eventually(Duration::from_secs(60), || {
            let now = reaper_databases(&mut su);
            unserved.iter().any(|n| now.contains(n))
        }),
        "a database that had no reaper got one once slots were free"
    );
    assert_eq!(launcher_pid(&mut su), Some(launcher));
}
