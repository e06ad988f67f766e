//! CPU time from /proc: of single backends in nanoseconds (schedstat), and
//! of whole clusters in clock ticks (stat), the latter counting backends
//! that exited through their postmaster's cutime and cstime.

use std::collections::HashMap;
use std::path::Path;

use crate::db::Result;

/// Linux's USER_HZ on every common architecture: stat(5)'s times are in it.
const TICKS_PER_SECOND: f64 = 100.0;

/// Time a process has spent on a CPU, ns (the first field of
/// /proc/<pid>/schedstat); 0 for a process that is gone.
pub fn process_ns(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

pub fn processes_ns(pids: &[i32]) -> u64 {
    pids.iter().map(|&p| process_ns(p)).sum()
}

/// One process's line of /proc/<pid>/stat: its parent, and its own CPU
/// ticks plus those of its reaped children.
struct Stat {
    ppid: i32,
    ticks: u64,
}

fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses: state is
    // field 3 of stat(5), so field n is at index n - 3 here.
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(Stat {
        ppid: n(4) as i32,
        // utime, stime, cutime, cstime
        ticks: n(14) + n(15) + n(16) + n(17),
    })
}

/// Every process's parent and ticks, read once.
pub struct Snapshot {
    stats: HashMap<i32, Stat>,
    /// All CPUs' busy time from /proc/stat, ticks.
    pub machine_busy: u64,
}

impl Snapshot {
    pub fn take() -> Snapshot {
        let mut stats = HashMap::new();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                if let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) {
                    if let Some(s) = stat(pid) {
                        stats.insert(pid, s);
                    }
                }
            }
        }
        Snapshot {
            stats,
            machine_busy: machine_busy(),
        }
    }

    /// A cluster's CPU seconds so far: its postmaster (with the backends it
    /// has reaped) and the children it has now.
    pub fn cluster_seconds(&self, postmaster: i32) -> f64 {
        let own = self.stats.get(&postmaster).map_or(0, |s| s.ticks);
        let children: u64 = self
            .stats
            .values()
            .filter(|s| s.ppid == postmaster)
            .map(|s| s.ticks)
            .sum();
        (own + children) as f64 / TICKS_PER_SECOND
    }
}

/// This process's CPU seconds (every thread, i.e. the clients).
pub fn own_seconds() -> f64 {
    stat(std::process::id() as i32).map_or(0.0, |s| s.ticks as f64 / TICKS_PER_SECOND)
}

/// Busy ticks of all CPUs (user, nice, system, irq, softirq, steal).
fn machine_busy() -> u64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| f.get(i)).sum()
}

pub fn busy_seconds(before: &Snapshot, after: &Snapshot) -> f64 {
    after.machine_busy.saturating_sub(before.machine_busy) as f64 / TICKS_PER_SECOND
}

/// The postmaster of the cluster in `dir` (the first line of postmaster.pid).
pub fn postmaster(dir: &Path) -> Result<i32> {
    let file = dir.join("data/postmaster.pid");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("{}: {e} (is the cluster running?)", file.display()))?;
    Ok(text.lines().next().unwrap_or("").trim().parse()?)
}

/// The 1-minute load average from /proc/loadavg ("?" elsewhere).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into())
}
