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

/// A result shown in a table cell: compact JSON, at most this many characters.
const STEP_RESULT_WIDTH: usize = 60;

/// What a parked workflow task waits for, from its row, steps and waits:
/// `{"kind": "event", "step", "key", "until"}` when it waits for an event
/// (until the wait's deadline), `{"kind": "sleep", "step", "until"}` when it
/// is scheduled for a sleep step's wake time; null otherwise (not parked:
/// not scheduled, or scheduled for a delay or a retry's backoff).
pub fn parked(task: &Record, steps: &[Record], waits: &[Record]) -> Value {
    if task.text("state") != "scheduled" {
        return Value::Null;
    }
    let mut p = Record::default();
    if let Some(w) = waits.first() {
        p.push("kind", "event");
        p.push("step", w.get("step").clone());
        p.push("key", w.get("key").clone());
        p.push("until", w.get("deadline").clone());
    } else if let Some(s) = steps.iter().rev().find(|s| {
        s.get("sleep_until").as_str().is_some() && s.get("sleep_until") == task.get("not_before")
    }) {
        p.push("kind", "sleep");
        p.push("step", s.get("step").clone());
        p.push("until", s.get("sleep_until").clone());
    } else {
        return Value::Null;
    }
    serde_json::to_value(&p).unwrap_or(Value::Null)
}

/// A step as `show` prints it: `queue_steps`' columns (without the helper
/// `sleep_until`).
fn step_record(s: &Record) -> Record {
    let mut r = Record::default();
    for (k, v) in s.fields().filter(|(k, _)| *k != "sleep_until") {
        r.push(k, v.clone());
    }
    r
}

/// The steps and waits of a task; none where the extension has no
/// workflows (before 0.9.0: 42883, no such function).
async fn workflow(c: &Client, queue: &str, task_id: i64) -> Result<(Vec<Record>, Vec<Record>)> {
    let absent = |e: &Error| matches!(e, Error::Db(d) if d.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_FUNCTION));
    let steps = match sql::steps(c, queue, task_id).await {
        Err(e) if absent(&e) => return Ok((Vec::new(), Vec::new())),
        other => other?,
    };
    let waits = sql::waits(c, queue, task_id).await?;
    Ok((steps, waits))
}

/// The parked line of `show`: "sleeps until T (step S)" or "waits for
/// event K until T (step S)".
pub fn parked_text(p: &Value) -> Option<String> {
    let until = output::cell(&output::human_time(&p["until"]));
    let step = output::cell(&p["step"]);
    match p["kind"].as_str()? {
        "sleep" => Some(format!("sleeps until {until} (step {step})")),
        "event" => Some(format!(
            "waits for event {} until {until} (step {step})",
            output::cell(&p["key"])
        )),
        _ => None,
    }
}

/// `show QUEUE TASK_ID`: every field, JSON values pretty-printed, then a
/// workflow's steps and what it is parked on.
pub async fn show(c: &Client, queue: &str, task_id: i64, json: bool) -> Result<()> {
    let task = sql::get(c, queue, task_id).await?.ok_or_else(|| {
        Error::msg(format!(
            "task {task_id} not found in queue {queue:?} (completed and not kept, cancelled, \
             purged, or never there)"
        ))
    })?;
    let (steps, waits) = workflow(c, queue, task_id).await?;
    let parked = parked(&task, &steps, &waits);
    if json {
        let mut doc = task.clone();
        let shown: Vec<Record> = steps.iter().map(step_record).collect();
        doc.push("steps", serde_json::to_value(&shown).unwrap_or_default());
        doc.push("waits", serde_json::to_value(&waits).unwrap_or_default());
        doc.push("parked", parked);
        return output::json_pretty(&doc);
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
    let mut text = output::vertical(&pairs);
    if !steps.is_empty() {
        let rows: Vec<Record> = steps
            .iter()
            .map(|s| {
                let mut r = Record::default();
                r.push("step", s.get("step").clone());
                r.push("recorded_at", output::human_time(s.get("recorded_at")));
                r.push("attempt", s.get("attempt").clone());
                let result = match s.get("result") {
                    Value::Null => String::new(),
                    v => output::truncate(&v.to_string(), STEP_RESULT_WIDTH),
                };
                r.push("result", result);
                r
            })
            .collect();
        text.push_str("\nsteps:\n");
        text.push_str(&output::table(
            &rows,
            &["step", "recorded_at", "attempt", "result"],
        ));
    }
    if let Some(line) = parked_text(&parked) {
        text.push_str(&format!("\nparked: {line}"));
    } else {
        for w in &waits {
            // Not parked any more (the event came, or its deadline passed):
            // the wait ends when the handler runs it again.
            text.push_str(&format!(
                "\nwaits for event {} (step {}, deadline {}); the task is {}",
                output::cell(w.get("key")),
                output::cell(w.get("step")),
                output::cell(&output::human_time(w.get("deadline"))),
                task.text("state")
            ));
        }
    }
    output::line(&text)
}
