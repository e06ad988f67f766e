//! What an operator meets installing aedb_queue in a database that is not
//! ours: the extension can be dropped and installed again, and
//! its superuser-only SQL functions never run a tenant's operator.

use aedb_queue_itests::*;

/// Counts of the catalogs an install writes to, in the current database
/// and cluster-wide.
const CATALOGS: &str = "
    SELECT (SELECT count(*) FROM pg_class), (SELECT count(*) FROM pg_proc),
           (SELECT count(*) FROM pg_type), (SELECT count(*) FROM pg_operator),
           (SELECT count(*) FROM pg_namespace WHERE nspname <> 'aedb_queue'),
           (SELECT count(*) FROM pg_event_trigger), (SELECT count(*) FROM pg_default_acl),
           (SELECT count(*) FROM pg_depend), (SELECT count(*) FROM pg_trigger),
           (SELECT count(*) FROM pg_roles WHERE rolname NOT LIKE 'aedb_queue_%')";

fn catalogs(c: &mut Client) -> Vec<i64> {
    let row = c.query_one(CATALOGS, &[]).unwrap();
    (0..row.len()).map(|i| row.get(i)).collect()
}

#[test]
fn drop_extension_removes_what_it_made_and_it_installs_again() {
    let cluster = Cluster::shared();
    let mut postgres_db = cluster.connect_to("postgres", SUPERUSER);
    postgres_db
        .batch_execute("CREATE DATABASE reinstall")
        .unwrap();
    let mut c = cluster.connect_to("reinstall", SUPERUSER);
    let before = catalogs(&mut c);
    for round in 0..3 {
        c.batch_execute("CREATE EXTENSION aedb_queue")
            .unwrap_or_else(|e| panic!("CREATE EXTENSION, round {round}: {}", describe(&e)));
        c.batch_execute(
            "SELECT aedb_queue.queue_enqueue('reinstalled', '{}');
             SELECT 1 FROM aedb_queue.queue_schedule_upsert('reinstalled', 's', '* * * * *');",
        )
        .unwrap();
        c.batch_execute("DROP EXTENSION aedb_queue").unwrap();
        // What PostgreSQL keeps by design: the roles (cluster-wide), and the
        // control file's schema, which it makes before the extension exists
        // and never counts as a member: left empty, adopted by the next
        // CREATE EXTENSION (docs/operations.md).
        assert_eq!(
            catalogs(&mut c),
            before,
            "round {round}: DROP EXTENSION left objects"
        );
        let left: Vec<i64> = first_column(
            &mut c,
            "SELECT count(*) FROM pg_depend d JOIN pg_namespace n ON d.refobjid = n.oid
             WHERE d.refclassid = 'pg_namespace'::regclass AND n.nspname = 'aedb_queue'",
            &[],
        );
        assert_eq!(
            left,
            vec![0],
            "round {round}: objects left in schema aedb_queue"
        );
    }

    // A schema someone else can write to is still refused, and nothing of
    // the failed install stays.
    c.batch_execute(
        "CREATE ROLE reinstall_stranger;
         GRANT CREATE ON SCHEMA aedb_queue TO reinstall_stranger;",
    )
    .unwrap();
    let err = c
        .batch_execute("CREATE EXTENSION aedb_queue")
        .expect_err("a schema another role may write to is refused");
    assert_eq!(
        sqlstate(&err).as_deref(),
        Some("42501"),
        "{}",
        describe(&err)
    );
    let installed: Vec<i64> = first_column(
        &mut c,
        "SELECT count(*) FROM pg_extension WHERE extname = 'aedb_queue'",
        &[],
    );
    assert_eq!(installed, vec![0]);
    c.batch_execute("DROP SCHEMA aedb_queue; DROP ROLE reinstall_stranger;")
        .unwrap();
    drop(c);
    postgres_db
        .batch_execute("DROP DATABASE reinstall WITH (FORCE)")
        .unwrap();
}

/// queue_shard() and queue_shard_assign() are called by superusers (the
/// router's set-up); with a search path that puts a writable schema
/// first, a role's operator of the same name must not run in them.
#[test]
fn the_shard_functions_never_run_an_operator_a_tenant_put_in_the_path() {
    let cluster = Cluster::shared();
    let mut su = cluster.connect();
    su.batch_execute(
        "CREATE ROLE shard_tenant LOGIN;
         CREATE SCHEMA shard_trap AUTHORIZATION shard_tenant;
         CREATE TABLE public.shard_trap_log (who text);
         GRANT INSERT ON public.shard_trap_log TO shard_tenant;",
    )
    .unwrap();
    let mut tenant = cluster.connect_as("shard_tenant");
    tenant
        .batch_execute(
            "CREATE FUNCTION shard_trap.shr(bigint, integer) RETURNS bigint
                 LANGUAGE sql AS $$ INSERT INTO public.shard_trap_log VALUES (current_user)
                                    RETURNING 0::bigint $$;
             CREATE OPERATOR shard_trap.>> (LEFTARG = bigint, RIGHTARG = integer,
                                            FUNCTION = shard_trap.shr);
             CREATE FUNCTION shard_trap.ge(integer, integer) RETURNS boolean
                 LANGUAGE sql AS $$ INSERT INTO public.shard_trap_log VALUES (current_user)
                                    RETURNING true $$;
             CREATE OPERATOR shard_trap.>= (LEFTARG = integer, RIGHTARG = integer,
                                            FUNCTION = shard_trap.ge);",
        )
        .unwrap();
    su.batch_execute("SET search_path = shard_trap, pg_catalog, public")
        .unwrap();
    let shard: Vec<i32> = first_column(&mut su, "SELECT aedb_queue.queue_shard()", &[]);
    assert_eq!(shard, vec![0]);
    let err = su
        .batch_execute("SELECT aedb_queue.queue_shard_assign(40000)")
        .expect_err("out of range");
    assert_eq!(sqlstate(&err).as_deref(), Some("22023"));
    su.batch_execute("RESET search_path").unwrap();
    let ran: Vec<String> = first_column(&mut su, "SELECT who FROM public.shard_trap_log", &[]);
    assert!(ran.is_empty(), "the tenant's operator ran as {ran:?}");
}

/// CPU time (user + system, in clock ticks) the process `pid` has used.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A due schedule whose row a session holds cannot fire; the background
/// reaper must wait its interval before looking again, not wake at once
/// for the fire time that has passed (it once woke every
/// millisecond: 30 % of a core for as long as the row was held).
#[test]
fn a_held_due_schedule_does_not_make_the_reaper_spin() {
    let cluster = Cluster::start_with(
        "shared_preload_libraries = 'aedb_queue'\naedb_queue.reaper_interval = '500ms'",
    );
    let mut su = cluster.connect();
    su.batch_execute(
        "SELECT 1 FROM aedb_queue.queue_schedule_upsert('held', 'yearly', '0 0 1 1 *');
         UPDATE aedb_queue.schedule SET next_fire_at = now() - interval '1 minute',
                                        fired_up_to = now() - interval '2 years'
          WHERE queue = 'held'",
    )
    .unwrap();
    let pid = {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let pids: Vec<i32> = first_column(
                &mut su,
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'aedb_queue reaper'",
                &[],
            );
            if let Some(&pid) = pids.first() {
                break pid;
            }
            assert!(std::time::Instant::now() < until, "no reaper started");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let mut holder = cluster.connect();
    let mut held = holder.transaction().unwrap();
    held.batch_execute("SELECT 1 FROM aedb_queue.schedule WHERE queue = 'held' FOR UPDATE")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let before = cpu_ticks(pid);
    std::thread::sleep(std::time::Duration::from_secs(4));
    let used = cpu_ticks(pid) - before;
    held.rollback().unwrap();
    // A pass every 500 ms costs a few ms; spinning used over a second.
    assert!(used < 40, "the reaper used {used} ticks of CPU in 4 s");
    // Let go, it fires on a later pass.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while first_column::<i64>(
        &mut su,
        "SELECT count(*) FROM aedb_queue.task WHERE queue = 'held'",
        &[],
    ) != vec![1]
    {
        assert!(
            std::time::Instant::now() < until,
            "the schedule never fired"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
