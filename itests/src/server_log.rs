//! The test suite's guard against backend deaths (docs/testing.md, "The guard against backend deaths"), on the
//! Rust side: every [`crate::Cluster`] has its server log checked when it is
//! torn down (dropped, or at exit for a shared one), by the same script the
//! shell scripts use, `scripts/check_server_log.sh`, so that the patterns
//! live in one place: a process that died by a signal, a PANIC, a Rust panic
//! on a thread of its own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The checker script of this checkout.
const CHECKER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../scripts/check_server_log.sh"
);

/// `Ok` when the server log at `log` shows no process of the cluster that
/// died; else the offending lines. With `sigkill_expected` (a test that kills
/// processes on purpose, [`crate::Cluster::expect_backend_deaths`]) deaths by
/// SIGKILL are tolerated; any other signal, a PANIC or a panic never is.
pub fn check_server_log(log: &Path, sigkill_expected: bool) -> Result<(), String> {
    let mut cmd = Command::new("bash");
    cmd.arg(CHECKER);
    if sigkill_expected {
        cmd.arg("--sigkill-expected");
    }
    let out = cmd
        .arg(log)
        .output()
        .map_err(|e| format!("cannot run {CHECKER}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(String::from_utf8_lossy(&out.stderr).into_owned())
}

/// [`check_server_log`] of a cluster about to be removed: the error also
/// says where a copy of the whole log was kept.
pub(crate) fn check_and_keep(log: &Path, sigkill_expected: bool) -> Result<(), String> {
    check_server_log(log, sigkill_expected)
        .map_err(|lines| format!("{lines}(the whole log: {})", keep_copy(log).display()))
}

/// A copy of `log` in the temp directory, which outlives the cluster's.
fn keep_copy(log: &Path) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let kept = std::env::temp_dir().join(format!(
        "aedb_itests_server_{}_{}.log",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    match std::fs::copy(log, &kept) {
        Ok(_) => kept,
        Err(_) => log.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log file with `text`, removed when dropped.
    struct TempLog(PathBuf);
    impl Drop for TempLog {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    impl std::ops::Deref for TempLog {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    fn log_with(text: &str) -> TempLog {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "aedb_server_log_test_{}_{}.log",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::write(&p, text).unwrap();
        TempLog(p)
    }

    const CLEAN: &str = "LOG:  database system is ready to accept connections\n\
                         FATAL:  terminating connection due to administrator command\n";
    const SEGV: &str =
        "LOG:  server process (PID 42) was terminated by signal 11: Segmentation fault\n";
    const KILLED: &str =
        "LOG:  background worker \"aedb_queue reaper\" (PID 7) was terminated by signal 9: Killed\n";

    #[test]
    fn a_clean_log_passes() {
        assert_eq!(check_server_log(&log_with(CLEAN), false), Ok(()));
    }

    #[test]
    fn a_signal_death_fails_naming_the_line() {
        let err = check_server_log(&log_with(&format!("{CLEAN}{SEGV}")), true).unwrap_err();
        assert!(err.contains(":3: LOG:  server process (PID 42)"), "{err}");
    }

    #[test]
    fn sigkill_fails_unless_expected() {
        let log = log_with(&format!("{CLEAN}{KILLED}"));
        assert!(check_server_log(&log, false).is_err());
        assert_eq!(check_server_log(&log, true), Ok(()));
    }

    #[test]
    fn panic_and_rust_panic_fail() {
        for line in [
            "PANIC:  could not write to file \"pg_wal/x\"\n",
            "thread '<unnamed>' panicked at src/lib.rs:1:1:\n",
        ] {
            assert!(check_server_log(&log_with(line), true).is_err(), "{line}");
        }
    }
}
