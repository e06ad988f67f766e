//! The worker process of the chaos tests. It works two queues through one
//! connection, as the role [`crate::SERVICE`] (follow-ups need producer
//! rights), and writes an application ledger row in the very transaction
//! that settles a task, so a ledger row exists exactly when a completion
//! committed.
//!
//! Before each call it prints the phase it enters on stdout (`P claim`,
//! `P complete`, `P follow_up`, `P batch`), so that the parent can SIGKILL it
//! right there; `R` when it lost its connection (and reconnects), `E code
//! message` for an error that is not a lost connection (a finding). It exits
//! when its stdin closes (the parent ended) or after [`CHILD_BOUND`].

use std::io::{Read, Write};
use std::thread;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use serde_json::{json, Value};

use super::is_connection_fault;
use crate::describe;

/// A worker process never outlives this, whatever its parent does.
pub const CHILD_BOUND: Duration = Duration::from_secs(600);
/// Short, so the tasks a killed worker held come back soon.
pub const LEASE: &str = "2 seconds";
/// Tasks a batch claim takes.
pub const BATCH: i32 = 8;

/// What a worker process is told through its environment.
#[derive(Debug, Clone)]
pub struct ChildConfig {
    pub dsn: String,
    pub main_queue: String,
    pub follow_queue: String,
    pub ledger: String,
    pub name: String,
}

impl ChildConfig {
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AEDB_CHAOS_DSN", self.dsn.clone()),
            ("AEDB_CHAOS_MAIN", self.main_queue.clone()),
            ("AEDB_CHAOS_FOLLOW", self.follow_queue.clone()),
            ("AEDB_CHAOS_LEDGER", self.ledger.clone()),
            ("AEDB_CHAOS_NAME", self.name.clone()),
        ]
    }

    fn from_env() -> ChildConfig {
        let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
        ChildConfig {
            dsn: var("AEDB_CHAOS_DSN"),
            main_queue: var("AEDB_CHAOS_MAIN"),
            follow_queue: var("AEDB_CHAOS_FOLLOW"),
            ledger: var("AEDB_CHAOS_LEDGER"),
            name: var("AEDB_CHAOS_NAME"),
        }
    }
}

/// One claimed task as the worker keeps it.
struct Held {
    id: i64,
    token: i64,
    parent: Option<i64>,
    /// The claim's attempt: above 1 once a lease expired (a killed holder).
    attempt: i32,
}

/// The worker process's `main`.
pub fn worker_main() {
    let cfg = ChildConfig::from_env();
    exit_when_stdin_closes();
    let bound = Instant::now() + CHILD_BOUND;
    let mut round: u64 = 0;
    while Instant::now() < bound {
        let Ok(mut c) = Client::connect(&cfg.dsn, NoTls) else {
            thread::sleep(Duration::from_millis(50));
            continue;
        };
        loop {
            if Instant::now() >= bound {
                break;
            }
            match one_round(&mut c, &cfg, round) {
                Ok(true) => round += 1,
                Ok(false) => {
                    round += 1;
                    thread::sleep(Duration::from_millis(3));
                }
                Err(e) if is_connection_fault(&e) || c.is_closed() => {
                    say("R");
                    break;
                }
                Err(e) => {
                    let code = e.code().map_or("-".to_string(), |c| c.code().to_string());
                    say(&format!("E {code} {}", describe(&e)));
                    thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
    std::process::exit(3);
}

/// Rounds turn through: one task completed, one completed with a
/// follow-up, a batch of the main queue, a batch of the follow-up queue.
/// `Ok(false)`: nothing was due.
fn one_round(c: &mut Client, cfg: &ChildConfig, round: u64) -> Result<bool, postgres::Error> {
    match round % 4 {
        0 => single(c, cfg, false),
        1 => single(c, cfg, true),
        2 => batch(c, cfg, &cfg.main_queue),
        _ => batch(c, cfg, &cfg.follow_queue),
    }
}

fn claim(
    c: &mut Client,
    cfg: &ChildConfig,
    queue: &str,
    max: i32,
) -> Result<Vec<Held>, postgres::Error> {
    say("P claim");
    let rows = c.query(
        "SELECT task_id::int8, fencing_token::int8, payload, attempts::int4 \
         FROM aedb_queue.queue_claim($1::text, $2::text, $3::text::interval, $4::int4)",
        &[&queue, &cfg.name, &LEASE, &max],
    )?;
    Ok(rows
        .iter()
        .map(|r| Held {
            id: r.get(0),
            token: r.get(1),
            parent: r
                .get::<_, Option<Value>>(2)
                .and_then(|p| p.get("parent").and_then(Value::as_i64)),
            attempt: r.get(3),
        })
        .collect())
}

/// Claims one task of the main queue and completes it (with a follow-up
/// into the follow-up queue when `follow_up`), its ledger row in the
/// completing transaction.
fn single(c: &mut Client, cfg: &ChildConfig, follow_up: bool) -> Result<bool, postgres::Error> {
    let Some(t) = claim(c, cfg, &cfg.main_queue, 1)?.pop() else {
        return Ok(false);
    };
    let mut tx = c.transaction()?;
    let outcome: String = if follow_up {
        say("P follow_up");
        let spec = json!([{ "queue": cfg.follow_queue, "payload": { "parent": t.id } }]);
        tx.query_one(
            "SELECT aedb_queue.queue_complete($1::text, $2::int8, $3::int8, \
             follow_ups => $4::jsonb)::text",
            &[&cfg.main_queue, &t.id, &t.token, &spec],
        )?
        .get(0)
    } else {
        say("P complete");
        tx.query_one(
            "SELECT aedb_queue.queue_complete($1::text, $2::int8, $3::int8)::text",
            &[&cfg.main_queue, &t.id, &t.token],
        )?
        .get(0)
    };
    if outcome != "applied" {
        tx.rollback()?; // the lease expired and the task was reclaimed
        return Ok(true);
    }
    let how = if follow_up { "follow_up" } else { "complete" };
    tx.execute(
        &format!(
            "INSERT INTO {} (queue, task_id, parent, how, worker, attempt) \
             VALUES ($1, $2, $3, $4, $5, $6)",
            cfg.ledger
        ),
        &[
            &cfg.main_queue,
            &t.id,
            &t.parent,
            &how,
            &cfg.name,
            &t.attempt,
        ],
    )?;
    // The handler's own work: the transaction stays open a moment, so a
    // kill right after the call lands inside it.
    thread::sleep(Duration::from_micros(500));
    tx.commit()?;
    Ok(true)
}

/// Claims up to [`BATCH`] tasks of `queue` and settles them with one
/// `queue_complete_batch`, whose applied rows go to the ledger in the same
/// statement.
fn batch(c: &mut Client, cfg: &ChildConfig, queue: &str) -> Result<bool, postgres::Error> {
    let held = claim(c, cfg, queue, BATCH)?;
    if held.is_empty() {
        return Ok(false);
    }
    let ids: Vec<i64> = held.iter().map(|t| t.id).collect();
    let tokens: Vec<i64> = held.iter().map(|t| t.token).collect();
    let parents: Vec<Option<i64>> = held.iter().map(|t| t.parent).collect();
    let attempts: Vec<i32> = held.iter().map(|t| t.attempt).collect();
    let mut tx = c.transaction()?;
    say("P batch");
    tx.execute(
        &format!(
            "INSERT INTO {} (queue, task_id, parent, how, worker, attempt) \
             SELECT $1, b.task_id, x.parent, 'batch', $5, x.attempt \
             FROM aedb_queue.queue_complete_batch($1::text, $2::int8[], $3::int8[]) AS b \
             JOIN unnest($2::int8[], $4::int8[], $6::int4[]) AS x(id, parent, attempt) \
               ON x.id = b.task_id \
             WHERE b.outcome = 'applied'",
            cfg.ledger
        ),
        &[&queue, &ids, &tokens, &parents, &cfg.name, &attempts],
    )?;
    thread::sleep(Duration::from_micros(500));
    tx.commit()?;
    Ok(true)
}

/// One protocol line to the parent, flushed at once.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // The parent may be gone; then stdin closes too and we exit.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn exit_when_stdin_closes() {
    thread::spawn(|| {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while let Ok(n) = stdin.read(&mut sink) {
            if n == 0 {
                break;
            }
        }
        std::process::exit(0);
    });
}
