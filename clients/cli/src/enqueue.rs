//! `enqueue`: one payload, or a file of them (one JSON document a line).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use tokio_postgres::Client;

use crate::error::{Error, Result};
use crate::output::{self, Record};
use crate::sql;

/// Payloads per `queue_enqueue_batch` call (each call its own transaction).
pub const BATCH: usize = 1000;

pub struct Options<'a> {
    /// `--delay`, a duration as in SQL, already checked by `duration::seconds`.
    pub delay: &'a str,
    pub priority: i64,
    pub idempotency_key: Option<&'a str>,
}

/// One task; prints its id (and, with --json, whether it was deduplicated).
pub async fn one(
    c: &Client,
    queue: &str,
    payload: Option<&Value>,
    opts: &Options<'_>,
    json: bool,
) -> Result<()> {
    let (task_id, deduplicated) = sql::enqueue(
        c,
        queue,
        payload,
        opts.delay,
        opts.priority,
        opts.idempotency_key,
    )
    .await?;
    if json {
        let mut r = Record::default();
        r.push("task_id", task_id);
        r.push("deduplicated", deduplicated);
        return output::json_line(&r);
    }
    if deduplicated {
        eprintln!("deduplicated: task {task_id} already had this idempotency key; nothing new was enqueued");
    }
    output::line(&task_id.to_string())
}

/// One line of a payload file: None for a blank line, else its JSON.
fn parse_line(path: &Path, line_no: usize, line: std::io::Result<String>) -> Result<Option<Value>> {
    let line = line.map_err(|e| Error::msg(format!("{}:{line_no}: {e}", path.display())))?;
    if line.trim().is_empty() {
        return Ok(None);
    }
    serde_json::from_str(&line).map(Some).map_err(|e| {
        Error::msg(format!(
            "{}:{line_no}: not a JSON document: {e}",
            path.display()
        ))
    })
}

fn open(path: &Path) -> Result<std::iter::Enumerate<std::io::Lines<BufReader<File>>>> {
    let file =
        File::open(path).map_err(|e| Error::msg(format!("cannot open {}: {e}", path.display())))?;
    Ok(BufReader::new(file).lines().enumerate())
}

/// Every line of `path` as a task (blank lines are skipped), in batches of
/// [`BATCH`]. The whole file is checked first, so a bad line enqueues
/// nothing; then each batch commits on its own: a server error stops at its
/// batch, after the ids of the batches before it have been printed.
pub async fn file(
    c: &Client,
    queue: &str,
    path: &Path,
    opts: &Options<'_>,
    json: bool,
) -> Result<()> {
    let mut total = 0u64;
    for (i, line) in open(path)? {
        if parse_line(path, i + 1, line)?.is_some() {
            total += 1;
        }
    }

    let pb = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("enqueue [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)")
    {
        pb.set_style(style.progress_chars("=> "));
    }

    // Read again, one batch in memory at a time.
    let mut reader = open(path)?;
    let mut lines: Vec<usize> = Vec::with_capacity(BATCH);
    let mut payloads: Vec<Value> = Vec::with_capacity(BATCH);
    let mut done = 0usize;
    loop {
        lines.clear();
        payloads.clear();
        for (i, line) in reader.by_ref() {
            if let Some(value) = parse_line(path, i + 1, line)? {
                lines.push(i + 1);
                payloads.push(value);
                if payloads.len() == BATCH {
                    break;
                }
            }
        }
        if payloads.is_empty() {
            break;
        }
        let ids = sql::enqueue_batch(c, queue, &payloads, opts.delay, opts.priority)
            .await
            .map_err(|e| {
                pb.abandon();
                e.context(format!(
                    "batch of lines {}-{} failed; the {done} task(s) of the lines before it stay enqueued",
                    lines[0],
                    lines[lines.len() - 1]
                ))
            })?;
        if ids.len() != payloads.len() {
            return Err(Error::msg(format!(
                "queue_enqueue_batch returned {} ids for {} payloads",
                ids.len(),
                payloads.len()
            )));
        }
        let mut text = String::new();
        for (id, line_no) in ids.iter().zip(&lines) {
            if !text.is_empty() {
                text.push('\n');
            }
            if json {
                let mut r = Record::default();
                r.push("task_id", *id);
                r.push("line", *line_no as i64);
                text.push_str(&serde_json::to_string(&r).map_err(|e| Error::msg(e.to_string()))?);
            } else {
                text.push_str(&id.to_string());
            }
        }
        pb.suspend(|| output::line(&text))?;
        done += ids.len();
        pb.inc(ids.len() as u64);
    }
    pb.finish_and_clear();
    eprintln!("enqueued {done} task(s) into queue {queue}");
    Ok(())
}
