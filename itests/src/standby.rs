//! A streaming standby of a harness [`Cluster`], for failover tests: made
//! with `pg_basebackup -R` on a free port of its own, synchronous or
//! asynchronous, promoted with `pg_ctl promote`.
//!
//! The standby is itself a [`Cluster`] (same directory layout, cleanup and
//! watchdog), so tests connect to it with [`Cluster::connect_as`] and read
//! its log with [`Cluster::server_log`] as they would the primary's. The
//! extension, the database and the application roles come with the base
//! backup; everything after it replicates through WAL.
//!
//! [`load`] has the producers, acknowledgements and ledger the failover
//! tests share.

pub mod load;

use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{make_root_dir, pg_bin, pick_free_port, register_for_cleanup, run_as_postgres};
use crate::{Client, Cluster, DB_NAME};

/// The name the standby's WAL receiver reports (`application_name` in the
/// primary's `pg_stat_replication`), and its replication slot.
pub const STANDBY_NAME: &str = "aedb_standby";

/// Whether a commit on the primary waits for the standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// `synchronous_standby_names = 'aedb_standby'` with the harness's
    /// `synchronous_commit = on`: a commit returns once the standby has
    /// flushed its WAL.
    Sync,
    /// No synchronous standby: a commit returns once it is on the primary's
    /// disk; the standby follows as fast as it streams.
    Async,
}

/// A standby streaming from `primary`.
pub struct Standby {
    pub cluster: Cluster,
}

impl Standby {
    /// Base backup of `primary` (with a replication slot, so the primary
    /// keeps the WAL the standby has not received), started as a hot
    /// standby, and waited for until it streams in `mode`.
    pub fn of(primary: &Cluster, mode: Replication) -> Standby {
        let mut cluster = base_backup(primary);
        start_standby(&mut cluster);
        let standby = Standby { cluster };
        // Set after the base backup, so the standby does not inherit it:
        // once promoted, it has no standby of its own to wait for.
        let names = match mode {
            Replication::Sync => STANDBY_NAME,
            Replication::Async => "",
        };
        let mut su = primary.connect();
        // Two statements: ALTER SYSTEM refuses to run in a batch's implicit
        // transaction.
        su.batch_execute(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{names}'"
        ))
        .expect("set synchronous_standby_names");
        su.batch_execute("SELECT pg_reload_conf()").expect("reload");
        standby.wait_streaming(primary, mode);
        standby
    }

    /// Waits (up to 60 s) until the primary's `pg_stat_replication` shows
    /// the standby streaming with the sync state `mode` asks for.
    pub fn wait_streaming(&self, primary: &Cluster, mode: Replication) {
        let want = match mode {
            Replication::Sync => "sync",
            Replication::Async => "async",
        };
        let mut su = primary.connect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let row = su
                .query_opt(
                    "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1",
                    &[&STANDBY_NAME],
                )
                .expect("read pg_stat_replication");
            let seen: Option<(String, String)> = row.map(|r| (r.get(0), r.get(1)));
            if matches!(&seen, Some((state, sync)) if state == "streaming" && sync == want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the standby is not streaming {want}: {seen:?}\n--- standby log ---\n{}",
                self.cluster.server_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (up to 60 s) until the standby has replayed everything the
    /// primary has written so far.
    pub fn wait_replayed(&self, primary: &Cluster) {
        let mut su = primary.connect();
        let target: String = su
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .unwrap()
            .get(0);
        let mut sb = self.cluster.connect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let caught_up: bool = sb
                .query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                    &[&target],
                )
                .unwrap()
                .get(0);
            if caught_up {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the standby did not replay {target}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The pid of the primary's WAL sender serving this standby.
    pub fn wal_sender_pid(&self, primary: &Cluster) -> i32 {
        primary
            .connect()
            .query_one(
                "SELECT pid FROM pg_stat_replication WHERE application_name = $1",
                &[&STANDBY_NAME],
            )
            .expect("the standby's WAL sender")
            .get(0)
    }

    /// `pg_ctl promote -w`: returns once the standby accepts writes.
    pub fn promote(&self) {
        run_as_postgres(
            Command::new(format!("{}/pg_ctl", pg_bin()))
                .arg("-D")
                .arg(&self.cluster.data)
                .args(["-w", "-t", "60", "promote"]),
            "pg_ctl promote",
        )
        .unwrap_or_else(|e| panic!("{e}\n--- standby log ---\n{}", self.cluster.server_log()));
        let mut c = self.cluster.connect();
        let in_recovery: bool = c
            .query_one("SELECT pg_is_in_recovery()", &[])
            .unwrap()
            .get(0);
        assert!(!in_recovery, "still in recovery after pg_ctl promote");
    }

    /// The WAL timeline the standby writes on (2 after a first promotion).
    pub fn timeline(&self) -> i64 {
        timeline(&mut self.cluster.connect())
    }
}

/// The timeline a primary writes WAL on: the first 8 hex digits of its
/// current WAL file's name (the last checkpoint's timeline can still be the
/// old one for a while after a promotion).
pub fn timeline(c: &mut Client) -> i64 {
    c.query_one(
        "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8",
        &[],
    )
    .unwrap()
    .get(0)
}

/// A libpq-style connection string naming both servers, first the primary:
/// `target_session_attrs=read-write` skips a server that is down or still
/// a standby, so a client that reconnects with it finds whichever accepts
/// writes. The short connect timeout keeps a dead server from holding a
/// reconnecting client.
pub fn failover_dsn(primary: &Cluster, standby: &Standby, user: &str) -> String {
    format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user={user} dbname={DB_NAME} connect_timeout=2 \
         target_session_attrs=read-write application_name=aedb_failover \
         options='-c statement_timeout=30000'",
        primary.port(),
        standby.cluster.port()
    )
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`) to a server process.
pub fn signal_process(pid: i32, signal: &str) {
    assert!(
        try_signal_process(pid, signal),
        "kill -{signal} {pid} failed"
    );
}

/// As [`signal_process`]; false when it could not be sent (the process is
/// gone).
pub fn try_signal_process(pid: i32, signal: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run kill")
        .success()
}

/// `pg_basebackup -R` of `primary` into a fresh directory: a `Cluster`
/// value for the standby, not yet running.
fn base_backup(primary: &Cluster) -> Cluster {
    let root = make_root_dir();
    let data = root.join("data");
    run_as_postgres(
        Command::new(format!("{}/pg_basebackup", pg_bin()))
            .args(["-h", "127.0.0.1", "-U", "postgres", "-p"])
            .arg(primary.port().to_string())
            .arg("-D")
            .arg(&data)
            // -R: standby.signal and primary_conninfo/primary_slot_name;
            // -C -S: a slot; -c fast: do not wait for a spread checkpoint.
            .args([
                "-R",
                "-X",
                "stream",
                "-C",
                "-S",
                STANDBY_NAME,
                "-c",
                "fast",
                "--no-sync",
            ]),
        "pg_basebackup",
    )
    .unwrap_or_else(|e| {
        let _ = fs::remove_dir_all(&root);
        panic!("{e}")
    });
    Cluster::unstarted(root, 0)
}

/// Starts the standby on a free port (retried if another server takes it
/// first), reporting itself as [`STANDBY_NAME`].
fn start_standby(standby: &mut Cluster) {
    let mut last = String::new();
    for _ in 0..8 {
        let port = pick_free_port();
        append_standby_conf(standby, port);
        standby.port = port;
        match standby.pg_ctl_start() {
            Ok(()) => {
                register_for_cleanup(standby);
                return;
            }
            Err(e) => {
                last = e;
                let log = standby.server_log();
                if !log.contains("could not bind") && !log.contains("in use") {
                    break;
                }
            }
        }
    }
    panic!(
        "could not start the standby: {last}\n--- standby log ---\n{}",
        standby.server_log()
    );
}

fn append_standby_conf(standby: &Cluster, port: u16) {
    use std::io::Write;
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(standby.data.join("postgresql.conf"))
        .expect("open the standby's postgresql.conf");
    writeln!(
        f,
        "\n# aedb_itests standby\nport = {port}\nunix_socket_directories = '{}'\n\
         cluster_name = '{STANDBY_NAME}'\nhot_standby = on\n",
        standby.data.display()
    )
    .expect("write the standby's postgresql.conf");
}
