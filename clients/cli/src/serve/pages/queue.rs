//! `GET /queues/{queue}`: one queue's figures, charts, tasks by state, its
//! schedules and keys, and the actions its administrators may take.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use maud::{html, Markup};

use super::overview::{counters_notice, estimates_legend, failure_text, rates, throughput_text};
use super::{
    count, csrf_field, encode_segment, human_secs, layout, opt, queue_href, respond, shorten,
    Flash, PageError,
};
use crate::serve::identity::Operator;
use crate::serve::queries::{
    self, ConcurrencyKey, ListFilter, OrderingKey, Overview, PageAt, Schedule, Task,
};
use crate::serve::sampler::{self, Point};
use crate::serve::{svg, Shared, View};

/// Tasks listed per state (queue_list's limit): the page stays small
/// whatever the queue holds.
pub const LIST_LIMIT: i32 = 50;
/// Ready tasks listed: the head of the line.
const READY_LIMIT: i32 = 20;
/// Schedules and keys listed.
const SIDE_LIMIT: i64 = 100;

/// The filtered task list: rows per page (`queue_tasks` filters every
/// task of the queue: see `list_page`).
pub const PAGE_SIZE: i32 = 50;
/// The most task ids one bulk post takes.
pub const BULK_MAX: usize = 500;

/// The states the list's filter offers ("" : every state).
const LIST_STATES: [&str; 7] = [
    "ready",
    "in_flight",
    "scheduled",
    "waiting",
    "blocked",
    "dead",
    "completed",
];

/// The states the purge form offers.
const PURGE_STATES: [&str; 7] = [
    "dead",
    "ready",
    "scheduled",
    "waiting",
    "blocked",
    "completed",
    "in_flight",
];

struct QueuePage {
    overview: Overview,
    administer: bool,
    in_flight: Vec<Task>,
    ready: Vec<Task>,
    scheduled: Vec<Task>,
    dead: Vec<Task>,
    schedules: Vec<Schedule>,
    concurrency_keys: Vec<ConcurrencyKey>,
    ordering_keys: Vec<OrderingKey>,
    list: Vec<Task>,
    has_prev: bool,
    has_next: bool,
}

/// The list's filters and page, as the query string carries them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListQuery {
    pub filter: ListFilter,
    pub at: Option<PageAt>,
}

impl ListQuery {
    pub fn from_params(p: &HashMap<String, String>) -> Result<ListQuery, PageError> {
        let get = |k: &str| {
            p.get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let state = get("state");
        if let Some(s) = &state {
            if !LIST_STATES.contains(&s.as_str()) {
                return Err(PageError::new(
                    axum::http::StatusCode::BAD_REQUEST,
                    format!("state {s:?} is not one of {}", LIST_STATES.join(", ")),
                ));
            }
        }
        let id = |k: &str| -> Result<Option<i64>, PageError> {
            get(k)
                .map(|v| {
                    v.parse().map_err(|_| {
                        PageError::new(
                            axum::http::StatusCode::BAD_REQUEST,
                            format!("{k} {v:?} is not a task id"),
                        )
                    })
                })
                .transpose()
        };
        let at = match (id("after")?, id("before")?) {
            (_, Some(b)) => Some(PageAt::Before(b)),
            (Some(a), None) => Some(PageAt::After(Some(a))),
            (None, None) => None,
        };
        let field = get("field");
        Ok(ListQuery {
            filter: ListFilter {
                state,
                created_after: get("created_after"),
                created_before: get("created_before"),
                updated_after: get("updated_after"),
                updated_before: get("updated_before"),
                value: field
                    .as_ref()
                    .and_then(|_| p.get("value").cloned())
                    .filter(|v| !v.is_empty()),
                field,
            },
            at,
        })
    }

    /// The filters as a query string ("" when none), `&`-joined, every
    /// value percent-encoded.
    pub fn filter_query(&self) -> String {
        let f = &self.filter;
        [
            ("state", &f.state),
            ("created_after", &f.created_after),
            ("created_before", &f.created_before),
            ("updated_after", &f.updated_after),
            ("updated_before", &f.updated_before),
            ("field", &f.field),
            ("value", &f.value),
        ]
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode_segment(v))))
        .collect::<Vec<_>>()
        .join("&")
    }

    /// The queue page with these filters and `page` ("after=ID" ...).
    pub fn href(&self, queue: &str, page: Option<String>) -> String {
        let q: Vec<String> = [Some(self.filter_query()), page]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .collect();
        if q.is_empty() {
            format!("{}#task-list", queue_href(queue))
        } else {
            format!("{}?{}#task-list", queue_href(queue), q.join("&"))
        }
    }
}

async fn load(
    app: &crate::serve::App,
    view: &View,
    queue: &str,
    lq: &ListQuery,
) -> Result<QueuePage, PageError> {
    let c = view.db.conn().await?;
    // One connection, the statements pipelined. The queue's own figures are
    // read now (one queue is cheap), not taken from the shared snapshot.
    let at = lq.at.unwrap_or(PageAt::After(None));
    let (overview, administer, in_flight, ready, scheduled, dead, schedules, ckeys, okeys, list) = futures_util::join!(
        queries::overview_one(&c, app.exact_limit, queue),
        queries::administers(&c, queue),
        queries::list(&c, queue, "in_flight", LIST_LIMIT),
        queries::list(&c, queue, "ready", READY_LIMIT),
        queries::list(&c, queue, "scheduled", LIST_LIMIT),
        queries::list(&c, queue, "dead", LIST_LIMIT),
        queries::schedules(&c, queue, SIDE_LIMIT),
        queries::concurrency_keys(&c, queue, SIDE_LIMIT),
        queries::ordering_keys(&c, queue, SIDE_LIMIT),
        queries::list_page(&c, queue, &lq.filter, at, PAGE_SIZE + 1),
    );
    // A queue the role may not read has no overview row: 404, before the
    // other calls' refusals.
    let overview = overview?.ok_or_else(|| {
        PageError::not_found(format!("No queue \"{queue}\" that this role may read."))
    })?;
    let mut list = list?;
    let more = list.len() > PAGE_SIZE as usize;
    let (has_prev, has_next) = match at {
        PageAt::After(None) => (false, more),
        PageAt::After(Some(_)) => (true, more),
        PageAt::Before(_) => (more, true),
    };
    if more {
        match at {
            // The page before a task: the extra row is the oldest.
            PageAt::Before(_) => {
                list.remove(0);
            }
            PageAt::After(_) => list.truncate(PAGE_SIZE as usize),
        }
    }
    Ok(QueuePage {
        list,
        has_prev,
        has_next,
        overview,
        administer: administer?,
        in_flight: in_flight?,
        ready: ready?,
        scheduled: scheduled?,
        dead: dead?,
        schedules: unless_refused(schedules)?,
        concurrency_keys: unless_refused(ckeys)?,
        ordering_keys: unless_refused(okeys)?,
    })
}

/// A side section the role may not read (the key views are for admins)
/// is left out instead of refusing the page.
fn unless_refused<T: Default>(r: queries::DbResult<T>) -> Result<T, PageError> {
    match r {
        Err(e) if crate::serve::sqlstate(&e).as_deref() == Some("42501") => Ok(T::default()),
        other => Ok(other?),
    }
}

/// A form posting to `/queues/{queue}/{path}` with the CSRF token.
fn action_form(
    csrf: &str,
    queue: &str,
    path: &str,
    action: &str,
    label: &str,
    confirm: Option<&str>,
    extra: Markup,
) -> Markup {
    html! {
        form.inline method="post" action={(queue_href(queue)) "/" (path)} data-action=(action)
            data-confirm=[confirm] {
            (csrf_field(csrf))
            (extra)
            button type="submit" { (label) }
        }
    }
}

pub fn cancel_form(csrf: &str, task_id: i64) -> Markup {
    html! {
        form.inline method="post" action={"/tasks/" (task_id) "/cancel"} data-action="cancel"
            data-confirm={"Cancel task " (task_id) "?"} {
            (csrf_field(csrf))
            button type="submit" { "cancel" }
        }
    }
}

pub fn retry_form(csrf: &str, queue: &str, task_id: i64, back_to_task: bool) -> Markup {
    action_form(
        csrf,
        queue,
        "retry-dead",
        "retry",
        "retry",
        None,
        html! {
            input type="hidden" name="task_id" value=(task_id);
            @if back_to_task { input type="hidden" name="back" value="task"; }
        },
    )
}

fn actions(p: &QueuePage, csrf: &str) -> Markup {
    let q = &p.overview.queue;
    html! {
        section #actions {
            h2 { "Actions" }
            div.actions {
                @if p.overview.paused {
                    (action_form(csrf, q, "resume", "resume", "Resume", None, html! {}))
                } @else {
                    (action_form(csrf, q, "pause", "pause", "Pause", None, html! {}))
                }
                (action_form(csrf, q, "retry-dead", "retry-dead-all", "Retry all dead tasks",
                    Some("Move every dead task of this queue back to ready?"), html! {}))
            }
            form.actions method="post" action={(queue_href(q)) "/purge"} data-action="purge"
                data-confirm="Delete these tasks for good?" {
                (csrf_field(csrf))
                label { "Purge every task in state "
                    select name="state" {
                        @for s in PURGE_STATES { option value=(s) { (s) } }
                    }
                }
                label { input type="checkbox" name="force" value="true"; " in flight too (force)" }
                label { "type the queue name to confirm "
                    input name="confirm" required autocomplete="off" placeholder=(q);
                }
                button type="submit" { "Purge" }
            }
        }
    }
}

fn lease_left(t: &Task) -> Markup {
    html! {
        @match t.lease_left_secs {
            Some(s) if s < 0.0 => span.error { "expired " (human_secs(-s)) " ago" },
            Some(s) => (human_secs(s)),
            None => span.muted { "–" },
        }
    }
}

fn task_link(t: &Task) -> Markup {
    html! { a href={"/tasks/" (t.task_id)} { (t.task_id) } }
}

fn payload_cell(t: &Task) -> Markup {
    html! { td { code { (opt(t.payload.as_deref().map(|p| shorten(p, 60)).as_deref())) } } }
}

fn in_flight_section(p: &QueuePage, csrf: &str) -> Markup {
    html! {
        section #in-flight {
            h2 { "In flight " span.muted { "(" (count(p.overview.in_flight, p.overview.is_estimated("in_flight"))) ")" } }
            @if p.in_flight.is_empty() { p.muted { "None." } } @else {
                table {
                    thead { tr { th { "task" } th { "owner" } th { "lease left" } th { "attempt" } th { "progress" } th { "payload" } @if p.administer { th {} } } }
                    tbody {
                        @for t in &p.in_flight {
                            tr data-task-id=(t.task_id) {
                                td { (task_link(t)) }
                                td data-field="owner" { (opt(t.owner_id.as_deref())) }
                                td data-field="lease_left" { (lease_left(t)) }
                                td { (t.attempts) "/" (opt(t.max_attempts.map(|m| m.to_string()).as_deref())) }
                                td { code { (opt(t.progress.as_deref().map(|p| shorten(p, 40)).as_deref())) } }
                                (payload_cell(t))
                                @if p.administer { td { (cancel_form(csrf, t.task_id)) } }
                            }
                        }
                    }
                }
                (more(p.in_flight.len(), LIST_LIMIT))
            }
        }
    }
}

fn more(shown: usize, limit: i32) -> Markup {
    html! {
        @if shown >= limit as usize { p.muted { "The first " (limit) " shown." } }
    }
}

fn simple_section(
    id: &str,
    title: &str,
    total: Markup,
    tasks: &[Task],
    limit: i32,
    administer: bool,
    csrf: &str,
) -> Markup {
    html! {
        section id=(id) {
            h2 { (title) " " span.muted { "(" (total) ")" } }
            @if tasks.is_empty() { p.muted { "None." } } @else {
                table {
                    thead { tr { th { "task" } th { "priority" } th { "due" } th { "age" } th { "attempts" } th { "payload" } @if administer { th {} } } }
                    tbody {
                        @for t in tasks {
                            tr data-task-id=(t.task_id) {
                                td { (task_link(t)) }
                                td.num { (t.priority) }
                                td data-field="due_at" {
                                    @match t.due_in_secs {
                                        Some(s) if s > 0.0 && t.state == "scheduled" => { "in " (human_secs(s)) },
                                        _ => span.muted { "now" },
                                    }
                                }
                                td { (opt(t.age_secs.map(human_secs).as_deref())) }
                                td { (t.attempts) }
                                (payload_cell(t))
                                @if administer { td { (cancel_form(csrf, t.task_id)) } }
                            }
                        }
                    }
                }
                (more(tasks.len(), limit))
            }
        }
    }
}

fn dead_section(p: &QueuePage, csrf: &str) -> Markup {
    let q = &p.overview.queue;
    html! {
        section #dead {
            h2 { "Dead " span.muted { "(" (count(p.overview.dead, p.overview.is_estimated("dead"))) ")" } }
            @if p.dead.is_empty() { p.muted { "None." } } @else {
                table {
                    thead { tr { th { "task" } th { "attempts" } th { "last error" } th { "died" } th { "payload" } @if p.administer { th {} } } }
                    tbody {
                        @for t in &p.dead {
                            tr data-task-id=(t.task_id) {
                                td { (task_link(t)) }
                                td { (t.attempts) }
                                td data-field="last_error" { (opt(t.last_error.as_deref().map(|e| shorten(e, 200)).as_deref())) }
                                td { (opt(t.updated_at.as_deref())) }
                                (payload_cell(t))
                                @if p.administer { td { (retry_form(csrf, q, t.task_id, false)) " " (cancel_form(csrf, t.task_id)) } }
                            }
                        }
                    }
                }
                (more(p.dead.len(), LIST_LIMIT))
            }
        }
    }
}

/// Every task of the queue, filtered (state, times, a payload field),
/// paged by task id, with checkboxes and the bulk actions for those who
/// administer the queue.
fn list_section(p: &QueuePage, lq: &ListQuery, csrf: &str) -> Markup {
    let q = &p.overview.queue;
    let f = &lq.filter;
    let v = |o: &Option<String>| o.clone().unwrap_or_default();
    let page_now = match lq.at {
        Some(PageAt::After(Some(a))) => Some(format!("after={a}")),
        Some(PageAt::Before(b)) => Some(format!("before={b}")),
        _ => None,
    };
    let back: String = [Some(lq.filter_query()), page_now]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("&");
    html! {
        section #task-list {
            h2 { "Tasks" }
            form #list-filter method="get" action=(queue_href(q)) {
                label { "state "
                    select name="state" {
                        option value="" { "any" }
                        @for s in LIST_STATES {
                            option value=(s) selected[f.state.as_deref() == Some(s)] { (s) }
                        }
                    }
                }
                " "
                label { "created after " input type="datetime-local" step="1" name="created_after" value=(v(&f.created_after)); }
                " "
                label { "before " input type="datetime-local" step="1" name="created_before" value=(v(&f.created_before)); }
                " "
                label { "updated after " input type="datetime-local" step="1" name="updated_after" value=(v(&f.updated_after)); }
                " "
                label { "before " input type="datetime-local" step="1" name="updated_before" value=(v(&f.updated_before)); }
                " "
                label { "payload field " input name="field" size="12" placeholder="customer" value=(v(&f.field)); }
                " = "
                label { input name="value" size="12" placeholder="acme" aria-label="payload value" value=(v(&f.value)); }
                " "
                button type="submit" { "Filter" }
                " "
                a href={(queue_href(q)) "#task-list"} { "clear" }
            }
            p.muted {
                "Every task of the queue (and the completed ones it keeps), in task id order, "
                (PAGE_SIZE) " a page. Times are the database server's time zone. "
                "A payload value that reads as JSON (42, true, \"42\", {\"a\": 1}) matches that "
                "JSON value, other text that string; a field with no value matches tasks that "
                "have the field."
            }
            @if p.administer {
                form #bulk method="post" action={(queue_href(q)) "/bulk"} data-action="bulk" {
                    (csrf_field(csrf))
                    input type="hidden" name="back" value=(back);
                    div.actions {
                        button type="submit" name="action" value="retry" data-action="bulk-retry"
                            data-confirm="Retry the {n} selected tasks (the dead ones go back to ready)?" { "Retry selected" }
                        button type="submit" name="action" value="cancel" data-action="bulk-cancel"
                            data-confirm="Cancel (delete) the {n} selected tasks?" { "Cancel selected" }
                        span.muted { "At most " (BULK_MAX) " a post." }
                    }
                }
            }
            @if p.list.is_empty() { p.muted #list-empty { "No task matches." } } @else {
                table #tasks {
                    thead { tr {
                        @if p.administer { th { input type="checkbox" data-select-all="bulk" aria-label="select all on this page" title="select all on this page"; } }
                        th { "task" } th { "state" } th.num { "priority" } th { "attempts" } th { "created" } th { "updated" } th { "payload" }
                    } }
                    tbody {
                        @for t in &p.list {
                            tr data-task-id=(t.task_id) data-state=(t.state) {
                                @if p.administer { td { input type="checkbox" form="bulk" name="id" value=(t.task_id) aria-label={"select task " (t.task_id)}; } }
                                td { (task_link(t)) }
                                td data-field="state" { (t.state) }
                                td.num { (t.priority) }
                                td { (t.attempts) }
                                td { (opt(t.created_at.as_deref())) }
                                td { (opt(t.updated_at.as_deref())) }
                                (payload_cell(t))
                            }
                        }
                    }
                }
            }
            p.pager {
                @if p.has_prev {
                    @if let Some(first) = p.list.first() {
                        a rel="prev" href=(lq.href(q, Some(format!("before={}", first.task_id)))) { "← previous" }
                    } @else {
                        a rel="prev" href=(lq.href(q, None)) { "← first page" }
                    }
                    " "
                }
                @if p.has_next {
                    @if let Some(last) = p.list.last() {
                        a rel="next" href=(lq.href(q, Some(format!("after={}", last.task_id)))) { "next →" }
                    }
                }
            }
        }
    }
}

fn schedules_section(schedules: &[Schedule]) -> Markup {
    html! {
        @if !schedules.is_empty() {
            section #schedules {
                h2 { "Schedules" }
                table {
                    thead { tr { th { "name" } th { "cron" } th { "time zone" } th { "paused" } th { "next fire" } th { "last error" } } }
                    tbody {
                        @for s in schedules {
                            tr data-schedule=(s.name) {
                                td { (s.name) } td { code { (s.cron) } } td { (s.time_zone) }
                                td { @if s.paused { span.paused { "paused" } } @else { "no" } }
                                td { (opt(s.next_fire_at.as_deref())) }
                                td { (opt(s.last_error.as_deref())) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn keys_section(ckeys: &[ConcurrencyKey], okeys: &[OrderingKey]) -> Markup {
    html! {
        @if !ckeys.is_empty() || !okeys.is_empty() {
            section #keys {
                h2 { "Keys" }
                @if !ckeys.is_empty() {
                    h3 { "Concurrency keys" }
                    table {
                        thead { tr { th { "key" } th.num { "taken" } th.num { "limit" } th { "at limit" } } }
                        tbody {
                            @for k in ckeys {
                                tr data-concurrency-key=(k.key) {
                                    td { (k.key) } td.num { (k.taken) } td.num { (k.limit) }
                                    td { @if k.at_limit { span.paused { "yes" } } @else { "no" } }
                                }
                            }
                        }
                    }
                }
                @if !okeys.is_empty() {
                    h3 { "Ordering keys" }
                    table {
                        thead { tr { th { "key" } th { "head task" } th { "head state" } th { "stopped by a dead task" } } }
                        tbody {
                            @for k in okeys {
                                tr data-ordering-key=(k.key) {
                                    td { (k.key) }
                                    td { @if let Some(id) = k.head_task_id { a href={"/tasks/" (id)} { (id) } } }
                                    td { (opt(k.head_state.as_deref())) }
                                    td { @if k.stopped_by_dead { span.error { "yes" } } @else { "no" } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// How long the samples cover ("12m 0s"), with two or more.
fn span(points: &[Point]) -> Option<String> {
    match (points.first(), points.last()) {
        (Some(a), Some(b)) if points.len() > 1 => Some(human_secs(b.at - a.at)),
        _ => None,
    }
}

fn span_caption(points: &[Point], what: &str) -> String {
    match (points.first(), points.last()) {
        (Some(a), Some(b)) if points.len() > 1 => {
            format!(
                "{what}, last {} ({} samples)",
                human_secs(b.at - a.at),
                points.len()
            )
        }
        _ => format!("{what}: not enough samples yet"),
    }
}

fn charts(points: &[Point], counters: &sampler::CountersState) -> Markup {
    let series = |f: fn(&Point) -> i64| -> Vec<Option<f64>> {
        points.iter().map(|p| Some(f(p) as f64)).collect()
    };
    let (ready, in_flight, scheduled, dead) = (
        series(|p| p.depth.ready),
        series(|p| p.depth.in_flight),
        series(|p| p.depth.scheduled),
        series(|p| p.depth.dead),
    );
    let deltas = sampler::deltas(points);
    let completed: Vec<Option<f64>> = deltas
        .iter()
        .skip(1)
        .map(|d| d.map(|c| c.completed as f64))
        .collect();
    let failed: Vec<Option<f64>> = deltas
        .iter()
        .skip(1)
        .map(|d| d.map(|c| c.failed as f64))
        .collect();
    html! {
        section #depth {
            h2 { "Depth" }
            (svg::chart("depth-chart", &[
                svg::Line { name: "ready", colour: "#36c", values: &ready },
                svg::Line { name: "in_flight", colour: "#c80", values: &in_flight },
                svg::Line { name: "scheduled", colour: "#888", values: &scheduled },
                svg::Line { name: "dead", colour: "#c33", values: &dead },
            ], &span_caption(points, "tasks by state"), span(points).as_deref()))
        }
        section #throughput {
            h2 { "Throughput " span.muted { "(per sample interval)" } }
            @if matches!(counters, sampler::CountersState::Unavailable(_)) {
                p.muted { "n/a: counters unavailable." }
            }
            (svg::chart("throughput-chart", &[
                svg::Line { name: "completed", colour: "#393", values: &completed },
                svg::Line { name: "failed", colour: "#c33", values: &failed },
            ], &span_caption(points, "completed and failed"), span(points).as_deref()))
        }
    }
}

fn summary(o: &Overview, points: &[Point], counters: &sampler::CountersState) -> Markup {
    let r = rates(counters, points);
    let cell = |f: &str| count(o.count(f), o.is_estimated(f));
    html! {
        table #summary data-queue=(o.queue) {
            tr {
                @for f in ["ready", "in_flight", "scheduled", "waiting", "blocked", "dead", "completed_kept", "expired_leases"] {
                    th.num { (f.replace('_', " ")) }
                }
                th.num { "oldest ready" } th.num { "throughput" } th.num { "failure rate" }
            }
            tr {
                @for f in ["ready", "in_flight", "scheduled", "waiting", "blocked", "dead", "completed_kept", "expired_leases"] {
                    td.num data-field=(f) { (cell(f)) }
                }
                td.num data-field="oldest_ready_age" { (opt(o.oldest_ready_age_secs.map(human_secs).as_deref())) }
                td.num data-field="throughput" { (throughput_text(&r)) }
                td.num data-field="failure_rate" { (failure_text(&r)) }
            }
        }
    }
}

pub async fn page(
    State(app): State<Shared>,
    Path(queue): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    op: Operator,
    flash: Flash,
) -> Result<Response, PageError> {
    let view = app.view(&op)?;
    let lq = ListQuery::from_params(&params)?;
    let p = load(&app, view, &queue, &lq).await?;
    let (points, counters) = {
        let h = view.history.lock().unwrap_or_else(|e| e.into_inner());
        (h.points(&queue), h.counters.clone())
    };
    let o = &p.overview;
    let csrf = op.csrf.as_str();
    let body = html! {
        p.muted { a href="/" { "Queues" } " / " a href=(queue_href(&o.queue)) { (o.queue) } }
        h1 { (o.queue) }
        @if o.paused { p.paused data-field="paused" { "Paused: enqueues land, nothing is handed out." } }
        (counters_notice(&counters))
        (summary(o, &points, &counters))
        (estimates_legend(app.exact_limit, o.estimated.len()))
        @if p.administer { (actions(&p, csrf)) }
        (charts(&points, &counters))
        (in_flight_section(&p, csrf))
        (simple_section("ready", "Ready (head of the line)", count(o.ready, o.is_estimated("ready")), &p.ready, READY_LIMIT, p.administer, csrf))
        (simple_section("scheduled", "Scheduled", count(o.scheduled, o.is_estimated("scheduled")), &p.scheduled, LIST_LIMIT, p.administer, csrf))
        (dead_section(&p, csrf))
        (list_section(&p, &lq, csrf))
        (schedules_section(&p.schedules))
        (keys_section(&p.concurrency_keys, &p.ordering_keys))
    };
    Ok(respond(
        &flash,
        layout(&queue, Some(&op), flash.0.as_deref(), body),
    ))
}
