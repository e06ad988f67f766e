//! Read-only commands: `stats`, `list`, `show`.

use std::io::IsTerminal;
use std::time::Duration;

use serde_json::Value;
use tokio_postgres::Client;

use crate::error::{Error, Result};
use crate::output::{self, Record};
use crate::sql;

/// The `queue_stats` columns of the table, with their (shorter) headers
/// and whether they are shown only when some queue has a value in them
/// (a count above 0, a limit, fair share on): dependencies, kept completed
/// tasks and flow control. JSON always has every column under its own name.
const STATS_COLUMNS: &[(&str, &str, bool)] = &[
    ("queue", "queue", false),
    ("waiting", "waiting", true),
    ("scheduled", "scheduled", false),
    ("blocked", "blocked", true),
    ("ready", "ready", false),
    ("in_flight", "in_flight", false),
    ("dead", "dead", false),
    ("completed_kept", "kept", true),
    ("oldest_ready_age", "oldest_ready", false),
    ("next_due", "next_due", false),
    ("expired_leases", "expired", false),
    ("paused", "paused", false),
    ("concurrency_limit", "concurrency_limit", true),
    ("rate_limit", "rate_limit", true),
    ("rate_tokens", "rate_tokens", true),
    ("fair_share", "fair_share", true),
];

/// Why a named queue has no row (`stats QUEUE`, `pause QUEUE`).
pub fn no_such_queue(queue: &str) -> String {
    format!(
        "no queue {queue:?} in aedb_queue.queue_stats (it has never been used or configured, \
         or this role may not read it)"
    )
}

/// The rows of one refresh: every queue, or the one asked for.
async fn stats_rows(c: &Client, queue: Option<&str>) -> Result<Vec<Record>> {
    match queue {
        None => sql::stats_all(c).await,
        Some(q) => Ok(vec![sql::stats_one(c, q)
            .await?
            .ok_or_else(|| Error::msg(no_such_queue(q)))?]),
    }
}

pub fn stats_table(rows: &[Record]) -> String {
    if rows.is_empty() {
        return "(no queues)".to_string();
    }
    let in_use = |key: &str| {
        rows.iter().any(|r| {
            !matches!(r.get(key), Value::Null | Value::Bool(false)) && r.get(key) != &Value::from(0)
        })
    };
    let shown: Vec<(&str, &str)> = STATS_COLUMNS
        .iter()
        .filter(|(key, _, optional)| !optional || in_use(key))
        .map(|(key, header, _)| (*key, *header))
        .collect();
    let display: Vec<Record> = rows
        .iter()
        .map(|r| {
            let mut d = Record::default();
            for (key, header) in &shown {
                d.push(*header, output::human_time(r.get(key)));
            }
            d
        })
        .collect();
    let headers: Vec<&str> = shown.iter().map(|(_, h)| *h).collect();
    output::table(&display, &headers)
}

fn print_stats(rows: &[Record], one: bool, json: bool) -> Result<()> {
    if json {
        // One queue: its object; every queue: an array.
        match (one, rows.first()) {
            (true, Some(r)) => output::json_line(r),
            _ => output::json_line(rows),
        }
    } else {
        output::line(&stats_table(rows))
    }
}

/// `stats [QUEUE] [--watch SECONDS]`.
pub async fn stats(c: &Client, queue: Option<&str>, watch: Option<f64>, json: bool) -> Result<()> {
    let Some(every) = watch else {
        let rows = stats_rows(c, queue).await?;
        return print_stats(&rows, queue.is_some(), json);
    };
    let in_place = !json && std::io::stdout().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(every));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            _ = tick.tick() => {
                let rows = stats_rows(c, queue).await?;
                if json {
                    print_stats(&rows, queue.is_some(), true)?;
                } else {
                    let header = format!(
                        "{}  every {every}s, Ctrl-C to stop",
                        output::utc_now()
                    );
                    // On a terminal: clear the screen and redraw at the top.
                    let clear = if in_place { "\x1b[H\x1b[2J" } else { "" };
                    output::line(&format!("{clear}{header}\n{}", stats_table(&rows)))?;
                }
            }
        }
    }
}

/// Columns of `list`'s table; JSON has every column of the task row.
pub async fn list(
    c: &Client,
    queue: &str,
    state: Option<&str>,
    limit: i32,
    json: bool,
) -> Result<()> {
    let rows = sql::list(c, queue, state, limit).await?;
    if json {
        for r in &rows {
            output::json_line(r)?;
        }
        return Ok(());
    }
    if rows.is_empty() {
        return output::line("(no tasks)");
    }
    let shown: Vec<Record> = rows
        .iter()
        .map(|r| {
            let mut s = Record::default();
            s.push("task_id", r.get("task_id").clone());
            s.push("state", r.get("state").clone());
            s.push("priority", r.get("priority").clone());
            let attempts = match r.get("max_attempts") {
                Value::Null => r.int("attempts").to_string(),
                max => format!("{}/{}", r.int("attempts"), output::cell(max)),
            };
            s.push("attempts", attempts);
            s.push("not_before", output::human_time(r.get("not_before")));
            s.push("owner_id", r.get("owner_id").clone());
            s.push(
                "payload",
                output::truncate(&output::cell(r.get("payload")), 40),
            );
            s.push(
                "last_error",
                output::truncate(&output::cell(r.get("last_error")), 40),
            );
            s
        })
        .collect();
    output::line(&output::table(
        &shown,
        &[
            "task_id",
            "state",
            "priority",
            "attempts",
            "not_before",
            "owner_id",
            "payload",
            "last_error",
        ],
    ))
}

/// `show QUEUE TASK_ID`: every field; JSON values pretty-printed.
pub async fn show(c: &Client, queue: &str, task_id: i64, json: bool) -> Result<()> {
    let task = sql::get(c, queue, task_id).await?.ok_or_else(|| {
        Error::msg(format!(
            "task {task_id} not found in queue {queue:?} (completed and not kept, cancelled, \
             purged, or never there)"
        ))
    })?;
    if json {
        return output::json_pretty(&task);
    }
    let pairs: Vec<(String, String)> = task
        .fields()
        .map(|(k, v)| {
            let text = match v {
                Value::Object(_) | Value::Array(_) => {
                    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
                }
                // A JSON string or number payload, shown as JSON.
                Value::String(_) | Value::Number(_) | Value::Bool(_)
                    if matches!(k, "payload" | "progress" | "result") =>
                {
                    v.to_string()
                }
                other => output::cell(other),
            };
            (k.to_string(), text)
        })
        .collect();
    output::line(&output::vertical(&pairs))
}
