//! A PgBouncer in transaction mode in front of a harness [`Cluster`], as a
//! production deployment puts one: each transaction of a client runs on
//! whichever server connection is free, and a few server connections serve
//! every client. Debian's `pgbouncer` (1.18) carries no prepared statement
//! between transactions, so whatever goes through it uses unnamed
//! statements (the harness helpers' `query_typed`) or the simple protocol.
//!
//! Each [`PgBouncer`] runs its own process (as the `postgres` OS user when
//! the tests run as root) with its own ini and auth file in a directory of
//! its own, on a free port of 127.0.0.1; dropping it kills the process, and
//! a watchdog shell kills it if the test process dies first.

use std::fs;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use postgres::NoTls;

use crate::{Client, Cluster, ADMIN, DB_NAME, PRODUCER, SERVICE, WORKER};

/// How long a start may take before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A running PgBouncer in front of one cluster's `aedb_itests` database.
pub struct PgBouncer {
    root: PathBuf,
    port: u16,
    child: Child,
}

/// What a [`PgBouncer`] is started with.
#[derive(Debug, Clone)]
pub struct PoolerConfig {
    /// Server connections per (login role, database) pool.
    pub pool_size: u32,
    /// Login roles the pooler lets in (trust auth, as the cluster's).
    pub users: Vec<String>,
}

impl PoolerConfig {
    /// The harness's application roles, `pool_size` server connections each.
    pub fn new(pool_size: u32) -> PoolerConfig {
        PoolerConfig {
            pool_size,
            users: [PRODUCER, WORKER, ADMIN, SERVICE]
                .map(String::from)
                .to_vec(),
        }
    }

    /// Also lets `user` in (roles a test creates).
    pub fn user(mut self, user: &str) -> PoolerConfig {
        self.users.push(user.to_string());
        self
    }
}

impl PgBouncer {
    /// Starts a pooler in front of `cluster` and waits until it accepts
    /// connections (at most [`START_TIMEOUT`] per try).
    pub fn start(cluster: &Cluster, config: &PoolerConfig) -> PgBouncer {
        let root = crate::make_root_dir();
        let mut last_log = String::new();
        // The port can be taken between the probe and the pooler's bind.
        for _ in 0..5 {
            let port = crate::pick_free_port();
            write_files(&root, port, cluster.port(), config);
            let child = spawn(&root);
            let mut pooler = PgBouncer {
                root: root.clone(),
                port,
                child,
            };
            match pooler.wait_until_listening() {
                Ok(()) => {
                    spawn_watchdog(pooler.child.id(), &root);
                    pooler.open_every_server(config);
                    return pooler;
                }
                Err(log) => {
                    last_log = log;
                    let _ = pooler.child.kill();
                    let _ = pooler.child.wait();
                    std::mem::forget(pooler); // keep the dir for the next try
                    if !last_log.contains("in use") {
                        break;
                    }
                }
            }
        }
        let _ = fs::remove_dir_all(&root);
        panic!("pgbouncer did not start\n--- pgbouncer log ---\n{last_log}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection string of login role `user` through the pooler.
    pub fn dsn(&self, user: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={user} dbname={DB_NAME} connect_timeout=20 \
             application_name=aedb_itests_pooled",
            self.port
        )
    }

    /// A client session of `user` through the pooler (an ordinary role,
    /// checked as [`Cluster::connect_as`] does). Its transactions run on
    /// whichever server connection of the pool is free.
    pub fn connect_as(&self, user: &str) -> Client {
        let mut c = Client::connect(&self.dsn(user), NoTls).unwrap_or_else(|e| {
            panic!(
                "cannot connect through pgbouncer as {user}: {e:?}\n--- pgbouncer log ---\n{}",
                self.log()
            )
        });
        let row = c
            .query_typed_one(
                "SELECT current_user::text, rolsuper FROM pg_catalog.pg_roles \
                 WHERE rolname = current_user",
                &[],
            )
            .expect("read the session's role");
        let (name, is_super): (String, bool) = (row.get(0), row.get(1));
        assert_eq!(name, user, "connected as another role");
        assert!(
            !is_super,
            "{user} is a superuser; application roles must not be"
        );
        c
    }

    /// The pooler's log so far (printed on failures).
    pub fn log(&self) -> String {
        fs::read_to_string(self.root.join("pgbouncer.log")).unwrap_or_default()
    }

    /// Makes every pool open all its server connections now (one client
    /// transaction holding each at once), so that tests see the pool's full
    /// size from their first transaction; `min_pool_size` keeps them open.
    fn open_every_server(&self, config: &PoolerConfig) {
        for user in &config.users {
            let mut clients: Vec<Client> = (0..config.pool_size)
                .map(|_| self.connect_as(user))
                .collect();
            let mut txs: Vec<_> = clients
                .iter_mut()
                .map(|c| c.transaction().unwrap())
                .collect();
            let pids: std::collections::HashSet<i32> = txs.iter_mut().map(backend_pid).collect();
            assert_eq!(
                pids.len(),
                config.pool_size as usize,
                "{user}: server connections opened"
            );
            for tx in txs {
                tx.commit().unwrap();
            }
        }
    }

    fn wait_until_listening(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("pgbouncer exited ({status})\n{}", self.log()));
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "not listening after {START_TIMEOUT:?}\n{}",
            self.log()
        ))
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// The server connection (backend pid) the statement ran on.
pub fn backend_pid(c: &mut impl crate::GenericClient) -> i32 {
    c.query_typed_one("SELECT pg_backend_pid()", &[])
        .expect("pg_backend_pid()")
        .get(0)
}

/// The ini and the auth file. Every pool keeps `pool_size` server
/// connections open (`min_pool_size`) and hands idle ones out round robin,
/// so even one client's consecutive transactions move between them.
/// `connect_query` gives each server connection the 30 s statement cap the
/// harness's direct sessions get through `options`, which PgBouncer does not
/// pass on.
fn write_files(root: &std::path::Path, port: u16, pg_port: u16, config: &PoolerConfig) {
    let users: String = config
        .users
        .iter()
        .map(|u| format!("\"{u}\" \"\"\n"))
        .collect();
    fs::write(root.join("users.txt"), users).expect("write users.txt");
    let ini = format!(
        "[databases]\n\
         {DB_NAME} = host=127.0.0.1 port={pg_port} dbname={DB_NAME} \
         connect_query='SET statement_timeout = 30000'\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {root}/users.txt\n\
         pool_mode = transaction\n\
         default_pool_size = {size}\n\
         min_pool_size = {size}\n\
         reserve_pool_size = 0\n\
         server_round_robin = 1\n\
         max_client_conn = 200\n\
         server_reset_query =\n\
         server_login_retry = 1\n\
         query_wait_timeout = 60\n\
         ignore_startup_parameters = extra_float_digits\n\
         logfile = {root}/pgbouncer.log\n\
         pidfile = {root}/pgbouncer.pid\n",
        root = root.display(),
        size = config.pool_size,
    );
    fs::write(root.join("pgbouncer.ini"), ini).expect("write pgbouncer.ini");
}

/// PgBouncer refuses to run as root: `-u` makes it switch to `postgres`
/// (the directory is theirs, see `make_root_dir`). Run in the foreground,
/// so the child is the pooler itself and killing it stops it.
fn spawn(root: &std::path::Path) -> Child {
    let mut cmd = Command::new(pgbouncer_bin());
    if crate::is_root() {
        cmd.args(["-u", "postgres"]);
    }
    cmd.arg("-q")
        .arg(root.join("pgbouncer.ini"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run pgbouncer (apt-get install pgbouncer): {e}"))
}

/// Debian installs it in /usr/sbin, which a non-root PATH may lack.
fn pgbouncer_bin() -> &'static str {
    if std::path::Path::new("/usr/sbin/pgbouncer").exists() {
        "/usr/sbin/pgbouncer"
    } else {
        "pgbouncer"
    }
}

/// A detached shell that kills the pooler once this test process is gone
/// (a SIGKILL or an abort skips `Drop`); only if the pid is still this
/// pooler's, as `Drop` may have stopped it and the pid be another's since.
fn spawn_watchdog(pooler_pid: u32, root: &std::path::Path) {
    let ini = root.join("pgbouncer.ini");
    let script = format!(
        "trap '' INT HUP; while kill -0 {} 2>/dev/null; do sleep 0.5; done; \
         if tr '\\0' ' ' < /proc/{pooler_pid}/cmdline 2>/dev/null | grep -qF '{}'; then \
         kill -9 {pooler_pid}; fi; rm -rf '{}'",
        std::process::id(),
        ini.display(),
        root.display()
    );
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}
