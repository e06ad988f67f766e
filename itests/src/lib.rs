//! Harness for the multi-connection integration tests of `aedb_queue`.
//!
//! These tests need what `#[pg_test]` cannot give: several sessions over real
//! TCP connections, real commits and rollbacks, wall-clock time passing, and a
//! server that crashes and recovers. So each test binary starts its own
//! throw-away cluster from the PostgreSQL binaries in `$AEDB_PG_BIN` (default
//! Debian's 15; `scripts/test_major.sh` points it at another major), with the
//! extension installed by `scripts/install.sh`, and the
//! tests talk to it as an application would, through the `postgres` crate.
//!
//! Applications connect as ordinary login roles that are members of the
//! extension's roles, not as superusers, so every application step of a test
//! runs as one: [`PRODUCER`] enqueues, [`WORKER`] claims, settles and reads,
//! [`ADMIN`] configures, pauses, reaps and grants, [`SERVICE`] (producer and
//! worker) completes with follow-ups. [`Cluster::connect`] (the superuser) is
//! only for what an application cannot do: set-up, reaching into the
//! extension's tables, reading them for assertions.
//!
//! Two parts:
//! - [`Cluster`]: initdb / pg_ctl wrapper (start, connect as a role, crash,
//!   restart, cleanup).
//! - Typed helpers around the SQL surface (`enqueue`, `claim`, `complete`,
//!   …), so that tests read as the scenario they check and the SQL of every
//!   call lives in one place. They send each statement with its parameters'
//!   types (`query_typed`: one unnamed statement, parsed, bound and run in
//!   one round trip), never a named prepared statement, so they work as well
//!   through a pooler in transaction mode ([`pgbouncer`]), where a statement
//!   prepared in one transaction may be missing on the server connection of
//!   the next.

pub mod chaos;
mod fault_drain;
pub use fault_drain::*;
pub mod pgbouncer;
pub mod server_log;
pub mod shards;
pub mod standby;
pub mod tls;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use postgres::types::{ToSql, Type};
use postgres::NoTls;
pub use postgres::{Client, GenericClient, Transaction};
pub use serde_json::{json, Value};

/// Where `initdb` and `pg_ctl` are taken from unless `AEDB_PG_BIN` says
/// otherwise (e.g. a private relocated copy of PostgreSQL 15, so that
/// reinstalling the extension into the system PG cannot touch the running
/// test clusters; `scripts/common.sh` honours the same variable).
const DEFAULT_PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// The PostgreSQL bin directory: `$AEDB_PG_BIN`, else [`DEFAULT_PG_BIN`].
pub fn pg_bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var("AEDB_PG_BIN") {
        Ok(dir) if !dir.trim().is_empty() => dir.trim_end_matches('/').to_string(),
        _ => DEFAULT_PG_BIN.to_string(),
    })
}
const DB_NAME: &str = "aedb_itests";

/// The superuser the cluster is created with ([`Cluster::connect`]).
pub const SUPERUSER: &str = "postgres";
/// Login role, member of `aedb_queue_producer`: enqueues.
pub const PRODUCER: &str = "app_producer";
/// Login role, member of `aedb_queue_worker`: claims, settles, reads tasks.
pub const WORKER: &str = "app_worker";
/// Login role, member of `aedb_queue_admin`: configures, pauses, reaps,
/// cancels, retries dead letters, grants.
pub const ADMIN: &str = "app_admin";
/// Login role, member of `aedb_queue_producer` and `aedb_queue_worker`: a
/// service that works tasks and enqueues in the same transaction (completion
/// follow-ups).
pub const SERVICE: &str = "app_service";

/// Run once per cluster after `CREATE EXTENSION aedb_queue`: the login roles
/// an application connects as, members of the extension's roles (never
/// superusers, so the extension's owner-rights switch and per-queue grants
/// are what lets them in). Tables the tests create as `postgres` in `public`
/// (the application's own tables: orders, ledgers) are readable and
/// writable by them, as an application's tables would be.
const APP_ROLES_SQL: &str = "
    CREATE ROLE app_producer LOGIN IN ROLE aedb_queue_producer;
    CREATE ROLE app_worker LOGIN IN ROLE aedb_queue_worker;
    CREATE ROLE app_admin LOGIN IN ROLE aedb_queue_admin;
    CREATE ROLE app_service LOGIN IN ROLE aedb_queue_producer, aedb_queue_worker;
    ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public
        GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES
        TO app_producer, app_worker, app_admin, app_service;
";
const PORT_RANGE: std::ops::Range<u16> = 29000..30000;

// ---------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------

/// A throw-away PostgreSQL cluster bound to 127.0.0.1 on a free port, with
/// database `aedb_itests` and `CREATE EXTENSION aedb_queue` done.
///
/// pg_cron is preloaded, where installed ([`pg_cron_installed`]), with
/// `cron.database_name = aedb_itests`: its scheduler
/// serves one database per cluster, and the tests use only this one. Only
/// `tests/cron.rs` runs `CREATE EXTENSION pg_cron`; elsewhere the scheduler
/// idles.
///
/// Dropping it stops the server (`-m fast`) and removes its directory. A
/// cluster kept in a `static` (see [`Cluster::shared`]) is never dropped, so
/// every live cluster is also registered for an `atexit` cleanup, and a small
/// watchdog shell stops it if the test process dies without running
/// `atexit` (SIGKILL, abort).
///
/// When it is torn down (dropped, or at exit), its server log is checked for
/// a process that died ([`server_log::check_server_log`]): a test that left
/// one fails (a shared cluster's fails the test binary), naming the line.
pub struct Cluster {
    root: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    running: AtomicBool,
    /// Set by [`Cluster::expect_backend_deaths`]; shared with the `atexit`
    /// cleanup.
    sigkill_expected: Arc<AtomicBool>,
}

impl Cluster {
    /// The cluster shared by all tests of one test binary. Tests that share it
    /// must use their own queue names (see [`unique_queue`]).
    pub fn shared() -> &'static Cluster {
        static SHARED: OnceLock<Cluster> = OnceLock::new();
        SHARED.get_or_init(Cluster::start)
    }

    /// initdb + start + create the database and the extension.
    pub fn start() -> Cluster {
        Cluster::start_with("")
    }

    /// As [`Cluster::start`], with `conf` appended to postgresql.conf (such
    /// as `shared_preload_libraries` for the background-worker reaper).
    pub fn start_with(conf: &str) -> Cluster {
        let cluster = Cluster::start_empty(conf);
        cluster.create_database();
        cluster
    }

    /// initdb + start only: no test database, no extension, no roles (the
    /// router's cluster, [`shards`], holds none of `aedb_queue`).
    pub(crate) fn start_empty(conf: &str) -> Cluster {
        let root = make_root_dir();
        let data = root.join("data");
        let log = root.join("server.log");
        run_as_postgres(
            Command::new(format!("{}/initdb", pg_bin()))
                .arg("-D")
                .arg(&data)
                .args(["--auth=trust", "-U", "postgres", "-E", "UTF8", "--locale=C"])
                // Only initdb's own final sync is skipped; the server itself
                // runs with fsync=on (the restart test relies on WAL replay).
                .arg("--no-sync"),
            "initdb",
        )
        .unwrap_or_else(|e| {
            let _ = fs::remove_dir_all(&root);
            panic!("{e}")
        });

        // The port can be taken between our probe and the server's bind (other
        // test binaries pick ports from the same range), so retry a few times.
        let mut last_err = String::new();
        for _ in 0..8 {
            let port = pick_free_port();
            write_conf(&data, port, conf);
            let cluster = Cluster::unstarted(root.clone(), port);
            match cluster.pg_ctl_start() {
                Ok(()) => {
                    register_for_cleanup(&cluster);
                    return cluster;
                }
                Err(e) => {
                    last_err = e;
                    let log_text = cluster.server_log();
                    std::mem::forget(cluster); // keep the dir for the next try
                    if !log_text.contains("could not bind") && !log_text.contains("in use") {
                        break;
                    }
                }
            }
        }
        let log_text = fs::read_to_string(&log).unwrap_or_default();
        let _ = fs::remove_dir_all(&root);
        panic!("could not start the test cluster: {last_err}\n--- server log ---\n{log_text}");
    }

    /// A cluster value for `root` (its `data` and `server.log`), not running.
    pub(crate) fn unstarted(root: PathBuf, port: u16) -> Cluster {
        Cluster {
            data: root.join("data"),
            log: root.join("server.log"),
            root,
            port,
            running: AtomicBool::new(false),
            sigkill_expected: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Declares that the test kills processes of this cluster with SIGKILL
    /// on purpose (a crash test): the guard on the server log then tolerates
    /// deaths by SIGKILL, and only those (a SIGSEGV, a PANIC or a Rust panic
    /// still fail). For a shared cluster it holds for the rest of the binary.
    pub fn expect_backend_deaths(&self) {
        self.sigkill_expected.store(true, Ordering::SeqCst);
    }

    /// The connection string of login role `user` to the test database,
    /// for clients other than the `postgres` crate (async runtimes, CLIs).
    pub fn dsn(&self, user: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={user} dbname={DB_NAME} connect_timeout=20 \
             application_name=aedb_itests",
            self.port
        )
    }

    /// A new session over TCP as the superuser `postgres`, for what an
    /// application cannot do: set-up (roles, grants to them, its tables),
    /// reaching into `aedb_queue`'s tables (backdating a lease, reading rows
    /// for a ledger or an assertion), extensions. Application steps use
    /// [`Cluster::connect_as`] with [`PRODUCER`], [`WORKER`], [`ADMIN`] or
    /// [`SERVICE`].
    pub fn connect(&self) -> Client {
        self.connect_to(DB_NAME, SUPERUSER)
    }

    /// A new session over TCP as login role `user` (trust auth: no password).
    /// Every statement is capped at 30 s server-side so that a lock-wait bug
    /// shows up as a failed test, not a hung one. Any role but `postgres` is
    /// checked to be an ordinary role, so that a test meant to run with an
    /// application's rights cannot silently run as a superuser.
    pub fn connect_as(&self, user: &str) -> Client {
        self.connect_to(DB_NAME, user)
    }

    /// [`Cluster::connect_as`] to another database of the cluster.
    pub fn connect_to(&self, db: &str, user: &str) -> Client {
        let mut c = self.connect_db_as(db, user);
        if user != SUPERUSER {
            let row = c
                .query_one(
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
        }
        c
    }

    /// A session of login role `user` that starts as `role`, as
    /// `PGOPTIONS='-c role=...'` (or a pooler's connect options) would make it.
    pub fn connect_as_with_role_option(&self, user: &str, role: &str) -> Client {
        self.connect_with_options(DB_NAME, user, &format!("-c role={role}"))
    }

    fn connect_db(&self, db: &str) -> Client {
        self.connect_db_as(db, SUPERUSER)
    }

    fn connect_db_as(&self, db: &str, user: &str) -> Client {
        self.connect_with_options(db, user, "")
    }

    fn connect_with_options(&self, db: &str, user: &str, options: &str) -> Client {
        let conn = format!(
            "host=127.0.0.1 port={} user={user} dbname={db} connect_timeout=20 \
             application_name=aedb_itests options='-c statement_timeout=30000 {options}'",
            self.port
        );
        let mut last = None;
        // Right after a (re)start the server may still refuse connections
        // for a moment (e.g. "the database system is starting up").
        for _ in 0..50 {
            match Client::connect(&conn, NoTls) {
                Ok(c) => return c,
                Err(e) => {
                    last = Some(e);
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        panic!(
            "cannot connect to 127.0.0.1:{} as {user}: {:?}\n--- server log ---\n{}",
            self.port,
            last,
            self.server_log()
        );
    }

    /// Simulates a crash: `pg_ctl stop -m immediate` skips the shutdown
    /// checkpoint, so the next start must recover from WAL.
    pub fn stop_immediate(&self) {
        self.pg_ctl_stop("immediate")
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts the server again on the same data directory and port.
    pub fn start_again(&self) {
        self.pg_ctl_start().unwrap_or_else(|e| {
            panic!(
                "restart failed: {e}\n--- server log ---\n{}",
                self.server_log()
            )
        });
    }

    /// The server's log so far (printed on failures; the restart test reads
    /// it to check that crash recovery really ran).
    pub fn server_log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn create_database(&self) {
        let mut admin = self.connect_db("postgres");
        admin
            .batch_execute(&format!("CREATE DATABASE {DB_NAME}"))
            .expect("CREATE DATABASE");
        let mut c = self.connect();
        if let Err(e) = c.batch_execute("CREATE EXTENSION aedb_queue CASCADE") {
            panic!(
                "CREATE EXTENSION aedb_queue failed (is it installed with `cargo pgrx install`?): {}",
                describe(&e)
            );
        }
        c.batch_execute(APP_ROLES_SQL)
            .unwrap_or_else(|e| panic!("creating the application roles: {}", describe(&e)));
    }

    fn pg_ctl_start(&self) -> Result<(), String> {
        run_as_postgres(
            Command::new(format!("{}/pg_ctl", pg_bin()))
                .arg("-D")
                .arg(&self.data)
                .arg("-l")
                .arg(&self.log)
                .args(["-w", "-t", "90", "start"]),
            "pg_ctl start",
        )?;
        self.running.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn pg_ctl_stop(&self, mode: &str) -> Result<(), String> {
        if !self.running.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        stop_data_dir(&self.data, mode)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Err(e) = self.pg_ctl_stop("fast") {
            eprintln!("{e}");
        }
        unregister(&self.root);
        let deaths =
            server_log::check_and_keep(&self.log, self.sigkill_expected.load(Ordering::SeqCst));
        let _ = fs::remove_dir_all(&self.root);
        if let Err(lines) = deaths {
            if std::thread::panicking() {
                eprintln!("{lines}");
            } else {
                panic!("{lines}");
            }
        }
    }
}

fn stop_data_dir(data: &Path, mode: &str) -> Result<(), String> {
    run_as_postgres(
        Command::new(format!("{}/pg_ctl", pg_bin()))
            .arg("-D")
            .arg(data)
            .args(["-m", mode, "-w", "-t", "60", "stop"]),
        "pg_ctl stop",
    )
}

/// Postgres refuses to run as root; the machine runs the tests as root, so
/// the server binaries run as the `postgres` OS user.
fn run_as_postgres(cmd: &mut Command, what: &str) -> Result<(), String> {
    let mut full = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        c
    } else {
        let mut c = Command::new(cmd.get_program());
        c.args(cmd.get_args());
        c
    };
    // A server that inherits RUST_BACKTRACE puts a Rust backtrace in the
    // DETAIL of every error raised inside the extension's SPI calls, at
    // ~0.2 s each (docs/chaos.md): the tests' servers run as production's.
    full.env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    // Stdin from /dev/null and captured output: the postmaster (started by
    // pg_ctl with -l) must not hold on to the test runner's pipes.
    let out = full
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

// The two libc functions the harness needs, declared here rather than
// pulling in the `libc` crate (std links libc anyway).
extern "C" {
    fn geteuid() -> u32;
    fn atexit(cb: extern "C" fn()) -> i32;
    fn _exit(status: i32) -> !;
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { geteuid() == 0 }
}

fn make_root_dir() -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let root = std::env::temp_dir().join(format!(
        "aedb_itests_{}_{}_{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst),
        rand::random::<u32>()
    ));
    fs::create_dir_all(&root).expect("create cluster dir");
    if is_root() {
        let st = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&root)
            .status()
            .expect("chown");
        assert!(st.success(), "chown postgres {root:?} failed");
    }
    root
}

fn pick_free_port() -> u16 {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    for _ in 0..200 {
        let port = rng.gen_range(PORT_RANGE);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {PORT_RANGE:?}");
}

/// Whether pg_cron is installed for the PostgreSQL the clusters run from.
/// Debian's 15 has it (postgresql-15-cron); the other majors have it only
/// where `scripts/pg_companions.sh` could build it (docs/postgres-majors.md).
/// Without it the clusters preload the rest, and the
/// pg_cron tests say they did not run.
pub fn pg_cron_installed() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        let out = Command::new(format!("{}/pg_config", pg_bin()))
            .arg("--pkglibdir")
            .output()
            .expect("run pg_config --pkglibdir");
        let libdir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Path::new(&libdir).join("pg_cron.so").exists()
    })
}

/// True, having said so, when pg_cron is not installed: a test of pg_cron
/// returns then.
pub fn skip_without_pg_cron(test: &str) -> bool {
    if pg_cron_installed() {
        return false;
    }
    eprintln!("{test}: not run: pg_cron is not installed for {}", pg_bin());
    true
}

/// A test's settings as the cluster gets them: pg_cron left out of a
/// `shared_preload_libraries` list where it is not installed.
fn settings_for_this_install(extra: &str) -> String {
    if pg_cron_installed() {
        return extra.to_string();
    }
    extra
        .lines()
        .map(|line| match line.trim_start().starts_with("shared_preload_libraries") {
            true => line.replace("'pg_cron,", "'").replace(",pg_cron", "").replace("'pg_cron'", "''"),
            false => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn write_conf(data: &Path, port: u16, extra: &str) {
    use std::io::Write;
    let extra = settings_for_this_install(extra);
    let cron = match pg_cron_installed() {
        true => format!("shared_preload_libraries = 'pg_cron'\ncron.database_name = '{DB_NAME}'\n"),
        false => String::new(),
    };
    // `AEDB_DIRECT_WRITES=off` runs a suite on the statement path (the test
    // command runs the model test both ways); a test's own `extra` wins.
    let direct_writes = std::env::var("AEDB_DIRECT_WRITES")
        .map(|v| format!("aedb_queue.direct_writes = '{v}'\n"))
        .unwrap_or_default();
    // Later settings override earlier ones, so appending on a retry is fine.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.conf"))
        .expect("open postgresql.conf");
    writeln!(
        f,
        "\n# aedb_itests\nport = {port}\nlisten_addresses = '127.0.0.1'\n\
         unix_socket_directories = '{}'\nmax_connections = 100\nfsync = on\n\
         synchronous_commit = on\nlog_min_messages = warning\n\
         {cron}{direct_writes}{extra}\n",
        data.display()
    )
    .expect("write postgresql.conf");
}

/// A cluster that is still running, for the `atexit` cleanup (statics are
/// never dropped).
struct Live {
    root: PathBuf,
    data: PathBuf,
    log: PathBuf,
    sigkill_expected: Arc<AtomicBool>,
}
static LIVE: Mutex<Vec<Live>> = Mutex::new(Vec::new());

fn register_for_cleanup(c: &Cluster) {
    static ATEXIT: Once = Once::new();
    ATEXIT.call_once(|| {
        // SAFETY: registering a plain extern "C" fn with no captured state.
        unsafe {
            atexit(cleanup_at_exit);
        }
    });
    LIVE.lock().unwrap_or_else(|p| p.into_inner()).push(Live {
        root: c.root.clone(),
        data: c.data.clone(),
        log: c.log.clone(),
        sigkill_expected: c.sigkill_expected.clone(),
    });
    spawn_watchdog(c);
}

fn unregister(root: &Path) {
    LIVE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|l| l.root != root);
}

extern "C" fn cleanup_at_exit() {
    let live = match LIVE.try_lock() {
        Ok(mut g) => std::mem::take(&mut *g),
        Err(_) => return, // the watchdog will do it
    };
    let mut deaths = false;
    for l in live {
        if l.data.join("postmaster.pid").exists() {
            let _ = stop_data_dir(&l.data, "fast");
        }
        let sigkill_expected = l.sigkill_expected.load(Ordering::SeqCst);
        if let Err(lines) = server_log::check_and_keep(&l.log, sigkill_expected) {
            eprintln!("{lines}");
            deaths = true;
        }
        let _ = fs::remove_dir_all(&l.root);
    }
    if deaths {
        // The tests passed, but a process of a shared cluster died: the
        // binary fails (exit() must not be called again from atexit).
        // SAFETY: _exit ends the process at once; nothing is left to run.
        unsafe { _exit(1) }
    }
}

/// A detached shell that waits for this test process to end and then makes
/// sure its cluster is stopped and removed, even after a SIGKILL.
fn spawn_watchdog(c: &Cluster) {
    let pid = std::process::id();
    let data = c.data.display().to_string();
    let root = c.root.display().to_string();
    let bin = pg_bin();
    let stop = if is_root() {
        format!("runuser -u postgres -- '{bin}/pg_ctl' -D '{data}' -m immediate -w stop")
    } else {
        format!("'{bin}/pg_ctl' -D '{data}' -m immediate -w stop")
    };
    let script = format!(
        "trap '' INT HUP; while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; \
         if [ -f '{data}/postmaster.pid' ]; then {stop}; fi; rm -rf '{root}'"
    );
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

// ---------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------

/// A queue name no other test (or earlier run against the same cluster) uses.
pub fn unique_queue(prefix: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}_{}_{:08x}",
        SEQ.fetch_add(1, Ordering::SeqCst),
        rand::random::<u32>()
    )
}

/// The server's clock (statement time). Time-based assertions compare server
/// timestamps with each other, never with the client's clock.
pub fn server_now(c: &mut impl GenericClient) -> SystemTime {
    c.query_typed_one("SELECT now()", &[])
        .expect("SELECT now()")
        .get(0)
}

/// `a - b` in seconds (negative when `a` is earlier).
pub fn secs_between(a: SystemTime, b: SystemTime) -> f64 {
    let f = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    f(a) - f(b)
}

/// Sleeps until the server clock has passed `t` by at least `margin`.
pub fn sleep_until_server_time(c: &mut impl GenericClient, t: SystemTime, margin: Duration) {
    let left = secs_between(t, server_now(c)) + margin.as_secs_f64();
    if left > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(left));
    }
}

/// The SQLSTATE of a server error, e.g. `Some("40002")`.
pub fn sqlstate(e: &postgres::Error) -> Option<String> {
    e.code().map(|c| c.code().to_string())
}

/// A readable rendering of a postgres error (the Display of the crate's error
/// hides the server message).
pub fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!(
            "{} (SQLSTATE {}): {}",
            db.severity(),
            db.code().code(),
            db.message()
        ),
        None => e.to_string(),
    }
}

fn expect_ok<T>(r: Result<T, postgres::Error>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {}", describe(&e)))
}

/// The first column of every row `sql` returns (panics with the error).
pub fn first_column<T: for<'a> postgres::types::FromSql<'a>>(
    c: &mut impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Vec<T> {
    expect_ok(c.query(sql, params), sql)
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A ledger table's rows per task (task id -> rows): the tests' proof that
/// each task's side effect was committed exactly once.
pub fn ledger_counts(
    c: &mut impl GenericClient,
    ledger: &str,
) -> std::collections::HashMap<i64, i64> {
    let sql = format!("SELECT task_id, count(*) FROM {ledger} GROUP BY task_id");
    expect_ok(c.query_typed(sql.as_str(), &[]), &sql)
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Parameters with the types their `$n::type` casts name (`query_typed`).
type Params = Vec<(Box<dyn ToSql + Sync>, Type)>;

fn refs(p: &Params) -> Vec<(&(dyn ToSql + Sync), Type)> {
    p.iter()
        .map(|(b, t)| (b.as_ref() as &(dyn ToSql + Sync), t.clone()))
        .collect()
}

/// The type of a parameter sent as `$n<cast>`: the first type its cast names.
fn cast_type(cast: &str) -> Type {
    match cast.trim_start_matches("::").split("::").next() {
        Some("text") => Type::TEXT,
        Some("int8") => Type::INT8,
        Some("int4") => Type::INT4,
        Some("bool") => Type::BOOL,
        Some("jsonb") => Type::JSONB,
        _ => panic!("no parameter type for the cast {cast:?}"),
    }
}

/// Appends `name => $n::ty` for an optional named argument, so that omitted
/// options fall back to the function's own defaults.
fn named_arg<T: ToSql + Sync + 'static>(
    args: &mut Vec<String>,
    params: &mut Params,
    name: &str,
    cast: &str,
    value: Option<T>,
) {
    if let Some(v) = value {
        params.push((Box::new(v), cast_type(cast)));
        args.push(format!("{name} => ${}{cast}", params.len()));
    }
}

// ---------------------------------------------------------------------------
// Typed helpers for the SQL surface
// ---------------------------------------------------------------------------

/// Result of a fenced call (`queue_complete`, `queue_fail`, `queue_heartbeat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    LeaseLost,
}

impl Outcome {
    fn parse(s: &str) -> Outcome {
        match s {
            "applied" => Outcome::Applied,
            "lease_lost" => Outcome::LeaseLost,
            other => panic!("unexpected outcome {other:?}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    pub task_id: i64,
    pub deduplicated: bool,
}

/// Optional arguments of `queue_enqueue`; `None` means "use the default".
/// Intervals are given as text, e.g. `"2 seconds"`.
#[derive(Debug, Clone, Default)]
pub struct EnqueueOpts {
    pub delay: Option<String>,
    pub priority: Option<i64>,
    pub max_attempts: Option<i32>,
    pub backoff_base: Option<String>,
    pub backoff_max: Option<String>,
    pub idempotency_key: Option<String>,
}

impl EnqueueOpts {
    pub fn delay(mut self, d: &str) -> Self {
        self.delay = Some(d.into());
        self
    }
    pub fn priority(mut self, p: i64) -> Self {
        self.priority = Some(p);
        self
    }
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = Some(n);
        self
    }
    pub fn backoff(mut self, base: &str, max: &str) -> Self {
        self.backoff_base = Some(base.into());
        self.backoff_max = Some(max.into());
        self
    }
    pub fn key(mut self, k: &str) -> Self {
        self.idempotency_key = Some(k.into());
        self
    }
}

/// One row returned by `queue_claim`.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub task_id: i64,
    pub payload: Option<Value>,
    pub attempts: i32,
    pub fencing_token: i64,
    pub lease_deadline: SystemTime,
    pub priority: i64,
    pub enqueued_at: SystemTime,
    pub progress: Option<Value>,
}

/// One row of `aedb_queue.tasks` (as returned by `queue_get` / `queue_list`).
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub task_id: i64,
    pub queue: String,
    pub state: String,
    pub not_before: SystemTime,
    pub priority: i64,
    pub attempts: i32,
    pub max_attempts: Option<i32>,
    pub owner_id: Option<String>,
    pub fencing_token: Option<i64>,
    pub lease_deadline: Option<SystemTime>,
    pub payload: Option<Value>,
    pub progress: Option<Value>,
    pub last_error: Option<String>,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reaped {
    pub promoted: i64,
    pub reclaimed: i64,
    pub dead_lettered: i64,
    /// Tasks made by schedules.
    pub fired: i64,
}

/// `queue_enqueue(queue, payload)` with all defaults.
pub fn enqueue(c: &mut impl GenericClient, queue: &str, payload: &Value) -> Enqueued {
    enqueue_with(c, queue, Some(payload), &EnqueueOpts::default())
}

pub fn enqueue_with(
    c: &mut impl GenericClient,
    queue: &str,
    payload: Option<&Value>,
    opts: &EnqueueOpts,
) -> Enqueued {
    expect_ok(try_enqueue_with(c, queue, payload, opts), "queue_enqueue")
}

pub fn try_enqueue_with(
    c: &mut impl GenericClient,
    queue: &str,
    payload: Option<&Value>,
    opts: &EnqueueOpts,
) -> Result<Enqueued, postgres::Error> {
    let mut params: Params = vec![
        (Box::new(queue.to_string()), Type::TEXT),
        (Box::new(payload.cloned()), Type::JSONB),
    ];
    let mut args = vec!["$1::text".to_string(), "$2::jsonb".to_string()];
    named_arg(
        &mut args,
        &mut params,
        "delay",
        "::text::interval",
        opts.delay.clone(),
    );
    named_arg(&mut args, &mut params, "priority", "::int8", opts.priority);
    named_arg(
        &mut args,
        &mut params,
        "max_attempts",
        "::int4",
        opts.max_attempts,
    );
    named_arg(
        &mut args,
        &mut params,
        "backoff_base",
        "::text::interval",
        opts.backoff_base.clone(),
    );
    named_arg(
        &mut args,
        &mut params,
        "backoff_max",
        "::text::interval",
        opts.backoff_max.clone(),
    );
    named_arg(
        &mut args,
        &mut params,
        "idempotency_key",
        "::text",
        opts.idempotency_key.clone(),
    );
    let sql = format!(
        "SELECT task_id::int8, deduplicated FROM aedb_queue.queue_enqueue({})",
        args.join(", ")
    );
    let row = c.query_typed_one(sql.as_str(), &refs(&params))?;
    Ok(Enqueued {
        task_id: row.get(0),
        deduplicated: row.get(1),
    })
}

/// `queue_enqueue_batch(queue, payloads)`: ids in payload order.
pub fn enqueue_batch(c: &mut impl GenericClient, queue: &str, payloads: &[Value]) -> Vec<i64> {
    let rows = expect_ok(
        c.query_typed(
            "SELECT b.id::int8 FROM aedb_queue.queue_enqueue_batch($1::text, $2::jsonb[]) \
             WITH ORDINALITY AS b(id, ord) ORDER BY b.ord",
            &[(&queue, Type::TEXT), (&payloads, Type::JSONB_ARRAY)],
        ),
        "queue_enqueue_batch",
    );
    rows.iter().map(|r| r.get(0)).collect()
}

/// `queue_claim(queue, owner_id, lease, max)`.
pub fn claim(
    c: &mut impl GenericClient,
    queue: &str,
    owner: &str,
    lease: &str,
    max: i32,
) -> Vec<Claimed> {
    let rows = expect_ok(
        c.query_typed(
            "SELECT task_id::int8, payload, attempts::int4, fencing_token::int8, lease_deadline, \
                    priority::int8, enqueued_at, progress \
             FROM aedb_queue.queue_claim($1::text, $2::text, $3::text::interval, $4::int4)",
            &[
                (&queue, Type::TEXT),
                (&owner, Type::TEXT),
                (&lease, Type::TEXT),
                (&max, Type::INT4),
            ],
        ),
        "queue_claim",
    );
    rows.iter()
        .map(|r| Claimed {
            task_id: r.get(0),
            payload: r.get(1),
            attempts: r.get(2),
            fencing_token: r.get(3),
            lease_deadline: r.get(4),
            priority: r.get(5),
            enqueued_at: r.get(6),
            progress: r.get(7),
        })
        .collect()
}

/// Claims at most one task; `None` when nothing is due.
pub fn claim_one(
    c: &mut impl GenericClient,
    queue: &str,
    owner: &str,
    lease: &str,
) -> Option<Claimed> {
    let mut v = claim(c, queue, owner, lease, 1);
    assert!(v.len() <= 1, "claim(max => 1) returned {} rows", v.len());
    v.pop()
}

/// Optional arguments of `queue_complete`.
#[derive(Debug, Clone, Default)]
pub struct CompleteOpts {
    pub result: Option<Value>,
    pub follow_ups: Option<Value>,
    pub strict: bool,
}

/// `queue_complete(queue, task_id, fencing_token)`.
pub fn complete(c: &mut impl GenericClient, queue: &str, task_id: i64, token: i64) -> Outcome {
    expect_ok(
        try_complete_with(c, queue, task_id, token, &CompleteOpts::default()),
        "queue_complete",
    )
}

/// `queue_complete` with result / follow_ups / strict. Returns the server
/// error as is, since `strict => true` is expected to raise 40002.
pub fn try_complete_with(
    c: &mut impl GenericClient,
    queue: &str,
    task_id: i64,
    token: i64,
    opts: &CompleteOpts,
) -> Result<Outcome, postgres::Error> {
    let row = c.query_typed_one(
        "SELECT aedb_queue.queue_complete($1::text, $2::int8, $3::int8, \
                result => $4::jsonb, follow_ups => $5::jsonb, strict => $6::bool)::text",
        &[
            (&queue, Type::TEXT),
            (&task_id, Type::INT8),
            (&token, Type::INT8),
            (&opts.result, Type::JSONB),
            (&opts.follow_ups, Type::JSONB),
            (&opts.strict, Type::BOOL),
        ],
    )?;
    Ok(Outcome::parse(row.get(0)))
}

/// `queue_complete_and_claim(queue, owner_id, held_task_id, held_fencing_token,
/// lease => .., max => .., strict => ..)`: the held task's outcome and the
/// tasks claimed. Returns the server error as is (strict raises 40002).
pub fn try_complete_and_claim(
    c: &mut impl GenericClient,
    queue: &str,
    owner: &str,
    held: (i64, i64),
    lease: &str,
    max: i32,
    strict: bool,
) -> Result<(Outcome, Vec<Claimed>), postgres::Error> {
    let rows = c.query_typed(
        "SELECT settled::text, task_id::int8, payload, attempts::int4, fencing_token::int8, \
                lease_deadline, priority::int8, enqueued_at, progress \
         FROM aedb_queue.queue_complete_and_claim($1::text, $2::text, $3::int8, $4::int8, \
              lease => $5::text::interval, max => $6::int4, strict => $7::bool)",
        &[
            (&queue, Type::TEXT),
            (&owner, Type::TEXT),
            (&held.0, Type::INT8),
            (&held.1, Type::INT8),
            (&lease, Type::TEXT),
            (&max, Type::INT4),
            (&strict, Type::BOOL),
        ],
    )?;
    Ok(settled_and_claimed(&rows, "queue_complete_and_claim"))
}

/// The rows of a settle-and-claim call (`settled`, then the claimed task's
/// columns, NULL when nothing was claimed): the held task's outcome and the
/// tasks claimed.
pub fn settled_and_claimed(rows: &[postgres::Row], call: &str) -> (Outcome, Vec<Claimed>) {
    assert!(!rows.is_empty(), "{call} returned no row");
    let settled = Outcome::parse(rows[0].get(0));
    let claimed = rows
        .iter()
        .filter(|r| r.get::<_, Option<i64>>(1).is_some())
        .map(|r| claimed_at(r, 1))
        .collect();
    (settled, claimed)
}

/// A claimed task from a row whose task columns start at `at`.
pub fn claimed_at(r: &postgres::Row, at: usize) -> Claimed {
    Claimed {
        task_id: r.get(at),
        payload: r.get(at + 1),
        attempts: r.get(at + 2),
        fencing_token: r.get(at + 3),
        lease_deadline: r.get(at + 4),
        priority: r.get(at + 5),
        enqueued_at: r.get(at + 6),
        progress: r.get(at + 7),
    }
}

/// Enqueues `count` tasks on `c` (autocommit), payload `{"n": first + i}`:
/// one per call, or with `batched` in `queue_enqueue_batch` calls of 1 to 50
/// (the bulk writer racing the workers' claims). Returns (id, n) pairs.
pub fn produce_on(
    c: &mut Client,
    queue: &str,
    first: usize,
    count: usize,
    batched: bool,
) -> Vec<(i64, usize)> {
    use rand::Rng;
    if !batched {
        return (first..first + count)
            .map(|n| (enqueue(c, queue, &json!({ "n": n })).task_id, n))
            .collect();
    }
    let mut rng = rand::thread_rng();
    let mut produced = Vec::with_capacity(count);
    let mut next = first;
    while next < first + count {
        let size = rng.gen_range(1..=50).min(first + count - next);
        let payloads: Vec<Value> = (next..next + size).map(|n| json!({ "n": n })).collect();
        let ids = enqueue_batch(c, queue, &payloads);
        assert_eq!(
            ids.len(),
            size,
            "queue_enqueue_batch returned {} ids for {size} payloads",
            ids.len()
        );
        produced.extend(ids.into_iter().zip(next..next + size));
        next += size;
    }
    produced
}

/// Optional arguments of `queue_fail`.
#[derive(Debug, Clone, Default)]
pub struct FailOpts {
    pub retry_in: Option<String>,
    pub dead_letter: Option<bool>,
}

/// `queue_fail(queue, task_id, fencing_token, error)` (backoff from the task).
pub fn fail(
    c: &mut impl GenericClient,
    queue: &str,
    task_id: i64,
    token: i64,
    error: &str,
) -> Outcome {
    fail_with(c, queue, task_id, token, error, &FailOpts::default())
}

pub fn fail_with(
    c: &mut impl GenericClient,
    queue: &str,
    task_id: i64,
    token: i64,
    error: &str,
    opts: &FailOpts,
) -> Outcome {
    let mut params: Params = vec![
        (Box::new(queue.to_string()), Type::TEXT),
        (Box::new(task_id), Type::INT8),
        (Box::new(token), Type::INT8),
        (Box::new(error.to_string()), Type::TEXT),
    ];
    let mut args: Vec<String> = ["$1::text", "$2::int8", "$3::int8", "$4::text"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    named_arg(
        &mut args,
        &mut params,
        "retry_in",
        "::text::interval",
        opts.retry_in.clone(),
    );
    named_arg(
        &mut args,
        &mut params,
        "dead_letter",
        "::bool",
        opts.dead_letter,
    );
    let sql = format!("SELECT aedb_queue.queue_fail({})::text", args.join(", "));
    let row = expect_ok(
        c.query_typed_one(sql.as_str(), &refs(&params)),
        "queue_fail",
    );
    Outcome::parse(row.get(0))
}

/// `queue_heartbeat(queue, task_id, fencing_token, extend, progress)`.
pub fn heartbeat(
    c: &mut impl GenericClient,
    queue: &str,
    task_id: i64,
    token: i64,
    extend: &str,
    progress: Option<&Value>,
) -> Outcome {
    let row = expect_ok(
        c.query_typed_one(
            "SELECT aedb_queue.queue_heartbeat($1::text, $2::int8, $3::int8, $4::text::interval, \
                    progress => $5::jsonb)::text",
            &[
                (&queue, Type::TEXT),
                (&task_id, Type::INT8),
                (&token, Type::INT8),
                (&extend, Type::TEXT),
                (&progress, Type::JSONB),
            ],
        ),
        "queue_heartbeat",
    );
    Outcome::parse(row.get(0))
}

/// `queue_cancel(queue, task_id)`: true when a task was removed.
pub fn cancel(c: &mut impl GenericClient, queue: &str, task_id: i64) -> bool {
    expect_ok(
        c.query_typed_one(
            "SELECT aedb_queue.queue_cancel($1::text, $2::int8)",
            &[(&queue, Type::TEXT), (&task_id, Type::INT8)],
        ),
        "queue_cancel",
    )
    .get(0)
}

const TASK_COLUMNS: &str = "task_id::int8, queue::text, state::text, not_before, priority::int8, \
     attempts::int4, max_attempts::int4, owner_id::text, fencing_token::int8, lease_deadline, \
     payload, progress, last_error::text, created_at, updated_at";

fn task_from_row(r: &postgres::Row) -> Task {
    Task {
        task_id: r.get(0),
        queue: r.get(1),
        state: r.get(2),
        not_before: r.get(3),
        priority: r.get(4),
        attempts: r.get(5),
        max_attempts: r.get(6),
        owner_id: r.get(7),
        fencing_token: r.get(8),
        lease_deadline: r.get(9),
        payload: r.get(10),
        progress: r.get(11),
        last_error: r.get(12),
        created_at: r.get(13),
        updated_at: r.get(14),
    }
}

/// `queue_get(queue, task_id)`: `None` once the task is completed/cancelled.
pub fn get(c: &mut impl GenericClient, queue: &str, task_id: i64) -> Option<Task> {
    let rows = expect_ok(
        c.query_typed(
            format!("SELECT {TASK_COLUMNS} FROM aedb_queue.queue_get($1::text, $2::int8)").as_str(),
            &[(&queue, Type::TEXT), (&task_id, Type::INT8)],
        ),
        "queue_get",
    );
    assert!(rows.len() <= 1, "queue_get returned {} rows", rows.len());
    rows.first().map(task_from_row)
}

/// `queue_list(queue, state, limit)`, ordered by task id for stable compares.
pub fn list(c: &mut impl GenericClient, queue: &str, state: Option<&str>, limit: i32) -> Vec<Task> {
    let rows = expect_ok(
        c.query_typed(
            format!(
                "SELECT {TASK_COLUMNS} FROM aedb_queue.queue_list($1::text, $2::text, $3::int4) \
                 ORDER BY task_id"
            )
            .as_str(),
            &[
                (&queue, Type::TEXT),
                (&state, Type::TEXT),
                (&limit, Type::INT4),
            ],
        ),
        "queue_list",
    );
    rows.iter().map(task_from_row).collect()
}

/// Every task of a queue, in any state (via `queue_list`).
pub fn all_tasks(c: &mut impl GenericClient, queue: &str) -> Vec<Task> {
    list(c, queue, None, 1000)
}

/// `queue_reap(queue, max)`; `queue = None` reaps every queue.
pub fn reap(c: &mut impl GenericClient, queue: Option<&str>) -> Reaped {
    let row = expect_ok(
        c.query_typed_one(
            "SELECT promoted::int8, reclaimed::int8, dead_lettered::int8, fired::int8 \
             FROM aedb_queue.queue_reap($1::text)",
            &[(&queue, Type::TEXT)],
        ),
        "queue_reap",
    );
    Reaped {
        promoted: row.get(0),
        reclaimed: row.get(1),
        dead_lettered: row.get(2),
        fired: row.get(3),
    }
}
