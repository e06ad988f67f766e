//! Commands that change a queue: `retry-dead`, `retry-from-step`, `purge`,
//! `pause`, `resume`.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio_postgres::Client;

use crate::error::{Error, Result};
use crate::inspect;
use crate::output::{self, Record};
use crate::sql;

/// Dead tasks moved back per `queue_retry_dead` call (each its own
/// transaction), so that the progress bar moves and no call holds row locks
/// on a whole backlog.
const RETRY_CHUNK: i64 = 1000;

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({elapsed})") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

fn spinner(what: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        pb.set_style(style);
    }
    pb.set_message(what.to_string());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// `retry-dead QUEUE [--task TASK_ID] [--max N]`.
///
/// One task: one call. Otherwise calls of up to [`RETRY_CHUNK`] tasks until
/// `--max` (else the dead count `queue_stats` showed at the start) have
/// moved or a call comes up short; tasks that die while it runs are left
/// for the next run, so it always ends.
pub async fn retry_dead(
    c: &Client,
    queue: &str,
    task: Option<i64>,
    max: Option<i32>,
    json: bool,
) -> Result<()> {
    let retried = if task.is_some() {
        sql::retry_dead(c, queue, task, max).await?
    } else {
        let dead_now = sql::stats_one(c, queue).await?.map_or(0, |r| r.int("dead"));
        // At least one call, so that the server checks the arguments.
        let target = match max {
            Some(m) => i64::from(m),
            None => dead_now.max(1),
        };
        let pb = bar(
            target.min(dead_now.max(1)) as u64,
            &format!("retrying dead tasks of {queue}"),
        );
        let mut done = 0i64;
        while done < target {
            let want = RETRY_CHUNK.min(target - done);
            let n = sql::retry_dead(c, queue, None, Some(want as i32))
                .await
                .map_err(|e| {
                    pb.abandon();
                    e.context(format!("after {done} tasks were retried"))
                })?;
            done += n;
            pb.inc(n as u64);
            if n < want {
                break;
            }
        }
        pb.finish_and_clear();
        done
    };
    if json {
        let mut r = Record::default();
        r.push("queue", queue);
        r.push("retried", retried);
        output::json_line(&r)
    } else {
        output::line(&format!("retried {retried} dead task(s) of queue {queue}"))
    }
}

/// `retry-from-step QUEUE TASK_ID STEP`: the workflow runs again from
/// `STEP` (it and every later step are dropped, with the task's waits; a
/// dead task is retried, a parked one is due now). The server refuses a
/// task in flight (55000) and an unknown step or task (22023).
pub async fn retry_from_step(
    c: &Client,
    queue: &str,
    task_id: i64,
    step: &str,
    json: bool,
) -> Result<()> {
    let dropped = sql::retry_from_step(c, queue, task_id, step).await?;
    if json {
        let mut r = Record::default();
        r.push("queue", queue);
        r.push("task_id", task_id);
        r.push("step", step);
        r.push("dropped", dropped);
        return output::json_line(&r);
    }
    output::line(&format!(
        "task {task_id} of queue {queue} runs again from step {step:?}; dropped {} step(s): {}",
        dropped.len(),
        dropped
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Which `queue_stats` column counts a state's tasks.
fn stats_column(state: &str) -> Option<&'static str> {
    Some(match state {
        "waiting" => "waiting",
        "scheduled" => "scheduled",
        "blocked" => "blocked",
        "ready" => "ready",
        "in_flight" => "in_flight",
        "dead" => "dead",
        "completed" => "completed_kept",
        _ => return None,
    })
}

/// Asks on stderr, reads one line of stdin: only `y` or `yes` goes on.
async fn confirm(question: String) -> Result<bool> {
    eprint!("{question} [y/N] ");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|e| Error::msg(format!("reading the answer: {e}")))?
    .map_err(|e| Error::msg(format!("reading the answer: {e}")))?;
    if !std::io::stdin().is_terminal() {
        // The answer was not echoed: end the question's line.
        eprintln!();
    }
    let answer = answer.trim().to_ascii_lowercase();
    Ok(answer == "y" || answer == "yes")
}

/// `purge QUEUE --state S [--force] [--yes]`.
pub async fn purge(
    c: &Client,
    queue: &str,
    state: &str,
    force: bool,
    yes: bool,
    json: bool,
) -> Result<()> {
    if !yes {
        let count = match stats_column(state) {
            Some(col) => sql::stats_one(c, queue).await?.map(|r| r.int(col)),
            None => None,
        };
        let how_many = count.map_or_else(|| "all".to_string(), |n| format!("{n}"));
        let question =
            format!("Delete {how_many} {state} task(s) of queue {queue:?}? This cannot be undone.");
        if !confirm(question).await? {
            return Err(Error::msg(
                "purge cancelled, nothing deleted (pass --yes to skip the question)",
            ));
        }
    }
    let pb = if std::io::stderr().is_terminal() {
        spinner(&format!("purging {state} tasks of {queue}"))
    } else {
        ProgressBar::hidden()
    };
    let result = sql::purge(c, queue, state, force).await;
    pb.finish_and_clear();
    let purged = result?;
    if json {
        let mut r = Record::default();
        r.push("queue", queue);
        r.push("state", state);
        r.push("purged", purged);
        output::json_line(&r)
    } else {
        output::line(&format!("purged {purged} {state} task(s) of queue {queue}"))
    }
}

/// `pause QUEUE [--create]` / `resume QUEUE [--create]`. A queue the role
/// cannot see is an error unless `create`: SQL's queue_pause creates it (so
/// that a pause can come before the first task), which for a typo would
/// leave a queue in the dashboard and /metrics for good.
pub async fn set_paused(
    c: &Client,
    queue: &str,
    paused: bool,
    create: bool,
    json: bool,
) -> Result<()> {
    let verb = if paused { "pause" } else { "resume" };
    let changed = sql::set_paused(c, queue, paused, create)
        .await?
        .ok_or_else(|| {
            Error::msg(format!(
                "{}; nothing was done. To {verb} it before its first task, pass --create",
                inspect::no_such_queue(queue)
            ))
        })?;
    if json {
        let mut r = Record::default();
        r.push("queue", queue);
        r.push("paused", paused);
        r.push("changed", changed);
        return output::json_line(&r);
    }
    let word = if paused { "paused" } else { "resumed" };
    if changed {
        output::line(&format!("queue {queue} {word}"))
    } else if paused {
        output::line(&format!("queue {queue} was already paused"))
    } else {
        output::line(&format!("queue {queue} was not paused"))
    }
}
