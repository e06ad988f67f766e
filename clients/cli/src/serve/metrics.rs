//! `/metrics`: the Prometheus text exposition format (0.0.4), written by
//! hand. The format is a few lines of text; writing it here keeps the label
//! capping, the "other" bucket and the family order in one pure function
//! that unit tests read, where a client library would add a registry that
//! has to be rebuilt per scrape anyway (every value comes from the database
//! at scrape time).
//!
//! Names are the ones agreed with docs/grafana/aedb_queue.json.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};

use super::identity::Operator;
use super::queries::{self, Counter, Counts, Overview, COUNTERS_UNAVAILABLE};
use super::Shared;

/// A scrape that takes longer reports the database as down.
const SCRAPE_LIMIT: Duration = Duration::from_secs(5);

/// The `state` label values of `aedb_queue_tasks`, in output order.
pub const STATES: [&str; 6] = [
    "waiting",
    "scheduled",
    "blocked",
    "ready",
    "in_flight",
    "dead",
];
/// The label value that sums every queue past the cap (and the extension's
/// overflow row).
pub const OTHER: &str = "other";

/// What one scrape read from the database.
pub struct Scrape<'a> {
    /// The database answered `queue_overview`.
    pub up: bool,
    pub overview: &'a [Overview],
    /// None when `queue_counters()` is not available (55000, or down).
    pub counters: Option<&'a [Counter]>,
    pub duration_secs: f64,
}

/// The figures of one `queue` label value: one queue, or the sum of the
/// queues in "other".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bucket {
    pub label: String,
    pub tasks: [i64; 6],
    pub estimated: [bool; 6],
    /// The oldest of the bucket's queues (seconds; 0 without ready tasks).
    pub oldest_ready_age: f64,
    pub expired_leases: i64,
    /// Queues paused (0 or 1 for one queue).
    pub paused: i64,
    pub counts: Counts,
}

impl Bucket {
    fn new(label: &str) -> Bucket {
        Bucket {
            label: label.to_string(),
            ..Bucket::default()
        }
    }

    fn add_overview(&mut self, o: &Overview) {
        for (i, state) in STATES.iter().enumerate() {
            self.tasks[i] += o.count(state);
            self.estimated[i] |= o.is_estimated(state);
        }
        self.oldest_ready_age = self
            .oldest_ready_age
            .max(o.oldest_ready_age_secs.unwrap_or(0.0));
        self.expired_leases += o.expired_leases;
        self.paused += i64::from(o.paused);
    }
}

/// One bucket per queue label value: at most `max_queues` of them. When
/// every queue fits, each has its own; otherwise the first `max_queues - 1`
/// by name do and the rest, with counters of queues not in the overview
/// and the extension's overflow row (queue NULL), are summed in "other".
pub fn buckets(
    overview: &[Overview],
    counters: Option<&[Counter]>,
    max_queues: usize,
) -> Vec<Bucket> {
    let max_queues = max_queues.max(1);
    let mut names: Vec<&str> = overview.iter().map(|o| o.queue.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let strays = counters.is_some_and(|cs| {
        cs.iter().any(|c| {
            c.queue
                .as_deref()
                .is_none_or(|q| names.binary_search(&q).is_err())
        })
    });
    let named = if names.len() > max_queues || (strays && names.len() >= max_queues) {
        max_queues - 1
    } else {
        names.len()
    };
    let mut by_label: BTreeMap<&str, Bucket> = names[..named]
        .iter()
        .map(|n| (*n, Bucket::new(n)))
        .collect();
    let mut other = Bucket::new(OTHER);
    let mut in_other = false;
    for o in overview {
        match by_label.get_mut(o.queue.as_str()) {
            Some(b) => b.add_overview(o),
            None => {
                other.add_overview(o);
                in_other = true;
            }
        }
    }
    for c in counters.unwrap_or_default() {
        match c.queue.as_deref().and_then(|q| by_label.get_mut(q)) {
            Some(b) => b.counts.add(&c.counts),
            None => {
                other.counts.add(&c.counts);
                in_other = true;
            }
        }
    }
    let mut out: Vec<Bucket> = by_label.into_values().collect();
    if in_other {
        out.push(other);
    }
    out
}

/// A label value with `\`, `"` and newlines escaped as the format wants.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn per_queue(
    out: &mut String,
    buckets: &[Bucket],
    name: &str,
    kind: &str,
    help: &str,
    value: impl Fn(&Bucket) -> f64,
) {
    family(out, name, kind, help);
    for b in buckets {
        let _ = writeln!(
            out,
            "{name}{{queue=\"{}\"}} {}",
            escape_label(&b.label),
            value(b)
        );
    }
}

const COUNTERS: [(&str, &str); 6] = [
    (
        "aedb_queue_enqueued_total",
        "Tasks enqueued (committed) since the database server started.",
    ),
    (
        "aedb_queue_completed_total",
        "Tasks completed since the database server started.",
    ),
    (
        "aedb_queue_failed_total",
        "Failures applied (retried or dead) since the database server started.",
    ),
    (
        "aedb_queue_dead_lettered_total",
        "Tasks that became dead since the database server started.",
    ),
    (
        "aedb_queue_reclaimed_total",
        "Expired leases taken back since the database server started.",
    ),
    (
        "aedb_queue_cancelled_total",
        "Tasks cancelled since the database server started.",
    ),
];

fn counter_value(c: &Counts, i: usize) -> i64 {
    [
        c.enqueued,
        c.completed,
        c.failed,
        c.dead_lettered,
        c.reclaimed,
        c.cancelled,
    ][i]
}

/// The whole exposition of one scrape.
pub fn render(s: &Scrape, max_queues: usize) -> String {
    let mut out = String::with_capacity(4096);
    family(
        &mut out,
        "aedb_queue_up",
        "gauge",
        "1 when the database answered this scrape.",
    );
    let _ = writeln!(out, "aedb_queue_up {}", u8::from(s.up));
    family(
        &mut out,
        "aedb_queue_counters_up",
        "gauge",
        "1 when queue_counters() is available (aedb_queue in shared_preload_libraries).",
    );
    let _ = writeln!(
        out,
        "aedb_queue_counters_up {}",
        u8::from(s.up && s.counters.is_some())
    );
    family(
        &mut out,
        "aedb_queue_scrape_duration_seconds",
        "gauge",
        "Time this scrape spent reading the database.",
    );
    let _ = writeln!(
        out,
        "aedb_queue_scrape_duration_seconds {:.6}",
        s.duration_secs
    );
    if !s.up {
        return out;
    }
    let buckets = buckets(s.overview, s.counters, max_queues);
    family(
        &mut out,
        "aedb_queue_tasks",
        "gauge",
        "Tasks by state (see aedb_queue_tasks_estimated).",
    );
    for b in &buckets {
        for (i, state) in STATES.iter().enumerate() {
            let _ = writeln!(
                out,
                "aedb_queue_tasks{{queue=\"{}\",state=\"{state}\"}} {}",
                escape_label(&b.label),
                b.tasks[i]
            );
        }
    }
    family(
        &mut out,
        "aedb_queue_tasks_estimated",
        "gauge",
        "1 when aedb_queue_tasks of that state is the planner's estimate (past the exact limit).",
    );
    for b in &buckets {
        for (i, state) in STATES.iter().enumerate() {
            let _ = writeln!(
                out,
                "aedb_queue_tasks_estimated{{queue=\"{}\",state=\"{state}\"}} {}",
                escape_label(&b.label),
                u8::from(b.estimated[i])
            );
        }
    }
    per_queue(
        &mut out,
        &buckets,
        "aedb_queue_oldest_ready_age_seconds",
        "gauge",
        "Age of the next ready task in service order (0 without ready tasks).",
        |b| b.oldest_ready_age,
    );
    per_queue(
        &mut out,
        &buckets,
        "aedb_queue_expired_leases",
        "gauge",
        "In-flight tasks past their lease, not yet reclaimed.",
        |b| b.expired_leases as f64,
    );
    per_queue(
        &mut out,
        &buckets,
        "aedb_queue_paused",
        "gauge",
        "1 when the queue is paused (for \"other\": how many of its queues are).",
        |b| b.paused as f64,
    );
    if s.counters.is_some() {
        for (i, (name, help)) in COUNTERS.iter().enumerate() {
            per_queue(&mut out, &buckets, name, "counter", help, |b| {
                counter_value(&b.counts, i) as f64
            });
        }
    }
    out
}

/// What the database says now: (overview, counters) or why it did not
/// answer. Counters that raise 55000 are None; other counter errors fail
/// the scrape.
/// The counters are read on every scrape (cheap, and they say whether the
/// database answers); the overview is the shared snapshot.
async fn read(
    view: &super::View,
) -> Result<(std::sync::Arc<Vec<Overview>>, Option<Vec<Counter>>), String> {
    let c = view.db.conn().await.map_err(|e| e.message)?;
    let (overview, counters) = futures_util::join!(view.overview.get(), queries::counters(&c));
    let overview = overview.map_err(|e| e.message)?;
    let counters = match counters {
        Ok(rows) => Some(rows),
        Err(e) if super::sqlstate(&e).as_deref() == Some(COUNTERS_UNAVAILABLE) => None,
        Err(e) => return Err(super::describe_db(&e)),
    };
    Ok((overview, counters))
}

/// `GET /metrics`: always 200, with aedb_queue_up 0 when the database did
/// not answer (so the scrape itself stays up and alerts can fire on it).
/// Only the queues the operator's role may read.
pub async fn handler(State(app): State<Shared>, op: Operator) -> Response {
    let view = match app.view(&op) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let started = Instant::now();
    let result = tokio::time::timeout(SCRAPE_LIMIT, read(view))
        .await
        .unwrap_or_else(|_| Err("timed out".into()));
    let duration_secs = started.elapsed().as_secs_f64();
    let body = match &result {
        Ok((overview, counters)) => render(
            &Scrape {
                up: true,
                overview: overview.as_slice(),
                counters: counters.as_deref(),
                duration_secs,
            },
            app.max_queues,
        ),
        Err(e) => {
            eprintln!("warning: /metrics: the database did not answer: {e}");
            render(
                &Scrape {
                    up: false,
                    overview: &[],
                    counters: None,
                    duration_secs,
                },
                app.max_queues,
            )
        }
    };
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ov(queue: &str, ready: i64) -> Overview {
        Overview {
            queue: queue.into(),
            ready,
            ..Overview::default()
        }
    }

    fn counter(queue: Option<&str>, completed: i64) -> Counter {
        Counter {
            queue: queue.map(String::from),
            counts: Counts {
                completed,
                ..Counts::default()
            },
            since: None,
        }
    }

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .map(|l| l[prefix.len()..].trim())
    }

    #[test]
    fn every_queue_has_its_own_label_while_they_fit() {
        let b = buckets(&[ov("a", 1), ov("b", 2)], Some(&[counter(Some("b"), 5)]), 2);
        assert_eq!(
            b.iter().map(|b| b.label.as_str()).collect::<Vec<_>>(),
            vec!["a", "b"]
        );
        assert_eq!(b[1].counts.completed, 5);
        assert_eq!(b[1].tasks[3], 2, "ready of b");
    }

    #[test]
    fn queues_past_the_cap_are_summed_in_other() {
        let o = [ov("a", 1), ov("b", 2), ov("c", 4), ov("d", 8)];
        let cs = [
            counter(Some("a"), 1),
            counter(Some("c"), 10),
            counter(Some("d"), 100),
            counter(None, 1000),
        ];
        let b = buckets(&o, Some(&cs), 3);
        assert_eq!(
            b.iter().map(|b| b.label.as_str()).collect::<Vec<_>>(),
            vec!["a", "b", "other"]
        );
        assert_eq!(b[2].tasks[3], 12);
        assert_eq!(b[2].counts.completed, 1110, "c, d and the overflow row");
    }

    #[test]
    fn the_overflow_row_alone_takes_a_label_within_the_cap() {
        let b = buckets(&[ov("a", 1), ov("b", 1)], Some(&[counter(None, 3)]), 2);
        assert_eq!(
            b.iter().map(|b| b.label.as_str()).collect::<Vec<_>>(),
            vec!["a", "other"]
        );
        assert_eq!(b[1].counts.completed, 3);
        assert_eq!(b[1].tasks[3], 1, "b went to other");
        let b = buckets(&[ov("a", 1)], Some(&[counter(None, 3)]), 5);
        assert_eq!(
            b.iter().map(|b| b.label.as_str()).collect::<Vec<_>>(),
            vec!["a", "other"]
        );
    }

    #[test]
    fn other_keeps_the_oldest_age_and_marks_any_estimate() {
        let mut x = ov("x", 1);
        x.oldest_ready_age_secs = Some(30.0);
        x.estimated = vec!["dead".into()];
        x.paused = true;
        let mut y = ov("y", 1);
        y.oldest_ready_age_secs = Some(90.0);
        y.paused = true;
        let b = buckets(&[ov("a", 0), x, y], None, 2);
        let other = b.last().unwrap();
        assert_eq!(other.label, OTHER);
        assert_eq!(other.oldest_ready_age, 90.0);
        assert_eq!(other.estimated, [false, false, false, false, false, true]);
        assert_eq!(other.paused, 2);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let text = render(
            &Scrape {
                up: true,
                overview: &[ov("q\"}x", 3)],
                counters: None,
                duration_secs: 0.0,
            },
            10,
        );
        assert_eq!(
            line(&text, "aedb_queue_tasks{queue=\"q\\\"}x\",state=\"ready\"}"),
            Some("3")
        );
    }

    #[test]
    fn a_scrape_has_every_family_with_types() {
        let mut a = ov("a", 3);
        a.estimated = vec!["ready".into()];
        a.oldest_ready_age_secs = Some(1.5);
        a.expired_leases = 2;
        let cs = [Counter {
            queue: Some("a".into()),
            counts: Counts {
                enqueued: 9,
                completed: 4,
                failed: 2,
                dead_lettered: 1,
                reclaimed: 3,
                cancelled: 5,
            },
            since: None,
        }];
        let text = render(
            &Scrape {
                up: true,
                overview: &[a],
                counters: Some(&cs),
                duration_secs: 0.012,
            },
            10,
        );
        assert_eq!(line(&text, "aedb_queue_up "), Some("1"));
        assert_eq!(line(&text, "aedb_queue_counters_up "), Some("1"));
        assert_eq!(
            line(&text, "aedb_queue_scrape_duration_seconds "),
            Some("0.012000")
        );
        assert_eq!(
            line(&text, "aedb_queue_tasks{queue=\"a\",state=\"ready\"}"),
            Some("3")
        );
        assert_eq!(
            line(&text, "aedb_queue_tasks{queue=\"a\",state=\"dead\"}"),
            Some("0")
        );
        assert_eq!(
            line(
                &text,
                "aedb_queue_tasks_estimated{queue=\"a\",state=\"ready\"}"
            ),
            Some("1")
        );
        assert_eq!(
            line(
                &text,
                "aedb_queue_tasks_estimated{queue=\"a\",state=\"dead\"}"
            ),
            Some("0")
        );
        assert_eq!(
            line(&text, "aedb_queue_oldest_ready_age_seconds{queue=\"a\"}"),
            Some("1.5")
        );
        assert_eq!(
            line(&text, "aedb_queue_expired_leases{queue=\"a\"}"),
            Some("2")
        );
        assert_eq!(line(&text, "aedb_queue_paused{queue=\"a\"}"), Some("0"));
        for (name, v) in [
            ("enqueued", "9"),
            ("completed", "4"),
            ("failed", "2"),
            ("dead_lettered", "1"),
            ("reclaimed", "3"),
            ("cancelled", "5"),
        ] {
            assert_eq!(
                line(&text, &format!("aedb_queue_{name}_total{{queue=\"a\"}}")),
                Some(v),
                "{name}"
            );
            assert!(
                text.contains(&format!("# TYPE aedb_queue_{name}_total counter\n")),
                "{text}"
            );
        }
        assert!(text.contains("# TYPE aedb_queue_tasks gauge\n"));
        // Each family's TYPE line comes once.
        assert_eq!(text.matches("# TYPE aedb_queue_tasks gauge").count(), 1);
    }

    #[test]
    fn without_counters_the_totals_are_left_out() {
        let text = render(
            &Scrape {
                up: true,
                overview: &[ov("a", 1)],
                counters: None,
                duration_secs: 0.0,
            },
            10,
        );
        assert_eq!(line(&text, "aedb_queue_counters_up "), Some("0"));
        assert!(!text.contains("_total"), "{text}");
        assert!(text.contains("aedb_queue_tasks{queue=\"a\""));
    }

    #[test]
    fn a_database_that_did_not_answer_is_up_0_and_nothing_else() {
        let text = render(
            &Scrape {
                up: false,
                overview: &[],
                counters: None,
                duration_secs: 0.5,
            },
            10,
        );
        assert_eq!(line(&text, "aedb_queue_up "), Some("0"));
        assert_eq!(line(&text, "aedb_queue_counters_up "), Some("0"));
        assert!(!text.contains("aedb_queue_tasks"), "{text}");
    }
}
