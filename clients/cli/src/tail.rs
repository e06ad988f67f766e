//! `tail [QUEUE...]`: wake-ups as they arrive, and count changes per tick.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use crate::conn::{self, Config};
use crate::duration;
use crate::error::{Error, Result};
use crate::output::{self, Record};
use crate::sql;

/// The counts a tail line follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub ready: i64,
    pub in_flight: i64,
    pub scheduled: i64,
    pub dead: i64,
}

impl Counts {
    fn of(r: &Record) -> Counts {
        Counts {
            ready: r.int("ready"),
            in_flight: r.int("in_flight"),
            scheduled: r.int("scheduled"),
            dead: r.int("dead"),
        }
    }
}

/// Tasks that left ready + in flight without showing up as dead or
/// scheduled (a retry's backoff): completions, or cancels and purges.
/// Enqueues and promoted timers in the same interval hide as many, so it is
/// an estimate, a lower bound when work also arrives.
pub fn approx_completed(before: Counts, after: Counts) -> i64 {
    let fall = (before.ready + before.in_flight) - (after.ready + after.in_flight);
    let rise_elsewhere =
        (after.dead - before.dead).max(0) + (after.scheduled - before.scheduled).max(0);
    (fall - rise_elsewhere).max(0)
}

fn signed(n: i64) -> String {
    if n > 0 {
        format!("+{n}")
    } else {
        n.to_string()
    }
}

/// A counts line; `before` is None for the first sight of a queue.
fn counts_line(queue: &str, before: Option<Counts>, now: Counts, json: bool) -> Result<()> {
    let fields = [
        ("ready", now.ready, before.map(|b| b.ready)),
        ("in_flight", now.in_flight, before.map(|b| b.in_flight)),
        ("scheduled", now.scheduled, before.map(|b| b.scheduled)),
        ("dead", now.dead, before.map(|b| b.dead)),
    ];
    let done = before.map(|b| approx_completed(b, now));
    if json {
        let mut r = Record::default();
        r.push("ts", output::utc_now());
        r.push("event", "counts");
        r.push("queue", queue);
        for (name, value, _) in fields {
            r.push(name, value);
        }
        for (name, value, old) in fields {
            r.push(format!("{name}_delta"), old.map_or(0, |o| value - o));
        }
        r.push("approx_completed", done.unwrap_or(0));
        return output::json_line(&r);
    }
    let mut text = format!("{}  counts  {queue}", output::utc_now());
    for (name, value, old) in fields {
        text.push_str(&format!("  {name} {value}"));
        if let Some(o) = old.filter(|o| *o != value) {
            text.push_str(&format!(" ({})", signed(value - o)));
        }
    }
    if let Some(n) = done.filter(|n| *n > 0) {
        text.push_str(&format!("  ~completed {n}"));
    }
    output::line(&text)
}

fn wake_line(queue: &str, json: bool) -> Result<()> {
    if json {
        let mut r = Record::default();
        r.push("ts", output::utc_now());
        r.push("event", "wake");
        r.push("queue", queue);
        output::json_line(&r)
    } else {
        output::line(&format!("{}  wake    {queue}", output::utc_now()))
    }
}

/// `<queue> <tasks> <first task id>`; the queue's name may hold spaces.
pub fn parse_completed(payload: &str) -> Option<(&str, u64, i64)> {
    let mut parts = payload.rsplitn(3, ' ');
    let first = parts.next()?.parse().ok()?;
    let count = parts.next()?.parse().ok()?;
    let queue = parts.next()?;
    Some((queue, count, first))
}

fn completed_line(queue: &str, count: u64, first: i64, json: bool) -> Result<()> {
    if json {
        let mut r = Record::default();
        r.push("ts", output::utc_now());
        r.push("event", "completed");
        r.push("queue", queue);
        r.push("tasks", count as i64);
        r.push("first_task_id", first);
        output::json_line(&r)
    } else {
        output::line(&format!(
            "{}  done    {queue}  {count} (task {first}{})",
            output::utc_now(),
            if count > 1 { " and more" } else { "" }
        ))
    }
}

/// Runs until Ctrl-C (or the connection fails).
pub async fn run(cfg: &Config, queues: &[String], interval: &str, json: bool) -> Result<()> {
    let (client, mut connection) = conn::connect_raw(cfg).await?;
    // The connection runs on its own task and hands the notifications over;
    // replies to the queries of this task are routed to it as usual.
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let event = (n.channel().to_string(), n.payload().to_string());
                    if tx.send(Ok(event)).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    break;
                }
            }
        }
    });
    let interval = duration::refresh(&client, "--interval", interval).await?;
    client.batch_execute(sql::LISTEN).await?;
    let wanted = |q: &str| queues.is_empty() || queues.iter().any(|w| w == q);
    if queues.is_empty() {
        eprintln!("listening on channel aedb_queue for every queue; Ctrl-C to stop");
    } else {
        eprintln!(
            "listening on channel aedb_queue for {}; Ctrl-C to stop",
            queues.join(", ")
        );
    }

    let mut last: HashMap<String, Counts> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(interval));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            message = rx.recv() => match message {
                Some(Ok((channel, payload))) if channel == sql::COMPLETED_CHANNEL => {
                    if let Some((queue, count, first)) = parse_completed(&payload) {
                        if wanted(queue) {
                            completed_line(queue, count, first, json)?;
                        }
                    }
                }
                Some(Ok((_, queue))) => {
                    if wanted(&queue) {
                        wake_line(&queue, json)?;
                    }
                }
                Some(Err(e)) => return Err(Error::from(e).context("the connection failed")),
                None => return Err(Error::msg("the connection closed")),
            },
            _ = tick.tick() => {
                for r in sql::stats_all(&client).await? {
                    let queue = r.text("queue").to_string();
                    if !wanted(&queue) {
                        continue;
                    }
                    let now = Counts::of(&r);
                    let before = last.get(&queue).copied();
                    if before != Some(now) {
                        counts_line(&queue, before, now, json)?;
                        last.insert(queue, now);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_payloads_parse_from_the_right() {
        assert_eq!(parse_completed("emails 3 41"), Some(("emails", 3, 41)));
        assert_eq!(parse_completed("a queue 1 7"), Some(("a queue", 1, 7)));
        assert_eq!(parse_completed("emails x 41"), None);
        assert_eq!(parse_completed("41"), None);
    }

    fn c(ready: i64, in_flight: i64, scheduled: i64, dead: i64) -> Counts {
        Counts {
            ready,
            in_flight,
            scheduled,
            dead,
        }
    }

    #[test]
    fn completions_are_the_fall_not_explained_by_dead_or_retries() {
        // 3 completed.
        assert_eq!(approx_completed(c(5, 2, 0, 0), c(3, 1, 0, 0)), 3);
        // 1 died, 1 retried with backoff, 1 completed.
        assert_eq!(approx_completed(c(0, 3, 0, 0), c(0, 0, 1, 1)), 1);
        // Work arrived: nothing counted.
        assert_eq!(approx_completed(c(0, 0, 0, 0), c(4, 0, 0, 0)), 0);
        // A timer promoted: scheduled to ready, no completion.
        assert_eq!(approx_completed(c(0, 0, 1, 0), c(1, 0, 0, 0)), 0);
    }
}
