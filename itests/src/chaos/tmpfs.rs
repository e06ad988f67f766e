//! A small tmpfs for a tablespace: the disk that fills.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size mounted on a fresh directory; unmounted (and the
/// directory removed) on drop, also when the test fails. Whatever uses it
/// (a cluster's tablespace) must be stopped before it is dropped.
pub struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`mount -o size=`, e.g. `"12m"`), owned by
    /// the `postgres` OS user. Needs root (the tests run as root).
    pub fn mount(size: &str) -> Tmpfs {
        let dir = std::env::temp_dir().join(format!(
            "aedb_chaos_tmpfs_{}_{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        fs::create_dir_all(&dir).expect("create the mount point");
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ],
            &dir,
        );
        let t = Tmpfs { dir };
        run("chown", &["postgres:postgres"], &t.dir);
        t
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

fn run(cmd: &str, args: &[&str], path: &Path) {
    let st = Command::new(cmd)
        .args(args)
        .arg(path)
        .status()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(st.success(), "{cmd} {args:?} {path:?} failed: {st}");
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let st = Command::new("umount").arg(&self.dir).status();
        if !matches!(st, Ok(s) if s.success()) {
            // Still busy (a server that did not stop): detach it anyway.
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = fs::remove_dir(&self.dir);
    }
}
