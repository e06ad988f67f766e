//! Running the built `aedb-queue` against the harness's cluster: once to
//! completion (bounded), or as a long-running child whose output lines are
//! read as they come (killed when dropped).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aedb_queue_itests::{Client, Cluster, ADMIN};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_aedb-queue");
pub const DB: &str = "aedb_itests";
/// How long one run may take before the test fails.
pub const RUN_LIMIT: Duration = Duration::from_secs(90);
/// How long a line of a long-running child may take to show up.
pub const LINE_LIMIT: Duration = Duration::from_secs(20);

/// The binary with the libpq variables pointing at the cluster as app_admin,
/// and nothing inherited that could point elsewhere.
pub fn command(cluster: &Cluster) -> Command {
    let mut cmd = Command::new(BIN);
    for var in [
        "AEDB_QUEUE_DSN",
        "PGPASSWORD",
        "PGSERVICE",
        "PGOPTIONS",
        "PGSSLMODE",
        "PGSSLROOTCERT",
        "PGSSLCERT",
        "PGSSLKEY",
        "PGHOSTADDR",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("PGHOST", "127.0.0.1")
        .env("PGPORT", cluster.port().to_string())
        .env("PGUSER", ADMIN)
        .env("PGDATABASE", DB);
    cmd
}

#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts exit 0 and returns self, printing both streams otherwise.
    #[track_caller]
    pub fn ok(self) -> Run {
        assert_eq!(self.code, 0, "expected success, got {self:#?}");
        self
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {:?}", self.stdout))
    }

    #[track_caller]
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("line is not JSON ({e}): {l:?}"))
            })
            .collect()
    }
}

fn collect(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Runs `cmd` to completion with `stdin` as its input, within [`RUN_LIMIT`].
pub fn run_command(mut cmd: Command, stdin: &str) -> Run {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start aedb-queue");
    let mut input = child.stdin.take().expect("stdin");
    let text = stdin.to_string();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(text.as_bytes());
        // Dropping `input` closes it: the child reads EOF after the text.
    });
    let out = collect(child.stdout.take().expect("stdout"));
    let err = collect(child.stderr.take().expect("stderr"));
    let deadline = Instant::now() + RUN_LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for aedb-queue") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} ran longer than {RUN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    Run {
        code: status.code().unwrap_or(-1),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// `aedb-queue ARGS...` as app_admin, empty stdin.
pub fn cli(cluster: &Cluster, args: &[&str]) -> Run {
    let mut cmd = command(cluster);
    cmd.args(args);
    run_command(cmd, "")
}

/// As [`cli`] with `stdin` as input.
pub fn cli_with_input(cluster: &Cluster, args: &[&str], stdin: &str) -> Run {
    let mut cmd = command(cluster);
    cmd.args(args);
    run_command(cmd, stdin)
}

/// A child that keeps running (`tail`, `stats --watch`); killed on drop.
pub struct Running {
    child: Child,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    /// Everything read so far, for failure messages.
    pub seen: Vec<String>,
}

fn lines(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            match line {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    });
    rx
}

pub fn spawn(cluster: &Cluster, args: &[&str]) -> Running {
    let mut cmd = command(cluster);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start aedb-queue");
    let stdout = lines(child.stdout.take().expect("stdout"));
    let stderr = lines(child.stderr.take().expect("stderr"));
    Running {
        child,
        stdout,
        stderr,
        seen: Vec::new(),
    }
}

impl Running {
    fn wait_on(&mut self, err: bool, what: &str, pred: &mut dyn FnMut(&str) -> bool) -> String {
        let deadline = Instant::now() + LINE_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let rx = if err { &self.stderr } else { &self.stdout };
            match rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Err(_) => {
                    let status = self.child.try_wait().ok().flatten();
                    panic!(
                        "no {} line {what} within {LINE_LIMIT:?} (exit status {status:?}); lines seen: {:#?}",
                        if err { "stderr" } else { "stdout" },
                        self.seen
                    );
                }
            }
        }
    }

    /// The next stdout line for which `pred` holds (earlier ones are kept in
    /// `seen`); fails the test after [`LINE_LIMIT`].
    pub fn stdout_line(&mut self, what: &str, mut pred: impl FnMut(&str) -> bool) -> String {
        self.wait_on(false, what, &mut pred)
    }

    pub fn stderr_line(&mut self, what: &str, mut pred: impl FnMut(&str) -> bool) -> String {
        self.wait_on(true, what, &mut pred)
    }

    /// The next stdout line that is a JSON object for which `pred` holds.
    pub fn json_line(&mut self, what: &str, mut pred: impl FnMut(&Value) -> bool) -> Value {
        let line = self.stdout_line(what, |l| {
            serde_json::from_str::<Value>(l)
                .map(|v| pred(&v))
                .unwrap_or_else(|e| panic!("line is not JSON ({e}): {l:?}"))
        });
        serde_json::from_str(&line).unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The cells of a table line (between the border characters comfy-table
/// draws), trimmed.
pub fn cells(line: &str) -> Vec<String> {
    let parts: Vec<String> = line
        .split(['│', '┆', '|'])
        .map(|c| c.trim().to_string())
        .collect();
    // The outer borders leave an empty part at each end; empty cells inside
    // (NULLs) stay, so that columns keep their places.
    if parts.len() < 3 {
        return Vec::new();
    }
    parts[1..parts.len() - 1].to_vec()
}

/// The value under `column` in the table row whose first cell is `key`.
#[track_caller]
pub fn table_cell(table: &str, key: &str, column: &str) -> String {
    let header = table
        .lines()
        .map(cells)
        .find(|c| c.iter().any(|h| h == column))
        .unwrap_or_else(|| panic!("no header with {column:?} in\n{table}"));
    let idx = header.iter().position(|h| h == column).unwrap();
    let row = table
        .lines()
        .map(cells)
        .find(|c| c.first().map(String::as_str) == Some(key))
        .unwrap_or_else(|| panic!("no row {key:?} in\n{table}"));
    row.get(idx).cloned().unwrap_or_default()
}

/// Tasks of `queue` in the extension's table (any state, or one), read as
/// the superuser.
pub fn task_count(su: &mut Client, queue: &str, state: Option<&str>) -> i64 {
    su.query_one(
        "SELECT count(*) FROM aedb_queue.task WHERE queue = $1::text \
         AND ($2::text IS NULL OR state::text = $2::text)",
        &[&queue, &state],
    )
    .expect("count tasks")
    .get(0)
}

/// `queue_stats.paused` of the queue, read as app_admin.
pub fn paused(admin: &mut Client, queue: &str) -> bool {
    admin
        .query_one(
            "SELECT paused FROM aedb_queue.queue_stats WHERE queue = $1::text",
            &[&queue],
        )
        .expect("queue_stats row")
        .get(0)
}

/// A fresh file path under the temp directory.
pub fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aedb_queue_cli_{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}
