//! `aedb-queue`: the operator command line of the aedb_queue extension.
//!
//! Connects as a member of `aedb_queue_admin`, runs the extension's SQL
//! functions with bound parameters (`sql.rs`), and prints tables or JSON
//! (`output.rs`). Exit codes: 0 success, 1 any failure (server errors print
//! their SQLSTATE), 2 usage errors (from clap, or a duration the server's
//! interval input refuses).

mod admin;
mod conn;
mod duration;
mod enqueue;
mod error;
mod inspect;
mod output;
mod serve;
mod sql;
mod tail;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::Value;

use crate::error::{Error, Result};

#[derive(Parser, Debug)]
#[command(
    name = "aedb-queue",
    version,
    about = "Inspect and operate aedb_queue task queues in PostgreSQL",
    long_about = "Inspect and operate aedb_queue task queues in PostgreSQL.\n\n\
        Connect as a role that is a member of aedb_queue_admin. The connection \
        comes from --dsn (or AEDB_QUEUE_DSN), a libpq connection string \
        (\"host=... port=... user=... dbname=...\") or URL \
        (postgresql://user@host:port/db); whatever it leaves out comes from \
        PGHOST, PGPORT, PGUSER, PGDATABASE and PGPASSWORD (defaults 127.0.0.1, \
        5432, the OS user, the user name). TLS as libpq's sslmode says (in the \
        DSN, or PGSSLMODE, PGSSLROOTCERT, PGSSLCERT, PGSSLKEY); an sslmode that \
        cannot be honoured is an error.\n\n\
        Exit codes: 0 success, 1 failure (a server error prints its SQLSTATE), \
        2 usage error.\n\n\
        Durations (--delay, --watch, --interval, serve's --sample-every and \
        --max-age) are written as in SQL, read by \
        PostgreSQL's interval input: '90 seconds', '1 hour', '1h30m', '500ms', \
        '2 days'; a plain number is seconds."
)]
struct Cli {
    /// Connection string (key=value pairs or a postgresql:// URL).
    #[arg(long, env = "AEDB_QUEUE_DSN", global = true, hide_env_values = true)]
    dsn: Option<String>,

    /// Print JSON for scripts (one document, or one per line for lists and
    /// streams) instead of tables.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show aedb_queue.queue_stats: task counts per state, oldest ready
    /// task, next timer, expired leases, pause.
    ///
    /// --json prints an array of every queue, or the one queue's object.
    Stats {
        /// Only this queue.
        queue: Option<String>,
        /// Refresh every DURATION until Ctrl-C: as in SQL ('2s', '500ms',
        /// '1 minute') or seconds (fractions allowed), 10 ms to 1 day;
        /// redraws in place on a terminal, prints one snapshot after another
        /// otherwise (with --json: one document per line).
        #[arg(long, value_name = "DURATION", value_parser = duration_text)]
        watch: Option<String>,
    },

    /// List tasks of a queue (aedb_queue.queue_list), in the state's own
    /// order: ready in service order, in_flight by lease deadline, scheduled
    /// by due time, dead oldest first, completed newest first.
    ///
    /// --json prints one task per line, every field.
    List {
        queue: String,
        /// waiting, scheduled, blocked, ready, in_flight, dead or completed
        /// (kept completed tasks); all live tasks when left out.
        #[arg(long, value_name = "STATE")]
        state: Option<String>,
        /// At most this many tasks (the server allows 1 to its own maximum).
        #[arg(
            long,
            value_name = "N",
            default_value_t = 100,
            allow_negative_numbers = true
        )]
        limit: i32,
    },

    /// Show one task with every field, payload, progress and result
    /// pretty-printed (aedb_queue.queue_get), and a workflow's steps
    /// (queue_steps: name, when, attempt, result shortened) and what it is
    /// parked on: the time a sleep ends, or the event key it waits for and
    /// until when (queue_waits). Exits 1 if there is no such task.
    ///
    /// --json adds "steps" (every column, results whole), "waits" and
    /// "parked" ({"kind": "sleep" | "event", "step", "key", "until"} or null).
    Show {
        queue: String,
        #[arg(allow_negative_numbers = true)]
        task_id: i64,
    },

    /// Move dead tasks back to ready with their attempts reset
    /// (aedb_queue.queue_retry_dead).
    ///
    /// Without --task, retries in transactions of 1,000 tasks with a progress
    /// bar, until --max tasks (else as many as were dead at the start) have
    /// moved.
    RetryDead {
        queue: String,
        /// Only this task.
        #[arg(long = "task", value_name = "TASK_ID", allow_negative_numbers = true)]
        task: Option<i64>,
        /// At most N tasks.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..))]
        max: Option<i32>,
    },

    /// Run a workflow task again from one of its steps
    /// (aedb_queue.queue_retry_from_step): that step and every step recorded
    /// after it are dropped (they run again), with the task's event waits;
    /// a dead task is retried, a parked one is due now. Prints the steps
    /// dropped (--json: {"queue", "task_id", "step", "dropped"}).
    ///
    /// A task in flight is refused (55000: its worker holds it; retry once
    /// it is handed back, or cancel it); a step the task has not recorded,
    /// or a task that is not live in the queue, is 22023.
    RetryFromStep {
        queue: String,
        #[arg(allow_negative_numbers = true)]
        task_id: i64,
        /// The step's name, as `show` lists it.
        step: String,
    },

    /// Delete every task of a queue in one state (aedb_queue.queue_purge).
    ///
    /// Asks for confirmation on stdin unless --yes. in_flight tasks belong to
    /// running workers: the server refuses them without --force.
    Purge {
        queue: String,
        /// waiting, scheduled, blocked, ready, in_flight, dead or completed.
        #[arg(long, value_name = "STATE")]
        state: String,
        /// Allow purging in_flight tasks.
        #[arg(long)]
        force: bool,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },

    /// Stop handing out tasks of a queue (enqueues still land; the reaper
    /// still reclaims expired leases).
    ///
    /// A queue this role cannot see (a typo) is an error and nothing is
    /// created, unless --create.
    Pause {
        queue: String,
        /// Pause a queue that does not exist yet (it is created paused, so
        /// that its first tasks wait).
        #[arg(long)]
        create: bool,
    },

    /// Hand out tasks of a paused queue again.
    ///
    /// A queue this role cannot see is an error, unless --create.
    Resume {
        queue: String,
        /// Create the queue (running) if it does not exist yet.
        #[arg(long)]
        create: bool,
    },

    /// Enqueue one task, or one per line of a file; prints the task id(s).
    ///
    /// A file holds one JSON payload a line (blank lines skipped). It is
    /// checked whole first, then sent with queue_enqueue_batch in batches of
    /// 1,000, each its own transaction, with a progress bar; the ids come out
    /// in line order (--json: {"task_id", "line"} per line).
    Enqueue {
        queue: String,
        /// The payload, a JSON document ('{"to": "ada@example.com"}'); NULL
        /// when left out.
        #[arg(value_name = "PAYLOAD_JSON", value_parser = parse_json, conflicts_with = "file")]
        payload: Option<Value>,
        /// One JSON payload per line.
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        /// Ready only after this long: a duration as in SQL ('90 seconds',
        /// '1 hour', '1h30m', '2 days') or seconds (fractions allowed).
        #[arg(
            long,
            value_name = "DURATION",
            default_value = "0",
            allow_negative_numbers = true,
            value_parser = duration_text
        )]
        delay: String,
        /// Higher is served first.
        #[arg(
            long,
            value_name = "N",
            default_value_t = 0,
            allow_negative_numbers = true
        )]
        priority: i64,
        /// A second enqueue with this key returns the first task's id
        /// (single payloads only).
        #[arg(long, value_name = "K", conflicts_with = "file")]
        idempotency_key: Option<String>,
    },

    /// Follow queues live: a line per wake-up and per change of counts.
    ///
    /// LISTENs on channel aedb_queue and prints a timestamped "wake" line for
    /// each notification (sent when an enqueue commits into a queue
    /// configured with notify => true, or a reap promotes or reclaims its
    /// tasks). Every --interval seconds it reads queue_stats and prints a
    /// "counts" line for each queue whose ready, in_flight, scheduled or dead
    /// count changed, with the changes. "~completed N" is an estimate: tasks
    /// that left ready + in_flight without a rise in dead (or in scheduled,
    /// a retry's backoff) most likely completed, or were cancelled or
    /// purged; enqueues in the same interval hide as many. Runs until Ctrl-C.
    Tail {
        /// Only these queues (default: every queue).
        queues: Vec<String>,
        /// Time between reads of queue_stats: as in SQL ('2s', '500ms') or
        /// seconds, 10 ms to 1 day.
        #[arg(long, value_name = "DURATION", default_value = "1", value_parser = duration_text)]
        interval: String,
    },

    /// Serve the web dashboard and Prometheus metrics (/metrics) over HTTP
    /// or HTTPS.
    ///
    /// Operators log in (--users, or a trusted proxy's header) and each
    /// one's requests run as their database role (SET ROLE from the DSN's
    /// role); --no-login serves the DSN's role to anyone, on loopback only.
    /// Pages show what the operator's role may read; actions (pause, resume,
    /// retry, cancel, purge, retry a workflow from a step) are offered on
    /// queues it administers. Figures
    /// come from queue_overview (bounded counts, estimates marked "~") and
    /// queue_counters (needs shared_preload_libraries = 'aedb_queue').
    /// Prints "listening on http://ADDR" once bound; runs until Ctrl-C.
    Serve(serve::Options),

    /// Print a users-file line for `serve --users`: NAME ROLE and the
    /// argon2id hash of the password read from stdin's first line.
    HashPassword {
        /// The operator's login name.
        name: String,
        /// The database role their requests run as.
        role: String,
    },
}

/// A duration flag's text, read later by the server (`duration.rs`); only
/// an empty one is refused here.
fn duration_text(s: &str) -> std::result::Result<String, String> {
    if s.trim().is_empty() {
        Err("expected a duration such as '90 seconds', '1h' or a number of seconds".into())
    } else {
        Ok(s.to_string())
    }
}

fn parse_json(s: &str) -> std::result::Result<Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not a JSON document: {e}"))
}

/// `hash-password`: no database needed.
fn hash_password(name: &str, role: &str) -> Result<()> {
    use std::io::Read as _;
    let mut input = String::new();
    std::io::stdin()
        .take(64 * 1024)
        .read_to_string(&mut input)
        .map_err(|e| Error::msg(format!("cannot read the password from stdin: {e}")))?;
    let line = serve::identity::users::hash_line(name, role, &input).map_err(Error::msg)?;
    println!("{line}");
    Ok(())
}

async fn run(cli: Cli) -> Result<()> {
    if let Command::HashPassword { name, role } = &cli.command {
        return hash_password(name, role);
    }
    let cfg = conn::config(cli.dsn.as_deref())?;
    let json = cli.json;
    if let Command::Tail { queues, interval } = &cli.command {
        return tail::run(&cfg, queues, interval, json).await;
    }
    if let Command::Serve(opts) = &cli.command {
        return serve::run(&cfg, opts).await;
    }
    let c = conn::connect(&cfg).await?;
    match cli.command {
        Command::Stats { queue, watch } => {
            let watch = match watch {
                Some(text) => Some(duration::refresh(&c, "--watch", &text).await?),
                None => None,
            };
            inspect::stats(&c, queue.as_deref(), watch, json).await
        }
        Command::List {
            queue,
            state,
            limit,
        } => inspect::list(&c, &queue, state.as_deref(), limit, json).await,
        Command::Show { queue, task_id } => inspect::show(&c, &queue, task_id, json).await,
        Command::RetryDead { queue, task, max } => {
            admin::retry_dead(&c, &queue, task, max, json).await
        }
        Command::RetryFromStep {
            queue,
            task_id,
            step,
        } => admin::retry_from_step(&c, &queue, task_id, &step, json).await,
        Command::Purge {
            queue,
            state,
            force,
            yes,
        } => admin::purge(&c, &queue, &state, force, yes, json).await,
        Command::Pause { queue, create } => admin::set_paused(&c, &queue, true, create, json).await,
        Command::Resume { queue, create } => {
            admin::set_paused(&c, &queue, false, create, json).await
        }
        Command::Enqueue {
            queue,
            payload,
            file,
            delay,
            priority,
            idempotency_key,
        } => {
            // Checked before anything is sent, so a bad one enqueues nothing.
            duration::seconds(&c, "--delay", &delay).await?;
            let opts = enqueue::Options {
                delay: &delay,
                priority,
                idempotency_key: idempotency_key.as_deref(),
            };
            match file {
                Some(path) => enqueue::file(&c, &queue, &path, &opts, json).await,
                None => enqueue::one(&c, &queue, payload.as_ref(), &opts, json).await,
            }
        }
        Command::Tail { .. } | Command::Serve(_) | Command::HashPassword { .. } => {
            unreachable!("handled above")
        }
    }
}

fn main() -> ExitCode {
    // Usage errors print clap's message and exit 2; --help and --version exit 0.
    let cli = Cli::parse();
    // One thread is plenty for a command; the server uses every core.
    let mut builder = if matches!(cli.command, Command::Serve(_)) {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) | Err(Error::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.report());
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_payload_and_a_file_exclude_each_other() {
        let r = Cli::try_parse_from(["aedb-queue", "enqueue", "q", "{}", "--file", "x"]);
        assert!(r.is_err());
        let r = Cli::try_parse_from([
            "aedb-queue",
            "enqueue",
            "q",
            "--file",
            "x",
            "--idempotency-key",
            "k",
        ]);
        assert!(r.is_err());
    }

    #[test]
    fn duration_flags_keep_their_text_for_the_server_and_refuse_an_empty_one() {
        let cli = Cli::try_parse_from(["aedb-queue", "enqueue", "q", "--delay", "1h30m"]).unwrap();
        assert!(matches!(cli.command, Command::Enqueue { delay, .. } if delay == "1h30m"));
        // The default is no delay; a negative number reaches the server (which refuses it).
        let cli = Cli::try_parse_from(["aedb-queue", "enqueue", "q"]).unwrap();
        assert!(matches!(cli.command, Command::Enqueue { delay, .. } if delay == "0"));
        let cli = Cli::try_parse_from(["aedb-queue", "enqueue", "q", "--delay", "-1"]).unwrap();
        assert!(matches!(cli.command, Command::Enqueue { delay, .. } if delay == "-1"));
        for flag in [
            ["enqueue", "q", "--delay"],
            ["stats", "q", "--watch"],
            ["tail", "q", "--interval"],
        ] {
            let mut args = vec!["aedb-queue"];
            args.extend(flag);
            args.push(" ");
            let err = Cli::try_parse_from(&args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn negative_priorities_parse() {
        let cli = Cli::try_parse_from(["aedb-queue", "enqueue", "q", "--priority", "-5"]).unwrap();
        match cli.command {
            Command::Enqueue {
                priority, payload, ..
            } => {
                assert_eq!(priority, -5);
                assert_eq!(payload, None);
            }
            other => panic!("parsed as {other:?}"),
        }
    }
}
