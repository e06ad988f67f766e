//! `GET /`: every queue the role may read, one row each, with sparklines.

use axum::extract::State;
use axum::response::Response;
use maud::{html, Markup};

use super::{count, human_secs, layout, queue_href, respond, Flash, PageError};
use crate::serve::identity::Operator;
use crate::serve::queries::Overview;
use crate::serve::sampler::{self, CountersState, Point};
use crate::serve::svg;
use crate::serve::{Shared, View};

/// Rates on the pages are over the last minute of samples.
pub const RATE_WINDOW_SECS: f64 = 60.0;

/// What the page shows of the counters: rates, or why there are none.
pub enum Rates {
    Unavailable,
    /// Completed per minute and failure rate (None: not enough samples).
    Known(Option<f64>, Option<f64>),
}

pub fn rates(counters: &CountersState, points: &[Point]) -> Rates {
    match counters {
        CountersState::Unavailable(_) => Rates::Unavailable,
        _ => Rates::Known(
            sampler::completed_per_minute(points, RATE_WINDOW_SECS),
            sampler::failure_rate(points, RATE_WINDOW_SECS),
        ),
    }
}

pub fn throughput_text(r: &Rates) -> String {
    match r {
        Rates::Unavailable => "n/a".into(),
        Rates::Known(Some(t), _) => format!("{t:.1}/min"),
        Rates::Known(None, _) => "–".into(),
    }
}

pub fn failure_text(r: &Rates) -> String {
    match r {
        Rates::Unavailable => "n/a".into(),
        Rates::Known(_, Some(f)) => format!("{:.1}%", f * 100.0),
        Rates::Known(_, None) => "–".into(),
    }
}

/// `p#counters-unavailable`, when queue_counters() is not there.
pub fn counters_notice(counters: &CountersState) -> Markup {
    html! {
        @if let CountersState::Unavailable(why) = counters {
            p #counters-unavailable .error role="alert" {
                "Counters unavailable: throughput and failure rates need aedb_queue in "
                code { "shared_preload_libraries" } " (" (why) ")."
            }
        }
    }
}

/// `p#estimates-legend`: what "~" means, and how many figures carry it.
pub fn estimates_legend(exact_limit: i32, estimated: usize) -> Markup {
    html! {
        p #estimates-legend .muted {
            "Figures marked " span.estimate title="estimate" { "~" } " are estimates: a count that "
            "reaches " (exact_limit) " is the planner's estimate, not an exact count. "
            @if estimated == 0 { "None on this page." } @else { (estimated) " on this page." }
        }
    }
}

fn ready_series(points: &[Point]) -> Vec<Option<f64>> {
    points.iter().map(|p| Some(p.depth.ready as f64)).collect()
}

fn completed_series(points: &[Point]) -> Vec<Option<f64>> {
    sampler::deltas(points)
        .iter()
        .skip(1)
        .map(|d| d.map(|c| c.completed as f64))
        .collect()
}

fn row(o: &Overview, points: &[Point], counters: &CountersState) -> Markup {
    let r = rates(counters, points);
    let cell = |field: &str| count(o.count(field), o.is_estimated(field));
    html! {
        tr data-queue=(o.queue) {
            th scope="row" { a href=(queue_href(&o.queue)) { (o.queue) } }
            td data-field="paused" {
                @if o.paused { span.paused { "paused" } } @else { span.muted { "no" } }
            }
            @for f in ["ready", "in_flight", "scheduled", "waiting", "blocked", "dead"] {
                td.num data-field=(f) { (cell(f)) }
            }
            td.num data-field="oldest_ready_age" {
                @match o.oldest_ready_age_secs {
                    Some(s) => (human_secs(s)),
                    None => span.muted { "–" },
                }
            }
            td.num data-field="throughput" { (throughput_text(&r)) }
            td.num data-field="failure_rate" { (failure_text(&r)) }
            td.num data-field="expired_leases" { (cell("expired_leases")) }
            td { (svg::sparkline("ready", "#36c", &ready_series(points))) }
            td { (svg::sparkline("completed", "#393", &completed_series(points))) }
        }
    }
}

/// The part the browser refreshes in place (`#overview`).
fn content(app: &crate::serve::App, overview: &[Overview], history: &sampler::History) -> Markup {
    let estimated: usize = overview.iter().map(|o| o.estimated.len()).sum();
    html! {
        div #overview {
            (counters_notice(&history.counters))
            @if let Some(e) = &history.last_error {
                p.error role="alert" { "The last sample failed: " (e) }
            }
            table #queues data-refresh=(app.refresh_secs) {
                thead {
                    tr {
                        th { "queue" } th { "paused" }
                        th.num { "ready" } th.num { "in flight" } th.num { "scheduled" }
                        th.num { "waiting" } th.num { "blocked" } th.num { "dead" }
                        th.num { "oldest ready" } th.num title="completed per minute, last minute" { "throughput" }
                        th.num title="failed / (completed + failed), last minute" { "failure rate" }
                        th.num { "expired leases" }
                        th { "ready (history)" } th { "completed per sample" }
                    }
                }
                tbody {
                    @for o in overview {
                        (row(o, &history.points(&o.queue), &history.counters))
                    }
                }
            }
            @if overview.is_empty() {
                p.muted { "No queue this role may read." }
            }
            (estimates_legend(app.exact_limit, estimated))
            p.muted {
                "Sampled every " (app.sample_every) " s, " (app.history_minutes) " minutes kept for "
                (history.queue_count()) " queues (at most " (app.max_queues) ")."
            }
        }
    }
}

pub async fn page(
    State(app): State<Shared>,
    op: Operator,
    flash: Flash,
) -> Result<Response, PageError> {
    let view: &View = app.view(&op)?;
    let overview = view.overview.get().await?;
    let body = {
        let history = view.history.lock().unwrap_or_else(|p| p.into_inner());
        html! {
            h1 { "Queues" }
            (content(&app, &overview, &history))
        }
    };
    Ok(respond(
        &flash,
        layout("queues", Some(&op), flash.0.as_deref(), body),
    ))
}
