//! The parent's side of the worker processes: a pool of them, each one
//! respawned in its slot when the test kills it, as a supervisor would.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::worker::ChildConfig;

/// A phase line of one worker process (`claim`, `complete`, ...).
struct PhaseSeen {
    slot: usize,
    generation: u64,
    phase: String,
}

struct Slot {
    child: Child,
    /// Held open: the child exits when it closes.
    _stdin: ChildStdin,
    generation: u64,
}

/// Worker processes working the same queues.
pub struct WorkerPool {
    exe: PathBuf,
    base: ChildConfig,
    slots: Vec<Slot>,
    phases_tx: SyncSender<PhaseSeen>,
    phases: Receiver<PhaseSeen>,
    /// `E ...` lines: errors the workers met that were not lost connections.
    pub errors: Arc<Mutex<Vec<String>>>,
    /// Reconnections the workers reported (`R` lines).
    pub reconnects: Arc<Mutex<u64>>,
}

impl WorkerPool {
    /// Starts `n` worker processes of `exe` (`CARGO_BIN_EXE_chaos_worker`),
    /// named `<base.name>-<slot>`.
    pub fn start(exe: &str, base: ChildConfig, n: usize) -> WorkerPool {
        // Bounded: phase lines nobody waits for are dropped, not queued.
        let (phases_tx, phases) = sync_channel(4096);
        let mut pool = WorkerPool {
            exe: PathBuf::from(exe),
            base,
            slots: Vec::new(),
            phases_tx,
            phases,
            errors: Arc::default(),
            reconnects: Arc::default(),
        };
        for slot in 0..n {
            let s = pool.spawn(slot, 0);
            pool.slots.push(s);
        }
        pool
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn spawn(&self, slot: usize, generation: u64) -> Slot {
        let mut cfg = self.base.clone();
        cfg.name = format!("{}-{slot}", self.base.name);
        let mut child = Command::new(&self.exe)
            .envs(cfg.to_env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {:?}: {e}", self.exe));
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, errors, reconnects) = (
            self.phases_tx.clone(),
            self.errors.clone(),
            self.reconnects.clone(),
        );
        let who = cfg.name.clone();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(phase) = line.strip_prefix("P ") {
                    let seen = PhaseSeen {
                        slot,
                        generation,
                        phase: phase.to_string(),
                    };
                    if let Err(TrySendError::Disconnected(_)) = tx.try_send(seen) {
                        break;
                    }
                } else if line == "R" {
                    *reconnects.lock().unwrap() += 1;
                } else {
                    errors.lock().unwrap().push(format!("{who}: {line}"));
                }
            }
        });
        Slot {
            child,
            _stdin: stdin,
            generation,
        }
    }

    /// SIGKILLs the first worker seen entering `phase` (any phase for
    /// `None`) from now on, and starts a new one in its slot. Returns the
    /// slot, or `None` when no worker entered the phase within `within`.
    pub fn kill_in_phase(&mut self, phase: Option<&str>, within: Duration) -> Option<usize> {
        while self.phases.try_recv().is_ok() {} // only phases entered from now on
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let seen = match self.phases.recv_timeout(left) {
                Ok(seen) => seen,
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => unreachable!("the pool holds a sender"),
            };
            let current = self.slots[seen.slot].generation == seen.generation;
            if current && phase.is_none_or(|p| p == seen.phase) {
                self.kill_and_respawn(seen.slot);
                return Some(seen.slot);
            }
        }
    }

    fn kill_and_respawn(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        // std's Child::kill sends SIGKILL on Unix: no cleanup runs.
        s.child.kill().expect("SIGKILL a worker process");
        let _ = s.child.wait();
        let generation = s.generation + 1;
        self.slots[slot] = self.spawn(slot, generation);
    }

    /// Ends every worker process (SIGKILL: by then every test has checked
    /// what it needs, and killed workers are what this harness is about).
    pub fn stop(&mut self) {
        for s in &mut self.slots {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
        self.slots.clear();
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.stop();
    }
}
