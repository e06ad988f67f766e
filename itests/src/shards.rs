//! Several shard clusters and a PL/Proxy router in front of them
//! (docs/scale-out.md), for the router tests (`tests/router.rs`).
//!
//! Shard i is a harness [`Cluster`] (database `aedb_itests` with the
//! extension and the application roles, as every test cluster) numbered i
//! with `aedb_queue.queue_shard_assign(i)`. The router is a cluster of its
//! own with no `aedb_queue` at all: database [`ROUTER_DB`] with
//! `CREATE EXTENSION aedb_queue_router CASCADE` (PL/Proxy), every shard
//! registered with `queue_router_add_shard`, and the application roles as
//! plain login roles, since PL/Proxy calls each shard as the caller and the
//! shard's own grants decide. Every cluster is on a free loopback port with
//! the harness's cleanup and watchdog.
//!
//! [`calls`] has the router-only calls, [`drain`] the drain with its
//! exactly-once ledger.

pub mod calls;
pub mod drain;

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::thread;

use postgres::NoTls;

use crate::{describe, Client, Cluster, SUPERUSER};

/// The router's database.
pub const ROUTER_DB: &str = "aedb_router";

/// The application roles on the router: plain logins, no rights of their
/// own there (the same names as on the shards, where they are members of
/// the extension's roles).
const ROUTER_ROLES_SQL: &str = "
    CREATE ROLE app_producer LOGIN;
    CREATE ROLE app_worker LOGIN;
    CREATE ROLE app_admin LOGIN;
    CREATE ROLE app_service LOGIN;
";

/// The shard that holds a task: the top bits of its id.
pub fn shard_of(task_id: i64) -> i32 {
    (task_id >> 48) as i32
}

/// What the server sent a session besides results (WARNINGs, NOTICEs), as
/// `"SEVERITY: message"`.
pub type Notices = Arc<Mutex<Vec<String>>>;

/// `n` shards and their router.
pub struct Shards {
    /// Shard i at index i - 1.
    shards: Vec<Cluster>,
    router: Cluster,
}

impl Shards {
    /// Starts `n` shard clusters and the router cluster (in parallel: most
    /// of the time is initdb), numbers the shards and registers them.
    pub fn start(n: usize) -> Shards {
        assert!(n >= 1, "a router needs a shard");
        let (shards, router) = thread::scope(|s| {
            let shards: Vec<_> = (1..=n)
                .map(|i| s.spawn(move || start_shard(i as i32)))
                .collect();
            let router = s.spawn(|| Cluster::start_empty(""));
            let shards: Vec<Cluster> = shards
                .into_iter()
                .map(|h| h.join().expect("starting a shard"))
                .collect();
            (shards, router.join().expect("starting the router"))
        });
        let set = Shards { shards, router };
        set.set_up_router();
        set
    }

    /// The shard numbers, 1..=n.
    pub fn numbers(&self) -> Vec<i32> {
        (1..=self.shards.len() as i32).collect()
    }

    /// Shard `shard`'s cluster (its log, its port).
    pub fn cluster(&self, shard: i32) -> &Cluster {
        &self.shards[shard as usize - 1]
    }

    /// The router's cluster.
    pub fn router_cluster(&self) -> &Cluster {
        &self.router
    }

    /// A session on the router as login role `user` (an application role
    /// or [`SUPERUSER`]).
    pub fn router(&self, user: &str) -> Client {
        self.router.connect_to(ROUTER_DB, user)
    }

    /// As [`Shards::router`], keeping every WARNING and NOTICE the session
    /// receives.
    pub fn router_with_notices(&self, user: &str) -> (Client, Notices) {
        let notices: Notices = Arc::default();
        let sink = notices.clone();
        let mut config = postgres::Config::from_str(&format!(
            "host=127.0.0.1 port={} user={user} dbname={ROUTER_DB} connect_timeout=20 \
             application_name=aedb_itests options='-c statement_timeout=30000'",
            self.router.port()
        ))
        .expect("router connection string");
        config.notice_callback(move |n| {
            sink.lock()
                .unwrap()
                .push(format!("{}: {}", n.severity(), n.message()))
        });
        let c = config
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("connect to the router as {user}: {}", describe(&e)));
        (c, notices)
    }

    /// A direct session on shard `shard` as login role `user`.
    pub fn shard(&self, shard: i32, user: &str) -> Client {
        self.cluster(shard).connect_as(user)
    }

    /// A direct superuser session on shard `shard`, for assertions.
    pub fn shard_su(&self, shard: i32) -> Client {
        self.cluster(shard).connect()
    }

    /// `pg_ctl stop -m immediate` of shard `shard`: down at once, as after
    /// a crash (its next start recovers from WAL).
    pub fn stop_shard(&self, shard: i32) {
        self.cluster(shard).stop_immediate();
    }

    /// Starts shard `shard` again on its data directory and port.
    pub fn start_shard(&self, shard: i32) {
        self.cluster(shard).start_again();
    }

    /// Each shard's rows of `queues` (live and kept completed tasks) as
    /// text, index shard - 1: a call that changed nothing on a shard leaves
    /// its text as it was.
    pub fn snapshot(&self, queues: &[&str]) -> Vec<String> {
        let queues: Vec<String> = queues.iter().map(|q| q.to_string()).collect();
        self.numbers()
            .into_iter()
            .map(|s| {
                self.shard_su(s)
                    .query_one(
                        "SELECT coalesce((SELECT string_agg(t::text, E'\\n' ORDER BY t.task_id) \
                                            FROM aedb_queue.task t WHERE t.queue = ANY($1)), '') \
                             || E'\\n--\\n' || \
                                coalesce((SELECT string_agg(c::text, E'\\n' ORDER BY c.task_id) \
                                            FROM aedb_queue.completed_task c WHERE c.queue = ANY($1)), '')",
                        &[&queues],
                    )
                    .unwrap_or_else(|e| panic!("snapshot of shard {s}: {}", describe(&e)))
                    .get(0)
            })
            .collect()
    }

    /// Tasks of `queue` in `aedb_queue.task` on shard `shard`, any state.
    pub fn tasks_on(&self, shard: i32, queue: &str) -> i64 {
        self.shard_su(shard)
            .query_one(
                "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
                &[&queue],
            )
            .unwrap_or_else(|e| panic!("count on shard {shard}: {}", describe(&e)))
            .get(0)
    }

    fn set_up_router(&self) {
        let mut admin = self.router.connect_db("postgres");
        admin
            .batch_execute(&format!("CREATE DATABASE {ROUTER_DB}"))
            .expect("CREATE DATABASE on the router");
        let mut su = self.router(SUPERUSER);
        su.batch_execute("CREATE EXTENSION aedb_queue_router CASCADE")
            .unwrap_or_else(|e| {
                panic!(
                    "CREATE EXTENSION aedb_queue_router failed (installed by scripts/install.sh, \
                     PL/Proxy by scripts/setup.sh?): {}",
                    describe(&e)
                )
            });
        if let Ok(sql) = std::env::var("H3_BREAK") {
            su.batch_execute(&sql).expect("H3_BREAK");
        } // TEMPORARY
        su.batch_execute(ROUTER_ROLES_SQL)
            .unwrap_or_else(|e| panic!("router roles: {}", describe(&e)));
        for s in self.numbers() {
            let conninfo = format!(
                "host=127.0.0.1 port={} dbname={} connect_timeout=2",
                self.cluster(s).port(),
                crate::DB_NAME
            );
            let added: bool = su
                .query_one(
                    "SELECT aedb_queue.queue_router_add_shard($1, $2)",
                    &[&s, &conninfo],
                )
                .unwrap_or_else(|e| panic!("registering shard {s}: {}", describe(&e)))
                .get(0);
            assert!(added, "shard {s} was already registered");
        }
    }
}

/// A harness cluster numbered `shard`.
fn start_shard(shard: i32) -> Cluster {
    let cluster = Cluster::start();
    let mut su = cluster.connect();
    su.query_one("SELECT aedb_queue.queue_shard_assign($1)", &[&shard])
        .unwrap_or_else(|e| panic!("queue_shard_assign({shard}): {}", describe(&e)));
    let reported: i32 = su
        .query_one("SELECT aedb_queue.queue_shard()", &[])
        .expect("queue_shard()")
        .get(0);
    assert_eq!(reported, shard, "the node reports another shard number");
    cluster
}
