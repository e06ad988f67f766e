//! `GET /tasks/{id}`: one task with every field, its payload, progress,
//! errors, a workflow's steps and what it is parked on, parents and
//! children, found with `queue_find` in the queues the role reads.

use axum::extract::{Path, State};
use axum::response::Response;
use maud::{html, Markup};

use super::queue::{cancel_form, retry_form};
use super::{
    csrf_field, human_secs, layout, opt, pretty_json, queue_href, respond, shorten, Flash,
    PageError,
};
use crate::serve::identity::Operator;
use crate::serve::queries::{self, Step, Task, TaskError, Wait};
use crate::serve::{svg, Shared};

/// Parents and children listed.
const LINKED_LIMIT: i64 = 100;
/// Steps and waits of a workflow listed.
const STEPS_LIMIT: i64 = 500;
/// The dependency graph: at most this many tasks.
pub const GRAPH_LIMIT: usize = 200;
/// Steps drawn on the workflow's timeline.
const TIMELINE_LIMIT: usize = 40;
/// A step's result in the table: at most this many characters.
const STEP_RESULT_WIDTH: usize = 80;

fn field(name: &str, value: Markup) -> Markup {
    html! {
        dt { (name.replace('_', " ")) }
        dd data-field=(name) { (value) }
    }
}

fn fields(t: &Task) -> Markup {
    let text = |v: Option<&str>| opt(v);
    html! {
        dl #task {
            (field("id", html! { (t.task_id) }))
            (field("queue", html! { a href=(queue_href(&t.queue)) { (t.queue) } }))
            (field("state", html! { (t.state) }))
            (field("attempts", html! { (t.attempts) }))
            (field("max_attempts", text(t.max_attempts.map(|m| m.to_string()).as_deref())))
            (field("priority", html! { (t.priority) }))
            (field("fencing_token", text(t.fencing_token.map(|f| f.to_string()).as_deref())))
            (field("owner", text(t.owner_id.as_deref())))
            (field("lease_until", html! {
                (opt(t.lease_until.as_deref()))
                @if let (Some(s), "in_flight") = (t.lease_left_secs, t.state.as_str()) {
                    " " span.muted { "(" @if s < 0.0 { "expired " (human_secs(-s)) " ago" } @else { (human_secs(s)) " left" } ")" }
                }
            }))
            (field("due_at", text(t.due_at.as_deref())))
            (field("created_at", html! {
                (opt(t.created_at.as_deref()))
                @if let Some(a) = t.age_secs { " " span.muted { "(" (human_secs(a)) " ago)" } }
            }))
            (field("updated_at", text(t.updated_at.as_deref())))
            (field("completed_at", text(t.completed_at.as_deref())))
            (field("progress", html! { @match &t.progress { Some(p) => code { (p) }, None => span.muted { "–" } } }))
            (field("idempotency_key", text(t.idempotency_key.as_deref())))
        }
    }
}

fn linked_table(heading: &str, tasks: &[Task]) -> Markup {
    html! {
        table data-linked=(heading) {
            thead { tr { th { (heading) } th { "queue" } th { "state" } th { "result" } } }
            tbody {
                @for p in tasks {
                    tr data-task-id=(p.task_id) {
                        td { a href={"/tasks/" (p.task_id)} { (p.task_id) } }
                        td { (p.queue) }
                        td { (p.state) }
                        td { code { (opt(p.result.as_deref())) } }
                    }
                }
            }
        }
    }
}

fn dependencies_section(parents: &[Task], children: &[Task]) -> Markup {
    html! {
        @if !parents.is_empty() || !children.is_empty() {
            section #dependencies {
                h2 { "Dependencies" }
                p.muted { "Tasks in queues this role may not read are left out." }
                @if !parents.is_empty() {
                    h3 { "Waits or waited for" }
                    (linked_table("parent", parents))
                }
                @if !children.is_empty() {
                    h3 { "Waited for by" }
                    (linked_table("child", children))
                }
            }
        }
    }
}

/// The task's dependency graph: every task linked to it through parents
/// and children, transitively, walked a level at a time (the level's
/// queue_parents and queue_children calls pipelined on one connection),
/// at most [`GRAPH_LIMIT`] tasks. Links the role may not read are left
/// out by the extension; a refused call leaves that task's links out.
pub struct Graph {
    pub nodes: Vec<Task>,
    pub edges: Vec<(i64, i64)>,
    /// Stopped at the bound: more tasks are linked.
    pub truncated: bool,
}

async fn walk(c: &deadpool_postgres::Client, root: &Task) -> Graph {
    let mut nodes: Vec<Task> = vec![root.clone()];
    let mut edges: Vec<(i64, i64)> = Vec::new();
    let mut frontier: Vec<(String, i64)> = vec![(root.queue.clone(), root.task_id)];
    let mut truncated = false;
    let lim = GRAPH_LIMIT as i64 + 1;
    while !frontier.is_empty() && !truncated {
        let calls = frontier.iter().map(|(q, id)| async move {
            let (p, ch) = futures_util::join!(
                queries::parents(c, q, *id, lim),
                queries::children(c, q, *id, lim)
            );
            (*id, p.unwrap_or_default(), ch.unwrap_or_default())
        });
        let found = futures_util::future::join_all(calls).await;
        let mut next = Vec::new();
        for (id, parents, children) in found {
            let linked = parents
                .into_iter()
                .map(|t| ((t.task_id, id), t))
                .chain(children.into_iter().map(|t| ((id, t.task_id), t)));
            for (edge, t) in linked {
                if !nodes.iter().any(|n| n.task_id == t.task_id) {
                    if nodes.len() >= GRAPH_LIMIT {
                        truncated = true;
                        continue;
                    }
                    next.push((t.queue.clone(), t.task_id));
                    nodes.push(t);
                }
                if !edges.contains(&edge) {
                    edges.push(edge);
                }
            }
        }
        frontier = next;
    }
    edges.retain(|(p, c)| {
        nodes.iter().any(|n| n.task_id == *p) && nodes.iter().any(|n| n.task_id == *c)
    });
    Graph {
        nodes,
        edges,
        truncated,
    }
}

fn graph_section(g: &Graph, current: &Task) -> Markup {
    let alone_done = g.nodes.len() == 1 && current.state == "completed";
    let current = current.task_id;
    let nodes: Vec<svg::Node> = g
        .nodes
        .iter()
        .map(|t| svg::Node {
            id: t.task_id,
            queue: &t.queue,
            state: &t.state,
        })
        .collect();
    html! {
        @if alone_done {
            section #graph {
                h2 { "Dependency graph" }
                p.muted #graph-alone { "No task linked to this one is kept." }
                (kept_note())
            }
        }
        @if g.nodes.len() > 1 {
            section #graph {
                h2 { "Dependency graph" }
                p.muted {
                    "Parents on the left, children on the right; each box links to its task. "
                    @if g.truncated { strong #graph-truncated { "Only the first " (GRAPH_LIMIT) " linked tasks are drawn." } " " }
                }
                div.graph { (svg::dag(&nodes, &g.edges, current)) }
                (kept_note())
            }
        }
    }
}

/// How long a finished graph stays drawn, and why its pages may answer 404.
fn kept_note() -> Markup {
    html! {
        p.muted #graph-kept {
            "A finished DAG or workflow stays drawn, each task with its result and steps, for "
            code { "aedb_queue.keep_workflows" } " (7 days by default) after it completed, or its "
            "queue's " code { "keep_completed" } " if longer; then its tasks are deleted, and with "
            "them their part of the graph: the database does not say which were, so they are "
            "simply not drawn."
        }
    }
}

fn timeline_section(t: &Task, steps: &[Step]) -> Markup {
    let marks: Vec<svg::Mark> = steps
        .iter()
        .take(TIMELINE_LIMIT)
        .map(|s| svg::Mark {
            name: &s.step,
            at: s.recorded_at.as_deref(),
        })
        .collect();
    html! {
        @if !steps.is_empty() {
            div.timeline {
                (svg::timeline(&marks, &t.state))
                @if steps.len() > TIMELINE_LIMIT { p.muted { "The first " (TIMELINE_LIMIT) " steps are drawn; the table lists them all." } }
            }
        }
    }
}

fn errors_section(errors: &[TaskError]) -> Markup {
    html! {
        section #errors {
            h2 { "Errors" }
            @if errors.is_empty() {
                p.muted { "None." }
            } @else {
                p.muted { "Every error the task met, oldest first (the last 20 are kept)." }
                table {
                    thead { tr { th { "attempt" } th { "at" } th { "error" } } }
                    tbody {
                        @for e in errors {
                            tr data-attempt=(e.attempt.map(|a| a.to_string()).unwrap_or_default()) {
                                td { (opt(e.attempt.map(|a| a.to_string()).as_deref())) }
                                td { (opt(e.at.as_deref())) }
                                td { pre.error-text { (e.error.as_deref().unwrap_or("")) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What a parked workflow task waits for, shown above its steps.
#[derive(Debug, PartialEq)]
enum Parked<'a> {
    /// Scheduled for a sleep step's wake time.
    Sleep { step: &'a str, until: &'a str },
    /// Scheduled until an event or its deadline.
    Event {
        step: &'a str,
        key: &'a str,
        until: Option<&'a str>,
    },
}

/// Parked: the task is scheduled, and waits for an event (queue_waits has
/// a row) or for the time a sleep step recorded (its due time is that
/// step's wake time). A task scheduled otherwise (a delay, a retry's
/// backoff) is not parked.
fn parked<'a>(t: &'a Task, steps: &'a [Step], waits: &'a [Wait]) -> Option<Parked<'a>> {
    if t.state != "scheduled" {
        return None;
    }
    if let Some(w) = waits.first() {
        return Some(Parked::Event {
            step: &w.step,
            key: &w.key,
            until: w.deadline.as_deref(),
        });
    }
    let due = t.due_at.as_deref()?;
    steps
        .iter()
        .rev()
        .find(|s| s.sleep_until.as_deref() == Some(due))
        .map(|s| Parked::Sleep {
            step: &s.step,
            until: due,
        })
}

/// The form of "Retry from this step".
fn retry_from_step_form(csrf: &str, task_id: i64, step: &str) -> Markup {
    html! {
        form.inline method="post" action={"/tasks/" (task_id) "/retry-from-step"}
            data-action="retry-from-step"
            data-confirm={"Run task " (task_id) " again from step " (step) "? It and every later step run again."} {
            (csrf_field(csrf))
            input type="hidden" name="step" value=(step);
            button type="submit" { "Retry from this step" }
        }
    }
}

/// A workflow's steps, and what it is parked on; nothing for a task that
/// recorded no step and waits for no event. `retry`: the operator's CSRF
/// token when "Retry from this step" is offered.
fn steps_section(t: &Task, steps: &[Step], waits: &[Wait], retry: Option<&str>) -> Markup {
    let parked = parked(t, steps, waits);
    html! {
        @if !steps.is_empty() || !waits.is_empty() {
            section #steps {
                h2 { "Steps" }
                @match &parked {
                    Some(Parked::Sleep { step, until }) => {
                        p #parked data-kind="sleep" {
                            "Parked: sleeps until " time { (until) }
                            @if let Some(s) = t.due_in_secs.filter(|s| *s > 0.0) { " " span.muted { "(in " (human_secs(s)) ")" } }
                            " (step " code.step-name { (step) } ")."
                        }
                    }
                    Some(Parked::Event { step, key, until }) => {
                        p #parked data-kind="event" {
                            "Parked: waits for event " code.event-key { (key) } " until " time { (opt(*until)) }
                            " (step " code.step-name { (step) } "); an emit makes it due at once."
                        }
                    }
                    None => {
                        @for w in waits {
                            p.wait data-kind="event" {
                                "Waits for event " code.event-key { (w.key) } " (step " code.step-name { (w.step) } ", deadline "
                                (opt(w.deadline.as_deref())) "); the task is " (t.state) "."
                            }
                        }
                    }
                }
                (timeline_section(t, steps))
                @if steps.is_empty() {
                    p.muted { "No step recorded yet." }
                } @else {
                    p.muted {
                        "Recorded in order; a recorded step returns its result instead of running again."
                        @if steps.len() as i64 >= STEPS_LIMIT { " The first " (STEPS_LIMIT) " are shown." }
                    }
                    table #step-list {
                        thead { tr { th { "step" } th { "recorded at" } th.num { "attempt" } th { "result" } @if retry.is_some() { th {} } } }
                        tbody {
                            @for s in steps {
                                tr data-step=(s.step) {
                                    td.step-name { (s.step) }
                                    td { (opt(s.recorded_at.as_deref())) }
                                    td.num { (opt(s.attempt.map(|a| a.to_string()).as_deref())) }
                                    td { @match &s.result {
                                        Some(r) => code.result title=(shorten(r, 2000)) { (shorten(r, STEP_RESULT_WIDTH)) },
                                        None => span.muted { "–" },
                                    } }
                                    @if let Some(csrf) = retry { td { (retry_from_step_form(csrf, t.task_id, &s.step)) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub async fn page(
    State(app): State<Shared>,
    Path(id): Path<i64>,
    op: Operator,
    flash: Flash,
) -> Result<Response, PageError> {
    let c = app.view(&op)?.db.conn().await?;
    let t = queries::find_by_id(&c, id).await?.ok_or_else(|| {
        PageError::not_found(format!(
            "No task {id} in a queue this role may read. A completed task is kept when it took \
             part in a workflow or a DAG (for aedb_queue.keep_workflows, 7 days by default) or \
             when its queue keeps completed tasks (queue_configure(queue, keep_completed => \
             '7 days')); otherwise it is deleted once done, and its page with it."
        ))
    })?;
    let (graph, parents, children, errors, administer, steps, waits) = futures_util::join!(
        walk(&c, &t),
        queries::parents(&c, &t.queue, id, LINKED_LIMIT),
        queries::children(&c, &t.queue, id, LINKED_LIMIT),
        queries::errors(&c, &t.queue, id),
        queries::administers(&c, &t.queue),
        queries::steps(&c, &t.queue, id, STEPS_LIMIT),
        queries::waits(&c, &t.queue, id, STEPS_LIMIT)
    );
    drop(c);
    // Where the extension has no workflows (before 0.9.0) there are none.
    let steps = steps.unwrap_or_default();
    let waits = waits.unwrap_or_default();
    // Reading these needs the worker's rights; without them a section is
    // left out rather than the page refused. A kept completed task has no
    // error history: its last error, if any, is shown.
    let parents = parents.unwrap_or_default();
    let children = children.unwrap_or_default();
    let errors = match errors {
        Ok(errors) if !errors.is_empty() => errors,
        _ => t
            .last_error
            .iter()
            .map(|e| TaskError {
                attempt: None,
                at: None,
                error: Some(e.clone()),
            })
            .collect(),
    };
    let administer = administer?;
    let csrf = op.csrf.as_str();
    let body = html! {
        p.muted { a href="/" { "Queues" } " / " a href=(queue_href(&t.queue)) { (t.queue) } " / " (t.task_id) }
        h1 { "Task " (t.task_id) }
        @if administer && t.state != "completed" {
            div.actions #actions {
                @if t.state == "dead" { (retry_form(csrf, &t.queue, t.task_id, true)) }
                (cancel_form(csrf, t.task_id))
            }
        }
        (fields(&t))
        h2 { "Payload" }
        pre #payload { (t.payload.as_deref().map(pretty_json).unwrap_or_else(|| "null".into())) }
        @if let Some(r) = &t.result {
            h2 { "Result" }
            pre #result { (pretty_json(r)) }
        }
        // A task in flight is its worker's (the database refuses, 55000);
        // a completed one is not live.
        (steps_section(&t, &steps, &waits,
            (administer && !matches!(t.state.as_str(), "in_flight" | "completed")).then_some(csrf)))
        (errors_section(&errors))
        (graph_section(&graph, &t))
        (dependencies_section(&parents, &children))
    };
    Ok(respond(
        &flash,
        layout(&format!("task {id}"), Some(&op), flash.0.as_deref(), body),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(id: i64) -> Task {
        Task {
            task_id: id,
            queue: "dag".into(),
            state: "completed".into(),
            ..Task::default()
        }
    }

    #[test]
    fn a_finished_dag_draws_every_task_completed_and_says_how_long_it_stays() {
        let g = Graph {
            nodes: vec![done(1), done(2), done(3)],
            edges: vec![(1, 2), (1, 3)],
            truncated: false,
        };
        let html = graph_section(&g, &g.nodes[1]).into_string();
        assert!(html.contains("svg"), "{html}");
        assert_eq!(
            html.matches("data-state=\"completed\"").count(),
            3,
            "every finished task drawn: {html}"
        );
        assert!(html.contains("aedb_queue.keep_workflows"), "{html}");
        assert!(!html.contains("graph-alone"), "{html}");
    }
}
